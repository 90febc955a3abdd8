"""The SQL :class:`~cairn.records.store.RecordStore`: SQLite and PostgreSQL, one module.

Tables and indexes are :mod:`cairn.records.schema`'s; text becomes index tokens by
:mod:`cairn.records.search`. Ranked search is one indexed statement per dialect:

* SQLite: FTS5 ``MATCH '"t…w1" OR "t…w2" …'`` ranked by ``bm25()``.
* PostgreSQL: ``tsv @@ to_tsquery('simple', 't…w1 | t…w2 …')`` on the GIN index,
  ranked by ``ts_rank_cd``.

The team, expiry, repository and visibility conditions sit in the same statement,
before ``LIMIT``.

Repositories belong to the identity component. This module reads them with plain SQL
over the ``repos`` table (its ``team_id``, ``id`` and ``project_id`` columns are the
whole contract) instead of importing identity's schema, so the records component
depends on nothing of identity's but a table in the same database.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from cairn.db import read_transaction, write_transaction
from cairn.records.schema import CURSOR_KEY_NAME, record_settings, records, records_meta
from cairn.records.search import index_terms, query_terms
from cairn.records.store import (
    PagePosition,
    Record,
    RecordReader,
    RecordStore,
    RecordWriter,
    Scope,
    ScoredRecord,
    utc,
)

_TS = sa.DateTime(timezone=True)

# A repository's project, read straight from identity's table (see the module doc).
_REPO_PROJECT = sa.text("SELECT project_id FROM repos WHERE team_id = :team AND id = :repo")

_DELETE_BY_KEY = records.delete().where(
    records.c.team_id == sa.bindparam("k_team"), records.c.id == sa.bindparam("k_id")
)


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
    def __init__(self, conn: Connection, store: SqlRecordStore) -> None:
        self._conn = conn
        self._store = store

    def enabled(self, team_id: str) -> bool:
        value = self._conn.execute(
            sa.select(record_settings.c.enabled).where(record_settings.c.team_id == team_id)
        ).scalar()
        return bool(value)

    def repo_project(self, team_id: str, repo_id: str) -> str | None:
        value = self._conn.execute(_REPO_PROJECT, {"team": team_id, "repo": repo_id}).scalar()
        return None if value is None else str(value)

    def search(self, scope: Scope, query: str, limit: int) -> list[ScoredRecord]:
        terms = query_terms(scope.team_id, query)
        if not terms:
            return []
        params: dict[str, object] = {"limit": limit}
        where = _where(scope, params)
        if self._conn.dialect.name == "sqlite":
            params["match"] = " OR ".join(f'"{t}"' for t in terms)
            sql = (
                "SELECT r.id, r.repo_id, r.text, r.created_at, r.expires_at,"
                " bm25(records_fts) AS rank"
                " FROM records_fts JOIN records AS r ON r.rowid_ = records_fts.rowid"
                f" WHERE records_fts MATCH :match AND {where}"
                " ORDER BY rank, r.created_at DESC LIMIT :limit"
            )
            sign = -1.0  # bm25() is lower-is-better
        else:
            params["q"] = " | ".join(terms)
            sql = (
                "SELECT r.id, r.repo_id, r.text, r.created_at, r.expires_at,"
                " ts_rank_cd(r.tsv, q.q) AS rank"
                " FROM records AS r, to_tsquery('simple', :q) AS q(q)"
                f" WHERE r.tsv @@ q.q AND {where}"
                " ORDER BY rank DESC, r.created_at DESC LIMIT :limit"
            )
            sign = 1.0
        stmt = _typed(sql, ranked=True)
        return [
            ScoredRecord(_record(scope.team_id, row), sign * float(row.rank))
            for row in self._conn.execute(stmt, params)
        ]

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
        rows: list[dict[str, Any]] = [
            {
                "team_id": r.team_id,
                "id": r.id,
                "repo_id": r.repo_id,
                "text": r.text,
                "terms": index_terms(r.team_id, r.text),
                "created_at": utc(r.created_at),
                "expires_at": utc(r.expires_at),
            }
            for r in records_
        ]
        self._conn.execute(records.insert(), rows)

    def delete(self, team_id: str, record_id: str) -> bool:
        removed = self._conn.execute(_DELETE_BY_KEY, {"k_team": team_id, "k_id": record_id})
        return removed.rowcount > 0

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
        keys = self._conn.execute(
            sa.select(records.c.team_id, records.c.id)
            .where(records.c.expires_at <= utc(now))
            .limit(limit)
        ).all()
        if keys:
            self._conn.execute(_DELETE_BY_KEY, [{"k_team": t, "k_id": i} for t, i in keys])
        return len(keys)


def _typed(sql: str, *, ranked: bool = False, paged: bool = False) -> sa.TextualSelect:
    """``sql`` (selecting a record's columns, plus ``rank`` when ``ranked``) with the
    types the driver needs to bind and read aware datetimes."""
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
    if ranked:
        cols.append(sa.column("rank", sa.Float))
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


class SqlRecordStore(RecordStore):
    """Records in the database of ``engine`` (schema: :mod:`cairn.records.schema`)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._key: bytes | None = None

    def reading(self) -> AbstractContextManager[RecordReader]:
        return self._open(write=False)

    def writing(self) -> AbstractContextManager[RecordWriter]:
        return self._open(write=True)

    @contextmanager
    def _open(self, *, write: bool) -> Iterator[_SqlWriter]:
        # One class serves both: the interface a caller is handed (RecordReader for
        # reading()) is what keeps a read transaction from writing.
        transaction = write_transaction if write else read_transaction
        with transaction(self.engine) as conn:
            yield _SqlWriter(conn, self)

    def _signing_key(self, conn: Connection) -> bytes:
        # Created once with the schema and never changed, so it is read once per store,
        # on the connection of the transaction that first needs it.
        if self._key is None:
            value = conn.execute(
                sa.select(records_meta.c.value).where(records_meta.c.name == CURSOR_KEY_NAME)
            ).scalar()
            self._key = bytes.fromhex(str(value))
        return self._key
