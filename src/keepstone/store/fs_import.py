"""The filesystem store's import batch: every document of one import under one lock.

A single :meth:`~keepstone.store.fs.FilesystemStore.write` pays, per document, a walk of
the path from the root, two saves of the usage state (dirty, then clean) and three
``fsync`` calls (the file, its directory, the state's directory). For an import of ten
thousand members that was most of a minute. A batch pays those once:

* the store's lock is taken once, and the usage state is marked dirty once, for the
  whole import: a crash at any point leaves a dirty state that the next writer
  recounts (the same self-healing as a single write);
* directories are opened once each (walked with ``O_NOFOLLOW``, as every path is) and
  a document's existence is one ``lstat`` in its directory;
* each document is written to a temporary file, *not yet renamed* and not synced; at
  the end (or every :data:`FLUSH_DOCUMENTS` documents, when :data:`FLUSH_DIRECTORIES`
  directories are open, or when the pending versions hold :data:`FLUSH_BYTES` of
  content) the filesystem is flushed once (``syncfs``), then every
  temporary file is renamed over its document and each directory synced. So a crash
  never leaves a document name whose content was not yet on disk: an imported
  document is all there or not there, as with a single write. What a crash leaves is
  at most ignored ``.keepstone-tmp-*.tmp`` files, which the next import removes from each
  directory it writes in;
* each write's version (:mod:`~keepstone.store.fs_history`: every write of the import is one,
  unless it repeats the bytes the path holds) is appended to the history after the
  flush has renamed the documents, in one transaction per flush: the files first, as
  every mutation of the store; a crash in between leaves the state dirty and the next
  writer's recount records the renamed files (actor ``hand-edit``).

Part of the filesystem adapter, like :mod:`~keepstone.store.fs_layout` and
:mod:`~keepstone.store.fs_index`: it uses the store's own helpers (its lock, counters and
directory walk), so the batch and a single write share every rule. The lock is held
for the whole import: another process's writes (and its usage reads, which wait for a
clean state) wait for the import to end.

Each document is checked exactly as a single write checks it: the shared prelude
:meth:`~keepstone.store.base.MemoryStore.check_write` made the
:class:`~keepstone.store.base.CheckedWrite` the batch receives (the archive runs it once per
member), then the precondition and the quota against the running counters here; a
document pending in the batch counts as existing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import sqlite3
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from keepstone.documents import content_etag
from keepstone.errors import Conflict
from keepstone.quota import MiB, clamp
from keepstone.spaces import SpaceRef
from keepstone.store.base import (
    CheckedWrite,
    ImportWriter,
    WriteResult,
    check_precondition,
)
from keepstone.store.fs_history import Known, Observed, Record, _us, history_errors
from keepstone.store.fs_layout import TEMP_PREFIX, TEMP_SUFFIX, encode_doc_path, space_components

if TYPE_CHECKING:
    from keepstone.store.fs import FilesystemStore
    from keepstone.store.fs_layout import UsageState

#: Pending documents that trigger a flush (bounds the temporary files a crash can leave).
FLUSH_DOCUMENTS: Final = 20_000


def _directory_bound() -> int:
    """A quarter of the process's descriptor limit, within [16, 4096]: room for the
    server's sockets and database connections beside an import's directories."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(16, min(4096, soft // 4))


#: Open directories that trigger a flush (bounds the descriptors held).
FLUSH_DIRECTORIES: Final = _directory_bound()

#: Content held in memory by the versions awaiting a flush that triggers one: the history
#: rows are written at the flush, so this bounds an import's memory (peak RSS), whatever
#: the archive's size. A flush costs one ``syncfs``: at 32 MiB, a few per 200 MiB.
FLUSH_BYTES: Final = 32 * MiB


def _held(record: Record | Observed) -> int:
    """Bytes of content ``record`` keeps in memory until the flush."""
    if isinstance(record, Record):
        return 0 if record.data is None else len(record.data)
    return 0 if record.live is None else len(record.live[0])


@dataclass
class _Batch:
    store: FilesystemStore
    ref: SpaceRef
    state: UsageState
    space: list[str]
    history: sqlite3.Connection
    dirs: dict[tuple[str, ...], int] = field(default_factory=dict)
    # (directory, document name) → (temporary name, its size in bytes)
    pending: dict[tuple[tuple[str, ...], str], tuple[str, int]] = field(default_factory=dict)
    # The versions to append at the next flush, and the etag each path written in this
    # batch holds now ('' for none).
    records: list[Record | Observed] = field(default_factory=list)
    holds: dict[str, str] = field(default_factory=dict)
    # The instant of each path's newest change in this batch (µs): the next is no earlier.
    times: dict[str, int] = field(default_factory=dict)
    # The newest versions in the history of the paths of ``records``, read when each was
    # first written (under the import's lock): the flush's append starts from them.
    known: Known = field(default_factory=dict)
    # Bytes of content the pending versions hold in memory (flushed past FLUSH_BYTES).
    held: int = 0

    def write(self, w: CheckedWrite) -> WriteResult:
        """Write ``w`` (past :meth:`~keepstone.store.base.MemoryStore.check_write`, which the
        archive ran once) as a single write would: precondition, quota, history."""
        from keepstone.store.fs import _os_errors

        create_only = w.if_none_match
        doc = encode_doc_path(w.path)
        where, name = tuple(doc[:-1]), doc[-1]
        with _os_errors(w.path):
            dfd = self._directory(where, w.path)
            size = self._existing_size(dfd, where, name, w.path)
            check_precondition(w.path, None if size is None else "", None, create_only)
            delta = len(w.data) - (size or 0)
            self.store._check_quota(self.ref, self.state, delta)
            records = self._versions(dfd, name, w.path, w.data, w.etag, size is not None)
            # The file's mtime (its updated_at) is its new version's instant, as for a write.
            own = [r for r in records if isinstance(r, Record) and r.data is not None]
            tmp = _write_temp(dfd, w.data, own[-1].at_us * 1000 if own else None)
            earlier = self.pending.pop((where, name), None)
            if earlier is not None:  # replaced again before the flush: drop the older one
                with contextlib.suppress(OSError):
                    os.unlink(earlier[0], dir_fd=dfd)
            self.pending[(where, name)] = (tmp, len(w.data))
        self.records += records
        self.held += sum(_held(r) for r in records)
        self.holds[w.path] = w.etag
        self.state.tree = clamp(self.state.tree + delta)
        used = clamp(self.state.spaces.get(self.ref.id, 0) + delta)
        if used:
            self.state.spaces[self.ref.id] = used
        else:
            self.state.spaces.pop(self.ref.id, None)
        if (
            len(self.pending) >= FLUSH_DOCUMENTS
            or len(self.dirs) >= FLUSH_DIRECTORIES
            or self.held >= FLUSH_BYTES
        ):
            self.flush()
        return WriteResult(w.path, len(w.data), w.etag, created=size is None)

    def _versions(
        self, dfd: int, name: str, path: str, data: bytes, etag: str, exists: bool
    ) -> list[Record | Observed]:
        """The versions this write makes: a hand edit of the file it replaces first (the
        first time the batch writes the path), then its own unless the bytes are the same."""
        held = self.holds.get(path)
        records: list[Record | Observed] = []
        if held is None:
            live = _read_live(dfd, name) if exists else None
            held = "" if live is None else content_etag(live[0])
            # A file's content is held until the flush only when it is a hand edit.
            with history_errors():
                now, known = self.store._instant(self.history, self.ref, (path, live, held or None))
                self.known.update(known)
                newest = known[(self.ref.id, path)]
                if live is None or self.store._is_hand_edited(newest, self.ref, path, live, held):
                    records.append(self.store._observed(self.ref, path, live, held or None, now))
        else:  # written earlier in this batch: its versions are not in the history yet
            now = max(_us(self.store.clock()), self.times[path])
        self.times[path] = now
        if held != etag:
            records.append(self.store._version_record(self.ref, path, data, etag, now))
        return records

    def _directory(self, where: tuple[str, ...], path: str) -> int:
        dfd = self.dirs.get(where)
        if dfd is None:
            opened = self.store._open_dirs(self.space + list(where), path, create=True)
            assert opened is not None  # create=True always yields a directory
            dfd = self.dirs[where] = opened
            _remove_stale_temps(dfd)
        return dfd

    def _existing_size(self, dfd: int, where: tuple[str, ...], name: str, path: str) -> int | None:
        """The size of the document there now (pending in this batch or on disk)."""
        pending = self.pending.get((where, name))
        if pending is not None:
            return pending[1]
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            raise Conflict(
                f"{path!r} is a symbolic link in the filesystem store; the store never "
                "follows links: replace the link with a file",
                path=path,
            )
        if not stat.S_ISREG(st.st_mode):
            raise Conflict(
                f"{path!r} is a directory or special file in the filesystem store, "
                "not a document; move it aside",
                path=path,
            )
        return st.st_size

    def flush(self) -> None:
        """Make every pending document durable, then give it its name."""
        if self.pending:
            _sync_filesystem(next(iter(self.dirs.values())))
            for (where, name), (tmp, _size) in self.pending.items():
                dfd = self.dirs[where]
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            self.pending.clear()
        for dfd in self.dirs.values():
            os.fsync(dfd)
            os.close(dfd)
        self.dirs.clear()
        with history_errors():
            self.store._record_history(self.history, self.records, self.known)
        self.records.clear()
        self.known.clear()
        self.held = 0

    def discard(self) -> None:
        """Drop what is pending (the import ended early) and close every directory."""
        for (where, _name), (tmp, _size) in self.pending.items():
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.dirs[where])
        self.pending.clear()
        self.records.clear()
        self.known.clear()
        self.held = 0
        for dfd in self.dirs.values():
            with contextlib.suppress(OSError):
                os.close(dfd)
        self.dirs.clear()


@contextlib.contextmanager
def import_batch(store: FilesystemStore, ref: SpaceRef) -> Iterator[ImportWriter]:
    """The writer of one import into ``ref`` (see the module's docstring). No grant: the
    authority of each write was checked by the prelude that made its ``CheckedWrite``."""
    from keepstone.store.fs import _os_errors

    with _os_errors(""), store._locked():
        state = store._load_state_locked()
        with history_errors():
            history = store._history_conn_locked()
        state.dirty = True
        store._save_state(state, sync_data=False, sync_dir=True)
        batch = _Batch(store, ref, state, space_components(ref), history)
        try:
            yield batch.write
            batch.flush()
        except BaseException:
            batch.discard()
            with contextlib.suppress(Exception):
                store._recount_locked()
            raise
        state.dirty = False
        store._save_state(state, sync_data=True, sync_dir=True)


def _remove_stale_temps(dfd: int) -> None:
    """Remove the temporary files a killed writer left in the directory ``dfd``.

    Every writer of the store writes its temporary files under the store's lock, which
    the batch holds: any there now belong to a process that died mid-write (an import
    killed before its flush leaves one per pending document)."""
    with os.scandir(dfd) as entries:
        stale = [
            e.name
            for e in entries
            if e.name.startswith(TEMP_PREFIX)
            and e.name.endswith(TEMP_SUFFIX)
            and e.is_file(follow_symlinks=False)
        ]
    for name in stale:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dfd)


def _read_live(dfd: int, name: str) -> tuple[bytes, os.stat_result] | None:
    """(content, stat) of the document ``name`` in ``dfd`` (checked a regular file)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except FileNotFoundError:
        return None
    try:
        with open(fd, "rb", closefd=False) as file:
            return file.read(), os.fstat(fd)
    finally:
        os.close(fd)


def _write_temp(dfd: int, data: bytes, mtime_ns: int | None = None) -> str:
    tmp = f"{TEMP_PREFIX}{uuid.uuid4().hex}{TEMP_SUFFIX}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o644, dir_fd=dfd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if mtime_ns is not None:
            os.utime(fd, ns=(mtime_ns, mtime_ns))
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise
    os.close(fd)
    return tmp


def _load_syncfs() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syncfs  # Linux: flush one filesystem, not every one
    except (OSError, AttributeError):
        return None


_SYNCFS = _load_syncfs()


def _sync_filesystem(fd: int) -> None:
    """Flush the filesystem holding ``fd`` to stable storage (every mount without
    ``syncfs``)."""
    if _SYNCFS is not None and _SYNCFS(fd) == 0:
        return
    os.sync()
