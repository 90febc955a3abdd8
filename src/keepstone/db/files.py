"""What a database file needs before any engine: SQLite's WAL mode, entered while other
processes open the same file, and whether a driver's error says the disk is full.

Without SQLAlchemy, so that the filesystem store's SQLite sidecars (its search index and
its history) load none of it: a ``keepstone memory`` command on the plain tree starts
without the SQL engines. :mod:`keepstone.db.durability` and :mod:`keepstone.db.engine`
build on it.
"""

from __future__ import annotations

import errno
import sqlite3
import time


def enter_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Put the SQLite file ``conn`` opened in WAL mode, waiting up to ``timeout`` seconds.

    Converting a file to WAL takes it whole, and SQLite runs no busy handler for that: of
    several processes or threads opening a new file at once, one converts it and another
    was refused at once with "database is locked", whatever its busy timeout. So the mode
    is read first (a file already in WAL, every open but the first, takes no lock for it)
    and a refused conversion is tried again, with a growing pause, until ``timeout``. A
    database that has no WAL (in memory) keeps the mode SQLite answers."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF not in _BUSY:
                raise
            if time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


#: SQLite's primary result codes of a lock held by another connection.
_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


#: PostgreSQL's SQLSTATE for "disk full" (class 53, insufficient resources).
_PG_DISK_FULL = "53100"


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (a driver's error, SQLAlchemy's wrapping one, or an OSError) says
    the disk that holds the data is full: SQLite's ``SQLITE_FULL``, PostgreSQL's
    ``disk_full``, ``ENOSPC`` or ``EDQUOT``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if getattr(current, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            return True
        if getattr(current, "sqlstate", None) == _PG_DISK_FULL:
            return True
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else current.__cause__
    return False


#: The refusal of a write on a full disk (SPEC: reads and deletes keep working).
DISK_FULL_MESSAGE = (
    "the disk that holds the database is full: writes are refused until space is freed "
    "there; reads, searches and deletes go on"
)
