"""``keepstone run --as-of`` and ``keepstone mcp --as-of``: a run hydrated from the space as it was.

On a SQL store (SQLite in ``tmp_path``), which keeps history, with a clock the test moves;
``keepstone run`` in-process with the CLI's local store put in its place.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from keepstone.automemory import auto_memory_ref, fold_back, materialise_as_of
from keepstone.cli import common
from keepstone.cli.agents import build_tools
from keepstone.cli.main import build_parser, main
from keepstone.service.access import console_principal
from keepstone.service.spaces import SpaceService
from keepstone.spaces import SpaceRef
from keepstone.store.sql import SqlStore
from tests.automemory.agent_script import AGENT

ME = console_principal("local")
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def tick(self) -> datetime:
        self.now += timedelta(hours=1)
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'keepstone.db'}"


@pytest.fixture
def svc(url: str, clock: Clock) -> Iterator[SpaceService]:
    store = SqlStore.open(url)
    store.clock = clock
    yield SpaceService(store)
    store.close()


def _history(svc: SpaceService, ref: SpaceRef, clock: Clock) -> datetime:
    """MEMORY.md v1 then v2, keep.md once, old.md then deleted, later.md after; returns an
    instant between the two halves."""
    clock.tick()
    for path, body in (("MEMORY.md", "# v1\n"), ("keep.md", "kept\n"), ("old.md", "old\n")):
        svc.write(ME, ref, path, body)
    then = clock.tick()
    clock.tick()
    svc.write(ME, ref, "MEMORY.md", "# v2\n")
    svc.delete(ME, ref, "old.md")
    svc.write(ME, ref, "later.md", "later\n")
    clock.tick()
    return then


def _files(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): p.read_text() for p in directory.rglob("*") if p.is_file()
    }


def test_hydrates_the_past_and_writes_back_to_the_live_space(
    svc: SpaceService, clock: Clock, tmp_path: Path
) -> None:
    ref = auto_memory_ref("b", tmp_path, tenant="local")
    then = _history(svc, ref, clock)
    directory = tmp_path / "dir"
    directory.mkdir()
    snap = materialise_as_of(svc, ref, directory, then)
    assert _files(directory) == {"MEMORY.md": "# v1\n", "keep.md": "kept\n", "old.md": "old\n"}
    kept_versions = svc.versions(ref, "keep.md")

    (directory / "MEMORY.md").write_text("# v1\nlearned today\n")
    (directory / "old.md").write_text("old, revived\n")  # deleted since: created again
    (directory / "new.md").write_text("new\n")
    warnings: list[str] = []
    report = fold_back(
        svc, ref, directory, snap, deadline=time.monotonic() + 60, warn=warnings.append
    )
    assert report.ok and warnings == []
    assert sorted(report.written) == ["MEMORY.md", "new.md", "old.md"]
    live = {doc.path: doc.content for doc in svc.iter_documents(ref)}
    assert live == {
        "MEMORY.md": "# v1\nlearned today\n",
        "keep.md": "kept\n",
        "later.md": "later\n",  # not hydrated, not touched: left alone
        "new.md": "new\n",
        "old.md": "old, revived\n",
    }
    # A document the run did not touch is not written back (no new version).
    assert svc.versions(ref, "keep.md") == kept_versions


def test_a_live_change_since_hydration_is_refused_and_kept(
    svc: SpaceService, clock: Clock, tmp_path: Path
) -> None:
    ref = auto_memory_ref("b", tmp_path, tenant="local")
    then = _history(svc, ref, clock)
    directory = tmp_path / "dir"
    directory.mkdir()
    snap = materialise_as_of(svc, ref, directory, then)
    svc.write(ME, ref, "MEMORY.md", "# v3 by another run\n")  # lands while this run works
    svc.write(ME, ref, "keep.md", "kept, changed\n")
    svc.write(ME, ref, "later.md", "later, changed\n")
    (directory / "MEMORY.md").write_text("# v1 edited\n")
    (directory / "keep.md").unlink()
    (directory / "later.md").write_text("from the past run\n")  # the run never saw it
    warnings: list[str] = []
    report = fold_back(
        svc, ref, directory, snap, deadline=time.monotonic() + 60, warn=warnings.append
    )
    failed = dict(report.failed)
    assert set(failed) == {"MEMORY.md", "keep.md", "later.md"}
    assert "live document changed after this run loaded its memory" in failed["MEMORY.md"]
    assert failed["keep.md"].startswith("delete refused: precondition_failed")
    assert "this run did not see it" in failed["later.md"]
    assert all(w.count("\n") == 0 and "precondition_failed" in w for w in warnings)
    assert svc.read(ref, "MEMORY.md").content == "# v3 by another run\n"
    assert svc.read(ref, "keep.md").content == "kept, changed\n"
    assert svc.read(ref, "later.md").content == "later, changed\n"
    assert (directory / "MEMORY.md").read_text() == "# v1 edited\n"  # nothing lost


def test_a_live_document_unchanged_since_hydration_takes_the_run_s_edit(
    svc: SpaceService, clock: Clock, tmp_path: Path
) -> None:
    """The guard is the live etag at hydration: a document nobody changed since takes the
    edit of the run (the version it replaces stays in the history), and a removal too."""
    ref = auto_memory_ref("b", tmp_path, tenant="local")
    then = _history(svc, ref, clock)
    directory = tmp_path / "dir"
    directory.mkdir()
    snap = materialise_as_of(svc, ref, directory, then)
    (directory / "keep.md").unlink()
    (directory / "later.md").write_text("written by the past run\n")
    report = fold_back(svc, ref, directory, snap, deadline=time.monotonic() + 60, warn=print)
    assert report.ok and report.deleted == ["keep.md"] and report.written == ["later.md"]
    assert [d.path for d in svc.list(ref)] == ["MEMORY.md", "later.md"]
    assert svc.read_version(ref, "later.md", 1).content == "later\n"


# --- The command line -------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, clock: Clock) -> Path:
    """A repository as the current directory; the CLI's local store is the SQLite store."""
    monkeypatch.setenv("KEEPSTONE_HOME", str(tmp_path / "home"))
    for name in (
        "KEEPSTONE_SERVER",
        "KEEPSTONE_TOKEN",
        "KEEPSTONE_AUTO_MEMORY",
        "KEEPSTONE_DATABASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    monkeypatch.chdir(repo)

    def sql_store(limits: object = None) -> SqlStore:
        store = SqlStore.open(url)
        store.clock = clock
        return store

    monkeypatch.setattr(common, "local_store", sql_store)
    return repo


def test_keepstone_run_as_of(
    repo: Path,
    svc: SpaceService,
    clock: Clock,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ref = auto_memory_ref("b", repo, tenant="local")
    then = _history(svc, ref, clock)
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    report = tmp_path / "report.json"
    monkeypatch.setenv("AGENT_REPORT", str(report))
    monkeypatch.setenv("AGENT_LINE", "- learned in the past run")
    command = ["--", sys.executable, str(agent), "append"]
    # --as-of turns auto-memory on by itself.
    code = main(["run", "--bot", "b", "--as-of", then.isoformat(), *command])
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"auto-memory as of {then.isoformat()}" in err
    seen = json.loads(report.read_text())["seen"]
    assert seen == {"MEMORY.md": "# v1\n", "keep.md": "kept\n", "old.md": "old\n"}
    assert svc.read(ref, "MEMORY.md").content == "# v1\n- learned in the past run\n"
    assert svc.read(ref, "later.md").content == "later\n"
    assert [d.path for d in svc.list(ref)] == ["MEMORY.md", "keep.md", "later.md"]


def test_keepstone_run_as_of_usage_errors(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--bot", "b", "--as-of", "last tuesday", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keepstone: usage: --as-of 'last tuesday' is not a time")
    assert main(["run", "--bot", "b", "--as-of", "2h", "--auto-memory", "off", "--", "true"]) == 2
    assert "drop one of the two" in capsys.readouterr().err


def test_keepstone_mcp_as_of_serves_the_past_read_only(
    repo: Path, svc: SpaceService, clock: Clock
) -> None:
    ref = SpaceRef.build("project", "default", tenant="local", project="web")
    then = _history(svc, ref, clock)
    args = build_parser().parse_args(
        ["mcp", "--visibility", "project", "--project", "web", "--as-of", then.isoformat()]
    )
    tools = build_tools(args)
    try:
        assert tools.as_of == then
        assert tools.names == ("memory_read", "memory_list", "memory_history")
        assert tools.dispatch("memory_read", {"path": "MEMORY.md"}).text == "# v1\n"
        listed = tools.dispatch("memory_list", {}).data["documents"]
        assert [d["path"] for d in listed] == ["MEMORY.md", "keep.md", "old.md"]
        assert "<workspace_memory_as_of>" in tools.context_text()
    finally:
        tools.service.close()
