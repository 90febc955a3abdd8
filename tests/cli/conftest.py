"""CLI test fixtures: a fresh ``KEEPSTONE_HOME`` with a project folder as the current
directory (the in-process runner is :mod:`tests.cli_runner`)."""

from __future__ import annotations

from pathlib import Path

import pytest


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
