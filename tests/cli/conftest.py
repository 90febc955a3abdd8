"""CLI test fixtures: a fresh ``KEEPSTONE_HOME`` with a project folder as the current
directory (the in-process runner is :mod:`tests.cli_runner`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli_runner import run_cli


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """KEEPSTONE_HOME in tmp_path, no server or quota of ours; the current directory is a
    project folder. (A module needing more of the environment defines its own ``home``.)"""
    home = tmp_path / "home"
    project = tmp_path / "myrepo"
    project.mkdir()
    monkeypatch.setenv("KEEPSTONE_HOME", str(home))
    for name in ("KEEPSTONE_SERVER", "KEEPSTONE_TOKEN", "KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(project)
    return home


@pytest.fixture
def admin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Any:
    """Runs ``keepstone admin <argv>`` on a fresh home's database: its JSON answer, or
    with ``ok=False`` ``(exit code, stdout, stderr)``."""
    monkeypatch.setenv("KEEPSTONE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KEEPSTONE_ARGON2_TIME_COST", "1")
    monkeypatch.setenv("KEEPSTONE_ARGON2_MEMORY_KIB", "1024")
    monkeypatch.delenv("KEEPSTONE_DATABASE_URL", raising=False)

    def run(*argv: str, ok: bool = True) -> Any:
        code, out, err = run_cli(capsys, "admin", *argv)
        if ok:
            assert code == 0, err
            return json.loads(out)
        return code, out, err

    return run
