"""A process's SQLite writers queue on one lock per database before ``BEGIN IMMEDIATE``,
instead of meeting in SQLite's busy handler, which waits by sleeping."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from cairn.db import make_engine, sqlite_writer_lock, write_transaction
from cairn.errors import StoreUnavailable


def _held_elsewhere(lock: threading.RLock) -> bool:
    got: list[bool] = []

    def probe() -> None:
        taken = lock.acquire(blocking=False)
        if taken:
            lock.release()
        got.append(not taken)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return got[0]


def test_a_write_transaction_holds_its_databases_writer_lock(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/a.db")
    other = make_engine(f"sqlite:///{tmp_path}/b.db")
    try:
        lock = sqlite_writer_lock(engine)
        assert sqlite_writer_lock(engine) is lock
        assert sqlite_writer_lock(other) is not lock
        assert not _held_elsewhere(lock)
        with write_transaction(engine) as conn:
            conn.execute(sa.text("CREATE TABLE t (x INTEGER)"))
            assert _held_elsewhere(lock)
            assert not _held_elsewhere(sqlite_writer_lock(other))
            # Reentrant: a nested write of the same thread is SQLite's to refuse, as before.
            with lock:
                pass
        assert not _held_elsewhere(lock)
    finally:
        engine.dispose()
        other.dispose()


def test_the_lock_is_released_when_the_transaction_fails(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/a.db")
    try:
        with pytest.raises(StoreUnavailable), write_transaction(engine) as conn:
            conn.execute(sa.text("SELECT * FROM no_such_table"))
        assert not _held_elsewhere(sqlite_writer_lock(engine))
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
