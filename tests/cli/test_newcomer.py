"""The CLI never surprises a newcomer.

Each test drives ``keepstone`` as a new user would: in-process through ``cli.main.main``
on a real local store in a temporary ``KEEPSTONE_HOME``, or as a real subprocess where the
terminal or stdin itself is what is tested.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import pty
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from keepstone.cli.common import (
    KeepstoneArgumentParser,
    Ticker,
    UsageError,
    local_store,
    progress,
)
from keepstone.cli.main import build_parser
from keepstone.documents import ImportStrategy
from keepstone.spaces import SpaceRef, encode_workdir_key
from tests.cli_runner import keepstone_argv, run_cli


def _tar(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "KEEPSTONE_HOME": str(home)}
    env.pop("KEEPSTONE_SERVER", None)
    env.pop("KEEPSTONE_TOKEN", None)
    return env


# --- The default visibility is named when it is the problem -------------------------------------


def test_a_missing_bot_says_the_default_visibility_is_the_problem(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "mem.tar.gz"
    archive.write_bytes(_tar({"a.md": b"a"}))
    code, out, err = run_cli(capsys, "memory", "import", "--in", str(archive), "--strategy", "skip")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "defaults to --visibility bot" in err
    assert "pass --bot ID" in err and "choose another --visibility" in err
    # Typed by the user, the visibility is not called a default.
    code, _, err = run_cli(capsys, "memory", "ls", "--visibility", "bot")
    assert code == 2 and "--visibility bot needs --bot ID" in err
    assert "defaults" not in err
    # The README's corrected line works.
    code, out, _ = run_cli(
        capsys,
        "memory",
        "import",
        "--bot",
        "whats-next",
        "--in",
        str(archive),
        "--strategy",
        "skip",
    )
    assert code == 0 and out.startswith("written 1, skipped 0, renamed 0, rejected 0")


def test_mcp_without_a_bot_names_the_default_too(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "mcp")
    assert code == 2 and "defaults to --visibility bot" in err


# --- A project is a name, or a directory spelled as one -----------------------------------------


def test_a_project_name_reaches_the_same_space_from_any_directory(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    note = tmp_path / "n.md"
    note.write_text("deploy on fridays")
    code, _, err = run_cli(
        capsys, "memory", "put", "n.md", "--bot", "b", "--project", "web", "--file", str(note)
    )
    assert (code, err) == (0, "")
    elsewhere = tmp_path / "somewhere" / "web"  # even a folder called web is not the name
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    code, out, _ = run_cli(capsys, "memory", "cat", "n.md", "--bot", "b", "--project", "web")
    assert (code, out) == (0, "deploy on fridays")
    # The very space the HTTP API's project=web names.
    ref = SpaceRef.build("bot", "default", tenant="local", project="web", bot="b")
    assert local_store().read(ref, "n.md").content == "deploy on fridays"


def test_a_project_spelled_as_a_directory_is_that_directory(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (Path.cwd() / "web").mkdir()
    note = tmp_path / "n.md"
    note.write_text("in the folder")
    code, _, _ = run_cli(
        capsys, "memory", "put", "n.md", "--bot", "b", "--project", "./web", "--file", str(note)
    )
    assert code == 0
    key = encode_workdir_key(Path.cwd() / "web")
    ref = SpaceRef.build("bot", "default", tenant="local", project=key, bot="b")
    assert local_store().read(ref, "n.md").content == "in the folder"
    code, out, err = run_cli(capsys, "memory", "ls", "--bot", "b", "--project", "./nope")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("keepstone: usage: --project") and "no such directory" in err


def test_project_help_says_name_or_directory() -> None:
    text = _subparser(build_parser(), "memory", "ls").format_help()
    assert "--project NAME|DIR" in text


def test_mcp_takes_a_project_name(home: Path) -> None:
    from keepstone.cli.agents import build_tools

    args = build_parser().parse_args(["mcp", "--bot", "b", "--project", "web"])
    tools = build_tools(args)
    try:
        assert tools.ref.project == "web"
    finally:
        tools.service.store.close()


def test_mcp_config_overrides_keep_a_directory_absolute_and_a_name_as_given(home: Path) -> None:
    from keepstone.cli.agents import project_override

    (Path.cwd() / "web").mkdir()
    assert project_override("web") == "web"
    assert project_override("./web") == str(Path.cwd() / "web")
    with pytest.raises(UsageError, match="--project"):
        project_override("./nope")


def test_run_takes_a_project_name_or_directory(home: Path) -> None:
    from keepstone.automemory.space import auto_memory_ref
    from keepstone.cli.agents import run_ref

    def ref_for(*flags: str) -> SpaceRef:
        args = build_parser().parse_args(["run", "--bot", "b", *flags, "--", "true"])
        return run_ref(args, "b", "local")

    assert ref_for("--project", "web").project == "web"
    assert ref_for("--project", "web").name == "auto-memory"
    assert ref_for() == auto_memory_ref("b", os.getcwd(), tenant="local")
    assert ref_for("--project", ".") == auto_memory_ref("b", os.getcwd(), tenant="local")
    with pytest.raises(UsageError, match="--project"):
        ref_for("--project", "./nope")


# --- An empty listing says which space it looked at ---------------------------------------------


def test_an_empty_listing_names_the_space_on_stderr(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, "memory", "ls", "--bot", "b1")
    assert (code, out) == (0, "")
    key = encode_workdir_key(Path.cwd())
    assert "bot space 'default'" in err and f"project {key}" in err
    assert "the current directory" in err and "bot b1" in err
    assert "keepstone memory spaces" in err
    code, out, err = run_cli(capsys, "memory", "ls", "--visibility", "project", "--project", "web")
    assert (code, out) == (0, "") and "project space 'default'" in err and "project web" in err
    code, out, err = run_cli(capsys, "memory", "ls", "--visibility", "user", "--user", "ann")
    assert "user space 'default'" in err and "user ann" in err
    code, out, err = run_cli(capsys, "memory", "ls", "--bot", "b1", "--json")
    assert (code, json.loads(out), err) == (0, {"documents": [], "next_cursor": None}, "")


def test_a_search_without_hits_names_the_space(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, "memory", "search", "quokka", "--bot", "b1")
    assert (code, out) == (0, "")
    assert err.startswith("no matches in bot space 'default'") and "keepstone memory spaces" in err


# --- put never waits at a terminal, never empties a note by accident ----------------------------


def test_put_at_a_terminal_refuses_at_once(home: Path, tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [*keepstone_argv(), "memory", "put", "MEMORY.md", "--bot", "b"],
            stdin=follower,
            capture_output=True,
            cwd=Path.cwd(),
            env=_env(home),
            timeout=120,  # today's code waits for input forever: the test fails, not hangs
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == 2
    assert b"no content: use --file F or pipe the content into stdin" in done.stderr


def test_empty_content_does_not_replace_a_note(home: Path, tmp_path: Path) -> None:
    env, cwd = _env(home), Path.cwd()

    def keepstone(*argv: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [*keepstone_argv(), "memory", *argv],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            cwd=cwd,
            env=env,
        )

    note = tmp_path / "note.md"
    note.write_text("twelve bytes")
    assert keepstone("put", "MEMORY.md", "--bot", "b", "--file", str(note)).returncode == 0
    refused = keepstone("put", "MEMORY.md", "--bot", "b")  # stdin is /dev/null
    assert refused.returncode == 2 and b"--empty" in refused.stderr
    empty = tmp_path / "empty.md"
    empty.write_text("")
    refused = keepstone("put", "MEMORY.md", "--bot", "b", "--file", str(empty))
    assert refused.returncode == 2 and b"--empty" in refused.stderr
    assert keepstone("cat", "MEMORY.md", "--bot", "b").stdout == b"twelve bytes"

    emptied = keepstone("put", "MEMORY.md", "--bot", "b", "--empty")
    assert emptied.returncode == 0 and emptied.stdout.startswith(b"replaced MEMORY.md (0 B")
    assert keepstone("cat", "MEMORY.md", "--bot", "b").stdout == b""
    both = keepstone("put", "MEMORY.md", "--bot", "b", "--empty", "--file", str(note))
    assert both.returncode == 2 and b"--empty" in both.stderr


# --- Suggestions, --token without a server, import's total and --quiet --------------------------


def _subparser(parser: argparse.ArgumentParser, *names: str) -> argparse.ArgumentParser:
    for name in names:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def _all_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _all_parsers(sub)
    return found


def test_every_parser_suggests() -> None:
    parsers = _all_parsers(build_parser())
    assert len(parsers) > 20
    assert all(isinstance(p, KeepstoneArgumentParser) for p in parsers)


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["memory", "ls", "--bot", "b", "--projct", "web"], "(did you mean --project?)"),
        (["memory", "ls", "--bot", "b", "--projct=web"], "(did you mean --project?)"),
        (["memory", "put", "a.md", "--bot", "b", "--emtpy"], "(did you mean --empty?)"),
        (["memory", "lss"], "(did you mean ls?)"),
        (["memroy", "ls"], "(did you mean memory?)"),
        (["memory", "ls", "--visibility", "projet"], "(did you mean project?)"),
    ],
)
def test_a_mistyped_flag_or_verb_gets_a_suggestion(
    home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], hint: str
) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert hint in err


def test_no_suggestion_when_nothing_is_close(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "memory", "ls", "--bot", "b", "--zzzzzz")
    assert code == 2 and "unrecognized arguments: --zzzzzz" in err and "did you mean" not in err


def test_token_without_a_server_is_a_usage_error(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run_cli(capsys, "memory", "ls", "--bot", "b", "--token", "t")
    assert code == 2 and out == ""
    assert "--token is for a server: add --server URL (or set KEEPSTONE_SERVER)" in err
    assert "drop --token to use the local store" in err
    # A token kept in the environment is no error: the local store is used.
    monkeypatch.setenv("KEEPSTONE_TOKEN", "kept")
    code, _, err = run_cli(capsys, "memory", "ls", "--bot", "b", "--json")
    assert (code, err) == (0, "")


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--server", "http://127.0.0.1:1\x01"], "the server URL 'http://127.0.0.1:1\\x01'"),
        (["--server", "127.0.0.1:8420"], "needs http:// or https:// and a host"),
        (["--server", "http://x", "--token", "kéy"], "the API key holds"),
        (["--server", "http://x", "--token", "key\r\n"], "the API key holds"),
    ],
    ids=["control-character", "no-scheme", "non-ascii-token", "token-with-newline"],
)
def test_a_server_url_or_key_no_request_can_carry_is_named(
    home: Path, capsys: pytest.CaptureFixture[str], flags: list[str], said: str
) -> None:
    """Refused before any request, with what to fix: not httpx's parser's traceback."""
    code, out, err = run_cli(capsys, "memory", "ls", "--bot", "b", *flags)
    assert code == 1 and out == "", err
    assert err.startswith("keepstone: invalid_request: ") and said in err, err


def test_the_token_comes_from_the_flag_else_the_environment(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from keepstone.cli.common import resolve_server_args

    monkeypatch.setenv("KEEPSTONE_TOKEN", "from-env")
    args = build_parser().parse_args(["memory", "du", "--bot", "b", "--server", "http://x"])
    assert args.token is None  # not given: read from the environment afterwards
    resolve_server_args(args)
    assert (args.server, args.token) == ("http://x", "from-env")
    monkeypatch.setenv("KEEPSTONE_SERVER", "http://env")
    args = build_parser().parse_args(["memory", "du", "--bot", "b", "--token", "flag"])
    resolve_server_args(args)
    assert (args.server, args.token) == ("http://env", "flag")


def test_import_learns_its_total_before_any_write(home: Path) -> None:
    store = local_store()
    ref = SpaceRef.build("org", "default", tenant="local")
    events: list[tuple[str, int, int]] = []

    def total(n: int) -> None:
        events.append(("total", n, len(store.list(ref))))

    def tick(n: int) -> None:
        events.append(("tick", n, 0))

    archive = _tar({"a.md": b"a", "b.md": b"b", "../evil.md": b"x"})
    report = store.import_archive(
        ref, io.BytesIO(archive), ImportStrategy.SKIP, progress=tick, total=total
    )
    assert len(report.written) == 2 and len(report.rejected) == 1
    assert events[0] == ("total", 3, 0)  # counted, nothing written yet
    assert sum(n for kind, n, _ in events if kind == "tick") == 3  # every member, rejected too


def test_the_progress_display_shows_the_total(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import keepstone.cli.memory as memory_cli

    shown: list[Ticker] = []
    real = memory_cli.progress

    @contextlib.contextmanager
    def recorded(description: str, total: int | None = None, **_: object) -> Iterator[Ticker]:
        with real(description, total, enabled=True) as ticker:
            shown.append(ticker)
            yield ticker

    monkeypatch.setattr(memory_cli, "progress", recorded)
    archive = tmp_path / "m.tar.gz"
    archive.write_bytes(_tar({"a.md": b"a", "b.md": b"b", "c.md": b"c"}))
    code, _, _ = run_cli(capsys, "memory", "import", "--bot", "b", "--in", str(archive))
    assert code == 0 and len(shown) == 1
    assert (shown[0].total, shown[0].done) == (3, 3)  # 3/3, not 3/?
    with progress("check", enabled=False) as ticker:
        ticker.set_total(2)
        ticker(2)
    assert (ticker.total, ticker.done) == (2, 2)


def test_import_quiet_prints_the_summary_and_the_rejected_only(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "m.tar.gz"
    archive.write_bytes(_tar({"a.md": b"a", "b.md": b"b", "notes.txt": b"t"}))
    code, out, _ = run_cli(
        capsys, "memory", "import", "--bot", "b", "--in", str(archive), "--quiet"
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "written 2, skipped 0, renamed 0, rejected 1"
    assert len(lines) == 2 and lines[1].startswith("  rejected  notes.txt: ")
    code, out, _ = run_cli(capsys, "memory", "import", "--bot", "b", "--in", str(archive), "-q")
    assert out.splitlines()[0] == "written 0, skipped 2, renamed 0, rejected 1"
    assert "skipped   a.md" not in out
