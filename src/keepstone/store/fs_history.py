"""The filesystem store's history file: every version of every document, in one SQLite
file beside the tree (docs/history.md).

Where: ``<root>/.keepstone-history.sqlite`` (:data:`HISTORY_FILE`, with SQLite's
``-wal``/``-shm``), so a person browsing the tree still sees only their ``.md`` files. One
table of versions (space id, path, version, etag, size, content packed by
:mod:`keepstone.store.version_pack`, stored bytes, instant, actor, deleted) and a ``meta``
table holding the tree's history counter (bytes of versions that are no longer the newest
of their path: the filesystem store has one tree-wide aggregate, so its history counter is
tree-wide too), the limits set by :meth:`HistoryDb.set_limits`, and whether the documents
that predate the file were recorded. Connections are the search index's plumbing
(:class:`~keepstone.store.sidecar.SqliteSidecar`: one per thread, reopened after a fork or
when the file is replaced; WAL). A file SQLite cannot read is moved aside
(``.keepstone-history.sqlite.corrupt-<time>``) and a new one started, so a broken history
never blocks a live write.

What a mutation records, when, and how hand edits of the tree are found is
:mod:`keepstone.store.fs_versions`'s; this module keeps the rows. An append is one
transaction: each :class:`Record` becomes its path's next version, an :class:`Observed`
file only when it is a hand edit (:func:`hand_edit`). Retention and quota as SQL: a path
keeps at most ``history_versions`` versions, the tree at most its history quota of replaced
versions' compressed bytes (the oldest go first, never a path's newest), kept at append
time; :meth:`HistoryDb.prune` drops replaced versions older than ``history_days``.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from keepstone.activity import UNKNOWN, ChangePage, FeedQuery, StoredChange, feed_page
from keepstone.documents import Document, DocumentInfo, VersionInfo, content_etag
from keepstone.errors import InvalidDocument
from keepstone.quota import HistoryLimits, Limits, clamp
from keepstone.store.fs_files import sidecar_errors
from keepstone.store.sidecar import SqliteSidecar, write_transaction
from keepstone.store.version_pack import pack_version, unpack_version

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
    content BLOB, action TEXT NOT NULL DEFAULT '', actor_kind TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS versions_by_path
    ON versions (space_id, path, version, at_us, deleted, size, etag, stored_bytes);
CREATE INDEX IF NOT EXISTS versions_by_time ON versions (space_id, at_us)
"""


def _add_change_columns(conn: sqlite3.Connection) -> None:
    """A file written before changes recorded their action and actor kind gains both ('' on
    its rows: a write or a deletion, by an unknown actor)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(versions)")}
    if have:
        for name in ("action", "actor_kind"):
            if name not in have:
                conn.execute(f"ALTER TABLE versions ADD COLUMN {name} TEXT NOT NULL DEFAULT ''")


#: The newest version of one path: (version, etag, deleted, at_us, stored_bytes).
Newest = tuple[int, str, bool, int, int]
#: Paths' newest versions as read under the store's lock, by (space id, path): what an
#: append that follows under the same lock starts from instead of reading them again.
Known = dict[tuple[str, str], Newest | None]


def to_us(at: datetime) -> int:
    """``at`` as the history stores an instant: microseconds since the epoch."""
    return (at - _EPOCH) // _US


def from_us(us: int) -> datetime:
    """An instant the history stored (:func:`to_us`) as an aware datetime."""
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
    #: What the change did and who made it (docs/history.md, "Activity"); '' for a hand
    #: edit found on disk: a write or a deletion by an unknown actor.
    action: str = ""
    kind: str = ""


#: (content, stat) of a live file, as ``FileTree.read_file`` answers; None: absent.
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
        super().__init__(root / HISTORY_FILE, "history")

    def _unreadable(self) -> str:
        """Keep an unreadable file for a person to look at, out of the way of a new one."""
        aside = f"{self.path}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.rename(f"{self.path}{suffix}", f"{aside}{suffix}")
        return f"moved it to {aside}"

    def _connect(self) -> sqlite3.Connection:
        return self._connect_with(_SCHEMA, _add_change_columns)

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

    @staticmethod
    def versions(conn: sqlite3.Connection, space_id: str, path: str) -> list[VersionInfo]:
        """Every version of ``path``, newest first."""
        rows = conn.execute(
            "SELECT version, etag, size, at_us, actor, deleted FROM versions "
            "WHERE space_id = ? AND path = ? ORDER BY version DESC",
            (space_id, path),
        ).fetchall()
        return [
            VersionInfo(int(v), str(etag), int(size), from_us(at), str(actor), bool(deleted))
            for v, etag, size, at, actor, deleted in rows
        ]

    @staticmethod
    def activity(
        conn: sqlite3.Connection, space_ids: Sequence[str], query: FeedQuery
    ) -> ChangePage:
        """The changes of ``space_ids``, newest first (:meth:`MemoryStore.activity`), along
        ``versions_by_time``; the cursor is the last one's (time, space, path, version)."""
        since, kind, limit, position = query.since, query.kind, query.limit, query.position()
        where = [f"space_id IN ({', '.join('?' * len(space_ids))})"]
        args: list[object] = list(space_ids)
        if since is not None:
            where.append("at_us >= ?")
            args.append(to_us(since))
        if kind is not None:
            where.append("actor_kind IN (?, ?)" if kind == UNKNOWN else "actor_kind = ?")
            args += ["", kind] if kind == UNKNOWN else [kind]
        if position is not None:
            at, space, path, version = position
            where.append("at_us <= ? AND (at_us, space_id, path, version) < (?, ?, ?, ?)")
            args += [to_us(at), to_us(at), space, path, version]
        rows = conn.execute(
            "SELECT at_us, space_id, path, version, action, actor_kind, actor, deleted, size "
            f"FROM versions WHERE {' AND '.join(where)} "
            "ORDER BY at_us DESC, space_id DESC, path DESC, version DESC LIMIT ?",
            (*args, limit + 1),
        ).fetchall()
        page = rows[:limit]
        last = page[-1] if len(rows) > limit else None
        after = None if last is None else (from_us(last[0]), last[1], last[2], last[3])
        return feed_page((_stored(conn, *row) for row in page), after)

    @staticmethod
    def read(conn: sqlite3.Connection, space_id: str, path: str, version: int) -> Document | None:
        """The content of ``version`` of ``path``; None when there is no such version, it
        was pruned, or it is a deletion."""
        row = conn.execute(
            "SELECT content, size, at_us, etag, deleted FROM versions "
            "WHERE space_id = ? AND path = ? AND version = ?",
            (space_id, path, version),
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
        return Document(path, text, int(row[1]), from_us(int(row[2])), str(row[3]))

    @staticmethod
    def as_of(
        conn: sqlite3.Connection, space_id: str, at: datetime, prefix: str
    ) -> list[DocumentInfo]:
        """The documents of the space at ``at`` under the directory ``prefix``, by path: one
        indexed query of this file alone."""
        query = (
            "SELECT path, MAX(version), size, at_us, etag, deleted FROM versions "
            "WHERE space_id = ? AND at_us <= ?"
        )
        params: tuple[object, ...] = (space_id, to_us(at))
        if prefix:
            query += " AND path >= ? AND path < ?"
            params += (prefix + "/", prefix + "0")
        rows = conn.execute(query + " GROUP BY path ORDER BY path", params).fetchall()
        return [
            DocumentInfo(str(path), int(size), from_us(int(at_us)), str(etag))
            for path, _, size, at_us, etag, deleted in rows
            if not deleted
        ]

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
                edit = hand_edit(
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
            cutoff = to_us(now - timedelta(days=days))
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

    def set_limits(self, conn: sqlite3.Connection, limits: HistoryLimits) -> None:
        pairs = (
            ("quota", limits.history_quota_bytes),
            ("versions", limits.history_versions),
            ("days", limits.history_days),
        )
        with write_transaction(conn):
            for key, value in pairs:
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
        "actor, deleted, content, action, actor_kind) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
            r.action,
            r.kind,
        ),
    )
    return 0 if packed is None else len(packed)


def _stored(
    conn: sqlite3.Connection,
    at_us: int,
    space_id: str,
    path: str,
    version: int,
    action: str,
    kind: str,
    actor: str,
    deleted: int,
    size: int,
) -> StoredChange:
    """One row of the feed; the size of the version before it read only when asked."""

    def before() -> int | None:
        prior = conn.execute(
            "SELECT size, deleted FROM versions WHERE space_id = ? AND path = ? AND version = ?",
            (space_id, path, version - 1),
        ).fetchone()
        return None if prior is None else (0 if prior[1] else int(prior[0]))

    at, gone = from_us(at_us), bool(deleted)
    return StoredChange(at, space_id, path, version, action, kind, actor, gone, size, before)


def history_errors() -> AbstractContextManager[None]:
    """Translate the history file's SQLite failures at the adapter boundary."""
    return sidecar_errors("history", HISTORY_FILE)


def hand_edit(
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
