"""The SQL store's document history (issue 14, docs/history.md): the part of
:class:`cairn.store.sql.SqlStore` that appends a version in the transaction of every write,
delete and move, keeps the team's history counter and limits, and reads the past.

:class:`DocumentHistory` is a mixin of :class:`~cairn.store.sql.SqlStore`: it uses the
store's engine, row addressing (``_address``), limits and clock.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Connection, Dialect, Engine

from cairn.db import read_transaction, utc, write_transaction
from cairn.documents import Document, DocumentInfo, VersionInfo, current_actor
from cairn.errors import InvalidRequest
from cairn.quota import Limits
from cairn.spaces import SpaceRef
from cairn.store.sql_schema import memory_document_versions, memory_tenant_usage

V = memory_document_versions
T = memory_tenant_usage

#: zlib level of stored versions: text compresses 2-5x at level 1.
_ZLIB_LEVEL = 1
#: A version smaller than this is stored as it is, after a zero byte (no zlib stream starts
#: with one): zlib costs about 20 µs per KB, as much as the rest of a small write's
#: history, to save at most a couple of KB.
_COMPRESS_FROM = 4096
_RAW = b"\x00"
#: Versions pruned per statement when a team's history is over its quota.
_PRUNE_BATCH = 200

#: Columns of a version row, in the order the raw INSERT binds them.
_VERSION_COLUMNS = (
    "tenant_id, space_key, path, version, space_id, etag, size_bytes, stored_bytes, content, "
    "at, actor, deleted"
)
_VERSION_VALUES = (
    ":t, :k, :p, {version}, :sid, :etag, :size, :stored, :content, :at, :actor, :deleted"
)
_ONE_PATH = "tenant_id = :t AND space_key = :k AND space_id = :sid AND path = :p"
_COUNTER_COLUMNS = "history_used_bytes, history_quota_bytes, quota_bytes, history_versions"

# Aliases: SqlStore defines a method called ``list``.
Versions = list[VersionInfo]
Infos = list[DocumentInfo]


def _bp(name: str, type_: Any = None) -> sa.BindParameter[Any]:
    return sa.bindparam(name, type_=type_)


class _Counter(NamedTuple):
    """The team's history counter and limits, as the write's bump of it returns them."""

    history_used_bytes: int
    history_quota_bytes: int | None
    quota_bytes: int
    history_versions: int | None


class _HistoryStatements:
    """The history's statements, built once per store.

    The statements of every write (``record_*``) are SQL text run on the driver's own
    cursor: they run in every write transaction, and SQLAlchemy's per-statement work
    (cache key, parameter and result processing) cost more than SQLite's execution of
    them. On PostgreSQL the three steps (read the path's newest version, insert the new
    one, bump the team's history counter) are ONE statement of data-modifying CTEs, so
    history adds one round trip to a write; SQLite runs in-process, so three plain
    statements cost little more than one.
    """

    def __init__(self, dialect: Dialect) -> None:
        self.postgres = dialect.name == "postgresql"
        #: ``at`` as the dialect stores a timestamp (SQLite: SQLAlchemy's text form, which
        #: every other statement compares with); None: the driver's own.
        self.bind_at: Callable[[Any], Any] | None = V.c.at.type.dialect_impl(
            dialect
        ).bind_processor(dialect)
        latest = (
            f"SELECT version, stored_bytes, deleted FROM memory_document_versions "
            f"WHERE {_ONE_PATH} ORDER BY version DESC LIMIT 1"
        )
        counter = (
            "UPDATE memory_tenant_usage SET history_used_bytes = history_used_bytes + {grown} "
            f"WHERE tenant_id = :tt RETURNING {_COUNTER_COLUMNS}"
        )
        self.record_latest = self.record_insert = self.record_bump = ""
        if self.postgres:
            # The CTEs all see the snapshot the statement started with: ``prev`` is the
            # newest version before this insert. RETURNING of the counter is NULL when the
            # team has no counter row yet (the LEFT JOIN).
            statement = (
                f"WITH prev AS ({latest}), "
                f"ins AS (INSERT INTO memory_document_versions ({_VERSION_COLUMNS}) VALUES ("
                + _VERSION_VALUES.format(version="coalesce((SELECT version FROM prev), 0) + 1")
                + ") RETURNING version), "
                "bump AS ("
                + counter.format(
                    grown="coalesce((SELECT stored_bytes FROM prev WHERE NOT deleted), 0)"
                )
                + ") SELECT ins.version, "
                + ", ".join(f"bump.{c.strip()}" for c in _COUNTER_COLUMNS.split(","))
                + " FROM ins LEFT JOIN bump ON true"
            )
            self.record_pg = _pyformat(statement)
        else:
            self.record_pg = ""
            self.record_latest = latest
            self.record_insert = (
                f"INSERT INTO memory_document_versions ({_VERSION_COLUMNS}) VALUES ("
                + _VERSION_VALUES.format(version=":v")
                + ")"
            )
            self.record_bump = counter.format(grown=":d")
        space = (V.c.tenant_id == _bp("t"), V.c.space_key == _bp("k"), V.c.space_id == _bp("sid"))
        one = (*space, V.c.path == _bp("p"))
        self.versions = (
            sa.select(V.c.version, V.c.etag, V.c.size_bytes, V.c.at, V.c.actor, V.c.deleted)
            .where(*one)
            .order_by(V.c.version.desc())
        )
        self.content = sa.select(V.c.content, V.c.size_bytes, V.c.at, V.c.etag, V.c.deleted).where(
            *one, V.c.version == _bp("v")
        )
        # What the space held at :at: each path's newest version at or before it, unless a
        # deletion. One pass with a window, no self-join: with the statistics of a young
        # table PostgreSQL planned a join of the versions with their grouped max (or an
        # anti-join) as a nested loop over the whole space, seconds for 2,000 documents.
        self.as_of_all = self._as_of(space)
        self.as_of_dir = self._as_of((*space, V.c.path >= _bp("lo"), V.c.path < _bp("hi")))
        # The versions of a document past its per-document count (never its newest).
        self.trim = sa.delete(V).where(*one, V.c.version <= _bp("upto")).returning(V.c.stored_bytes)
        self.bump = (
            sa.update(T)
            .where(T.c.tenant_id == _bp("t"))
            .values(
                history_used_bytes=sa.case(
                    (T.c.history_used_bytes + _bp("d", sa.BigInteger) < 0, 0),
                    else_=T.c.history_used_bytes + _bp("d", sa.BigInteger),
                )
            )
            .returning(
                T.c.history_used_bytes,
                T.c.history_quota_bytes,
                T.c.quota_bytes,
                T.c.history_versions,
            )
        )
        self.limits = sa.select(
            T.c.history_quota_bytes, T.c.quota_bytes, T.c.history_versions, T.c.history_days
        ).where(T.c.tenant_id == _bp("t"))
        self.usage = sa.select(
            T.c.history_used_bytes, T.c.history_quota_bytes, T.c.quota_bytes
        ).where(T.c.tenant_id == _bp("t"))

    @staticmethod
    def _as_of(where: tuple[Any, ...]) -> sa.Select[Any]:
        newest_first = sa.func.row_number().over(partition_by=V.c.path, order_by=V.c.version.desc())
        ranked = (
            sa.select(
                V.c.path, V.c.size_bytes, V.c.at, V.c.etag, V.c.deleted, newest_first.label("n")
            )
            .where(*where, V.c.at <= _bp("at"))
            .subquery()
        )
        return (
            sa.select(ranked.c.path, ranked.c.size_bytes, ranked.c.at, ranked.c.etag)
            .where(ranked.c.n == 1, ranked.c.deleted.is_(False))
            .order_by(ranked.c.path)
        )


def _driver(
    conn: Connection, sql: str, params: dict[str, Any], *, fetch: bool = True
) -> tuple[Any, ...] | None:
    """Run ``sql`` on the driver's cursor of ``conn``, in its transaction: its first row
    (``fetch``). A driver error is raised as SQLAlchemy's (cairn.db translates those)."""
    dbapi: Any = conn.dialect.dbapi
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, params)
        return cursor.fetchone() if fetch else None
    except dbapi.Error as exc:
        raise sa.exc.DBAPIError.instance(
            sql, params, exc, dbapi.Error, hide_parameters=True, dialect=conn.dialect
        ) from exc
    finally:
        cursor.close()


def _pack(data: bytes) -> bytes:
    """A version's content as stored: zlib, or as it is behind a zero byte when small."""
    return _RAW + data if len(data) < _COMPRESS_FROM else zlib.compress(data, _ZLIB_LEVEL)


def _unpack(stored: bytes) -> bytes:
    return stored[1:] if stored[:1] == _RAW else zlib.decompress(stored)


def _pyformat(sql: str) -> str:
    """``:name`` parameters as psycopg's ``%(name)s``."""
    return re.sub(r":(\w+)", r"%(\1)s", sql)


class DocumentHistory:
    """Mixin: the history of the documents of :class:`~cairn.store.sql.SqlStore`."""

    engine: Engine
    limits: Limits
    #: What "now" is for a new version (a test gives the store a clock of its own).
    clock: Callable[[], datetime]
    _address: Callable[[SpaceRef], dict[str, str]]
    _aggregate: Callable[[SpaceRef], tuple[str, int]]
    _hist: _HistoryStatements

    # --- Writing: called inside the mutation's own transaction -------------------------------

    def _record_version(
        self,
        conn: Connection,
        ref: SpaceRef,
        addr: dict[str, str],
        path: str,
        at: datetime,
        data: bytes | None = None,
        etag: str = "",
    ) -> None:
        """Append the version ``data`` (None: a deletion marker) of ``path``, which the
        caller holds the row lock of, then keep the team's history within its limits."""
        key = {**addr, "p": path}
        packed = None if data is None else _pack(data)
        tenant, _ = self._aggregate(ref)
        row = {
            **key,
            "tt": tenant,
            "etag": etag,
            "size": 0 if data is None else len(data),
            "stored": 0 if packed is None else len(packed),
            "content": packed,
            "at": utc(at) if self._hist.bind_at is None else self._hist.bind_at(utc(at)),
            "actor": current_actor()[:256],
            "deleted": data is None,
        }
        version, limits = self._append_version(conn, row)
        if limits is None:  # no counter row yet (a delete before any charge): nothing to keep
            return
        keep = int(limits.history_versions or self.limits.history_versions)
        freed = 0
        if version > keep:
            freed += sum(
                int(r.stored_bytes)
                for r in conn.execute(self._hist.trim, {**key, "upto": version - keep})
            )
        quota = self._history_quota(limits)
        used = int(limits.history_used_bytes) - freed
        if used > quota:
            freed += self._prune_oldest(conn, tenant, used - quota)
        if freed:
            conn.execute(self._hist.bump, {"t": tenant, "d": -freed})

    def _append_version(self, conn: Connection, row: dict[str, Any]) -> tuple[int, _Counter | None]:
        """Insert the version ``row`` numbered after the path's newest and add the version
        it replaced to the team's history counter: (its number, the counter after)."""
        h = self._hist
        if h.postgres:
            got = _driver(conn, h.record_pg, row)
            assert got is not None  # the INSERT always returns its row
            counter = None if got[1] is None else _Counter(*got[1:])
            return int(got[0]), counter
        previous = _driver(conn, h.record_latest, row)
        version = 1 if previous is None else int(previous[0]) + 1
        _driver(conn, h.record_insert, {**row, "v": version}, fetch=False)
        grown = 0 if previous is None or previous[2] else int(previous[1])
        got = _driver(conn, h.record_bump, {"tt": row["tt"], "d": grown})
        return version, None if got is None else _Counter(*got)

    def _history_quota(self, row: Any) -> int:
        if row.history_quota_bytes is not None:
            return int(row.history_quota_bytes)
        if self.limits.history_quota is not None:
            return self.limits.history_quota
        return int(row.quota_bytes)

    def _prune_oldest(self, conn: Connection, tenant: str, over: int) -> int:
        """Drop the team's oldest replaced versions until ``over`` bytes are freed (never a
        path's newest version: the live document, or the marker of its deletion)."""
        newer = V.alias("newer")
        has_newer = (
            sa.select(newer.c.version)
            .where(
                newer.c.tenant_id == V.c.tenant_id,
                newer.c.space_key == V.c.space_key,
                newer.c.path == V.c.path,
                newer.c.version > V.c.version,
            )
            .exists()
        )
        freed = 0
        while freed < over:
            rows = conn.execute(
                sa.select(V.c.space_key, V.c.path, V.c.version, V.c.stored_bytes)
                .where(V.c.tenant_id == tenant, has_newer)
                .order_by(V.c.at, V.c.version)
                .limit(_PRUNE_BATCH)
            ).all()
            if not rows:
                break
            for row in rows:
                conn.execute(
                    sa.delete(V).where(
                        V.c.tenant_id == tenant,
                        V.c.space_key == row.space_key,
                        V.c.path == row.path,
                        V.c.version == row.version,
                    )
                )
                freed += int(row.stored_bytes)
                if freed >= over:
                    break
        return freed

    # --- Retention: the purge job ------------------------------------------------------------

    def prune_history(self, tenant: str | None = None) -> int:
        """Drop replaced versions older than their team's ``history_days`` (never a path's
        newest version); ``tenant`` None: every team. Returns how many were dropped."""
        with read_transaction(self.engine) as conn:
            query = sa.select(T.c.tenant_id, T.c.history_days)
            if tenant is not None:
                query = query.where(T.c.tenant_id == tenant)
            teams = conn.execute(query).all()
        dropped = 0
        now = utc(self.clock())
        for team in teams:
            days = int(team.history_days or self.limits.history_days)
            cutoff = now - timedelta(days=days)
            newer = V.alias("newer")
            replaced_before = sa.and_(
                V.c.tenant_id == team.tenant_id,
                V.c.at < cutoff,
                sa.select(newer.c.version)
                .where(
                    newer.c.tenant_id == V.c.tenant_id,
                    newer.c.space_key == V.c.space_key,
                    newer.c.path == V.c.path,
                    newer.c.version > V.c.version,
                    # Kept while it was the version current at the cutoff.
                    newer.c.at <= cutoff,
                )
                .exists(),
            )
            with write_transaction(self.engine) as conn:
                freed = conn.execute(
                    sa.select(sa.func.coalesce(sa.func.sum(V.c.stored_bytes), 0)).where(
                        replaced_before
                    )
                ).scalar_one()
                result = conn.execute(sa.delete(V).where(replaced_before))
                dropped += int(result.rowcount or 0)
                if freed:
                    conn.execute(self._hist.bump, {"t": team.tenant_id, "d": -int(freed)})
        return dropped

    def set_history_limits(
        self,
        tenant: str,
        *,
        quota_bytes: int | None = None,
        versions: int | None = None,
        days: int | None = None,
    ) -> None:
        """Set a team's history limits (None: the store's default), creating the team's
        counter (empty, at the default quota) if the team never wrote: limits set before a
        team's first write still hold for it."""
        for name, value in (("quota_bytes", quota_bytes), ("versions", versions), ("days", days)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidRequest(f"history {name} must be a whole number or None")
            if value is not None and value < 1:
                raise InvalidRequest(f"history {name} must be at least 1, not {value}")
        dialect = pg_dialect if self.engine.dialect.name == "postgresql" else sqlite_dialect
        limits = {
            "history_quota_bytes": quota_bytes,
            "history_versions": versions,
            "history_days": days,
        }
        with write_transaction(self.engine) as conn:
            conn.execute(
                dialect.insert(T)
                .values(tenant_id=tenant, used_bytes=0, quota_bytes=self.limits.team_quota)
                .on_conflict_do_nothing(index_elements=[T.c.tenant_id])
            )
            conn.execute(sa.update(T).where(T.c.tenant_id == tenant).values(**limits))

    def history_limits(self, tenant: str) -> tuple[int | None, int | None, int | None]:
        """A team's own history limits (days, versions, quota bytes), None where it has
        the store's default."""
        with read_transaction(self.engine) as conn:
            row = conn.execute(self._hist.limits, {"t": tenant}).first()
        if row is None:
            return None, None, None
        return row.history_days, row.history_versions, row.history_quota_bytes

    def history_usage(self, tenant: str) -> tuple[int, int]:
        """(bytes of replaced versions kept, the history quota) of a team."""
        with read_transaction(self.engine) as conn:
            return self._history_usage_in(conn, tenant, self.limits.team_quota)

    def _history_usage_in(
        self, conn: Connection, counter: str, default_quota: int
    ) -> tuple[int, int]:
        """(history bytes, history quota) of ``counter`` (a team, or the instance counter
        of global spaces), read in ``conn``; a counter not yet made has the defaults."""
        row = conn.execute(self._hist.usage, {"t": counter}).first()
        if row is None:
            quota = self.limits.history_quota
            return 0, default_quota if quota is None else quota
        return int(row.history_used_bytes), self._history_quota(row)

    # --- Reading the past --------------------------------------------------------------------

    def _versions(self, ref: SpaceRef, path: str) -> Versions:
        with read_transaction(self.engine) as conn:
            rows = conn.execute(self._hist.versions, {**self._address(ref), "p": path}).all()
        return [
            VersionInfo(int(r.version), r.etag, int(r.size_bytes), utc(r.at), r.actor, r.deleted)
            for r in rows
        ]

    def _read_version(self, ref: SpaceRef, path: str, version: int) -> Document | None:
        key = {**self._address(ref), "p": path, "v": version}
        with read_transaction(self.engine) as conn:
            row = conn.execute(self._hist.content, key).first()
        if row is None or row.deleted or row.content is None:
            return None
        text = _unpack(row.content).decode("utf-8")
        return Document(path, text, int(row.size_bytes), utc(row.at), row.etag)

    def _list_as_of(self, ref: SpaceRef, at: datetime, prefix: str) -> Infos:
        # In UTC: SQLite keeps a timestamp as text without its offset, so only instants of
        # one zone compare (every stored one is UTC).
        params: dict[str, Any] = {**self._address(ref), "at": utc(at)}
        query = self._hist.as_of_all
        if prefix:
            params.update(lo=prefix + "/", hi=prefix + "0")
            query = self._hist.as_of_dir
        with read_transaction(self.engine) as conn:
            rows = conn.execute(query, params).all()
        return [DocumentInfo(r.path, int(r.size_bytes), utc(r.at), r.etag) for r in rows]
