"""docs/integrations/langgraph.md cannot drift: every ```python block runs, in order, as
tests/sdk/test_python_docs.py runs docs/python.md's: a LangGraph graph keeps what it is told
in a local space through KeepstoneStore, then the async store does the same on a real
``keepstone serve``."""

from __future__ import annotations

from pathlib import Path

import pytest

from keepstone.sdk import Memory
from tests.doc_blocks import as_a_reader, python_blocks, run_block
from tests.sdk.conftest import Server

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "langgraph.md"


@pytest.mark.slow  # the connect example talks to a real keepstone serve
def test_every_python_block_of_the_page_runs(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = server.member_key()
    as_a_reader(monkeypatch, tmp_path, server.url, key)
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "none")
    blocks = python_blocks(DOC)
    assert len(blocks) == 2, "docs/integrations/langgraph.md lost its examples"
    for line, code in blocks:
        run_block(code, f"docs/integrations/langgraph.md, the block at line {line}")
    with Memory.local(bot="my-agent", project="web") as memory:
        shown = memory.read("users/alice/memories/note-0.md").content
        assert shown == '```json\n{\n  "text": "Lunch is at noon.",\n  "kind": "fact"\n}\n```\n'
        assert shown in DOC.read_text(encoding="utf-8")  # the page shows the real document
    with Memory.connect(server.url, key, bot="my-agent") as remote:
        assert [d.path for d in remote.list()] == ["users/bob/where.md"]
