"""The filesystem store's document history (issue 14, docs/history.md).

Every write, delete, move and import of a document through
:class:`~keepstone.store.fs.FilesystemStore` keeps the version it made, with the same
semantics as the SQL store (:mod:`keepstone.store.sql_history`): a version per change of
content (the same bytes again make none), a deletion marker per delete, a marker on the
old path and a version on the new one per move, numbered per path, attributed to
:func:`~keepstone.documents.current_actor`, stamped with the store's ``clock``.

Where: beside the plain tree, in one SQLite file at the root,
``<root>/.keepstone-history.sqlite`` (:data:`HISTORY_FILE`, with SQLite's ``-wal``/``-shm``),
so a person browsing the tree still sees only their ``.md`` files. One table of versions
(space id, path, version, etag, size, content packed by :mod:`keepstone.store.version_pack`,
stored bytes, instant, actor, deleted) and a ``meta`` table holding the tree's history
counter (bytes of versions that are no longer the newest of their path: the filesystem
store has one tree-wide aggregate, so its history counter is tree-wide too) and the
limits set by :meth:`set_history_limits`. Connections are the search index's plumbing
(:class:`~keepstone.store.fs_index.SqliteSidecar`: one per thread, reopened after a fork or
when the file is replaced; WAL).

When: under the store's lock, in the same critical section as the file operation.

Crash safety, the rule: **the file operation first, then the history insert**, both
inside the lock and while the usage state is marked dirty (``FilesystemStore._mutate``).
So a version is never recorded for a file operation that did not happen. A process
killed between the two leaves the state dirty; the next writer (or reader of the
counters) recounts (``_recount_locked``), and a recount reconciles the history with the
files first (:meth:`DocumentHistory._reconcile_history_locked`):

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
the path's versions, by :meth:`DocumentHistory.reconcile_history` (``keepstone doctor``) and
by every recount. Listings as of an instant (:meth:`_list_as_of`) read only the history
file (fast: one indexed query), so an edit nobody has picked up yet is not in them.

Files that predate the history: the history file is created, under the lock, the first
time the history is written or read, and in that same transaction every document of the
tree is recorded as version 1 (actor ``before-history``, ``at`` = its mtime). A history
file deleted by hand starts over the same way; one SQLite cannot read is moved aside
(``.keepstone-history.sqlite.corrupt-<time>``) and a new one started, so a broken history
never blocks a live write.

Retention and quota as SQL: a path keeps at most ``history_versions`` versions, the tree
at most its history quota of replaced versions' compressed bytes (the oldest go first,
never a path's newest), kept at write time; :meth:`prune_history` drops replaced versions
older than ``history_days``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from keepstone.documents import Document, DocumentInfo, VersionInfo, content_etag, current_actor
from keepstone.errors import InvalidDocument, StoreUnavailable
from keepstone.quota import Limits, clamp
from keepstone.spaces import SpaceRef
from keepstone.store.fs_index import SqliteSidecar, connect_wal, write_transaction
from keepstone.store.fs_layout import encode_doc_path, space_components
from keepstone.store.version_pack import pack_version, unpack_version

log = logging.getLogger("keepstone.store")

HISTORY_FILE: Final = ".keepstone-history.sqlite"
#: The actor of a version found on disk rather than written through the store.
HAND_EDIT: Final = "hand-edit"
#: The actor of the version 1 of a document that predates the history file.
BEFORE_HISTORY: Final = "before-history"
_PRUNE_BATCH = 200
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER);
CREATE TABLE IF NOT EXISTS versions (
    space_id TEXT NOT NULL, path TEXT NOT NULL, version INTEGER NOT NULL,
    etag TEXT NOT NULL, size INTEGER NOT NULL, stored_bytes INTEGER NOT NULL,
    at_us INTEGER NOT NULL, actor TEXT NOT NULL, deleted INTEGER NOT NULL,
    content BLOB
);
CREATE INDEX IF NOT EXISTS versions_by_path
    ON versions (space_id, path, version, at_us, deleted, size, etag, stored_bytes)
"""

#: The newest version of one path: (version, etag, deleted, at_us, stored_bytes).
Newest = tuple[int, str, bool, int, int]
#: Paths' newest versions as read under the store's lock, by (space id, path): what an
#: append that follows under the same lock starts from instead of reading them again.
Known = dict[tuple[str, str], Newest | None]
# Aliases: FilesystemStore defines a method called ``list``.
Versions = list[VersionInfo]
Infos = list[DocumentInfo]


def _us(at: datetime) -> int:
    return (at - _EPOCH) // _US


def _instant(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


@dataclass(frozen=True, slots=True)
class Record:
    """One version to append: ``data`` None is a deletion marker."""

    space_id: str
    path: str
    data: bytes | None
    etag: str
    at_us: int
    actor: str


#: (content, stat) of a live file, as ``FilesystemStore._read_file`` answers; None: absent.
Live = tuple[bytes, os.stat_result] | None


@dataclass(frozen=True, slots=True)
class Observed:
    """The file a mutation found at ``path`` (``live``, None: none) before changing it:
    appended first as a hand edit when it is not the path's newest version."""

    space_id: str
    path: str
    live: Live
    now_us: int
    #: The live file's etag when the caller has it already (None: computed when needed).
    etag: str | None = None


class HistoryDb(SqliteSidecar):
    """The history file of one filesystem store (see the module doc)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root / HISTORY_FILE)

    def _open(self) -> sqlite3.Connection:
        try:
            return self._connect()
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as exc:  # not a database, or malformed
            aside = f"{self.path}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
            log.warning("history %s is unreadable (%s); moved it to %s", self.path, exc, aside)
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.rename(f"{self.path}{suffix}", f"{aside}{suffix}")
            return self._connect()

    def _connect(self) -> sqlite3.Connection:
        conn = connect_wal(self.path)
        try:
            with write_transaction(conn):
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
        except BaseException:
            conn.close()
            raise
        self._remember(conn)
        return conn

    def connection(self, *, create: bool) -> sqlite3.Connection | None:
        return self._conn(create=create)

    # --- Reads --------------------------------------------------------------------------------

    def ready(self, conn: sqlite3.Connection) -> bool:
        """Whether the documents that predate the history were recorded (the file is
        usable); once true, remembered for the connection."""
        if getattr(self._local, "ready", None) is conn:
            return True
        if conn.execute("SELECT 1 FROM meta WHERE key = 'ready'").fetchone() is None:
            return False
        self._local.ready = conn
        return True

    @staticmethod
    def newest(conn: sqlite3.Connection, space_id: str, path: str) -> Newest | None:
        row = conn.execute(
            "SELECT version, etag, deleted, at_us, stored_bytes FROM versions "
            "WHERE space_id = ? AND path = ? ORDER BY version DESC LIMIT 1",
            (space_id, path),
        ).fetchone()
        if row is None:
            return None
        return int(row[0]), str(row[1]), bool(row[2]), int(row[3]), int(row[4])

    @staticmethod
    def newest_of_space(conn: sqlite3.Connection, space_id: str) -> dict[str, Newest]:
        return {
            path: (int(v), str(etag), bool(deleted), int(at), int(stored))
            for path, v, etag, deleted, at, stored in conn.execute(
                "SELECT path, MAX(version), etag, deleted, at_us, stored_bytes FROM versions "
                "WHERE space_id = ? GROUP BY path",
                (space_id,),
            )
        }

    @staticmethod
    def space_ids(conn: sqlite3.Connection) -> list[str]:
        return [r[0] for r in conn.execute("SELECT DISTINCT space_id FROM versions")]

    # --- Writes (one transaction each) ----------------------------------------------------------

    def append(
        self,
        conn: sqlite3.Connection,
        records: Sequence[Record | Observed],
        limits: Limits,
        known: Known | None = None,
    ) -> None:
        """Append ``records`` in order (an :class:`Observed` file only when it is a hand
        edit), then keep the tree's history within its limits. ``known``: paths' newest
        versions read under the store's lock since, not read again."""
        if not records:
            return
        with write_transaction(conn):
            self._append_locked(conn, records, limits, known)

    def backfill(self, conn: sqlite3.Connection, records: Iterable[Record]) -> None:
        """Record the documents that predate the history and mark the file ready."""
        with write_transaction(conn):
            if self.ready(conn):
                return  # another process got there first
            for r in records:
                _insert(conn, r, 1)
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('ready', 1)")

    def _append_locked(
        self,
        conn: sqlite3.Connection,
        records: Sequence[Record | Observed],
        limits: Limits,
        seen: Known | None,
    ) -> None:
        meta = dict(conn.execute("SELECT key, value FROM meta WHERE key != 'ready'").fetchall())
        used = before = int(meta.get("used") or 0)
        keep = int(meta.get("versions") or limits.history_versions)
        freed = 0
        # Each path's newest version, read once (none read already under the lock).
        known: Known = dict(seen or {})
        for item in records:
            key = (item.space_id, item.path)
            if key not in known:
                known[key] = self.newest(conn, *key)
            previous = known[key]
            if isinstance(item, Observed):
                edit = _hand_edit(
                    previous, item.space_id, item.path, item.live, item.now_us, item.etag
                )
                if edit is None:
                    continue
                item = edit
            r = item
            version = 1 if previous is None else previous[0] + 1
            known[key] = (version, r.etag, r.data is None, r.at_us, _insert(conn, r, version))
            # The version this one replaced is history now: its bytes count.
            if previous is not None and not previous[2]:
                used += previous[4]
            if version > keep:
                freed += sum(
                    int(row[0])
                    for row in conn.execute(
                        "DELETE FROM versions WHERE space_id = ? AND path = ? AND version <= ? "
                        "RETURNING stored_bytes",
                        (r.space_id, r.path, version - keep),
                    ).fetchall()
                )
        used -= freed
        quota = meta.get("quota")
        quota = int(quota) if quota is not None else _default_quota(limits)
        if used > quota:
            used -= self._prune_oldest(conn, used - quota)
        if used != before:
            self._set_meta(conn, "used", clamp(used))

    @staticmethod
    def _prune_oldest(conn: sqlite3.Connection, over: int) -> int:
        """Drop the tree's oldest replaced versions until ``over`` bytes are freed (never
        a path's newest version: the live document, or the marker of its deletion)."""
        freed = 0
        while freed < over:
            rows = conn.execute(
                "SELECT rowid, stored_bytes FROM versions v WHERE EXISTS ("
                " SELECT 1 FROM versions n WHERE n.space_id = v.space_id"
                " AND n.path = v.path AND n.version > v.version)"
                " ORDER BY at_us, version LIMIT ?",
                (_PRUNE_BATCH,),
            ).fetchall()
            if not rows:
                break
            for rowid, stored in rows:
                conn.execute("DELETE FROM versions WHERE rowid = ?", (rowid,))
                freed += int(stored)
                if freed >= over:
                    break
        return freed

    def prune(self, conn: sqlite3.Connection, now: datetime, limits: Limits) -> int:
        """Drop replaced versions older than ``history_days`` that were no longer current
        at the cutoff; returns how many."""
        with write_transaction(conn):
            days = self._meta(conn, "days") or limits.history_days
            cutoff = _us(now - timedelta(days=days))
            old = (
                "FROM versions WHERE at_us < :cut AND EXISTS ("
                " SELECT 1 FROM versions n WHERE n.space_id = versions.space_id"
                " AND n.path = versions.path AND n.version > versions.version"
                " AND n.at_us <= :cut)"
            )
            freed = conn.execute(
                f"SELECT COALESCE(SUM(stored_bytes), 0) {old}", {"cut": cutoff}
            ).fetchone()[0]
            dropped = conn.execute(f"DELETE {old}", {"cut": cutoff}).rowcount
            if freed:
                used = self._meta(conn, "used") or 0
                self._set_meta(conn, "used", clamp(used - int(freed)))
        return int(dropped or 0)

    def set_limits(
        self, conn: sqlite3.Connection, quota: int | None, versions: int | None, days: int | None
    ) -> None:
        with write_transaction(conn):
            for key, value in (("quota", quota), ("versions", versions), ("days", days)):
                if value is None:
                    conn.execute("DELETE FROM meta WHERE key = ?", (key,))
                else:
                    self._set_meta(conn, key, value)

    def usage(self, conn: sqlite3.Connection | None, limits: Limits) -> tuple[int, int]:
        if conn is None:
            return 0, _default_quota(limits)
        return self._meta(conn, "used") or 0, self.quota(conn, limits)

    def quota(self, conn: sqlite3.Connection, limits: Limits) -> int:
        set_quota = self._meta(conn, "quota")
        return set_quota if set_quota is not None else _default_quota(limits)

    @staticmethod
    def _meta(conn: sqlite3.Connection, key: str) -> int | None:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    @staticmethod
    def _set_meta(conn: sqlite3.Connection, key: str, value: int) -> None:
        if not conn.execute("UPDATE meta SET value = ? WHERE key = ?", (value, key)).rowcount:
            conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (key, value))


def _default_quota(limits: Limits) -> int:
    return limits.history_quota if limits.history_quota is not None else limits.team_quota


def _insert(conn: sqlite3.Connection, r: Record, version: int) -> int:
    """Insert ``r`` as ``version`` of its path; returns its stored bytes."""
    packed = None if r.data is None else pack_version(r.data)
    conn.execute(
        "INSERT INTO versions (space_id, path, version, etag, size, stored_bytes, at_us, "
        "actor, deleted, content) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            r.space_id,
            r.path,
            version,
            r.etag,
            0 if r.data is None else len(r.data),
            0 if packed is None else len(packed),
            r.at_us,
            r.actor[:256],
            r.data is None,
            packed,
        ),
    )
    return 0 if packed is None else len(packed)


@contextlib.contextmanager
def history_errors() -> Iterator[None]:
    """Translate the history file's SQLite failures at the adapter boundary."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreUnavailable(
            f"the filesystem store's history ({HISTORY_FILE} at the store's root) failed: {exc}"
        ) from exc


class DocumentHistory:
    """Mixin of :class:`~keepstone.store.fs.FilesystemStore`: its history (see the module doc).

    Uses the store's lock, usage state, file reads and walks, ``limits`` and ``clock``."""

    limits: Limits
    #: What "now" is for a new version (a test gives the store a clock of its own).
    clock: Callable[[], datetime]
    root: Path
    _history: HistoryDb
    # The store's own (FilesystemStore): its walks, file reads, lock and counters.
    _spaces: Callable[[], Iterator[SpaceRef]]
    _walk_space: Callable[[SpaceRef, str], Iterator[tuple[str, list[str], os.stat_result]]]
    _read_file: Callable[[list[str], str], Live]
    _locked: Callable[[], contextlib.AbstractContextManager[None]]
    _load_state_locked: Callable[[], object]
    _checked: Callable[[SpaceRef], SpaceRef]

    # --- Building blocks for the store's mutations (called under the lock) -------------------

    def _history_conn_locked(self) -> sqlite3.Connection:
        """The history file, created (and the documents that predate it recorded) on
        first use. Call under the store's lock."""
        conn = self._history.connection(create=True)
        assert conn is not None  # create=True always opens a file
        if not self._history.ready(conn):
            self._history.backfill(conn, self._before_history())
        return conn

    def _before_history(self) -> Iterator[Record]:
        for ref in self._spaces():
            space = space_components(ref)
            for doc_path, comps, _ in self._walk_space(ref, ""):
                got = self._read_file(space + comps, doc_path)
                if got is not None:
                    data, st = got
                    at = st.st_mtime_ns // 1000
                    yield Record(ref.id, doc_path, data, content_etag(data), at, BEFORE_HISTORY)

    def _instant(
        self, conn: sqlite3.Connection, ref: SpaceRef, *found: tuple[str, Live, str | None]
    ) -> tuple[int, Known]:
        """Now, in µs, for a mutation of the paths of ``found`` (each with the file found
        there and its etag when known): the clock's, but never before a path's newest
        version, nor before the hand edit of its file recorded first. A clock that stepped
        back would otherwise time a version before the one it replaces. With the paths'
        newest versions it read, for the mutation's append (under the same lock)."""
        now = _us(self.clock())
        known: Known = {}
        for path, live, etag in found:
            newest = known[(ref.id, path)] = self._history.newest(conn, ref.id, path)
            if newest is not None:
                now = max(now, newest[3])
            edit = _hand_edit(newest, ref.id, path, live, now, etag)
            if edit is not None:
                now = max(now, edit.at_us)
        return now, known

    def _version_record(
        self, ref: SpaceRef, path: str, data: bytes | None, etag: str, at_us: int
    ) -> Record:
        """The version a mutation through the store makes at ``at_us`` (its instant)."""
        return Record(ref.id, path, data, etag, at_us, current_actor())

    def _observed(
        self, ref: SpaceRef, path: str, live: Live, etag: str | None = None, now_us: int = 0
    ) -> Observed:
        """The file found at ``path`` (its content's ``etag`` when known) before a
        change at ``now_us`` (0: the clock's now): a hand edit is recorded first."""
        return Observed(ref.id, path, live, now_us or _us(self.clock()), etag)

    @staticmethod
    def _is_hand_edited(
        newest: Newest | None, ref: SpaceRef, path: str, live: Live, etag: str | None
    ) -> bool:
        """The file ``live`` at ``path`` is not its newest version: a hand edit."""
        return _hand_edit(newest, ref.id, path, live, 0, etag) is not None

    def _record_history(
        self,
        conn: sqlite3.Connection,
        records: Sequence[Record | Observed],
        known: Known | None = None,
    ) -> None:
        self._history.append(conn, records, self.limits, known)

    def _reconcile_history_locked(self) -> int:
        """Record every difference between the files and their history as a hand edit
        (see the module doc); returns how many versions were recorded. Nothing when the
        history file was never created (its first use records the tree)."""
        with history_errors():
            if self._history.connection(create=False) is None:
                return 0
            conn = self._history_conn_locked()
            records: list[Record | Observed] = []
            seen: set[str] = set()
            now = _us(self.clock())
            for ref in self._spaces():
                seen.add(ref.id)
                newest = self._history.newest_of_space(conn, ref.id)
                space = space_components(ref)
                for doc_path, comps, _ in self._walk_space(ref, ""):
                    live = self._read_file(space + comps, doc_path)
                    edit = _hand_edit(newest.pop(doc_path, None), ref.id, doc_path, live, now)
                    if edit is not None:
                        records.append(edit)
                records += _vanished(ref.id, newest, now)
            for space_id in self._history.space_ids(conn):
                if space_id not in seen:  # the space's directory is gone
                    records += _vanished(
                        space_id, self._history.newest_of_space(conn, space_id), now
                    )
            self._record_history(conn, records)
        return len(records)

    # --- Public: keepstone doctor, the purge job, limits -----------------------------------------

    def reconcile_history(self) -> int:
        """Record every hand edit of the tree (changed, new and removed files) as a
        version, actor ``hand-edit`` (``keepstone doctor``); returns how many were recorded."""
        from keepstone.store.fs import _os_errors

        if not self.root.is_dir():
            return 0
        with _os_errors(""), self._locked():
            found = self._reconcile_history_locked()
            with history_errors():
                self._load_state_locked()
        return found

    def prune_history(self, tenant: str | None = None) -> int:
        """Drop replaced versions older than ``history_days`` (never a path's newest
        version); the tree is one aggregate, so ``tenant`` is not used. Returns how many
        were dropped."""
        conn = self._history_reader()
        if conn is None:
            return 0
        with history_errors():
            return self._history.prune(conn, self.clock(), self.limits)

    def set_history_limits(
        self,
        tenant: str,
        *,
        quota_bytes: int | None = None,
        versions: int | None = None,
        days: int | None = None,
    ) -> None:
        """Set the tree's history limits (None: the store's ``limits``); the tree is one
        aggregate, so they hold for every team in it."""
        from keepstone.store.fs import _os_errors

        with _os_errors(""), self._locked(), history_errors():
            self._history.set_limits(self._history_conn_locked(), quota_bytes, versions, days)

    def history_usage(self, tenant: str) -> tuple[int, int]:
        """(bytes of replaced versions kept, the history quota) of the tree."""
        with history_errors():
            conn = self._history.connection(create=False) if self.root.is_dir() else None
            return self._history.usage(conn, self.limits)

    # --- Reading the past --------------------------------------------------------------------

    def _history_reader(self) -> sqlite3.Connection | None:
        """The history file, ready to read (created under the lock when missing); None when
        the store has no tree at all."""
        from keepstone.store.fs import _os_errors

        if not self.root.is_dir():
            return None
        with history_errors():
            conn = self._history.connection(create=False)
            if conn is not None and self._history.ready(conn):
                return conn
        with _os_errors(""), self._locked(), history_errors():
            return self._history_conn_locked()

    def _versions(self, ref: SpaceRef, path: str) -> Versions:
        from keepstone.store.fs import _os_errors

        ref = self._checked(ref)
        conn = self._history_reader()
        if conn is None:
            return []
        comps = space_components(ref) + encode_doc_path(path)
        with _os_errors(path), history_errors():
            newest = self._history.newest(conn, ref.id, path)
            if self._is_hand_edited(newest, ref, path, self._read_file(comps, path), None):
                # A hand edit: record it under the lock (a writer may be between its file
                # operation and its insert: look again once it is done).
                with self._locked():
                    self._load_state_locked()
                    live = self._read_file(comps, path)
                    self._record_history(conn, [self._observed(ref, path, live)])
            rows = conn.execute(
                "SELECT version, etag, size, at_us, actor, deleted FROM versions "
                "WHERE space_id = ? AND path = ? ORDER BY version DESC",
                (ref.id, path),
            ).fetchall()
        return [
            VersionInfo(int(v), str(etag), int(size), _instant(at), str(actor), bool(deleted))
            for v, etag, size, at, actor, deleted in rows
        ]

    def _read_version(self, ref: SpaceRef, path: str, version: int) -> Document | None:
        ref = self._checked(ref)
        conn = self._history_reader()
        if conn is None:
            return None
        with history_errors():
            row = conn.execute(
                "SELECT content, size, at_us, etag, deleted FROM versions "
                "WHERE space_id = ? AND path = ? AND version = ?",
                (ref.id, path, version),
            ).fetchone()
        if row is None or row[4] or row[0] is None:
            return None
        try:
            text = unpack_version(row[0]).decode("utf-8")
        except UnicodeDecodeError:  # a hand edit recorded as it was found
            raise InvalidDocument(
                f"version {version} of {path!r} is not valid UTF-8 (a file edited by hand); "
                "read another version",
                path=path,
            ) from None
        return Document(path, text, int(row[1]), _instant(int(row[2])), str(row[3]))

    def _list_as_of(self, ref: SpaceRef, at: datetime, prefix: str) -> Infos:
        ref = self._checked(ref)
        conn = self._history_reader()
        if conn is None:
            return []
        query = (
            "SELECT path, MAX(version), size, at_us, etag, deleted FROM versions "
            "WHERE space_id = ? AND at_us <= ?"
        )
        params: tuple[object, ...] = (ref.id, _us(at))
        if prefix:
            query += " AND path >= ? AND path < ?"
            params += (prefix + "/", prefix + "0")
        with history_errors():
            rows = conn.execute(query + " GROUP BY path ORDER BY path", params).fetchall()
        return [
            DocumentInfo(str(path), int(size), _instant(int(at_us)), str(etag))
            for path, _, size, at_us, etag, deleted in rows
            if not deleted
        ]


def _hand_edit(
    newest: Newest | None,
    space_id: str,
    path: str,
    live: Live,
    now_us: int,
    etag: str | None = None,
) -> Record | None:
    """The version a hand edit of ``path`` made, when its file (``live``) is not its newest
    version (a removed file: a deletion marker at ``now_us``); None when they agree."""
    if live is None:
        if newest is None or newest[2]:
            return None
        return Record(space_id, path, None, "", max(now_us, newest[3]), HAND_EDIT)
    data, st = live
    if etag is None:
        etag = content_etag(data)
    if newest is not None and not newest[2] and newest[1] == etag:
        return None
    at = st.st_mtime_ns // 1000
    if newest is not None:
        at = max(at, newest[3])  # an edit keeping an old mtime (cp -p) still comes after
    return Record(space_id, path, data, etag, at, HAND_EDIT)


def _vanished(space_id: str, newest: dict[str, Newest], now_us: int) -> list[Record]:
    """Deletion markers for the paths of ``newest`` whose last version has content (their
    files are gone)."""
    return [
        Record(space_id, path, None, "", max(now_us, n[3]), HAND_EDIT)
        for path, n in sorted(newest.items())
        if not n[2]
    ]
