"""The operator's side of document history: ``keepstone admin set-history``,
``keepstone db prune-history``, and the history line of ``keepstone memory du``."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from keepstone import runtime as keepstone_runtime
from keepstone.quota import HistoryLimits, Limits
from keepstone.spaces import SpaceRef
from keepstone.store.sql import SqlStore
from tests.cli_runner import run_cli
from tests.conformance.helpers import TEAM, ServedHttpStore


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("KEEPSTONE_HOME", str(home))
    monkeypatch.setenv("KEEPSTONE_ARGON2_TIME_COST", "1")
    monkeypatch.setenv("KEEPSTONE_ARGON2_MEMORY_KIB", "1024")
    for name in ("KEEPSTONE_DATABASE_URL", "KEEPSTONE_SERVER", "KEEPSTONE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    project = tmp_path / "repo"
    project.mkdir()
    monkeypatch.chdir(project)
    return home


def ok(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    return json.loads(out)


def _store(home: Path) -> SqlStore:
    return SqlStore.open(f"sqlite:///{home / 'keepstone.db'}")


def test_set_history_applies_to_every_team_of_the_org(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    org = ok(capsys, "admin", "create-org", "--name", "Acme")["id"]
    teams = sorted(
        ok(capsys, "admin", "create-team", "--org", org, "--name", n)["id"] for n in "ab"
    )
    out = ok(capsys, "admin", "set-history", "--org", org, "--days", "7", "--versions", "3")
    assert out == {
        "org_id": org,
        "history_days": 7,
        "history_versions": 3,
        "teams_updated": teams,
        "teams_failed": [],
    }
    store = _store(home)
    try:
        assert [store.history_limits(t) for t in teams] == [(7, 3, None)] * 2
        out = ok(
            capsys,
            "admin",
            "set-history",
            "--org",
            org,
            "--quota-bytes",
            "900",
            "--days",
            "default",
        )
        assert out["history_days"] is None and out["history_quota_bytes"] == 900
        assert store.history_limits(teams[0]) == (None, 3, 900)
    finally:
        store.close()


@pytest.mark.parametrize(
    ("argv", "status", "says"),
    [
        ((), 2, "name a limit"),
        (("--days", "soon"), 2, "--days takes a whole number"),
        (("--versions", "0"), 1, "history_versions must be a whole number from 1"),
    ],
)
def test_set_history_refusals_are_one_line(
    home: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], status: int, says: str
) -> None:
    org = ok(capsys, "admin", "create-org", "--name", "Acme")["id"]
    code, out, err = run_cli(capsys, "admin", "set-history", "--org", org, *argv)
    assert code == status and out == "" and says in err and err.count("\n") == 1


def test_db_prune_history_drops_versions_past_the_days(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ok(capsys, "db", "upgrade")
    store = _store(home)
    try:
        ref = SpaceRef.build("project", "notes", tenant="t1", project="p")
        store.set_history_limits("t1", HistoryLimits(history_days=1))
        start = datetime.now(UTC) - timedelta(days=5)
        for i, text in enumerate(("one", "two", "three")):
            store.clock = lambda i=i: start + timedelta(hours=i)  # type: ignore[misc]
            store.write(ref, "a.md", text)
        assert [v.version for v in store.versions(ref, "a.md")] == [3, 2, 1]
    finally:
        store.close()
    assert ok(capsys, "db", "prune-history") == {"pruned_versions": 2}
    store = _store(home)
    try:
        assert [v.version for v in store.versions(ref, "a.md")] == [3]
    finally:
        store.close()
    assert ok(capsys, "db", "prune-history") == {"pruned_versions": 0}


def test_du_prints_the_history_line(
    home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The local filesystem store keeps history for its whole tree: the line says so.
    code, out, _ = run_cli(capsys, "memory", "du", "--bot", "b1")
    assert code == 0 and "history 0 B of 1.0 GiB" in out and "replaced versions" in out
    # A server's store keeps history: its bytes apart from the live ones.
    served = tmp_path / "served"
    served.mkdir()
    writer = ServedHttpStore(served, Limits())
    try:
        ref = SpaceRef.build("project", "notes", tenant=TEAM, project="p")
        writer.write(ref, "a.md", "x" * 2000)
        writer.write(ref, "a.md", "y")
    finally:
        writer.close()
    monkeypatch.setattr(
        keepstone_runtime,
        "open_remote_store",
        lambda server, token: ServedHttpStore(served, Limits()),
    )
    argv = ("memory", "du", "--visibility", "project", "--project", "p", "--name", "notes")
    argv = (*argv, "--server", "http://keepstone.test")
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("history"))
    assert (
        "of 1.0 GiB" in line and "replaced versions" in line and not line.startswith("history 0 B")
    )
    usage = ok(capsys, *argv, "--json")
    # The replaced 2,000-byte version is under the 4 KB compression threshold: stored as it
    # is, after its one-byte marker.
    assert usage["history_used_bytes"] == 2001
    assert usage["history_quota_bytes"] == 1 << 30
