"""``keepstone --version`` and ``keepstone.__version__`` name the release: the one place it is
written, which pyproject.toml reads and the installed distribution reports."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import pytest

import keepstone
from keepstone.cli.main import main

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_package_version_is_the_projects() -> None:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "keepstone.__version__"}
    assert importlib.metadata.version("keepstone") == keepstone.__version__


def test_keepstone_version_prints_it_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"keepstone {keepstone.__version__}"
