"""``keepstone memory log|show|diff|restore`` and ``--as-of`` on ``ls``/``cat``/``export``.

In-process through ``cli.main.main``, on a SQL store (SQLite in ``tmp_path``) put in place of
the local store, with a clock the test moves, so every version has a known instant.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from keepstone.cli import common
from keepstone.cli.common import UsageError
from keepstone.cli.history import parse_time
from keepstone.store.sql import SqlStore
from tests.cli_runner import run_memory

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Clock:
    """What "now" is for the store: moved by the test."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def tick(self) -> datetime:
        self.now += timedelta(hours=1)
        return self.now


@pytest.fixture
def clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """The CLI's local store is a SQLite SqlStore driven by the returned clock."""
    monkeypatch.setenv("KEEPSTONE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "none")
    for name in ("KEEPSTONE_SERVER", "KEEPSTONE_TOKEN", "KEEPSTONE_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    project = tmp_path / "myrepo"
    project.mkdir()
    monkeypatch.chdir(project)
    url = f"sqlite:///{tmp_path / 'keepstone.db'}"
    the_clock = Clock()

    def sql_store(limits: object = None) -> SqlStore:
        store = SqlStore.open(url)
        store.clock = the_clock
        return store

    monkeypatch.setattr(common, "local_store", sql_store)
    yield the_clock


def put(capsys: pytest.CaptureFixture[str], tmp_path: Path, path: str, content: str) -> None:
    src = tmp_path / "content.md"
    src.write_text(content, encoding="utf-8")
    code, _, err = run_memory(capsys, "put", path, "--bot", "b1", "--file", str(src))
    assert (code, err) == (0, "")


@pytest.fixture
def three(clock: Clock, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[datetime]:
    """MEMORY.md written three times, an hour apart; the instants of its versions."""
    instants = []
    for text in ("one\n", "one\ntwo\n", "one\ntwo\nthree\n"):
        instants.append(clock.tick())
        put(capsys, tmp_path, "MEMORY.md", text)
    return instants


def test_log_lists_versions_newest_first(
    three: list[datetime], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_memory(capsys, "log", "MEMORY.md", "--bot", "b1")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == ["3", "2", "1"]
    assert lines[0].endswith("local-cli  (live)")  # who: the local console
    assert "(live)" not in lines[1] and "2026-11-30 13:00:00Z" in lines[2]
    code, out, _ = run_memory(capsys, "log", "MEMORY.md", "--bot", "b1", "--json")
    body = json.loads(out)
    assert [v["version"] for v in body["versions"]] == [3, 2, 1]
    assert set(body["versions"][0]) == {"version", "etag", "size_bytes", "at", "actor", "deleted"}
    assert body["versions"][2]["size_bytes"] == 4 and body["versions"][2]["deleted"] is False
    assert datetime.fromisoformat(body["versions"][0]["at"]) == three[2]


def test_log_shows_a_deletion(
    three: list[datetime], clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    clock.tick()
    assert run_memory(capsys, "rm", "MEMORY.md", "--bot", "b1")[0] == 0
    code, out, _ = run_memory(capsys, "log", "MEMORY.md", "--bot", "b1")
    assert code == 0
    first = out.splitlines()[0]
    assert first.split()[0] == "4" and "deleted" in first and "(live)" not in first


def test_show_prints_a_version(three: list[datetime], capsys: pytest.CaptureFixture[str]) -> None:
    assert run_memory(capsys, "show", "MEMORY.md", "--version", "2", "--bot", "b1") == (
        0,
        "one\ntwo\n",
        "",
    )
    code, out, err = run_memory(capsys, "show", "MEMORY.md", "--version", "9", "--bot", "b1")
    assert (code, out) == (1, "")
    assert err.startswith("keepstone: not_found: ") and "version 9" in err and err.count("\n") == 1
    code, _, err = run_memory(capsys, "show", "MEMORY.md", "--version", "0", "--bot", "b1")
    assert code == 1 and "version must be a whole number from 1" in err
    code, _, err = run_memory(capsys, "show", "MEMORY.md", "--bot", "b1")
    assert code == 2 and "--version" in err


def test_diff_defaults_to_the_live_version(
    three: list[datetime], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_memory(capsys, "diff", "MEMORY.md", "--from", "1", "--bot", "b1")
    assert (code, err) == (0, "")
    assert "--- a/MEMORY.md (version 1)" in out and "+++ b/MEMORY.md (version 3)" in out
    assert "+two\n" in out and "+three\n" in out
    code, out, _ = run_memory(
        capsys, "diff", "MEMORY.md", "--from", "1", "--to", "2", "--bot", "b1"
    )
    assert "+two\n" in out and "three" not in out
    code, out, err = run_memory(
        capsys, "diff", "MEMORY.md", "--from", "2", "--to", "2", "--bot", "b1"
    )
    assert (code, out) == (0, "") and "identical" in err
    code, _, err = run_memory(capsys, "diff", "MEMORY.md", "--from", "7", "--bot", "b1")
    assert code == 1 and err.startswith("keepstone: not_found: ")


def test_restore_writes_the_old_content_as_a_new_version(
    three: list[datetime], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_memory(capsys, "restore", "MEMORY.md", "--version", "1", "--bot", "b1")
    assert (code, err) == (0, "")
    assert out.startswith("restored MEMORY.md from version 1 (4 B, etag ")
    assert run_memory(capsys, "cat", "MEMORY.md", "--bot", "b1")[1] == "one\n"
    code, out, _ = run_memory(capsys, "log", "MEMORY.md", "--bot", "b1", "--json")
    assert [v["version"] for v in json.loads(out)["versions"]] == [4, 3, 2, 1]
    code, out, err = run_memory(
        capsys, "restore", "MEMORY.md", "--version", "3", "--if-match", "0" * 32, "--bot", "b1"
    )
    assert (code, out) == (1, "") and err.startswith("keepstone: precondition_failed: ")
    assert run_memory(capsys, "cat", "MEMORY.md", "--bot", "b1")[1] == "one\n"


def test_cat_and_ls_as_of(
    three: list[datetime], clock: Clock, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock.tick()
    put(capsys, tmp_path, "topics/later.md", "later\n")
    between = (three[0] + timedelta(minutes=30)).isoformat()
    assert run_memory(capsys, "cat", "MEMORY.md", "--bot", "b1", "--as-of", between)[1] == "one\n"
    at_two = three[1].strftime("%Y-%m-%dT%H:%M:%SZ")
    assert (
        run_memory(capsys, "cat", "MEMORY.md", "--bot", "b1", "--as-of", at_two)[1] == "one\ntwo\n"
    )
    # An offset and a naive time (UTC) name the same instant.
    naive = three[1].replace(tzinfo=None).isoformat()
    assert (
        run_memory(capsys, "cat", "MEMORY.md", "--bot", "b1", "--as-of", naive)[1] == "one\ntwo\n"
    )
    east = three[1].astimezone(UTC).replace(tzinfo=None).isoformat() + "+00:00"
    assert run_memory(capsys, "cat", "MEMORY.md", "--bot", "b1", "--as-of", east)[1] == "one\ntwo\n"
    code, out, _ = run_memory(capsys, "ls", "--bot", "b1", "--json", "--as-of", at_two)
    assert [d["path"] for d in json.loads(out)["documents"]] == ["MEMORY.md"]
    code, out, _ = run_memory(capsys, "ls", "--bot", "b1", "--json")
    assert [d["path"] for d in json.loads(out)["documents"]] == ["MEMORY.md", "topics/later.md"]
    before = (T0 - timedelta(days=1)).isoformat()
    code, out, err = run_memory(capsys, "cat", "MEMORY.md", "--bot", "b1", "--as-of", before)
    assert (code, out) == (1, "") and err.startswith("keepstone: not_found: there was no document")
    code, out, err = run_memory(capsys, "ls", "--bot", "b1", "--as-of", before)
    assert (code, out) == (0, "") and "no documents" in err


def test_export_as_of_writes_the_space_as_it_was(
    three: list[datetime], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "then.tar.gz"
    at = three[0].isoformat()
    code, _, err = run_memory(
        capsys, "export", "--bot", "b1", "--out", str(out_file), "--as-of", at
    )
    assert (
        code == 0 and "exported 1 document(s)" in err and "as of 2026-11-30T13:00:00+00:00" in err
    )
    with tarfile.open(out_file, "r:gz") as tar:
        member = tar.extractfile("MEMORY.md")
        assert member is not None and member.read() == b"one\n"


def test_a_bad_as_of_is_a_usage_error(
    three: list[datetime], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_memory(capsys, "cat", "MEMORY.md", "--bot", "b1", "--as-of", "yesterday")
    assert (code, out) == (2, "")
    assert (
        err.startswith("keepstone: usage: --as-of 'yesterday' is not a time")
        and err.count("\n") == 1
    )


def test_parse_time_reads_iso_8601_and_times_ago() -> None:
    now = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
    assert parse_time("2026-11-30T14:00:00Z") == datetime(2026, 11, 30, 14, tzinfo=UTC)
    assert parse_time("2026-11-30T16:00+02:00") == datetime(2026, 11, 30, 14, tzinfo=UTC)
    assert parse_time("2026-11-30T14:00") == datetime(2026, 11, 30, 14, tzinfo=UTC)
    assert parse_time("2026-11-30") == datetime(2026, 11, 30, tzinfo=UTC)
    assert parse_time("2h", now=now) == now - timedelta(hours=2)
    assert parse_time("3d", now=now) == now - timedelta(days=3)
    assert parse_time("90s", now=now) == now - timedelta(seconds=90)
    assert parse_time("1w", now=now) == now - timedelta(weeks=1)
    with pytest.raises(UsageError, match="--until '2 hours' is not a time"):
        parse_time("2 hours", flag="--until")


def test_the_local_store_without_history_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whatever store is behind the CLI, a history verb it cannot answer is one line."""
    monkeypatch.setenv("KEEPSTONE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    code, out, err = run_memory(capsys, "log", "MEMORY.md", "--bot", "b1", "--json")
    assert code == 1 and out == "" and err.count("\n") == 1 and err.startswith("keepstone: ")


def test_the_verbs_are_registered() -> None:
    from keepstone.cli.main import build_parser

    args = build_parser().parse_args(["memory", "restore", "a.md", "--version", "2", "--bot", "b"])
    assert (args.verb, args.path, args.version, args.if_match) == ("restore", "a.md", 2, None)


# --- keepstone memory recent -----------------------------------------------------------------


def test_recent_lists_the_space_s_changes_newest_first(
    three: list[datetime], clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every space of the team: the space's id on each line.
    code, out, err = run_memory(capsys, "recent", "--all", "--limit", "1")
    assert code == 0 and ":b1:" in out.split()[3], (out, err)
    clock.tick()
    assert run_memory(capsys, "rm", "MEMORY.md", "--bot", "b1")[0] == 0
    code, out, err = run_memory(capsys, "recent", "--bot", "b1")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert [line.split()[2] for line in lines] == ["delete", "write", "write", "write"]
    assert lines[0].split()[4:6] == ["v4", "-14"] and lines[0].endswith("local console")
    assert lines[3].split()[4:6] == ["v1", "+4"]
    # Since an instant, and as JSON, a page at a time.
    code, out, _ = run_memory(capsys, "recent", "--bot", "b1", "--since", three[2].isoformat())
    assert len(out.splitlines()) == 2
    code, out, err = run_memory(capsys, "recent", "--bot", "b1", "--limit", "3", "--json")
    body = json.loads(out)
    assert [c["version"] for c in body["changes"]] == [4, 3, 2] and body["next_cursor"]
    assert body["changes"][0]["actor"] == {"kind": "user", "name": "local console"}
    code, out, _ = run_memory(
        capsys, "recent", "--bot", "b1", "--json", "--cursor", body["next_cursor"]
    )
    assert [c["version"] for c in json.loads(out)["changes"]] == [1]


def test_recent_refuses_bad_flags_naming_them(
    three: list[datetime], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_memory(capsys, "recent", "--bot", "b1", "--limit", "0")
    assert code == 1 and "limit must be" in err
    code, _, err = run_memory(capsys, "recent", "--bot", "b1", "--since", "yesterday")
    assert code == 2 and "--since" in err
    code, _, err = run_memory(capsys, "recent", "--bot", "b1", "--actor-kind", "robot")
    assert code == 2 and "--actor-kind" in err
    code, _, err = run_memory(capsys, "recent", "--bot", "b1", "--cursor", "nope")
    assert code == 1 and "cursor" in err
