"""On SQLite every acknowledged change is on disk before it is acknowledged, as a
PostgreSQL commit is: documents, imports, settings, records and keys. Commits write the WAL
unsynced; each durable write then syncs it after its commit, outside the writers' turn, one
fsync shared by the writers waiting at the same time (``keepstone.db.durability.WalSync``).
Only what is made again from durable data (search chunks, vectors, a purge's pass) is not
synced.

A power loss cannot be staged here; the order of commits and syncs decides it, and that is
what these tests read (the sync is wrapped, the commits seen through SQLAlchemy's events)."""

from __future__ import annotations

import asyncio
import io
import itertools
import os
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from keepstone.db import (
    WalSync,
    begins_immediate,
    durability,
    make_engine,
    wal_sync,
    write_transaction,
)
from keepstone.errors import StoreUnavailable
from keepstone.quota import Limits
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import ImportStrategy
from keepstone.store.sql import SqlStore

REF = SpaceRef.build(Visibility.PROJECT, "notes", tenant="team-a", project="p1")


class Events:
    """Commits of write transactions and syncs of the database's files, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[str] = []
        real = durability._datasync

        def datasync(fd: int) -> None:
            real(fd)
            self.seen.append("sync " + os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))

        monkeypatch.setattr(durability, "_datasync", datasync)

    def during(self, engine: Engine, call: Callable[[], Any]) -> list[str]:
        writing: set[int] = set()

        def on_begin(conn: Connection) -> None:
            if begins_immediate(conn):
                writing.add(id(conn))

        def on_commit(conn: Connection) -> None:
            if id(conn) in writing:  # a read's commit writes nothing
                writing.discard(id(conn))
                self.seen.append("commit")

        self.seen = []
        event.listen(engine, "begin", on_begin)
        event.listen(engine, "commit", on_commit)
        try:
            call()
        finally:
            event.remove(engine, "begin", on_begin)
            event.remove(engine, "commit", on_commit)
        seen, self.seen = self.seen, []
        return seen


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> Events:
    return Events(monkeypatch)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    opened = SqlStore.open(f"sqlite:///{tmp_path / 'keepstone.db'}", Limits())
    try:
        yield opened
    finally:
        opened.close()


def _each_commit_synced(seen: list[str], database: str) -> None:
    assert seen, "nothing committed"
    assert seen == ["commit", f"sync {database}-wal"] * (len(seen) // 2), seen


def test_a_durable_write_transaction_syncs_the_wal_after_its_commit(
    tmp_path: Path, events: Events
) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'a.db'}")
    try:

        def write(durable: bool) -> None:
            with write_transaction(engine, durable=durable) as conn:
                conn.execute(sa.text("CREATE TABLE IF NOT EXISTS t (x INTEGER)"))
                conn.execute(sa.text("INSERT INTO t VALUES (1)"))

        assert events.during(engine, lambda: write(True)) == ["commit", "sync a.db-wal"]
        assert events.during(engine, lambda: write(False)) == ["commit"]

        def failing() -> None:
            with write_transaction(engine) as conn:
                conn.execute(sa.text("INSERT INTO t VALUES (2)"))
                raise RuntimeError("the block failed")

        with pytest.raises(RuntimeError):
            events.during(engine, failing)
        assert events.seen == []  # rolled back: nothing to sync
    finally:
        engine.dispose()


def test_every_document_change_is_synced_before_it_returns(store: SqlStore, events: Events) -> None:
    def changes() -> None:
        store.write(REF, "a.md", "first")
        store.write(REF, "a.md", "second")
        store.move(REF, "a.md", "b.md")
        store.delete(REF, "b.md")
        store.set_team_quota("team-a", 10 * 1024 * 1024)

    seen = events.during(store.engine, changes)
    assert seen.count("commit") == 5
    _each_commit_synced(seen, "keepstone.db")


def test_an_import_batch_is_synced_once_after_its_commit(store: SqlStore, events: Events) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for i in range(3):
            data = f"# note {i}\n".encode()
            info = tarfile.TarInfo(f"n{i}.md")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    raw.seek(0)

    seen = events.during(
        store.engine, lambda: store.import_archive(REF, raw, ImportStrategy.OVERWRITE)
    )
    assert seen == ["commit", "sync keepstone.db-wal"]
    assert [d.path for d in store.list(REF)] == ["n0.md", "n1.md", "n2.md"]


def test_search_chunks_are_derived_and_not_synced(store: SqlStore, events: Events) -> None:
    store.write(REF, "a.md", "# deploy\nthe deploy notes")
    assert events.during(store.engine, store.reindex) == ["commit"]


def test_writers_waiting_together_share_an_fsync_that_began_after_each_arrived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = tmp_path / "a.db"
    (tmp_path / "a.db-wal").write_bytes(b"frames")
    sync = WalSync(str(database))
    clock = itertools.count()
    fsyncs: list[tuple[int, int]] = []

    def slow(_fd: int) -> None:
        began = next(clock)
        time.sleep(0.02)
        fsyncs.append((began, next(clock)))

    monkeypatch.setattr(durability, "_datasync", slow)
    calls: list[tuple[int, int]] = []

    def caller() -> None:
        arrived = next(clock)
        sync.sync()
        calls.append((arrived, next(clock)))

    threads = [threading.Thread(target=caller) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 16
    assert len(fsyncs) < 16  # shared
    for arrived, returned in calls:
        assert any(arrived < began and ended < returned for began, ended in fsyncs)


def test_a_failed_fsync_is_an_error_and_the_next_caller_syncs_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.db-wal").write_bytes(b"frames")
    sync = WalSync(str(tmp_path / "a.db"))
    outcomes = iter([OSError(5, "Input/output error"), None])
    done: list[int] = []

    def flaky(_fd: int) -> None:
        failure = next(outcomes)
        if failure is not None:
            raise failure
        done.append(1)

    monkeypatch.setattr(durability, "_datasync", flaky)
    with pytest.raises(StoreUnavailable, match="failed to sync"):
        sync.sync()
    sync.sync()
    assert done == [1]


def test_with_no_wal_the_database_file_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.db").write_bytes(b"pages")
    synced: list[str] = []
    monkeypatch.setattr(
        durability, "_datasync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}"))
    )
    WalSync(str(tmp_path / "a.db")).sync()
    assert synced == [str(tmp_path / "a.db")]


def test_a_database_in_memory_has_nothing_to_sync(tmp_path: Path) -> None:
    memory = make_engine("sqlite://")
    try:
        assert wal_sync(memory) is None
    finally:
        memory.dispose()
    assert durability._sync_for("file:mem1?mode=memory&cache=shared") is None
    found = durability._sync_for(f"file:{tmp_path / 'u.db'}?mode=rwc")
    assert found is not None and found._paths == (f"{tmp_path}/u.db-wal", f"{tmp_path}/u.db")


def test_the_wal_is_opened_again_once_a_connection_closed(tmp_path: Path, events: Events) -> None:
    """The descriptor kept between syncs: SQLite removes the WAL with the database's last
    connection, and the next connection makes a new file, which is the one to sync."""
    engine = make_engine(f"sqlite:///{tmp_path / 'a.db'}")

    def write() -> None:
        with write_transaction(engine) as conn:
            conn.execute(sa.text("CREATE TABLE IF NOT EXISTS t (x INTEGER)"))
            conn.execute(sa.text("INSERT INTO t VALUES (1)"))

    try:
        assert events.during(engine, write) == ["commit", "sync a.db-wal"]
        engine.dispose()  # the last connection: its close removes the WAL
        assert not (tmp_path / "a.db-wal").exists()
        assert events.during(engine, write) == ["commit", "sync a.db-wal"]  # not "(deleted)"
    finally:
        engine.dispose()


def _with_wal(tmp_path: Path) -> WalSync:
    """The WalSync of a database in ``tmp_path`` whose WAL holds frames."""
    (tmp_path / "a.db-wal").write_bytes(b"frames")
    return WalSync(str(tmp_path / "a.db"))


async def _one_after_another(sync: WalSync, times: int) -> str:
    """Await ``sync.synced()`` ``times`` times in a row; the loop's thread."""
    for _ in range(times):
        await sync.synced()
    return threading.current_thread().name


def _where_synced(monkeypatch: pytest.MonkeyPatch, took: float = 0.0) -> list[str]:
    """The thread of each fsync from now on; each one takes ``took`` seconds. A quick
    fsync (``took`` 0) stays quick on a loaded machine: a pause of the test's own thread
    while the loop times it must not read as a slow disk, so the bars are raised."""
    threads: list[str] = []
    if not took:
        monkeypatch.setattr(WalSync, "SLOW_FSYNC_S", 60.0)
        monkeypatch.setattr(WalSync, "INLINE_FSYNC_S", 60.0)

    def datasync(_fd: int) -> None:
        time.sleep(took)
        threads.append(threading.current_thread().name)

    monkeypatch.setattr(durability, "_datasync", datasync)
    return threads


def test_a_coroutine_syncs_on_its_loop_while_the_disk_is_quick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync = _with_wal(tmp_path)
    threads = _where_synced(monkeypatch)

    loop_thread = asyncio.run(_one_after_another(sync, 3))
    assert threads == [loop_thread] * 3


def test_after_a_slow_fsync_the_thread_syncs_for_coroutines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync = _with_wal(tmp_path)
    threads = _where_synced(monkeypatch, took=WalSync.SLOW_FSYNC_S * 2)

    loop_thread = asyncio.run(_one_after_another(sync, 3))
    # the first told the loop the disk is slow; the thread's syncs are not timed
    assert threads == [loop_thread, "keepstone-wal-sync", "keepstone-wal-sync"]


def test_the_loop_tries_again_after_the_hold_with_its_mean_forgotten(tmp_path: Path) -> None:
    sync = WalSync(str(tmp_path / "a.db"))
    assert sync.syncs_inline()  # the first sync tells
    quick, middling = WalSync.INLINE_FSYNC_S / 10, WalSync.INLINE_FSYNC_S * 2
    for _ in range(8):
        sync._timed(quick)
    sync._timed(middling)  # slower than the mean's bar, not slow: the mean absorbs one
    assert sync.syncs_inline()
    while sync.syncs_inline():  # ... not a run of them
        sync._timed(middling)
    sync._threaded_until = time.monotonic() - 1  # the hold has passed
    assert sync.syncs_inline()
    sync._timed(middling)  # the mean starts again from the first sync after the hold,
    assert sync._fsync_s == middling and sync.syncs_inline()  # and decides from the eighth
    for _ in range(6):
        sync._timed(middling)
    assert sync.syncs_inline()
    sync._timed(middling)
    assert not sync.syncs_inline()
    sync._threaded_until = time.monotonic() - 1
    sync._timed(WalSync.SLOW_FSYNC_S * 2)  # one slow sync is enough
    assert not sync.syncs_inline()


def test_coroutines_of_one_turn_of_the_loop_share_its_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync = _with_wal(tmp_path)
    threads = _where_synced(monkeypatch)

    async def together() -> str:
        await asyncio.gather(*(sync.synced() for _ in range(20)))
        await sync.synced()  # a later turn: its own
        return threading.current_thread().name

    loop_thread = asyncio.run(together())
    assert threads == [loop_thread, loop_thread]


def test_a_waiter_that_starts_in_the_next_turn_shares_the_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As a request read while a write's turn ran: its task starts in the next turn, after
    # the callbacks that turn scheduled.
    sync = _with_wal(tmp_path)
    threads = _where_synced(monkeypatch)

    async def staggered() -> None:
        first = asyncio.ensure_future(sync.synced())  # awaits in the next turn
        await asyncio.sleep(0)  # that turn: first awaits, then this goes on
        second = asyncio.ensure_future(sync.synced())  # awaits in the turn after
        await asyncio.gather(first, second)
        await asyncio.ensure_future(sync.synced())  # two turns later: its own
        assert len(threads) == 2

    asyncio.run(staggered())


def test_a_cancelled_waiter_cancels_no_other_of_its_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync = _with_wal(tmp_path)
    threads = _where_synced(monkeypatch)

    async def one_cancelled() -> None:
        gone = asyncio.ensure_future(sync.synced())
        kept = asyncio.ensure_future(sync.synced())
        await asyncio.sleep(0)  # both wait for the turn's fsync
        gone.cancel()
        await kept
        assert gone.cancelled()

    asyncio.run(one_cancelled())
    assert len(threads) == 1


def test_a_failed_fsync_of_a_turn_fails_each_of_its_waiters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync = _with_wal(tmp_path)

    def failing(_fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(durability, "_datasync", failing)

    async def two() -> list[BaseException | None]:
        return await asyncio.gather(sync.synced(), sync.synced(), return_exceptions=True)

    outcomes = asyncio.run(two())
    assert all(isinstance(o, StoreUnavailable) for o in outcomes)
