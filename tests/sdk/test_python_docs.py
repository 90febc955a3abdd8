"""docs/python.md cannot drift: every ```python block runs, in order, in a fresh
KEEPSTONE_HOME (and current directory), with KEEPSTONE_SERVER / KEEPSTONE_TOKEN naming a real
``keepstone serve`` and a member's key; a ``print(...)  # shown`` comment must match what the
block printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doc_blocks import as_a_reader, python_blocks, run_block
from tests.sdk.conftest import Server

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"


@pytest.mark.slow  # the connect example talks to a real keepstone serve
def test_every_python_block_of_the_docs_runs(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_a_reader(monkeypatch, tmp_path, server.url, server.member_key())
    blocks = python_blocks(DOC)
    assert len(blocks) >= 6, "docs/python.md lost its examples"
    for line, code in blocks:
        run_block(code, f"docs/python.md, the block at line {line}")
