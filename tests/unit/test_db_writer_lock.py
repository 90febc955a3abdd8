"""SQLite writers take turns before ``BEGIN IMMEDIATE``, the threads of a process on a lock
and the processes on an ``flock`` beside the database, instead of meeting in SQLite's busy
handler, which waits by sleeping."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from keepstone.db import SqliteWriters, make_engine, sqlite_writers, write_transaction
from keepstone.errors import StoreUnavailable
from tests.processes import child_context


def _held_elsewhere(writers: SqliteWriters) -> bool:
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(writers.held_elsewhere()))
    t.start()
    t.join()
    return got[0]


def _flock_free(path: str, answer: multiprocessing.SimpleQueue[bool]) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        answer.put(False)
    else:
        answer.put(True)
    finally:
        os.close(fd)


def _free_in_another_process(path: str) -> bool:
    ctx = child_context()
    answer: multiprocessing.SimpleQueue[bool] = ctx.SimpleQueue()
    child = ctx.Process(target=_flock_free, args=(path, answer))
    child.start()
    child.join(60)
    return answer.get()


def test_a_write_transaction_holds_its_databases_turn(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/a.db")
    other = make_engine(f"sqlite:///{tmp_path}/b.db")
    try:
        writers = sqlite_writers(engine)
        assert sqlite_writers(engine) is writers
        assert sqlite_writers(other) is not writers
        assert not _held_elsewhere(writers)
        with write_transaction(engine) as conn:
            conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
            assert _held_elsewhere(writers)
            assert not _held_elsewhere(sqlite_writers(other))
            # Reentrant: a nested write of the same thread is SQLite's to refuse, as before.
            with writers:
                pass
            assert _held_elsewhere(writers)
        assert not _held_elsewhere(writers)
    finally:
        engine.dispose()
        other.dispose()


def test_other_processes_wait_on_the_lock_file(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/a.db")
    lock_file = f"{tmp_path}/a.db-writer.lock"
    try:
        with write_transaction(engine) as conn:
            conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
            assert not _free_in_another_process(lock_file)
        assert _free_in_another_process(lock_file)
    finally:
        engine.dispose()


def test_the_turn_is_given_back_when_the_transaction_fails(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/a.db")
    try:
        with pytest.raises(StoreUnavailable), write_transaction(engine) as conn:
            conn.execute(sa.text("SELECT * FROM no_such_table"))
        assert not _held_elsewhere(sqlite_writers(engine))
        assert _free_in_another_process(f"{tmp_path}/a.db-writer.lock")
    finally:
        engine.dispose()


def test_concurrent_writers_of_one_process_all_commit(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/a.db")
    try:
        with write_transaction(engine) as conn:
            conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))

        def writer(base: int) -> None:
            for i in range(50):
                with write_transaction(engine) as conn:
                    conn.execute(sa.text("INSERT INTO t VALUES (:x)"), {"x": base + i})

        threads = [threading.Thread(target=writer, args=(k * 1000,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(DISTINCT x) FROM t")).scalar() == 400
    finally:
        engine.dispose()


def test_a_lock_file_that_cannot_be_made_leaves_the_turn_to_the_process_lock(
    tmp_path: Path,
) -> None:
    # A directory this process may not create files in (here: one that does not exist):
    # the turn is then the process's lock alone, and a write is SQLite's to allow.
    writers = SqliteWriters(f"{tmp_path}/missing-dir/a.db-writer.lock")
    with writers:
        assert _held_elsewhere(writers)
    assert not _held_elsewhere(writers)
    assert not (tmp_path / "missing-dir").exists()


def _hold_flock(
    path: str, held: multiprocessing.SimpleQueue[bool], done: multiprocessing.SimpleQueue[bool]
) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    held.put(True)
    done.get()  # until told to let go
    os.close(fd)


def test_try_enter_takes_only_a_free_turn(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/a.db")
    try:
        writers = sqlite_writers(engine)
        assert writers.try_enter()  # free: taken
        assert writers.try_enter()  # reentrant in its thread, like the blocking turn
        assert _held_elsewhere(writers)
        got: list[bool] = []
        t = threading.Thread(target=lambda: got.append(writers.try_enter()))
        t.start()
        t.join()
        assert got == [False]  # another thread of the process has it: no wait, no turn
        writers.__exit__()
        assert _held_elsewhere(writers)  # still held once
        writers.__exit__()
        assert not _held_elsewhere(writers)
        assert _free_in_another_process(f"{tmp_path}/a.db-writer.lock")
        # Another process has it: no wait, no turn, and the thread lock is given back.
        ctx = child_context()
        held: multiprocessing.SimpleQueue[bool] = ctx.SimpleQueue()
        done: multiprocessing.SimpleQueue[bool] = ctx.SimpleQueue()
        lock_file = f"{tmp_path}/a.db-writer.lock"
        holder = ctx.Process(target=_hold_flock, args=(lock_file, held, done))
        holder.start()
        try:
            assert held.get() is True
            assert not writers.try_enter()
            assert not _held_elsewhere(writers)
        finally:
            done.put(True)
            holder.join(60)
        assert writers.try_enter()
        writers.__exit__()
    finally:
        engine.dispose()


def test_a_begin_the_database_refuses_is_store_unavailable(tmp_path: Path) -> None:
    """``BEGIN IMMEDIATE`` is sent on the driver itself (keepstone.db's begin listener): a writer
    outside Keepstone's turns holding the database past the busy timeout is the driver's
    error, raised as SQLAlchemy's and translated as any other; the connection stays
    usable, and the next transaction begins once the database is free."""
    import sqlite3

    path = tmp_path / "c.db"
    engine = make_engine(f"sqlite:///{path}")
    with engine.connect() as conn:  # the pool's one connection: a short busy timeout
        conn.connection.driver_connection.execute("PRAGMA busy_timeout=20")  # type: ignore[union-attr]
    outsider = sqlite3.connect(path, isolation_level=None)
    outsider.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreUnavailable), write_transaction(engine) as conn:
            raise AssertionError("began while another writer held the database")
    finally:
        outsider.execute("COMMIT")
        outsider.close()
    with write_transaction(engine) as conn:
        conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM t")).scalar() == 0
    engine.dispose()


def test_the_writers_of_a_process_share_one_connection_out_of_the_pool(tmp_path: Path) -> None:
    """A write transaction takes the turn's connection, kept open between writes; it begins
    IMMEDIATE (holding the write lock before its first statement), and the pool neither
    counts it nor hands it to a reader."""
    import sqlite3

    path = tmp_path / "d.db"
    engine = make_engine(f"sqlite:///{path}")
    try:
        with write_transaction(engine) as first:
            outsider = sqlite3.connect(path, timeout=0, isolation_level=None)
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                outsider.execute("BEGIN IMMEDIATE")
            outsider.close()
            first.execute(sa.text("CREATE TABLE t (x INTEGER)"))
        with write_transaction(engine) as second:
            second.execute(sa.text("INSERT INTO t VALUES (1)"))
        assert second is first
        turn = sqlite_writers(engine)
        assert turn.try_enter()  # the turn an event loop takes for a write it runs itself
        try:
            with write_transaction(engine) as inside:
                inside.execute(sa.text("INSERT INTO t VALUES (2)"))
        finally:
            turn.__exit__()
        assert inside is first
        assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
        with engine.connect() as reader:
            assert reader.connection.dbapi_connection is not first.connection.dbapi_connection
            assert reader.execute(sa.text("SELECT count(*) FROM t")).scalar() == 2
    finally:
        engine.dispose()


def test_disposing_the_engine_closes_the_shared_connection(tmp_path: Path) -> None:
    """The database's last connection closes with the engine (SQLite checkpoints and removes
    the WAL then); a write after it opens another."""
    path = tmp_path / "e.db"
    engine = make_engine(f"sqlite:///{path}")
    with write_transaction(engine) as first:
        first.execute(sa.text("CREATE TABLE t (x INTEGER)"))
    assert (tmp_path / "e.db-wal").exists()
    engine.dispose()
    assert first.closed
    assert not (tmp_path / "e.db-wal").exists()
    with write_transaction(engine) as again:
        again.execute(sa.text("INSERT INTO t VALUES (1)"))
    assert again is not first
    engine.dispose()
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM t")).scalar() == 1
    engine.dispose()


def test_an_engine_never_disposed_is_collected_with_its_shared_connection(
    tmp_path: Path,
) -> None:
    """The map that finds a database's turn by engine does not keep the engine (the turn's
    connection holds the pool, whose listeners hold the engine); nor does collecting it
    warn (the connection is out of the pool: no finalizer)."""
    import gc
    import weakref

    engine = make_engine(f"sqlite:///{tmp_path / 'f.db'}")
    with write_transaction(engine) as conn:
        conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
    gone = weakref.ref(engine)
    del engine, conn
    gc.collect()
    assert gone() is None
    assert not (tmp_path / "f.db-wal").exists()  # its connections closed


def test_an_invalidated_shared_connection_is_replaced(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'g.db'}")
    try:
        with pytest.raises(RuntimeError), write_transaction(engine) as first:
            first.execute(sa.text("CREATE TABLE t (x INTEGER)"))
            first.invalidate()
            raise RuntimeError("the write failed")
        with write_transaction(engine) as second:
            second.execute(sa.text("CREATE TABLE t (x INTEGER)"))  # the first rolled back
        assert second is not first
        assert not sqlite_writers(engine).held_elsewhere()
    finally:
        engine.dispose()


def test_a_forked_child_writes_on_a_connection_of_its_own(tmp_path: Path) -> None:
    """A child forked while the parent's turn keeps a connection opens another (SQLite's
    connections do not cross a fork) and leaves the parent's alone: the parent writes on
    after it, on the same connection."""
    engine = make_engine(f"sqlite:///{tmp_path / 'h.db'}")
    try:
        with write_transaction(engine) as first:
            first.execute(sa.text("CREATE TABLE t (x INTEGER)"))
        parents = id(first)
        del first  # the turn alone holds it now

        def child() -> None:
            with write_transaction(engine) as conn:
                conn.execute(sa.text("INSERT INTO t VALUES (1)"))
            os._exit(0 if id(conn) != parents else 3)

        forked = multiprocessing.get_context("fork").Process(target=child)
        forked.start()
        forked.join(30)
        assert forked.exitcode == 0
        with write_transaction(engine) as again:
            again.execute(sa.text("INSERT INTO t VALUES (2)"))
        assert id(again) == parents
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM t")).scalar() == 2
    finally:
        engine.dispose()
