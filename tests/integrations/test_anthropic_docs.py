"""docs/integrations/anthropic.md cannot drift: every ```python block runs, in order, as
tests/sdk/test_python_docs.py runs docs/python.md's, with ``anthropic.Anthropic`` and
``AsyncAnthropic`` answering from a recorded reply (no network): Claude views its memory,
then keeps the fact it was told in ``/memories/deploys.md``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import pytest

from keepstone.sdk import Memory
from tests.doc_blocks import as_a_reader, python_blocks, run_block
from tests.integrations.recorded import RecordedApi
from tests.sdk.conftest import Server

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "anthropic.md"
REPLY = [
    {"command": "view", "path": "/memories"},
    {
        "command": "create",
        "path": "/memories/deploys.md",
        "file_text": "# Deploys\n\n- We deploy on Fridays, blue-green.\n",
    },
]
SAID = "I'll remember that you deploy on Fridays."


@pytest.mark.slow  # the connect example talks to a real keepstone serve
def test_every_python_block_of_the_page_runs(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_a_reader(monkeypatch, tmp_path, server.url, server.member_key())
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "none")
    replies: list[RecordedApi] = []

    def recorded(kind: str) -> Any:
        def client(**kwargs: Any) -> Any:
            replies.append(RecordedApi(REPLY, final_text=SAID))
            return replies[-1].client() if kind == "sync" else replies[-1].async_client()

        return client

    monkeypatch.setattr(anthropic, "Anthropic", recorded("sync"))
    monkeypatch.setattr(anthropic, "AsyncAnthropic", recorded("async"))
    blocks = python_blocks(DOC)
    assert len(blocks) == 2, "docs/integrations/anthropic.md lost its examples"
    for line, code in blocks:
        run_block(code, f"docs/integrations/anthropic.md, the block at line {line}")
    assert len(replies) == 2
    assert all(not r.is_error for api in replies for r in api.results())
    with Memory.local(bot="my-bot", project="web") as memory:
        assert memory.read("deploys.md").content == REPLY[1]["file_text"]
