"""The SQL :class:`~keepstone.records.store.RecordStore`: SQLite and PostgreSQL alike.

Tables and indexes are :mod:`keepstone.records.schema`'s. The store finds and stores; it
never ranks. A record's ``terms`` are :func:`keepstone.search.text.analyze` of its text,
and its ``dup_key`` :func:`keepstone.search.floor.duplicate_key` of it, written with it,
so it is keyword-searchable as soon as its save commits; ranking reads
a team's rows (:meth:`RecordReader.ranking_rows`) and vectors into the process
(:mod:`keepstone.service.record_search`), the same way on both dialects. Every insert,
delete and purge bumps the team's ``terms_version`` in its own transaction (a delete or
purge listing the records it removed under it, ``record_removals``).

Vectors are written by the background indexer, never by a save: that side of the store,
and the per-team counters, are :mod:`keepstone.records.sql_index`'s.

Repositories and teams belong to the identity component. This module reads them with
plain SQL over the ``repos`` table (its ``team_id``, ``id`` and ``project_id`` columns)
and the ``teams`` and ``orgs`` tables (``id``, ``org_id``, ``plan``) instead of
importing identity's schema, so the records component depends on nothing of
identity's but tables in the same database.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection, Engine

from keepstone.db import read_statements, refresh_statistics, write_transaction
from keepstone.db.pgvector import Nearest, Pgvector, VectorRows
from keepstone.db.vectors import Float32Array
from keepstone.records.schema import (
    CURSOR_KEY_NAME,
    record_removals,
    record_search_versions,
    record_settings,
    records,
    records_meta,
)
from keepstone.records.sql_index import (
    PENDING_IN_TEAM,
    RecordIndex,
    bump_teams,
    forget_removals,
    list_removals,
    pending_params,
    search_counters,
)
from keepstone.records.store import (
    PagePosition,
    RankingRow,
    Record,
    RecordReader,
    RecordStore,
    RecordWriter,
    RemovedRecord,
    Scope,
    SearchState,
    SearchVersions,
    StoredVector,
    utc,
)
from keepstone.search.floor import duplicate_key
from keepstone.search.text import analyze

_TS = sa.DateTime(timezone=True)
R = records
V = record_search_versions
G = record_removals

# A repository's project, read straight from identity's table (see the module doc).
_REPO_PROJECT = sa.text("SELECT project_id FROM repos WHERE team_id = :team AND id = :repo")
# A team's org and plan, read straight from identity's tables too.
_TEAM_PLAN = sa.text(
    "SELECT teams.org_id, orgs.plan FROM teams JOIN orgs ON orgs.id = teams.org_id "
    "WHERE teams.id = :team"
)
_VISIBLE_REPOS = sa.text(
    "SELECT id FROM repos WHERE team_id = :team AND project_id IN :projects"
).bindparams(sa.bindparam("projects", expanding=True))

_DELETE_BY_KEY = R.delete().where(
    R.c.team_id == sa.bindparam("k_team"), R.c.id == sa.bindparam("k_id")
)
#: A delete's: the record, if it has not expired (one that has is gone to every reader,
#: and the purge removes it), so a delete answers for what a reader could see; with the
#: version that stored it, which its listing in record_removals carries.
_DELETE_LIVE = _DELETE_BY_KEY.where(R.c.expires_at > sa.bindparam("now")).returning(
    R.c.terms_version
)
#: What a purge removes: expired records of any team, with the version that stored each.
_EXPIRED = (
    sa.select(R.c.team_id, R.c.id, R.c.terms_version)
    .where(R.c.expires_at <= sa.bindparam("now", type_=_TS))
    .limit(sa.bindparam("limit"))
)
S = record_settings
_ENABLED = sa.select(S.c.enabled).where(S.c.team_id == sa.bindparam("team"))
# A search's first read: the team's setting and its search counters in one statement
# (one round trip on PostgreSQL instead of two), each side absent for a team never set.
_TEAM = sa.select(sa.cast(sa.bindparam("team", type_=sa.String), sa.String(64)).label("id"))
_team = _TEAM.subquery("k")
_STATE = sa.select(
    S.c.enabled, V.c.terms_version, V.c.vectors_version, V.c.vectors_reset, V.c.terms_reset
).select_from(_team.outerjoin(S, S.c.team_id == _team.c.id).outerjoin(V, V.c.team_id == _team.c.id))
_RANKING_COLUMNS = (
    R.c.id,
    R.c.repo_id,
    R.c.terms,
    R.c.created_at,
    R.c.expires_at,
    R.c.dup_key,
    R.c.terms_version,
)
#: A record stored before v5 has no terms_version: it counts as stored at version 0.
_TERMS_VERSION = sa.func.coalesce(R.c.terms_version, 0)
_UPTO = sa.bindparam("upto", type_=sa.BigInteger)
_RANKING_ROWS = (
    sa.select(*_RANKING_COLUMNS)
    .where(R.c.team_id == sa.bindparam("team"), _TERMS_VERSION <= _UPTO)
    .order_by(_TERMS_VERSION, R.c.created_at, R.c.id)
)
#: The records stored after version ``after``, read by the team's index on terms_version.
_RANKING_ROWS_SINCE = (
    sa.select(*_RANKING_COLUMNS)
    .where(
        R.c.team_id == sa.bindparam("team"),
        R.c.terms_version > sa.bindparam("after", type_=sa.BigInteger),
        R.c.terms_version <= _UPTO,
    )
    .order_by(R.c.terms_version, R.c.created_at, R.c.id)
)
#: The records removed after version ``after``, by the primary key's range of the team.
_REMOVED_SINCE = sa.select(G.c.id, G.c.terms_version, G.c.stored_version).where(
    G.c.team_id == sa.bindparam("team"),
    G.c.terms_version > sa.bindparam("after", type_=sa.BigInteger),
    G.c.terms_version <= _UPTO,
)
_VECTORS = (
    sa.select(R.c.id, R.c.embedding, R.c.vector_version)
    .where(
        R.c.team_id == sa.bindparam("team"),
        R.c.model == sa.bindparam("model"),
        R.c.vector_version > sa.bindparam("after", type_=sa.BigInteger),
        R.c.vector_version <= sa.bindparam("upto", type_=sa.BigInteger),
    )
    .order_by(R.c.vector_version, R.c.id)
)
_RECORD_COLUMNS = (R.c.id, R.c.repo_id, R.c.text, R.c.created_at, R.c.expires_at)
#: A team's records by id, the ids one parameter (a fixed statement, prepared once by the
#: driver; an expanding IN list was rewritten for every number of ids): a PostgreSQL
#: array, a JSON array on SQLite.
_BY_ID = {
    "postgresql": sa.select(*_RECORD_COLUMNS).where(
        R.c.team_id == sa.bindparam("team"),
        R.c.id == sa.any_(sa.bindparam("ids", type_=postgresql.ARRAY(sa.String))),
    ),
    "sqlite": sa.select(*_RECORD_COLUMNS).where(
        R.c.team_id == sa.bindparam("team"),
        R.c.id.in_(
            sa.select(sa.column("value")).select_from(sa.func.json_each(sa.bindparam("ids")))
        ),
    ),
}


def _visibility_clause(project_ids: frozenset[str] | None, params: dict[str, object]) -> str:
    """SQL condition on ``r.repo_id`` for a caller limited to ``project_ids``.

    Unlimited (None): no condition. Limited: only records whose repository belongs to
    one of the projects (read from ``repos``, see the module doc); a record with no
    repository never qualifies.
    """
    if project_ids is None:
        return ""
    if not project_ids:
        return " AND 1 = 0"
    names = []
    for i, pid in enumerate(sorted(project_ids)):
        params[f"vp{i}"] = pid
        names.append(f":vp{i}")
    return (
        " AND r.repo_id IN (SELECT rp.id FROM repos rp WHERE rp.team_id = :team"
        f" AND rp.project_id IN ({', '.join(names)}))"
    )


def _where(scope: Scope, params: dict[str, object]) -> str:
    """The conditions every read shares: team, not expired, repository, visibility."""
    params.update(team=scope.team_id, now=utc(scope.now))
    where = "r.team_id = :team AND r.expires_at > :now"
    if scope.repo_id is not None:
        where += " AND r.repo_id = :repo"
        params["repo"] = scope.repo_id
    return where + _visibility_clause(scope.project_ids, params)


class _SqlReader(RecordReader):
    def __init__(
        self, conn: Connection, store: SqlRecordStore, *, in_transaction: bool = True
    ) -> None:
        self._conn = conn
        self._store = store
        self._in_transaction = in_transaction

    def enabled(self, team_id: str) -> bool:
        return bool(self._conn.execute(_ENABLED, {"team": team_id}).scalar())

    def repo_project(self, team_id: str, repo_id: str) -> str | None:
        value = self._conn.execute(_REPO_PROJECT, {"team": team_id, "repo": repo_id}).scalar()
        return None if value is None else str(value)

    def search_state(self, team_id: str) -> SearchState:
        row = self._conn.execute(_STATE, {"team": team_id}).one()
        versions = SearchVersions(*(0 if v is None else int(v) for v in row[1:]))
        return SearchState(bool(row[0]), versions)

    def team_plan(self, team_id: str) -> tuple[str, str] | None:
        row = self._conn.execute(_TEAM_PLAN, {"team": team_id}).first()
        return None if row is None else (str(row.org_id), str(row.plan))

    def search_versions(self, team_id: str) -> SearchVersions:
        return self.search_state(team_id).versions

    def ranking_rows(self, team_id: str, upto: int, after: int = 0) -> list[RankingRow]:
        params = {"team": team_id, "upto": upto, "after": after}
        return [
            RankingRow(
                str(r.id),
                None if r.repo_id is None else str(r.repo_id),
                str(r.terms),
                utc(r.created_at),
                utc(r.expires_at),
                r.dup_key,
                int(r.terms_version or 0),
            )
            for r in self._conn.execute(_RANKING_ROWS_SINCE if after else _RANKING_ROWS, params)
        ]

    def removed_records(self, team_id: str, upto: int, after: int) -> list[RemovedRecord]:
        params = {"team": team_id, "upto": upto, "after": after}
        return [
            RemovedRecord(str(r.id), int(r.terms_version), int(r.stored_version))
            for r in self._conn.execute(_REMOVED_SINCE, params)
        ]

    def record_vectors(
        self, team_id: str, model: str, upto: int, after: int = 0
    ) -> list[StoredVector]:
        params = {"team": team_id, "model": model, "after": after, "upto": upto}
        return [
            StoredVector(str(r.id), bytes(r.embedding), int(r.vector_version))
            for r in self._conn.execute(_VECTORS, params)
        ]

    def visible_repos(self, team_id: str, project_ids: frozenset[str]) -> frozenset[str]:
        if not project_ids:
            return frozenset()
        params = {"team": team_id, "projects": sorted(project_ids)}
        return frozenset(str(v) for v in self._conn.execute(_VISIBLE_REPOS, params).scalars())

    def nearest_records(
        self, scope: Scope, model: str, query: Float32Array, k: int
    ) -> list[tuple[str, float]] | None:
        # The HNSW query's settings hold for one transaction: outside one, it opens its own.
        conn = self._conn if self._in_transaction else None
        return self._by_vector(
            scope,
            lambda vec, rows: vec.nearest(rows, model, query, k, conn=conn),
        )

    def record_similarity(
        self, scope: Scope, model: str, query: Float32Array, ids: Sequence[str]
    ) -> list[tuple[str, float]] | None:
        keys = [(i,) for i in ids]
        return self._by_vector(
            scope,
            lambda vec, rows: vec.similarity(rows, model, query, keys, conn=self._conn),
        )

    def _by_vector(
        self, scope: Scope, ask: Callable[[Pgvector, VectorRows], list[Nearest]]
    ) -> list[tuple[str, float]] | None:
        """``ask`` pgvector about the records within ``scope``, as (record id, cosine); None
        without pgvector to search."""
        vec = self._store.vectors
        if vec is None or not vec.search:
            return None
        params: dict[str, Any] = {}
        where = _where(scope, params)
        rows = VectorRows(R.name, ("r.id",), where, params, alias="r")
        return [(str(n.key[0]), float(n.cosine)) for n in ask(vec, rows)]

    def count_pending(self, team_id: str, model: str) -> int:
        return int(
            self._conn.execute(PENDING_IN_TEAM, pending_params(0, model, team_id)).scalar() or 0
        )

    def index_min_vectors(self) -> int | None:
        vec = self._store.vectors
        return vec.min_vectors if vec is not None and vec.search else None

    def records_by_id(self, team_id: str, ids: Sequence[str]) -> dict[str, Record]:
        if not ids:
            return {}
        dialect = self._conn.dialect.name
        listed = list(ids) if dialect == "postgresql" else json.dumps(list(ids))
        rows = self._conn.execute(_BY_ID[dialect], {"team": team_id, "ids": listed})
        return {str(row.id): _record(team_id, row) for row in rows}

    def page(self, scope: Scope, after: PagePosition | None, limit: int) -> list[Record]:
        params: dict[str, object] = {"n": limit}
        where = _where(scope, params)
        if after is not None:
            where += " AND (r.created_at < :ac OR (r.created_at = :ac AND r.id < :ai))"
            params["ac"], params["ai"] = utc(after.created_at), after.record_id
        stmt = _typed(
            "SELECT r.id, r.repo_id, r.text, r.created_at, r.expires_at FROM records AS r"
            f" WHERE {where} ORDER BY r.created_at DESC, r.id DESC LIMIT :n",
            paged=after is not None,
        )
        return [_record(scope.team_id, row) for row in self._conn.execute(stmt, params)]

    def signing_key(self) -> bytes:
        return self._store._signing_key(self._conn)


class _SqlWriter(_SqlReader, RecordWriter):
    def insert(self, records_: Sequence[Record]) -> None:
        if not records_:
            return
        # The team's counter first: each record carries the version its insert made, which
        # a search's cached rows are extended from (nothing else waits on rows not yet
        # written, so holding the counter meanwhile adds no wait to anyone's).
        bump = search_counters(self._conn).bump_terms
        versions = bump_teams(self._conn, bump, (r.team_id for r in records_))
        rows: list[dict[str, Any]] = [
            {
                "team_id": r.team_id,
                "id": r.id,
                "repo_id": r.repo_id,
                "text": r.text,
                "terms": " ".join(analyze(r.text)),
                "dup_key": duplicate_key(r.text),
                "created_at": utc(r.created_at),
                "expires_at": utc(r.expires_at),
                "terms_version": versions[r.team_id],
            }
            for r in records_
        ]
        self._conn.execute(R.insert(), rows)

    def delete(self, team_id: str, record_id: str, now: datetime) -> bool:
        params = {"k_team": team_id, "k_id": record_id, "now": utc(now)}
        # Read whole: SQLite holds a statement with RETURNING open until it is.
        stored = self._conn.execute(_DELETE_LIVE, params).scalars().all()
        list_removals(self._conn, [(team_id, record_id, v) for v in stored], utc(now))
        return bool(stored)

    def set_enabled(self, team_id: str, enabled: bool, now: datetime) -> None:
        updated = self._conn.execute(
            record_settings.update()
            .where(record_settings.c.team_id == team_id)
            .values(enabled=enabled, updated_at=utc(now))
        )
        if updated.rowcount == 0:
            self._conn.execute(
                record_settings.insert().values(
                    team_id=team_id, enabled=enabled, updated_at=utc(now)
                )
            )

    def purge_expired(self, now: datetime, limit: int) -> int:
        found = self._conn.execute(_EXPIRED, {"now": utc(now), "limit": limit}).all()
        if found:
            self._conn.execute(_DELETE_BY_KEY, [{"k_team": t, "k_id": i} for t, i, _ in found])
            list_removals(self._conn, [(t, i, v) for t, i, v in found], utc(now))
        return len(found)

    def forget_removals(self, before: datetime) -> int:
        return forget_removals(self._conn, utc(before))


def _typed(sql: str, *, paged: bool = False) -> sa.TextualSelect:
    """``sql`` (selecting a record's columns) with the types the driver needs to bind and
    read aware datetimes."""
    binds = [sa.bindparam("now", type_=_TS)]
    if paged:
        binds.append(sa.bindparam("ac", type_=_TS))
    cols: list[sa.ColumnClause[Any]] = [
        sa.column("id", sa.String),
        sa.column("repo_id", sa.String),
        sa.column("text", sa.Text),
        sa.column("created_at", _TS),
        sa.column("expires_at", _TS),
    ]
    return sa.text(sql).bindparams(*binds).columns(*cols)


def _record(team_id: str, row: Any) -> Record:
    return Record(
        id=str(row.id),
        team_id=team_id,
        repo_id=None if row.repo_id is None else str(row.repo_id),
        text=str(row.text),
        created_at=utc(row.created_at),
        expires_at=utc(row.expires_at),
    )


class SqlRecordStore(RecordIndex, RecordStore):
    """Records in the database of ``engine`` (schema: :mod:`keepstone.records.schema`);
    ``vectors``: pgvector there (:func:`keepstone.db.pgvector.setup`), None without it.
    The background indexer's side is :class:`~keepstone.records.sql_index.RecordIndex`'s."""

    def __init__(self, engine: Engine, vectors: Pgvector | None = None) -> None:
        super().__init__(engine, vectors)
        self._key: bytes | None = None

    def reading(self) -> AbstractContextManager[RecordReader]:
        return self._open(write=False)

    def drop_team(self, team_id: str) -> int:
        """Delete every record of the team, its search counters, its listed removals and
        its setting, in one transaction; returns how many records went."""
        with write_transaction(self.engine) as conn:
            gone = int(conn.execute(R.delete().where(R.c.team_id == team_id)).rowcount)
            for table in (record_removals, record_search_versions, record_settings):
                conn.execute(table.delete().where(table.c.team_id == team_id))
        return gone

    def writing(self) -> AbstractContextManager[RecordWriter]:
        return self._open(write=True)

    @contextmanager
    def _open(self, *, write: bool) -> Iterator[_SqlWriter]:
        # One class serves both: the interface a caller is handed (RecordReader for
        # reading()) is what keeps a read transaction from writing.
        # A write is a save acknowledged as durable (or a delete, a setting): fsynced.
        if write:
            with write_transaction(self.engine) as conn:
                yield _SqlWriter(conn, self)
        else:
            # A search is then two statements, two round trips on PostgreSQL.
            with read_statements(self.engine) as conn:
                yield _SqlWriter(conn, self, in_transaction=conn.in_transaction())

    def loaded(self, rows: int) -> None:
        """After a bulk load: ``ANALYZE records`` on PostgreSQL
        (:func:`keepstone.db.refresh_statistics`)."""
        refresh_statistics(self.engine, (R.name,), rows)

    def _signing_key(self, conn: Connection) -> bytes:
        # Created once with the schema and never changed, so it is read once per store,
        # on the connection of the transaction that first needs it.
        if self._key is None:
            value = conn.execute(
                sa.select(records_meta.c.value).where(records_meta.c.name == CURSOR_KEY_NAME)
            ).scalar()
            self._key = bytes.fromhex(str(value))
        return self._key
