"""The SQL store's document history (docs/history.md): the part of
:class:`keepstone.store.sql.SqlStore` that appends a version in the transaction of every write,
delete and move, keeps the team's history counter and limits, and reads the past.

:class:`DocumentHistory` is a mixin of :class:`~keepstone.store.sql.SqlStore`: it uses the
store's engine, row addressing (``_address``), limits and clock.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Connection, Engine

from keepstone.db import read_transaction, utc, write_transaction
from keepstone.documents import Document, DocumentInfo, VersionInfo
from keepstone.errors import InvalidRequest
from keepstone.quota import DEFAULT_HISTORY_LIMITS, HistoryLimits, Limits
from keepstone.spaces import SpaceRef
from keepstone.store.sql_schema import (
    memory_document_versions,
    memory_documents,
    memory_tenant_usage,
)
from keepstone.store.sql_statements import bp
from keepstone.store.sql_write import Team
from keepstone.store.version_pack import unpack_version

V = memory_document_versions
T = memory_tenant_usage
D = memory_documents

#: Versions pruned per statement when a team's history is over its quota.
_PRUNE_BATCH = 200

# Aliases: SqlStore defines a method called ``list``.
Versions = list[VersionInfo]
Infos = list[DocumentInfo]


class HistoryStatements:
    """The history's statements that are not part of a change (the change statement,
    :mod:`keepstone.store.sql_write`, appends the versions), built once per store."""

    def __init__(self) -> None:
        space = (V.c.tenant_id == bp("t"), V.c.space_key == bp("k"), V.c.space_id == bp("sid"))
        one = (*space, V.c.path == bp("p"))
        live_space = (
            D.c.tenant_id == bp("t"),
            D.c.space_key == bp("k"),
            D.c.space_id == bp("sid"),
        )
        live_one = (*live_space, D.c.path == bp("p"))
        # The replaced versions and markers (the table), and the live one (the document).
        self.versions = (
            sa.select(V.c.version, V.c.etag, V.c.size_bytes, V.c.at, V.c.actor, V.c.deleted)
            .where(*one)
            .order_by(V.c.version.desc())
        )
        self.live = sa.select(
            D.c.version, D.c.etag, D.c.size_bytes, D.c.updated_at, D.c.actor
        ).where(*live_one)
        self.content = sa.select(V.c.content, V.c.size_bytes, V.c.at, V.c.etag, V.c.deleted).where(
            *one, V.c.version == bp("v")
        )
        self.live_content = sa.select(D.c.content, D.c.size_bytes, D.c.updated_at, D.c.etag).where(
            *live_one, D.c.version == bp("v")
        )
        # What the space held at :at: each path's newest version at or before it, unless a
        # deletion — among the table's and the live documents'. One pass with a window, no
        # self-join: with the statistics of a young table PostgreSQL planned a join of the
        # versions with their grouped max (or an anti-join) as a nested loop over the whole
        # space, seconds for 2,000 documents.
        in_dir = (V.c.path >= bp("lo"), V.c.path < bp("hi"))
        live_in_dir = (D.c.path >= bp("lo"), D.c.path < bp("hi"))
        self.as_of_all = self._as_of(space, live_space)
        self.as_of_dir = self._as_of((*space, *in_dir), (*live_space, *live_in_dir))
        # The versions of a document past its per-document count (never its newest).
        self.trim = sa.delete(V).where(*one, V.c.version <= bp("upto")).returning(V.c.stored_bytes)
        self.bump = (
            sa.update(T)
            .where(T.c.tenant_id == bp("t"))
            .values(
                history_used_bytes=sa.case(
                    (T.c.history_used_bytes + bp("d", sa.BigInteger) < 0, 0),
                    else_=T.c.history_used_bytes + bp("d", sa.BigInteger),
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
        ).where(T.c.tenant_id == bp("t"))
        self.usage = sa.select(
            T.c.history_used_bytes, T.c.history_quota_bytes, T.c.quota_bytes
        ).where(T.c.tenant_id == bp("t"))

    @staticmethod
    def _as_of(where: tuple[Any, ...], live_where: tuple[Any, ...]) -> sa.Select[Any]:
        at = bp("at")
        kept = sa.select(
            V.c.path, V.c.version, V.c.size_bytes, V.c.at, V.c.etag, V.c.deleted
        ).where(*where, V.c.at <= at)
        live = sa.select(
            D.c.path,
            D.c.version,
            D.c.size_bytes,
            D.c.updated_at.label("at"),
            D.c.etag,
            sa.false().label("deleted"),
        ).where(*live_where, D.c.updated_at <= at)
        every = sa.union_all(kept, live).subquery()
        newest_first = sa.func.row_number().over(
            partition_by=every.c.path, order_by=every.c.version.desc()
        )
        ranked = sa.select(
            every.c.path,
            every.c.size_bytes,
            every.c.at,
            every.c.etag,
            every.c.deleted,
            newest_first.label("n"),
        ).subquery()
        return (
            sa.select(ranked.c.path, ranked.c.size_bytes, ranked.c.at, ranked.c.etag)
            .where(ranked.c.n == 1, ranked.c.deleted.is_(False))
            .order_by(ranked.c.path)
        )


def _replaced(by: datetime | None = None) -> sa.ColumnElement[bool]:
    """A row of the table that is not its path's newest version (``by``: replaced at or
    before that instant): a newer row follows it, or a newer document lives at its path."""
    newer = V.alias("newer")
    newer_row = [
        newer.c.tenant_id == V.c.tenant_id,
        newer.c.space_key == V.c.space_key,
        newer.c.path == V.c.path,
        newer.c.version > V.c.version,
    ]
    live = [
        D.c.tenant_id == V.c.tenant_id,
        D.c.space_key == V.c.space_key,
        D.c.path == V.c.path,
        # A large live version has its own row: that one is the newest, not replaced.
        D.c.version > V.c.version,
    ]
    if by is not None:
        newer_row.append(newer.c.at <= by)
        live.append(D.c.updated_at <= by)
    return sa.or_(
        sa.select(newer.c.version).where(*newer_row).exists(),
        sa.select(D.c.version).where(*live).exists(),
    )


class DocumentHistory:
    """Mixin: the history of the documents of :class:`~keepstone.store.sql.SqlStore`."""

    engine: Engine
    limits: Limits
    #: What "now" is for a new version (a test gives the store a clock of its own).
    clock: Callable[[], datetime]
    _address: Callable[[SpaceRef], dict[str, str]]
    _aggregate: Callable[[SpaceRef], tuple[str, int]]
    _hist: HistoryStatements

    # --- Writing: called inside the mutation's own transaction -------------------------------

    def _keep_history(
        self, conn: Connection, tenant: str, key: dict[str, str], version: int, team: Team
    ) -> None:
        """Keep the team's history within its limits after a change made ``version`` the
        newest of the path ``key`` (the change statement grew the history counter to
        ``team``'s): the path's versions past the per-document count, then the team's
        oldest replaced versions past its history quota, go in the same transaction."""
        freed = self._trimmed(conn, key, version, team)
        used = int(team.history_used_bytes) - freed
        quota = self._history_quota(team)
        if used > quota:
            freed += self._prune_oldest(conn, tenant, used - quota)
        if freed:
            conn.execute(self._hist.bump, {"t": tenant, "d": -freed})

    def _trim_versions(
        self, conn: Connection, tenant: str, key: dict[str, str], version: int, team: Team
    ) -> None:
        """The versions of the path ``key`` past the per-document count, now that
        ``version`` is its newest, dropped and uncounted."""
        freed = self._trimmed(conn, key, version, team)
        if freed:
            conn.execute(self._hist.bump, {"t": tenant, "d": -freed})

    def _trimmed(self, conn: Connection, key: dict[str, str], version: int, team: Team) -> int:
        # ``history_versions`` counts the newest (the live document, or a marker) too.
        keep = int(team.history_versions or self.limits.history_versions)
        if version <= keep:
            return 0
        rows = conn.execute(self._hist.trim, {**key, "upto": version - keep})
        return sum(int(r.stored_bytes) for r in rows)

    def _history_quota(self, row: Any) -> int:
        if row.history_quota_bytes is not None:
            return int(row.history_quota_bytes)
        if self.limits.history_quota is not None:
            return self.limits.history_quota
        return int(row.quota_bytes)

    def _prune_oldest(self, conn: Connection, tenant: str, over: int) -> int:
        """Drop the team's oldest replaced versions until ``over`` bytes are freed (never a
        path's newest version: the live document, or the marker of its deletion)."""
        freed = 0
        while freed < over:
            rows = conn.execute(
                sa.select(V.c.space_key, V.c.path, V.c.version, V.c.stored_bytes)
                .where(V.c.tenant_id == tenant, V.c.at.isnot(None), _replaced())
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
            # Kept while it was the version current at the cutoff.
            replaced_before = sa.and_(
                V.c.tenant_id == team.tenant_id,
                V.c.at.isnot(None),
                V.c.at < cutoff,
                _replaced(by=cutoff),
            )
            # A pass lost to a power loss is made again by the next one.
            with write_transaction(self.engine, durable=False) as conn:
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
        self, tenant: str, limits: HistoryLimits = DEFAULT_HISTORY_LIMITS
    ) -> None:
        """Set a team's history limits (None: the store's default), creating the team's
        counter (empty, at the default quota) if the team never wrote: limits set before a
        team's first write still hold for it."""
        for name, value in limits._asdict().items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidRequest(f"history {name} must be a whole number or None")
            if value is not None and value < 1:
                raise InvalidRequest(f"history {name} must be at least 1, not {value}")
        dialect = pg_dialect if self.engine.dialect.name == "postgresql" else sqlite_dialect
        with write_transaction(self.engine) as conn:
            conn.execute(
                dialect.insert(T)
                .values(tenant_id=tenant, used_bytes=0, quota_bytes=self.limits.team_quota)
                .on_conflict_do_nothing(index_elements=[T.c.tenant_id])
            )
            conn.execute(sa.update(T).where(T.c.tenant_id == tenant).values(**limits._asdict()))

    def history_limits(self, tenant: str) -> HistoryLimits:
        """A team's own history limits (days, versions, quota bytes), None where it has
        the store's default."""
        with read_transaction(self.engine) as conn:
            row = conn.execute(self._hist.limits, {"t": tenant}).first()
        if row is None:
            return DEFAULT_HISTORY_LIMITS
        return HistoryLimits(row.history_days, row.history_versions, row.history_quota_bytes)

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
        key = {**self._address(ref), "p": path}
        with read_transaction(self.engine) as conn:
            live = conn.execute(self._hist.live, key).first()
            rows = conn.execute(self._hist.versions, key).all()
        found = [
            VersionInfo(int(r.version), r.etag, int(r.size_bytes), utc(r.at), r.actor, r.deleted)
            for r in rows
        ]
        if live is None:
            return found
        at = utc(live.updated_at)
        current = VersionInfo(int(live.version), live.etag, int(live.size_bytes), at, live.actor)
        # A large live version's packed row is the table's newest: listed once.
        return [current, *(v for v in found if v.version != current.version)]

    def _read_version(self, ref: SpaceRef, path: str, version: int) -> Document | None:
        key = {**self._address(ref), "p": path, "v": version}
        with read_transaction(self.engine) as conn:
            live = conn.execute(self._hist.live_content, key).first()
            row = None if live is not None else conn.execute(self._hist.content, key).first()
        if live is not None:
            return Document(
                path, live.content, int(live.size_bytes), utc(live.updated_at), live.etag
            )
        if row is None or row.deleted or row.content is None:
            return None
        text = unpack_version(row.content).decode("utf-8")
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
