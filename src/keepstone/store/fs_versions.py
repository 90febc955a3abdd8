"""The history of the filesystem store's documents: what each mutation records, how hand
edits of the tree are found, and the past read back (docs/history.md).

Every write, delete, move and import of a document through
:class:`~keepstone.store.fs.FilesystemStore` keeps the version it made, with the same
semantics as the SQL store (:mod:`keepstone.store.sql_history`): a version per change of
content (the same bytes again make none), a deletion marker per delete, a marker on the
old path and a version on the new one per move, numbered per path, attributed to
:func:`~keepstone.documents.current_actor`, stamped with the store's ``clock``. The rows
live in the history file (:mod:`keepstone.store.fs_history`); :class:`TreeHistory` ties
them to the files of the tree (:mod:`keepstone.store.fs_tree`).

When: under the store's lock, in the same critical section as the file operation.

Crash safety, the rule: **the file operation first, then the history insert**, both
inside the lock and while the usage state is marked dirty
(:meth:`keepstone.store.fs_counters.Counters.dirty`). So a version is never recorded for
a file operation that did not happen. A process killed between the two leaves the state
dirty; the next writer (or reader of the counters) recounts, and a recount reconciles the
history with the files first (:meth:`TreeHistory.reconcile_locked`):

* a live file whose etag is not its path's newest version's (or whose path has no
  version, or whose newest version is a deletion) is recorded as a version, actor
  ``hand-edit``, ``at`` = the file's mtime;
* a path whose newest version has content but no file is given a deletion marker, actor
  ``hand-edit``, ``at`` = now.

An interrupted write was never acknowledged, so nobody is owed its attribution: its file,
if it landed, is recorded like a hand edit. After any recovery every live file is its
path's newest version and every path without a file ends in a deletion marker — no
version without its document, no document without its version. A commit lost to a power
cut (``synchronous=NORMAL``; a killed process loses none) is repaired the same way. An
insert that fails after its file operation (the history file unwritable, locked too long)
fails the call with :class:`~keepstone.errors.StoreUnavailable`; the file stays as written
(a file operation cannot be rolled back as a transaction can) and is recorded by the
recount that follows, as a hand edit. Writing the same bytes again makes no new version.

Hand edits (the tree is plain files) are picked up the same way: by the next write,
delete or move of the path (the file as it is is recorded before the change), by reading
the path's versions, by ``FilesystemStore.reconcile_history`` (``keepstone doctor``) and
by every recount. Listings as of an instant (:meth:`TreeHistory.list_as_of`) read only
the history file (one indexed query), so an edit nobody has picked up yet is not in them.

Files that predate the history: the history file is created, under the lock, the first
time the history is written or read, and in that same transaction every document of the
tree is recorded as version 1 (actor ``before-history``, ``at`` = its mtime). A history
file deleted by hand starts over the same way.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime

from keepstone.activity import ChangePage, FeedQuery, current_action, current_kind
from keepstone.documents import Document, DocumentInfo, VersionInfo, content_etag, current_actor
from keepstone.quota import HistoryLimits, Limits
from keepstone.spaces import SpaceRef
from keepstone.store.fs_files import os_errors
from keepstone.store.fs_history import (
    BEFORE_HISTORY,
    HAND_EDIT,
    HistoryDb,
    Known,
    Live,
    Newest,
    Observed,
    Record,
    hand_edit,
    history_errors,
    to_us,
)
from keepstone.store.fs_layout import encode_doc_path, space_components
from keepstone.store.fs_tree import FileTree

# Aliases: FilesystemStore defines a method called ``list``.
Versions = list[VersionInfo]
Infos = list[DocumentInfo]
Records = list[Record | Observed]


class TreeHistory:
    """The history of the documents of one filesystem store's tree (see the module doc).

    ``clock`` is what "now" is for a new version (the store's: a test gives the store a
    clock of its own). The methods named ``..._locked`` run under the tree's lock, which
    the caller holds; the others take it when they must."""

    def __init__(
        self, tree: FileTree, limits: Limits, clock: Callable[[], datetime], keep: bool = True
    ) -> None:
        self._tree = tree
        self._keep = keep
        self._db = HistoryDb(tree.root)
        self._limits = limits
        self._clock = clock

    def close(self) -> None:
        self._db.close()

    # --- Building blocks of the store's mutations (called under the lock) -----------------

    def connection_locked(self) -> sqlite3.Connection:
        """The history file, created (and the documents that predate it recorded) on
        first use."""
        conn = self._db.connection(create=True)
        assert conn is not None  # create=True always opens a file
        if not self._db.ready(conn):
            self._db.backfill(conn, self._before_history())
        return conn

    def _before_history(self) -> Iterator[Record]:
        for ref in self._tree.spaces():
            space = space_components(ref)
            for doc_path, comps, _ in self._tree.walk_space(ref, ""):
                got = self._tree.read_file(space + comps, doc_path)
                if got is not None:
                    data, st = got
                    at = st.st_mtime_ns // 1000
                    yield Record(ref.id, doc_path, data, content_etag(data), at, BEFORE_HISTORY)

    def now_us(self) -> int:
        """The clock's now, in µs, as a version's instant."""
        return to_us(self._clock())

    def instant(
        self, conn: sqlite3.Connection, ref: SpaceRef, *found: tuple[str, Live, str | None]
    ) -> tuple[int, Known]:
        """Now, in µs, for a mutation of the paths of ``found`` (each with the file found
        there and its etag when known): the clock's, but never before a path's newest
        version, nor before the hand edit of its file recorded first. A clock that stepped
        back would otherwise time a version before the one it replaces. With the paths'
        newest versions it read, for the mutation's append (under the same lock)."""
        now = self.now_us()
        known: Known = {}
        for path, live, etag in found:
            newest = known[(ref.id, path)] = self._db.newest(conn, ref.id, path)
            if newest is not None:
                now = max(now, newest[3])
            edit = hand_edit(newest, ref.id, path, live, now, etag)
            if edit is not None:
                now = max(now, edit.at_us)
        return now, known

    def version_record(
        self, ref: SpaceRef, path: str, data: bytes | None, etag: str, at_us: int
    ) -> Record:
        """The version a mutation through the store makes at ``at_us`` (its instant)."""
        action, kind = current_action(deleted=data is None), current_kind()
        return Record(ref.id, path, data, etag, at_us, current_actor(), action, kind)

    def observed(
        self, ref: SpaceRef, path: str, live: Live, etag: str | None = None, now_us: int = 0
    ) -> Observed:
        """The file found at ``path`` (its content's ``etag`` when known) before a
        change at ``now_us`` (0: the clock's now): a hand edit is recorded first."""
        return Observed(ref.id, path, live, now_us or self.now_us(), etag)

    @staticmethod
    def is_hand_edited(
        newest: Newest | None, ref: SpaceRef, path: str, live: Live, etag: str | None
    ) -> bool:
        """The file ``live`` at ``path`` is not its newest version: a hand edit."""
        return hand_edit(newest, ref.id, path, live, 0, etag) is not None

    def record(
        self,
        conn: sqlite3.Connection,
        records: Sequence[Record | Observed],
        known: Known | None = None,
    ) -> None:
        """Append ``records`` (see :meth:`~keepstone.store.fs_history.HistoryDb.append`);
        nothing when the store keeps no history."""
        if self._keep:
            self._db.append(conn, records, self._limits, known)

    def reconcile_locked(self) -> int:
        """Record every difference between the files and their history as a hand edit
        (see the module doc); returns how many versions were recorded. Nothing when the
        history file was never created (its first use records the tree)."""
        with history_errors():
            if self._db.connection(create=False) is None:
                return 0
            conn = self.connection_locked()
            records: Records = []
            seen: set[str] = set()
            now = self.now_us()
            for ref in self._tree.spaces():
                seen.add(ref.id)
                newest = self._db.newest_of_space(conn, ref.id)
                space = space_components(ref)
                for doc_path, comps, _ in self._tree.walk_space(ref, ""):
                    live = self._tree.read_file(space + comps, doc_path)
                    edit = hand_edit(newest.pop(doc_path, None), ref.id, doc_path, live, now)
                    if edit is not None:
                        records.append(edit)
                records += _vanished(ref.id, newest, now)
            for space_id in self._db.space_ids(conn):
                if space_id not in seen:  # the space's directory is gone
                    records += _vanished(space_id, self._db.newest_of_space(conn, space_id), now)
            self.record(conn, records)
        return len(records)

    # --- The purge job, limits, usage -------------------------------------------------------

    def prune(self) -> int:
        """Drop replaced versions older than ``history_days`` (never a path's newest
        version); returns how many were dropped."""
        conn = self._reader()
        if conn is None:
            return 0
        with history_errors():
            return self._db.prune(conn, self._clock(), self._limits)

    def set_limits(self, limits: HistoryLimits) -> None:
        """Set the tree's history limits (None: the store's ``limits``)."""
        with os_errors(""), self._tree.locked(), history_errors():
            self._db.set_limits(self.connection_locked(), limits)

    def usage(self) -> tuple[int, int]:
        """(bytes of replaced versions kept, the history quota) of the tree."""
        with history_errors():
            conn = self._db.connection(create=False) if self._tree.root.is_dir() else None
            return self._db.usage(conn, self._limits)

    # --- Reading the past --------------------------------------------------------------------

    def _reader(self) -> sqlite3.Connection | None:
        """The history file, ready to read (created under the lock when missing); None when
        the store has no tree at all."""
        if not self._tree.root.is_dir():
            return None
        with history_errors():
            conn = self._db.connection(create=False)
            if conn is not None and self._db.ready(conn):
                return conn
        with os_errors(""), self._tree.locked(), history_errors():
            return self.connection_locked()

    def versions(self, ref: SpaceRef, path: str, *, settle: Callable[[], object]) -> Versions:
        """Every version of ``path``, newest first. A hand edit of its file is recorded
        first, under the lock and after ``settle()`` (the store's counters loaded, so a
        writer between its file operation and its insert is waited for, and one that died
        there recounted)."""
        conn = self._reader()
        if conn is None:
            return []
        comps = space_components(ref) + encode_doc_path(path)
        with os_errors(path), history_errors():
            newest = self._db.newest(conn, ref.id, path)
            if self.is_hand_edited(newest, ref, path, self._tree.read_file(comps, path), None):
                with self._tree.locked():
                    settle()
                    live = self._tree.read_file(comps, path)
                    self.record(conn, [self.observed(ref, path, live)])
            return self._db.versions(conn, ref.id, path)

    def activity(self, space_ids: Sequence[str], query: FeedQuery) -> ChangePage:
        """The changes of ``space_ids``, newest first (hand edits of files not yet seen
        through the store are recorded when their path's history or the tree is read)."""
        conn = self._reader()
        if conn is None or not space_ids:
            return ChangePage((), None)
        with history_errors():
            return self._db.activity(conn, space_ids, query)

    def read_version(self, ref: SpaceRef, path: str, version: int) -> Document | None:
        conn = self._reader()
        if conn is None:
            return None
        with history_errors():
            return self._db.read(conn, ref.id, path, version)

    def list_as_of(self, ref: SpaceRef, at: datetime, prefix: str) -> Infos:
        conn = self._reader()
        if conn is None:
            return []
        with history_errors():
            return self._db.as_of(conn, ref.id, at, prefix)


def _vanished(space_id: str, newest: dict[str, Newest], now_us: int) -> list[Record]:
    """Deletion markers for the paths of ``newest`` whose last version has content (their
    files are gone)."""
    return [
        Record(space_id, path, None, "", max(now_us, n[3]), HAND_EDIT)
        for path, n in sorted(newest.items())
        if not n[2]
    ]
