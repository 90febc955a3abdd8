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
* each write's version (:mod:`~keepstone.store.fs_versions`: every write of the import is one,
  unless it repeats the bytes the path holds) is appended to the history after the
  flush has renamed the documents, in one transaction per flush: the files first, as
  every mutation of the store; a crash in between leaves the state dirty and the next
  writer's recount records the renamed files (actor ``hand-edit``).

Part of the filesystem adapter: it uses the parts a single write uses — the tree
(:mod:`~keepstone.store.fs_tree`: its lock and its walk), the counters
(:mod:`~keepstone.store.fs_counters`) and the history (:mod:`~keepstone.store.fs_versions`)
— so the batch and a single write share every rule. The lock is held for the whole
import: another process's writes (and its usage reads, which wait for a clean state) wait
for the import to end.

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
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from keepstone.documents import WriteResult, content_etag
from keepstone.quota import MiB
from keepstone.spaces import SpaceRef
from keepstone.store.fs_counters import Counters
from keepstone.store.fs_files import os_errors, remove_stale_temps, write_temp
from keepstone.store.fs_history import Known, Observed, Record, history_errors
from keepstone.store.fs_layout import UsageState, encode_doc_path, space_components
from keepstone.store.fs_tree import FileTree, document_size, read_in
from keepstone.store.fs_versions import TreeHistory
from keepstone.store.prelude import CheckedWrite, ImportWriter, check_precondition

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
    tree: FileTree
    counters: Counters
    history: TreeHistory
    ref: SpaceRef
    state: UsageState
    space: list[str]
    # The history file, opened under the import's lock.
    conn: sqlite3.Connection
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
        create_only = w.if_none_match
        doc = encode_doc_path(w.path)
        where, name = tuple(doc[:-1]), doc[-1]
        with os_errors(w.path):
            dfd = self._directory(where, w.path)
            size = self._existing_size(dfd, where, name, w.path)
            check_precondition(w.path, None if size is None else "", None, create_only)
            delta = len(w.data) - (size or 0)
            self.counters.check_quota(self.ref, self.state, delta)
            records = self._versions(dfd, name, w.path, w.data, w.etag, size is not None)
            # The file's mtime (its updated_at) is its new version's instant, as for a write.
            own = [r for r in records if isinstance(r, Record) and r.data is not None]
            tmp = write_temp(dfd, w.data, mtime_ns=own[-1].at_us * 1000 if own else None)
            earlier = self.pending.pop((where, name), None)
            if earlier is not None:  # replaced again before the flush: drop the older one
                with contextlib.suppress(OSError):
                    os.unlink(earlier[0], dir_fd=dfd)
            self.pending[(where, name)] = (tmp, len(w.data))
        self.records += records
        self.held += sum(_held(r) for r in records)
        self.holds[w.path] = w.etag
        self.counters.charge(self.state, self.ref, delta)
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
            live = read_in(dfd, name, path) if exists else None
            held = "" if live is None else content_etag(live[0])
            # A file's content is held until the flush only when it is a hand edit.
            with history_errors():
                now, known = self.history.instant(self.conn, self.ref, (path, live, held or None))
                self.known.update(known)
                newest = known[(self.ref.id, path)]
                if live is None or self.history.is_hand_edited(newest, self.ref, path, live, held):
                    records.append(self.history.observed(self.ref, path, live, held or None, now))
        else:  # written earlier in this batch: its versions are not in the history yet
            now = max(self.history.now_us(), self.times[path])
        self.times[path] = now
        if held != etag:
            records.append(self.history.version_record(self.ref, path, data, etag, now))
        return records

    def _directory(self, where: tuple[str, ...], path: str) -> int:
        dfd = self.dirs.get(where)
        if dfd is None:
            opened = self.tree.open_dirs(self.space + list(where), path, create=True)
            assert opened is not None  # create=True always yields a directory
            dfd = self.dirs[where] = opened
            # Any temporary file here now is a dead writer's: this batch holds the lock.
            remove_stale_temps(dfd)
        return dfd

    def _existing_size(self, dfd: int, where: tuple[str, ...], name: str, path: str) -> int | None:
        """The size of the document there now (pending in this batch or on disk)."""
        pending = self.pending.get((where, name))
        if pending is not None:
            return pending[1]
        return document_size(dfd, name, path)

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
            self.history.record(self.conn, self.records, self.known)
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
def import_batch(
    tree: FileTree, counters: Counters, history: TreeHistory, ref: SpaceRef
) -> Iterator[ImportWriter]:
    """The writer of one import into ``ref`` (see the module's docstring). No grant: the
    authority of each write was checked by the prelude that made its ``CheckedWrite``."""
    with os_errors(""), tree.locked():
        state = counters.load_locked()
        with history_errors():
            conn = history.connection_locked()
        with counters.dirty(state, sync_clean=True):
            batch = _Batch(tree, counters, history, ref, state, space_components(ref), conn)
            try:
                yield batch.write
                batch.flush()
            except BaseException:
                batch.discard()
                raise


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
