"""``Memory.local(...).search`` says what it could not embed in time: a local search (no
server, so no indexer) embeds pending chunks newest first for a time budget, and the
answer's ``pending`` counts what is left — right before, during and after a backlog."""

from __future__ import annotations

from pathlib import Path

import pytest

from keepstone import runtime
from keepstone.sdk import Memory
from keepstone.service import search

DOCS = 12  # two chunks each


def open_memory(home: Path, budget: float, mp: pytest.MonkeyPatch) -> Memory:
    mp.setattr(runtime, "EMBED_BUDGET_SECONDS", budget)  # read when the memory is opened
    return Memory.local(bot="b1", home=home)


def test_pending_before_during_and_after_a_backlog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "minilm")
    home = tmp_path / "home"
    with open_memory(home, 0.0, monkeypatch) as writer:  # no budget: embeds nothing
        for i in range(DOCS):
            writer.write(f"notes/{i}.md", f"# Note {i}\n\nquokka {i}\n\n## More\n\nwombat {i}\n")
        before = writer.search("quokka")
        assert before and before.pending == 2 * DOCS
    # A budget that one batch overruns: each search embeds one batch, newest first.
    with open_memory(home, 1e-3, monkeypatch) as memory:
        during = memory.search("quokka")
        assert during.pending == 2 * DOCS - search.LOCAL_BATCH
        assert memory.search("quokka").pending == 2 * DOCS - 2 * search.LOCAL_BATCH
    with open_memory(home, 60.0, monkeypatch) as memory:
        after = memory.search("quokka")
        assert after.pending == 0
        assert "meaning" in after[0].matched
