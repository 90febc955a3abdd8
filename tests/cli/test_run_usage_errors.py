"""``keepstone run`` usage mistakes (each failed once before its fix).

A usage mistake exits 2 with one ``keepstone: usage: ...`` line on stderr naming what to fix
(SPEC §8), and the runner's own refusal of an empty command is a 400-class error, not
the tree's 500 root.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from keepstone.automemory.runner import RunOptions, run_command, run_with_auto_memory
from keepstone.cli.main import main
from keepstone.errors import BadRequest


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEEPSTONE_HOME", str(tmp_path / "home"))
    for name in ("KEEPSTONE_SERVER", "KEEPSTONE_TOKEN", "KEEPSTONE_AUTO_MEMORY"):
        monkeypatch.delenv(name, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)


def _usage_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("keepstone: usage: "), err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--auto-memory", "on", "--", "true"],  # no --bot, no config
        ["run", "--auto-memory", "on", "--bot", "", "--", "true"],
    ],
    ids=["no-bot", "empty-bot"],
)
def test_run_without_a_bot_id_is_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert "--bot" in _usage_line(capsys)


@pytest.mark.parametrize("bot", ["a/b", "..", "x:y"])
def test_run_with_an_invalid_bot_is_a_usage_error(
    bot: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--auto-memory", "on", "--bot", bot, "--", "true"]) == 2
    assert f"--bot {bot!r}" in _usage_line(capsys)


@pytest.mark.parametrize("auto_memory", ["on", "off"])
def test_run_with_a_blank_command_is_a_usage_error(
    auto_memory: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--auto-memory", auto_memory, "--bot", "b", "--", ""]) == 2
    assert "blank" in _usage_line(capsys)


def test_runner_refuses_no_command_with_a_400_class_error() -> None:
    warnings: list[str] = []
    with pytest.raises(BadRequest, match="after '--'") as caught:
        run_command(RunOptions([]), warnings.append)
    assert caught.value.status == 400 and caught.value.code == "invalid_request"
    # Refused before the space is touched: no service or space is needed to see it.
    unused: Any = None
    with pytest.raises(BadRequest, match="after '--'") as caught:
        run_with_auto_memory(unused, unused, RunOptions([]), warnings.append)
    assert caught.value.status == 400
    assert warnings == []
