"""docs/python.md cannot drift: every ```python block runs, in order, in a fresh
KEEPSTONE_HOME (and current directory), with KEEPSTONE_SERVER / KEEPSTONE_TOKEN naming a real
``keepstone serve`` and a member's key; a ``print(...)  # shown`` comment must match what the
block printed."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from tests.sdk.conftest import Server

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
_SHOWN = re.compile(r"^\s*print\(.*\)\s+# (.+)$")


def _blocks() -> list[tuple[int, str]]:
    text = DOC.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _BLOCK.finditer(text)]


def _shown(code: str) -> list[str]:
    """What the block's ``print(...)  # X`` comments say it prints, in order."""
    return [m.group(1).strip() for line in code.splitlines() if (m := _SHOWN.match(line))]


@pytest.mark.slow  # the connect example talks to a real keepstone serve
def test_every_python_block_of_the_docs_runs(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEPSTONE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KEEPSTONE_SERVER", server.url)
    monkeypatch.setenv("KEEPSTONE_TOKEN", server.member_key())
    for name in ("KEEPSTONE_DATABASE_URL", "KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL"):
        monkeypatch.delenv(name, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    blocks = _blocks()
    assert len(blocks) >= 6, "docs/python.md lost its examples"
    for line, code in blocks:
        out = io.StringIO()
        where = f"docs/python.md, the block at line {line}"
        with contextlib.redirect_stdout(out):
            try:
                exec(compile(code, where, "exec"), {"__name__": "__docs__"})
            except Exception as exc:
                pytest.fail(f"{where} raised {type(exc).__name__}: {exc}")
        printed = out.getvalue().splitlines()
        rest = iter(printed)
        for expected in _shown(code):
            prefix = expected.removesuffix("...").rstrip()
            cut = prefix != expected  # "X ..." matches a line starting with X
            found = any(p == expected or (cut and p.startswith(prefix)) for p in rest)
            assert found, f"{where}: expected a line {expected!r} in {printed}"
