"""The commands that open the local store, run where the environment is wrong: a current
directory deleted under the shell, a ``KEEPSTONE_HOME`` that is a file. Each mistake is one
line on stderr naming it and the way out, the same from ``memory``, ``mcp``, ``run``, the
commands on the default database, and the Python API."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from keepstone import Memory
from keepstone.errors import InvalidRequest
from tests.cli_runner import run_cli

#: One command of each kind that names a space by the current directory or opens the store.
COMMANDS = [
    ["memory", "ls", "--bot", "b1"],
    ["memory", "put", "a.md", "--bot", "b1", "--empty"],
    ["mcp", "--bot", "b1"],
    ["run", "--auto-memory", "on", "--bot", "b1", "--", "true"],
]
#: Commands that open the default database under the home, not the store.
DATABASE_COMMANDS = [
    ["admin", "create-org", "--name", "acme"],
    ["db", "upgrade"],
]


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEEPSTONE_HOME", str(tmp_path / "home"))
    for name in ("KEEPSTONE_SERVER", "KEEPSTONE_TOKEN", "KEEPSTONE_AUTO_MEMORY"):
        monkeypatch.delenv(name, raising=False)


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 1 and out == "", err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def _in_a_deleted_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run on in a directory deleted after the process entered it, as a shell can be."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: argv[0])
def test_a_deleted_current_directory_is_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
) -> None:
    _in_a_deleted_directory(tmp_path, monkeypatch)
    assert _one_line(capsys, argv) == (
        "keepstone: invalid_request: the current directory no longer exists (it was deleted "
        "after the shell entered it): cd to a directory that exists, or pass --project NAME|DIR\n"
    )


def test_a_deleted_current_directory_is_no_matter_with_project_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _in_a_deleted_directory(tmp_path, monkeypatch)
    code, _, err = run_cli(capsys, "memory", "ls", "--bot", "b1", "--project", "web")
    assert code == 0 and "project web" in err


def _sdk_refusal() -> str:
    with pytest.raises(InvalidRequest) as refused:
        Memory.local(bot="b1", project="web")
    return refused.value.message


@pytest.mark.parametrize("argv", COMMANDS + DATABASE_COMMANDS, ids=lambda argv: argv[0])
@pytest.mark.parametrize("under", ["", "sub"], ids=["a-file", "under-a-file"])
def test_keepstone_home_that_is_a_file_is_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    under: str,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    file = tmp_path / "f"
    file.write_text("x")
    home = os.path.join(file, under) if under else str(file)
    monkeypatch.setenv("KEEPSTONE_HOME", home)
    said = (
        f"KEEPSTONE_HOME {home!r} is not a directory; give the folder that holds (or is to "
        "hold) Keepstone's local state"
    )
    assert _one_line(capsys, argv) == f"keepstone: invalid_request: {said}\n"
    assert _sdk_refusal() == said  # the Python API's words, from the same check


def test_a_store_directory_that_is_a_file_is_the_stores_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    home = tmp_path / "home"
    home.mkdir()
    (home / "spaces").write_text("x")
    err = _one_line(capsys, ["memory", "put", "a.md", "--bot", "b1", "--empty"])
    assert err.startswith("keepstone: store_unavailable: cannot make the disk reserve ")
    assert str(home / "spaces") in err


def test_a_home_that_cannot_be_made_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KEEPSTONE_HOME", "/proc/keepstone-home")  # no directory is made in /proc
    err = _one_line(capsys, ["db", "upgrade"])
    assert err.startswith("keepstone: invalid_request: KEEPSTONE_HOME '/proc/keepstone-home' ")
    assert "cannot be made" in err


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_a_server_on_a_database_in_memory_is_refused(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    err = _one_line(capsys, ["serve", "--database", url, "--port", "1"])
    assert "is a database in memory" in err and "sqlite:///path/keepstone.db" in err


@pytest.mark.parametrize("number", ["٢", "+2", " 2", "1_0", "２"])
@pytest.mark.parametrize(
    "argv",
    [
        ["memory", "show", "m.md", "--bot", "b1", "--version"],
        ["memory", "restore", "m.md", "--bot", "b1", "--version"],
        ["memory", "diff", "m.md", "--bot", "b1", "--from"],
        ["admin", "set-quota", "--instance", "--bytes"],
        ["serve", "--port"],
    ],
    ids=lambda argv: "-".join(argv[:2]) if isinstance(argv, list) else None,
)
def test_a_number_flag_takes_ascii_digits_only(
    capsys: pytest.CaptureFixture[str], argv: list[str], number: str
) -> None:
    # As every other face reads a number (docs/api.md, "Numbers"): int() would also have
    # read 1_0 as ten, other scripts' digits and '+2', and a restore would have written.
    code, out, err = run_cli(capsys, *argv, number)
    assert code == 2 and out == ""
    assert f"{number!r} is not a whole number written in digits 0-9" in err
    assert "Traceback" not in err


def test_set_history_takes_ascii_digits_only(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "admin", "set-history", "--org", "o", "--versions", "٣")
    assert code == 2 and "--versions takes a whole number from 1 in digits 0-9" in err
