"""Room kept for deletes on a full disk.

Freeing space takes writing first: a SQLite delete appends to its write-ahead log, the
filesystem store records the delete in its history file and marks its counters. So on a
disk filled to the last byte nothing could be deleted, and a full disk could never be
cleaned. A store therefore keeps a *reserve*: a file of ``size`` bytes beside its data,
allocated while there is room. Writes go on only while the reserve is there (a write that
cannot make it again is refused with ``507 insufficient_storage`` naming the disk); a
delete that finds the disk full gives the reserve back and runs again in the room it
leaves. The next write makes the reserve again once the disk has room for it — on the
filesystem store a delete frees its bytes at once; a database file keeps freed pages for
its next writes instead of returning them, so there an operator frees space beside it or
grows the volume (docs/operations.md).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from keepstone.errors import InsufficientStorage, StoreUnavailable
from keepstone.quota import MiB

log = logging.getLogger("keepstone.store")

T = TypeVar("T")

#: The reserve's default size: room for many deletes' log and history pages.
DEFAULT_RESERVE_BYTES = 4 * MiB


def disk_full(path: Path) -> bool:
    """Whether the disk that holds ``path`` has (next to) no room left: what an I/O error
    of SQLite means there (it reports a failed log write as ``disk I/O error``)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < NEARLY_FULL_BYTES


#: Free bytes under which a disk counts as full when a write fails.
NEARLY_FULL_BYTES = 1 * MiB


class DiskReserve:
    """The reserve file ``path`` of ``size`` bytes; ``what`` names the data it protects
    (for the refusal: "the disk that holds <what> (<directory>) is full")."""

    def __init__(self, path: Path, what: str, size: int = DEFAULT_RESERVE_BYTES) -> None:
        self.path = path
        self.what = what
        self.size = size

    def ensure(self) -> None:
        """Make sure the reserve is there before a write: a ``stat`` when it is; allocated
        again (in full, synced) when a delete gave it back; InsufficientStorage when the
        disk has no room for it, and nothing is left half-made."""
        if self.size <= 0 or self.held():
            return
        # A name of its own: writers of other processes may be making it at the same time.
        spare = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex}.new")
        try:
            # Inside the guard: a store directory that cannot be made (it is a file, or lies
            # under one) is refused, naming it, as any other failure to make the reserve is.
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(spare, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.size)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(spare, self.path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(spare)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise InsufficientStorage(self.refusal(), needed_bytes=self.size) from exc
            raise StoreUnavailable(f"cannot make the disk reserve {self.path}: {exc}") from exc
        log.info("disk reserve: made again at %s (%d bytes)", self.path, self.size)

    def release(self) -> bool:
        """Give the reserve back to the disk (a delete found it full); whether there was one
        to give."""
        try:
            os.unlink(self.path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        log.warning(
            "disk full: gave back the %d-byte reserve at %s so that reads and deletes can run; "
            "writes are refused until the disk has room for it again",
            self.size,
            self.path,
        )
        return True

    def retrying(self, op: Callable[[], T]) -> T:
        """``op()`` — a read, a search, a delete: never a write — run once more after giving
        the reserve back when it failed for a full disk (InsufficientStorage, or a store
        failure while the disk has no room: SQLite reports a log it cannot grow as an I/O
        error)."""
        try:
            return op()
        except StoreUnavailable as exc:
            if not self.says_full(exc) or not self.release():
                raise
        return op()

    def says_full(self, exc: StoreUnavailable) -> bool:
        """Whether ``exc`` means this disk is full: InsufficientStorage (a full log, or no
        room to make the reserve again), or a store failure while the disk has no room
        (SQLite reports a log it cannot grow as an I/O error)."""
        return isinstance(exc, InsufficientStorage) or disk_full(self.path.parent)

    def refusing(self, op: Callable[[], T]) -> T:
        """``op()`` — a write — with a full disk's refusal naming this disk."""
        try:
            return op()
        except InsufficientStorage as exc:
            raise InsufficientStorage(self.refusal()) from exc

    def refusal(self) -> str:
        """The 507's message: which disk, and what still works."""
        return (
            f"the disk that holds {self.what} ({self.path.parent}) is full: writes are refused "
            "until space is freed there; reads, searches and deletes go on"
        )

    def held(self) -> bool:
        """Whether the reserve is there (a reserve of size 0 always is)."""
        if self.size <= 0:
            return True
        try:
            return os.stat(self.path).st_size >= self.size
        except (FileNotFoundError, NotADirectoryError):  # ensure() says why it cannot be made
            return False
