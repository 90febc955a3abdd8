"""A SQLite file is put in WAL mode however many connections open it at once.

SQLite converts a file to WAL under an exclusive lock and runs no busy handler for it: a
connection that found another holding the file was refused at once ("database is locked"),
whatever its busy timeout. The filesystem store's sidecars and the SQL store's engine open
new files from several threads and processes at once, so the conversion waits its turn
(``keepstone.db.enter_wal``)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from keepstone.db import enter_wal, make_engine
from keepstone.store.fs_files import connect_wal


def held_file(path: Path) -> sqlite3.Connection:
    """A connection holding a read lock on the rollback-journal file ``path``."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN")
    holder.execute("SELECT * FROM t").fetchall()
    return holder


def test_a_refused_conversion_is_tried_again_until_the_file_is_free(tmp_path: Path) -> None:
    # With no busy timeout, a held file refuses the conversion at once, as it does in the
    # race of concurrent opens whatever the timeout.
    path = tmp_path / "new.sqlite"
    holder = held_file(path)
    conn = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        conn.execute("PRAGMA journal_mode=WAL")
    threading.Timer(0.3, lambda: holder.execute("COMMIT")).start()
    started = time.monotonic()
    enter_wal(conn, 10)
    assert time.monotonic() - started >= 0.25
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    holder.close()
    conn.close()


def test_a_conversion_held_off_past_the_timeout_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    holder = held_file(path)
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        enter_wal(conn, 0.2)
    assert 0.2 <= time.monotonic() - started < 2
    holder.close()
    conn.close()


def test_a_file_already_in_wal_takes_no_lock_to_enter_it(tmp_path: Path) -> None:
    path = tmp_path / "wal.sqlite"
    connect_wal(path).close()
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")  # in WAL mode, readers still get in
    conn = sqlite3.connect(path, isolation_level=None)
    enter_wal(conn, 0)
    writer.close()
    conn.close()


@pytest.mark.parametrize("opener", ["sidecar", "engine"])
def test_sixteen_threads_open_one_new_file_at_once(tmp_path: Path, opener: str) -> None:
    for n in range(60 if opener == "sidecar" else 15):
        path = tmp_path / f"{n}.sqlite"
        start = threading.Barrier(16)
        errors: list[Exception] = []

        def open_it(
            path: Path = path, start: threading.Barrier = start, errors: list[Exception] = errors
        ) -> None:
            start.wait()
            try:
                if opener == "sidecar":
                    connect_wal(path).close()
                else:
                    engine = make_engine(f"sqlite:///{path}")
                    with engine.connect() as conn:
                        conn.execute(sa.text("SELECT 1"))
                    engine.dispose()
            except Exception as exc:  # reported below, with every other thread's
                errors.append(exc)

        threads = [threading.Thread(target=open_it) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []


def test_a_database_in_memory_keeps_its_mode_at_once() -> None:
    conn = sqlite3.connect(":memory:")
    started = time.monotonic()
    enter_wal(conn, 5)
    assert time.monotonic() - started < 1
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "memory"
    conn.close()
