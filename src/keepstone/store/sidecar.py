"""A SQLite file a filesystem store keeps beside its tree (the search index, the history):
per-thread connections that notice the file replaced, deleted or inherited over a fork,
and the write transaction both take."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from keepstone.store.fs_files import connect_wal, made_already, open_sidecar


@dataclass(slots=True)
class _Held:
    conn: sqlite3.Connection
    ino: int
    pid: int


class SqliteSidecar(ABC):
    """Per-thread connections to one SQLite file at the store's root (the search index,
    the history): each thread holds its own connection, reopened when the file was
    replaced or deleted (its inode changed) or the process forked (SQLite forbids using an
    inherited connection). A subclass makes a connection (:meth:`_connect`) and says what
    becomes of a file SQLite cannot read (:meth:`_unreadable`); ``label`` names the file in
    the warning that says so."""

    def __init__(self, path: Path, label: str) -> None:
        self.path = path
        self.label = label
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()

    @abstractmethod
    def _connect(self) -> sqlite3.Connection:
        """A new connection to the file, created with its schema when missing."""

    @abstractmethod
    def _unreadable(self) -> str:
        """Clear the way for a new file when SQLite cannot read this one; says how."""

    def _open(self) -> sqlite3.Connection:
        return open_sidecar(self.label, self.path, self._connect, self._unreadable)

    def _conn(self, *, create: bool) -> sqlite3.Connection | None:
        """This thread's connection to the file, reopened when the file was replaced
        or deleted; None when there is no file and ``create`` is false."""
        held: _Held | None = getattr(self._local, "held", None)
        try:
            ino: int | None = os.stat(self.path).st_ino
        except FileNotFoundError:
            ino = None
        if held is not None and held.ino == ino and held.pid == os.getpid():
            return held.conn
        if held is not None:
            self._forget(held)
        if ino is None and not create:
            return None
        conn = self._open()
        self._local.held = _Held(conn, os.stat(self.path).st_ino, os.getpid())
        return conn

    def _connect_with(
        self, schema: str, prepare: Callable[[sqlite3.Connection], None] | None = None
    ) -> sqlite3.Connection:
        """A new connection to the file (:func:`connect_wal`) with ``prepare``, then each
        statement of ``schema``, run in one write transaction; kept for :meth:`close`."""
        conn = connect_wal(self.path)
        try:
            with write_transaction(conn):
                if prepare is not None:
                    prepare(conn)
                for statement in schema.split(";"):
                    if statement.strip() and not made_already(conn, statement):
                        conn.execute(statement)
        except BaseException:
            conn.close()
            raise
        self._remember(conn)
        return conn

    def _remember(self, conn: sqlite3.Connection) -> None:
        with self._all_lock:
            self._all.append(conn)

    def _forget(self, held: _Held) -> None:
        self._local.held = None
        with self._all_lock:
            if held.conn in self._all:
                self._all.remove(held.conn)
        if held.pid != os.getpid():
            return  # inherited over fork(): SQLite forbids using it, closing included
        with contextlib.suppress(sqlite3.Error):
            held.conn.close()

    def _delete_files(self) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.path}{suffix}")

    def _reset(self) -> None:
        held: _Held | None = getattr(self._local, "held", None)
        if held is not None:
            self._forget(held)
        self._delete_files()

    def close(self) -> None:
        with self._all_lock:
            conns, self._all = self._all, []
        held: _Held | None = getattr(self._local, "held", None)
        if held is not None and held.pid != os.getpid():
            conns = []  # a forked child's copies belong to its parent
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._local = threading.local()


@contextlib.contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction, taken at once (``BEGIN IMMEDIATE``), so two writers never
    deadlock upgrading a read lock; rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
