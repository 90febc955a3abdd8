"""File operations every module of the filesystem store shares, each written once.

* :func:`write_temp` and :func:`atomic_write`: a document (or the counters file) is
  written to a temporary file in its own directory and renamed over its name, so a reader
  sees the old file or the new one, never half of one. A single write syncs and renames at
  once (:func:`atomic_write`); an import writes its temporary files first and renames them
  all after one flush (:mod:`keepstone.store.fs_import`).
* :func:`os_errors`: operating-system failures translated at the adapter boundary.
* :func:`open_sidecar`: a SQLite file beside the tree that SQLite cannot read is set aside
  and started again, so a damaged sidecar never blocks the store.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from keepstone.db import enter_wal
from keepstone.documents import Document, content_etag
from keepstone.errors import InsufficientStorage, InvalidDocument, InvalidPath, StoreUnavailable
from keepstone.store.fs_layout import TEMP_PREFIX, TEMP_SUFFIX

log = logging.getLogger("keepstone.store")


def write_temp(dir_fd: int, data: bytes, *, mtime_ns: int | None = None, sync: bool = False) -> str:
    """Write ``data`` to a new temporary file in ``dir_fd`` and return its name; nothing is
    left behind when it fails. ``mtime_ns`` sets its modification time (None: now);
    ``sync`` makes its bytes durable before it is closed."""
    tmp = f"{TEMP_PREFIX}{uuid.uuid4().hex}{TEMP_SUFFIX}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o644, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if mtime_ns is not None:
                os.utime(fd, ns=(mtime_ns, mtime_ns))
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    return tmp


def atomic_write(
    dir_fd: int,
    name: str,
    data: bytes,
    *,
    sync_data: bool = True,
    sync_dir: bool = True,
    mtime_ns: int | None = None,
) -> None:
    """Write ``name`` in ``dir_fd`` all-or-nothing: temp file, fsync, rename, fsync dir;
    ``mtime_ns`` sets the file's modification time (None: now)."""
    tmp = write_temp(dir_fd, data, mtime_ns=mtime_ns, sync=sync_data)
    try:
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    if sync_dir:
        os.fsync(dir_fd)


def remove_stale_temps(dir_fd: int) -> None:
    """Remove the temporary files a killed writer left in the directory ``dir_fd``.

    Every writer of the store writes its temporary files under the store's lock: call this
    holding it, when any there belong to a process that died mid-write (an import killed
    before its flush leaves one per pending document)."""
    with os.scandir(dir_fd) as entries:
        stale = [
            e.name
            for e in entries
            if e.name.startswith(TEMP_PREFIX)
            and e.name.endswith(TEMP_SUFFIX)
            and e.is_file(follow_symlinks=False)
        ]
    for name in stale:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)


#: The refusal of a write on a full disk (SPEC: reads and deletes keep working).
DISK_FULL = (
    "the disk that holds the memory tree is full: writes are refused until space is freed "
    "there; reads, searches and deletes go on"
)


@contextlib.contextmanager
def os_errors(path: str) -> Iterator[None]:
    """Translate operating-system failures at the adapter boundary."""
    try:
        yield
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise InvalidPath(
                f"path {path!r} is too long for the filesystem under this store's root; "
                "use shorter names",
                path=path,
            ) from exc
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise InsufficientStorage(DISK_FULL) from exc
        raise StoreUnavailable(
            f"the filesystem store failed: {exc.strerror or exc} ({exc.errno})"
        ) from exc


@contextlib.contextmanager
def sidecar_errors(what: str, file: str) -> Iterator[None]:
    """Translate the SQLite failures of the sidecar ``file`` (the ``what``, for the message)
    at the adapter boundary."""
    try:
        yield
    except sqlite3.Error as exc:
        if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            raise InsufficientStorage(DISK_FULL) from exc
        raise StoreUnavailable(
            f"the filesystem store's {what} ({file} at the store's root) failed: {exc}"
        ) from exc


def open_sidecar(
    what: str,
    path: Path,
    connect: Callable[[], sqlite3.Connection],
    set_aside: Callable[[], str],
) -> sqlite3.Connection:
    """``connect()`` to the sidecar SQLite file ``path`` (the ``what``, for the log).

    When SQLite cannot read the file (not a database, or malformed), ``set_aside()``
    removes it (and answers what it did, for the log) and a new file is started. A busy,
    locked or unreachable file is no damage: that error is raised as it is."""
    try:
        return connect()
    except sqlite3.OperationalError:
        raise
    except sqlite3.DatabaseError as exc:  # not a database, or malformed
        done = set_aside()
        log.warning("%s %s is unreadable (%s); %s", what, path, exc, done)
        return connect()


#: How long a sidecar connection waits for another writer's transaction (seconds).
BUSY_TIMEOUT = 30.0

_CREATED = re.compile(
    r"\s*CREATE\s+(?:TABLE|(?:UNIQUE\s+)?INDEX)\s+IF\s+NOT\s+EXISTS\s+(\w+)", re.I
)


def made_already(conn: sqlite3.Connection, statement: str) -> bool:
    """Whether ``statement`` creates a table or index the file already has: it is then not
    run, so opening a file written before needs no room (a full disk must not stop reads)."""
    created = _CREATED.match(statement)
    if created is None:
        return False
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (created.group(1),))
    return found.fetchone() is not None


def connect_wal(path: Path) -> sqlite3.Connection:
    """A connection to the SQLite file ``path`` in WAL mode (several processes share it),
    autocommit (transactions are explicit: :func:`write_transaction`), usable from the
    thread that holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(
        path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
    )
    try:
        enter_wal(conn, BUSY_TIMEOUT)
        # A transaction lost to a power cut (never to a killed process: WAL) is repaired
        # from the files: the index re-reads them, the history records them again.
        conn.execute("PRAGMA synchronous=NORMAL")
    except BaseException:
        conn.close()
        raise
    return conn


def document_of(path: str, data: bytes, st: os.stat_result) -> Document:
    """The document a file's bytes ``data`` and its ``st`` make; a file that is not UTF-8 is
    :class:`~keepstone.errors.InvalidDocument`."""
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidDocument(
            f"document {path!r} on disk is not valid UTF-8; fix or remove the file", path=path
        ) from None
    return Document(path, content, len(data), mtime_of(st), content_etag(data))


def mtime_of(st: os.stat_result) -> datetime:
    """A file's modification time, in UTC."""
    return datetime.fromtimestamp(st.st_mtime, UTC)


def stat_key(st: os.stat_result) -> tuple[int, ...]:
    """What identifies a file's content without reading it (device, inode, size, times)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
