"""The SQL store's import batch (keepstone.store.sql_import): many documents to a transaction,
each refused exactly as a write would refuse it, with history and counters as for writes,
and a document held by another writer written alone instead of waited on under the
batch's counter locks."""

from __future__ import annotations

import io
import threading
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from keepstone.db import sqlite_writers
from keepstone.errors import PreconditionFailed, QuotaExceeded
from keepstone.quota import Limits
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store import sql_import
from keepstone.store.base import CheckedWrite, ImportStrategy, PlatformGrant, WriteTerms
from keepstone.store.sql import SqlStore
from keepstone.store.sql_schema import memory_document_versions
from tests.conformance.archives import regular, tar_gz
from tests.transactions import round_trips
from tests.unit.conftest import Backend

REF = SpaceRef.build(Visibility.PROJECT, "notes", tenant="team-a", project="p1")
GLOBAL = SpaceRef.build(Visibility.GLOBAL, "catalogue")
AWS_KEY = "AKIA" + "QYLPMN5HHHFPZAM2"


def _versions(store: SqlStore) -> int:
    with store.engine.connect() as conn:
        return int(
            conn.execute(sa.select(sa.func.count()).select_from(memory_document_versions)).scalar()
            or 0
        )


def _checked(store: SqlStore, path: str, body: str, create_only: bool = True) -> CheckedWrite:
    """A member past the prelude, as the archive hands it to the writer."""
    return store.check_write(REF, path, body, WriteTerms(if_none_match=create_only))


def test_a_refused_member_leaves_the_batch_going(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_import, "BATCH_DOCUMENTS", 3)  # several batches, one refusal each
    store = backend.open(Limits(team_quota=10_000))
    store.write(REF, "taken.md", "already here")
    with store.import_writer(REF, None) as write:
        outcomes: list[str] = []
        for i in range(8):
            try:
                write(_checked(store, f"n{i}.md", f"note {i}"))
                outcomes.append("ok")
            except Exception as exc:
                outcomes.append(type(exc).__name__)
            for path, body, error in (
                ("taken.md", "again", PreconditionFailed),
                (f"big{i}.md", "x" * 20_000, QuotaExceeded),
            ):
                with pytest.raises(error):
                    write(_checked(store, path, body))
    assert outcomes == ["ok"] * 8
    assert [d.path for d in store.list(REF)] == sorted(
        ["taken.md", *(f"n{i}.md" for i in range(8))]
    )
    assert store.read(REF, "taken.md").content == "already here"
    usage = store.usage(REF)
    assert usage.used_bytes == sum(d.size_bytes for d in store.list(REF))
    assert usage.team_used_bytes == usage.used_bytes
    assert [v.version for v in store.versions(REF, "n7.md")] == [1]
    # Nothing was replaced: no document's version waits in the table of replaced ones,
    # and no refused member left one there.
    assert _versions(store) == 0


def test_an_import_writes_as_writes_do(backend: Backend) -> None:
    store = backend.open()
    store.write(REF, "a.md", "old a")
    members = [regular(f"d/{i}.md", f"doc {i}") for i in range(450)] + [regular("a.md", "new a")]
    report = store.import_archive(REF, io.BytesIO(tar_gz(members)), ImportStrategy.OVERWRITE)
    assert len(report.written) == 451 and not report.rejected
    assert len(store.list(REF)) == 451
    assert [v.version for v in store.versions(REF, "a.md")] == [2, 1]
    assert store.read_version(REF, "a.md", 1).content == "old a"
    assert store.usage(REF).used_bytes == sum(d.size_bytes for d in store.list(REF))


def test_an_archive_member_refused_mid_batch_is_rejected_alone(backend: Backend) -> None:
    store = backend.open()
    store.write(REF, "taken.md", "already here")
    members = [
        regular("a.md", "a"),
        regular("taken.md", "again"),  # skipped: create-only finds it there
        regular("secret.md", f"key {AWS_KEY}"),
        regular("b.md", "b"),
    ]
    report = store.import_archive(REF, io.BytesIO(tar_gz(members)), ImportStrategy.SKIP)
    assert report.written == ["a.md", "b.md"] and report.skipped == ["taken.md"]
    assert [r.path for r in report.rejected] == ["secret.md"]
    assert [d.path for d in store.list(REF)] == ["a.md", "b.md", "taken.md"]
    assert store.usage(REF).used_bytes == sum(d.size_bytes for d in store.list(REF))


def test_a_global_import_is_audited_per_document(backend: Backend) -> None:
    store = backend.open()
    grant = PlatformGrant("admin-token", importing=True)
    members = [regular(f"{i}.md", f"g {i}") for i in range(3)]
    store.import_archive(GLOBAL, io.BytesIO(tar_gz(members)), grant=grant)
    imports = [r for r in store.audit_log() if r["action"] == "memory.global_import"]
    assert sorted(r["path"] for r in imports) == ["0.md", "1.md", "2.md"]


def test_an_escaping_error_rolls_back_the_batch_in_progress(backend: Backend) -> None:
    store = backend.open()
    with pytest.raises(RuntimeError), store.import_writer(REF, None) as write:
        write(_checked(store, "a.md", "a", False))
        raise RuntimeError("the archive broke")
    assert store.list(REF) == []
    assert store.usage(REF).used_bytes == 0


def test_on_sqlite_a_batch_holds_its_turn_among_the_databases_writers(tmp_path: Path) -> None:
    # SQLite only: PostgreSQL's writers wait on row locks, with no turn to take.
    store = Backend("sqlite", f"sqlite:///{tmp_path / 'keepstone.db'}", None).open()
    writers = sqlite_writers(store.engine)

    def held() -> bool:
        seen: list[bool] = []
        probe = threading.Thread(target=lambda: seen.append(writers.held_elsewhere()))
        probe.start()
        probe.join()
        return seen[0]

    with pytest.raises(RuntimeError), store.import_writer(REF, None) as write:
        write(_checked(store, "a.md", "a", False))
        assert held()
        raise RuntimeError("the archive broke")
    assert not held()
    with store.import_writer(REF, None) as write:
        write(_checked(store, "b.md", "b", False))
        assert held()
    assert not held()
    assert [d.path for d in store.list(REF)] == ["b.md"]
    store.close()


@pytest.mark.postgres
def test_a_document_another_writer_holds_is_written_alone(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PostgreSQL only: SQLite's writers queue on the database lock, so no row is held.
    monkeypatch.setattr(sql_import, "LOCK_WAIT", "50ms")
    store = SqlStore.open(postgres_url, schema=f"t_{uuid.uuid4().hex[:16]}")
    store.write(REF, "held.md", "before")
    locked, release = threading.Event(), threading.Event()
    key = store._address(REF)

    def hold() -> None:
        # A writer that holds the document's row and then wants the space counter,
        # which the batch holds by then: a deadlock if the batch waited for the row.
        with store.engine.begin() as conn:
            store._change_sql.lock(conn, {**key, "p": "held.md"})
            locked.set()
            release.wait(10)
            conn.execute(store._sql.bump_space, key)

    holder = threading.Thread(target=hold)
    holder.start()
    locked.wait(10)
    try:
        with store.import_writer(REF, None) as write:
            write(_checked(store, "first.md", "first", False))  # it holds the counters now
            release.set()  # the holder now waits for the space counter
            write(_checked(store, "held.md", "after", False))
            write(_checked(store, "last.md", "last", False))
    finally:
        release.set()
        holder.join(10)
    assert store.read(REF, "held.md").content == "after"
    assert [d.path for d in store.list(REF)] == ["first.md", "held.md", "last.md"]
    assert store.usage(REF).used_bytes == sum(d.size_bytes for d in store.list(REF))
    store.close()


def test_an_import_trims_the_history_as_writes_do(backend: Backend) -> None:
    # A member whose write must trim its path's history takes the transaction path (the
    # one-statement write on PostgreSQL hands it over): the same versions as writes keep.
    store = backend.open(Limits(history_versions=2))
    for body in ("one", "two", "three"):
        store.write(REF, "imported.md", body)
        store.write(REF, "written.md", body)
    with store.import_writer(REF, None) as write:
        write(_checked(store, "imported.md", "four", False))
    store.write(REF, "written.md", "four")
    imported = [(v.version, v.etag) for v in store.versions(REF, "imported.md")]
    written = [(v.version, v.etag) for v in store.versions(REF, "written.md")]
    assert imported == written and len(imported) <= 3
    assert store.read(REF, "imported.md").content == "four"


@pytest.mark.postgres
def test_on_postgresql_a_member_costs_the_batch_one_round_trip(postgres_url: str) -> None:
    # The transaction path took four per document (savepoint, lock, change, release); the
    # one-statement write, pipelined with its savepoint, one. Counted as libpq's
    # ReadyForQuery messages, an import of n + 40 members against one of n: what the
    # batch costs besides its members (its begin, commit, pool checkout) cancels out.
    store = SqlStore.open(postgres_url, schema=f"t_{uuid.uuid4().hex[:16]}")
    trips: list[int] = []
    for run, count in enumerate((40, 80)):
        store.write(REF, f"old{run}.md", "before")
        members = [_checked(store, f"r{run}/{i}.md", f"doc {i}") for i in range(count - 1)]
        members.append(_checked(store, f"old{run}.md", "after", False))  # keeps a version

        def work(members: list[CheckedWrite] = members) -> None:
            with store.import_writer(REF, None) as write:
                for member in members:
                    write(member)

        trips.append(round_trips(store.engine, work))
    assert trips[1] - trips[0] == 40
    assert len(store.list(REF)) == 120
    assert [v.version for v in store.versions(REF, "old1.md")] == [2, 1]
    assert store.read_version(REF, "old1.md", 1).content == "before"
    store.close()
