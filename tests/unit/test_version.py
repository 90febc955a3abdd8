"""``keepstone --version`` and ``keepstone.__version__`` name the release pyproject.toml declares
(issue 11, finding 6)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import keepstone
from keepstone.cli.main import main

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_package_version_is_the_projects() -> None:
    declared = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["version"]
    assert keepstone.__version__ == declared


def test_keepstone_version_prints_it_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"keepstone {keepstone.__version__}"
