"""The ```python blocks of a docs page, run as a reader would paste them.

A page's blocks run in order, each in a fresh namespace; a ``print(...)  # X`` comment says
the block printed a line ``X`` (``X ...`` a line starting with ``X``), in order. Used by the
tests that hold docs/python.md and docs/integrations/*.md to their examples.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
_SHOWN = re.compile(r"^\s*print\(.*\)\s+# (.+)$")


def as_a_reader(mp: pytest.MonkeyPatch, tmp_path: Path, server_url: str, key: str) -> None:
    """The environment the pages' examples assume: a fresh ``KEEPSTONE_HOME`` and current
    directory under ``tmp_path``, ``KEEPSTONE_SERVER`` / ``KEEPSTONE_TOKEN`` naming a real
    server and a member's key, no database or quota setting of the machine's."""
    mp.setenv("KEEPSTONE_HOME", str(tmp_path / "home"))
    mp.setenv("KEEPSTONE_SERVER", server_url)
    mp.setenv("KEEPSTONE_TOKEN", key)
    for name in ("KEEPSTONE_DATABASE_URL", "KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL"):
        mp.delenv(name, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    mp.chdir(work)


def python_blocks(doc: Path) -> list[tuple[int, str]]:
    """Each ```python block of ``doc`` with the line it starts on."""
    text = doc.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _BLOCK.finditer(text)]


def _shown(code: str) -> list[str]:
    """What the block's ``print(...)  # X`` comments say it prints, in order."""
    return [m.group(1).strip() for line in code.splitlines() if (m := _SHOWN.match(line))]


def run_block(code: str, where: str) -> None:
    """Execute one block; fail the test, naming ``where``, when it raises or prints other
    than its comments say."""
    out = io.StringIO()
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
