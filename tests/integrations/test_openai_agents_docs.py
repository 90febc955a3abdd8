"""docs/integrations/openai-agents.md cannot drift: every ```python block runs, in order, as
tests/sdk/test_python_docs.py runs docs/python.md's, with the page's model name answered by
the SDK's own ScriptedModel playing back a recorded run (no network): the agent looks in its
memory, keeps the fact it was told in ``deploys.md``, and a read-only agent reads it back."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from agents.models.multi_provider import MultiProvider
from agents.testing import ScriptedModel, assistant_message, function_call

from keepstone.integrations.openai_agents import memory_tools
from keepstone.sdk import Memory
from tests.doc_blocks import as_a_reader, python_blocks, run_block

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "openai-agents.md"
DEPLOYS = "# Deploys\n\n- We deploy on Fridays, blue-green.\n"


def recorded_runs() -> list[ScriptedModel]:
    """The two runs of the page, as the model played them."""
    remember = ScriptedModel(
        [
            [function_call("memory_list", {"dir": None}, call_id="list")],
            [
                function_call(
                    "memory_write",
                    {"path": "deploys.md", "content": DEPLOYS, "if_match": None},
                    call_id="write",
                )
            ],
            [assistant_message("I'll remember that you deploy on Fridays.")],
        ]
    )
    recall = ScriptedModel(
        [
            [function_call("memory_read", {"path": "deploys.md"}, call_id="read")],
            [assistant_message("On Fridays, blue-green.")],
        ]
    )
    return [remember, recall]


def test_every_python_block_of_the_page_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_a_reader(monkeypatch, tmp_path, "http://127.0.0.1:9", "the page needs no server")
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "none")
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    runs = recorded_runs()
    asked: list[str | None] = []

    def get_model(self: MultiProvider, model_name: str | None) -> Any:
        asked.append(model_name)
        return next(run for run in runs if run.remaining_steps)

    monkeypatch.setattr(MultiProvider, "get_model", get_model)
    blocks = python_blocks(DOC)
    assert len(blocks) == 2, "docs/integrations/openai-agents.md lost its examples"
    # Runner.run_sync runs on the thread's default loop and leaves it open for the next
    # run: the test owns that loop, and closes it.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        for line, code in blocks:
            run_block(code, f"docs/integrations/openai-agents.md, the block at line {line}")
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    for run in runs:
        run.assert_complete()
    assert set(asked) == {"gpt-5-mini"}
    offered = [[t.name for t in run.calls[0].tools] for run in runs]
    assert "memory_write" in offered[0] and "memory_write" not in offered[1]
    answers = [i for i in runs[1].calls[1].input if isinstance(i, dict) and "output" in i]
    assert [a["output"] for a in answers] == [DEPLOYS]
    with Memory.local(bot="my-bot", project="web") as memory:
        assert memory.read("deploys.md").content == DEPLOYS


def test_the_page_names_every_tool_and_what_search_leaves_out(tmp_path: Path) -> None:
    """The page's list of tools is memory_tools()'s, and the search arguments that can have
    no effect through a Memory (the team records' filter) are named as such."""
    text = DOC.read_text(encoding="utf-8")
    listed = text.split("`memory_tools(memory)` gives it", 1)[1].split("with the names", 1)[0]
    with Memory.local(bot="b", home=tmp_path) as memory:
        names = [t.name for t in memory_tools(memory)]
    assert re.findall(r"`(memory_\w+)`", listed) == names
    assert "`repo_id` argument" in text and "has no effect" in text
