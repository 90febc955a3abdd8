"""The records' search index in SQL: the per-team search counters every change moves, and
the background indexer's side of :class:`~keepstone.records.sql.SqlRecordStore`.

Every insert, delete and purge bumps the team's ``terms_version`` in its own transaction
(:func:`search_counters`); a delete or purge lists each record it removed under that
version in ``record_removals`` (:func:`list_removals`), which the periodic purge forgets
after :data:`~keepstone.records.store.REMOVALS_KEPT` (:func:`forget_removals`).

Vectors are written by the background indexer, never by a save:
:meth:`RecordIndex.claim_pending_records` mirrors the document store's
``claim_pending_chunks`` (``FOR UPDATE SKIP LOCKED`` on PostgreSQL; on SQLite a read
without a lock and one short write at the end), and every batch stored bumps its teams'
``vectors_version``, teams in key order. Where the database has pgvector, the same
statement sets the record's ``vec`` (:mod:`keepstone.db.pgvector`).

:class:`RecordIndex` is a mixin of ``SqlRecordStore``: it holds the store's engine and
pgvector handle, which the store's reads use too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from keepstone.db import read_transaction, utcnow, write_transaction
from keepstone.db.pgvector import Pgvector
from keepstone.records.schema import (
    UNEMBEDDED,
    record_removals,
    record_search_versions,
    records,
)
from keepstone.records.store import PendingRecord
from keepstone.search.claim import EmbeddingClaim
from keepstone.search.embedding_table import EmbeddingTable

_TS = sa.DateTime(timezone=True)
R = records
V = record_search_versions
G = record_removals

# Written as three conditions (not ``model IS DISTINCT FROM``) so the ``model`` index
# serves it rather than a scan of every record.
_model: sa.BindParameter[str] = sa.bindparam("model")
_NOT_OF_MODEL = sa.or_(R.c.model.is_(None), R.c.model < _model, R.c.model > _model)
# The indexer's scan: the unexpired records with no vector of the configured model, in
# statements an index drives whatever the planner's statistics say.
_UNEXPIRED_ROWS = sa.select(R.c.team_id, R.c.id, R.c.text).where(
    R.c.expires_at > sa.bindparam("now", type_=_TS)
)
# Newest first: a record just saved is embedded before an older backlog.
_ORDER = (R.c.created_at.desc(), R.c.team_id, R.c.id)
# Records never embedded, along ix_records_unembedded (which holds them alone).
_PENDING = _UNEXPIRED_ROWS.where(UNEMBEDDED).order_by(*_ORDER).limit(sa.bindparam("limit"))
# Records embedded by the model ``:other`` (not the configured one: it changed), from its
# range of the ``model`` index.
_PENDING_OTHER = (
    _UNEXPIRED_ROWS.where(R.c.model == sa.bindparam("other"))
    .order_by(*_ORDER)
    .limit(sa.bindparam("limit"))
)
#: What every team has pending: the indexer's backlog of records.
_BACKLOG = (
    sa.select(sa.func.count())
    .select_from(R)
    .where(_NOT_OF_MODEL, R.c.expires_at > sa.bindparam("now", type_=_TS))
)


class _Unindexed(FunctionElement[Any]):
    """A column no index may answer for: SQLite's planner is told so by a unary ``+`` (its
    documented way); elsewhere the column as it is."""

    inherit_cache = True
    name = "unindexed"


@compiles(_Unindexed)
def _as_is(element: _Unindexed, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(element.clauses, **kw)


@compiles(_Unindexed, "sqlite")
def _unary_plus(element: _Unindexed, compiler: SQLCompiler, **kw: Any) -> str:
    return "+" + compiler.process(element.clauses, **kw)


def _in_team(model_is: sa.ColumnElement[bool]) -> sa.ScalarSelect[int]:
    """How many unexpired records of ``:team`` satisfy ``model_is``: one range of
    ix_records_team_vectors (team, model), so it reads the pending rows only. Its expiry
    is a filter, never an index's range: with statistics of one large team (``ANALYZE``)
    SQLite took ix_records_expires instead and read every record of the team."""
    return (
        sa.select(sa.func.count())
        .select_from(R)
        .where(
            R.c.team_id == sa.bindparam("team"),
            model_is,
            _Unindexed(R.c.expires_at) > sa.bindparam("now", type_=_TS),
        )
        .scalar_subquery()
    )


#: What one team has pending: three ranges summed, not one OR that a planner may answer by
#: reading every record of the team (a search pays this count on every answer).
PENDING_IN_TEAM = sa.select(
    _in_team(R.c.model.is_(None)) + _in_team(R.c.model < _model) + _in_team(R.c.model > _model)
)
_CLAIM = _PENDING.with_for_update(skip_locked=True)
#: The fresh lane: what was saved since ``:since`` (a fresh record has no vector).
_FRESH = _PENDING.where(R.c.created_at >= sa.bindparam("since", type_=_TS))
_FRESH_CLAIM = _FRESH.with_for_update(skip_locked=True)
_CLAIM_OTHER = _PENDING_OTHER.with_for_update(skip_locked=True)
# The next model after ``:after`` that made a vector (None: none): one probe of the
# ``model`` index, in its order, with or without statistics.
_NEXT_MODEL = (
    sa.select(R.c.model).where(R.c.model > sa.bindparam("after")).order_by(R.c.model).limit(1)
)


def _store_vector(vec: Pgvector | None) -> Any:
    """The statement that stores a record's vector (and, with pgvector, its ``vec``)."""
    into = R if vec is None else vec.with_vec(R)
    model: sa.BindParameter[str] = sa.bindparam("model")
    return (
        into.update()
        # Not a record deleted, or embedded by this model, since it was read (SQLite claims
        # hold no lock): a deleted record is never resurrected, nor one embedded twice.
        .where(
            into.c.team_id == sa.bindparam("k_team"),
            into.c.id == sa.bindparam("k_id"),
            sa.or_(into.c.model.is_(None), into.c.model < model, into.c.model > model),
        )
        .values(
            embedding=sa.bindparam("blob"),
            model=sa.bindparam("by_model"),
            vector_version=sa.bindparam("version", type_=sa.BigInteger),
            **({} if vec is None else {"vec": vec.vec_param()}),
        )
    )


_STORE_VECTOR = _store_vector(None)


class SearchCounters:
    """The per-team counter upserts of one dialect (each its own INSERT ... ON CONFLICT)."""

    def __init__(self, dialect: str) -> None:
        insert: Any = pg_dialect.insert if dialect == "postgresql" else sqlite_dialect.insert
        team: sa.BindParameter[str] = sa.bindparam("team")

        def bump(counter: sa.Column[int], *, reset: bool = False) -> Any:
            """Move ``counter`` one up (with ``reset``, ``vectors_reset`` to its new value:
            every vector dropped), creating the team's row at 1; returning the new value."""
            moved = {counter: counter + 1}
            first = {"terms_version": 0, "vectors_version": 0, "vectors_reset": 0}
            first[counter.name] = 1
            if reset:
                moved[V.c.vectors_reset] = counter + 1
                first["vectors_reset"] = 1
            return (
                insert(V)
                .values(team_id=team, **first)
                .on_conflict_do_update(index_elements=[V.c.team_id], set_=moved)
                .returning(counter)
            )

        self.bump_terms = bump(V.c.terms_version)
        self.bump_vectors = bump(V.c.vectors_version)
        # Every vector dropped: vectors_version moves, and the reset mark with it. (A
        # delete or purge moves terms_version alone, as an insert does: see
        # :func:`list_removals`; a removed record's vector left in a cached matrix matches
        # no cached row, so the matrix stands.)
        self.reset_vectors = bump(V.c.vectors_version, reset=True)


_DIALECTS = {name: SearchCounters(name) for name in ("sqlite", "postgresql")}


def search_counters(conn: Connection) -> SearchCounters:
    """The counter upserts of ``conn``'s dialect."""
    return _DIALECTS[conn.dialect.name]


def bump_teams(conn: Connection, statement: Any, teams: Iterable[str]) -> dict[str, int]:
    """Move the counters of each of ``teams`` with ``statement`` (one of
    :class:`SearchCounters`'); return each team's counter it returned. Teams in key order,
    so two writers cannot deadlock one another; each answer read whole (SQLite keeps a
    statement with RETURNING open, and its transaction from committing, until it is)."""
    return {
        team: int(conn.execute(statement, {"team": team}).scalar_one())
        for team in sorted(set(teams))
    }


def list_removals(
    conn: Connection, removed: Sequence[tuple[str, str, int | None]], now: datetime
) -> None:
    """After ``removed`` records (team, id, the ``terms_version`` that stored it) were
    deleted in ``conn``'s transaction: bump each team's ``terms_version`` (teams in key
    order) and list each record under its team's new version, at ``now``."""
    if not removed:
        return
    versions = bump_teams(conn, search_counters(conn).bump_terms, (t for t, _, _ in removed))
    rows = [
        {
            "team_id": team,
            "terms_version": versions[team],
            "id": record_id,
            "stored_version": stored or 0,
            "removed_at": now,
        }
        for team, record_id, stored in removed
    ]
    conn.execute(G.insert(), rows)


def forget_removals(conn: Connection, before: datetime) -> int:
    """Forget the removals listed before ``before``: per team (in key order) every
    version up to the last such one, whole, and the team's ``terms_reset`` moved to it,
    so rows cached before it are read whole rather than patched by an incomplete list.
    Returns how many listings went."""
    last = (
        sa.select(G.c.team_id, sa.func.max(G.c.terms_version))
        .where(G.c.removed_at < before)
        .group_by(G.c.team_id)
        .order_by(G.c.team_id)
    )
    forgotten = 0
    for team, upto in conn.execute(last).all():
        conn.execute(
            V.update().where(V.c.team_id == team, V.c.terms_reset < upto).values(terms_reset=upto)
        )
        gone = conn.execute(G.delete().where(G.c.team_id == team, G.c.terms_version <= upto))
        forgotten += gone.rowcount
    return forgotten


#: A claim of pending records (:meth:`SqlRecordStore.claim_pending_records`).
RecordClaim = EmbeddingClaim[PendingRecord]


def _pending_key(row: PendingRecord) -> tuple[str, str]:
    return row.team_id, row.id


class RecordIndex:
    """The search index side of :class:`~keepstone.records.sql.SqlRecordStore` (a mixin:
    see the module docstring)."""

    def __init__(self, engine: Engine, vectors: Pgvector | None = None) -> None:
        self.engine = engine
        #: pgvector's ``vec`` column of ``records``, when the database has one.
        self.vectors = vectors if vectors is not None and R.name in vectors.tables else None
        self._store_vector = _STORE_VECTOR if self.vectors is None else _store_vector(vectors)

    def pending_records(self, limit: int, model: str) -> list[PendingRecord]:
        """Up to ``limit`` unexpired records with no vector, then with one made by another
        model than ``model``, each newest first, across every team. Reads without
        claiming: the indexers of several replicas use :meth:`claim_pending_records`."""
        with read_transaction(self.engine) as conn:
            return _pending_rows(conn, limit, model, lock=False)

    def count_backlog(self, model: str) -> int:
        """How many unexpired records of every team have no vector of ``model``: the
        indexer's backlog."""
        with read_transaction(self.engine) as conn:
            return int(conn.execute(_BACKLOG, pending_params(0, model)).scalar() or 0)

    def claim_pending_records(self, limit: int, model: str) -> AbstractContextManager[RecordClaim]:
        """Claim up to ``limit`` pending records (see :meth:`pending_records`) to embed::

            with store.claim_pending_records(32, embedder.model_id) as claim:
                claim.store_embeddings(encode_many(embed([r.search_text for r in claim.rows])))

        On PostgreSQL the rows are locked ``FOR UPDATE SKIP LOCKED`` in a transaction
        held until the block ends, so concurrent indexers (threads, replicas) never
        claim the same record, and the vectors commit with the claim when the block
        exits normally (an exception, or a crash, rolls back and leaves the records
        pending). A delete of a claimed record waits for the claim: keep batches small.
        On SQLite the claim holds no lock (a lock would stop every save while the model
        runs): records are read, and the vectors are written in one short write
        transaction when the block exits; a record deleted meanwhile stays deleted.
        Either way the teams' ``vectors_version`` is bumped, teams in key order.
        """
        return self._embedding.claim(limit, model)

    def claim_fresh_records(
        self, limit: int, model: str, since: datetime
    ) -> AbstractContextManager[RecordClaim]:
        """:meth:`claim_pending_records` of the records saved at ``since`` or later only:
        the indexer's fresh lane, claimed before each batch of the backlog."""
        return self._embedding.claim(limit, model, since)

    def store_record_embeddings(
        self, rows: Sequence[PendingRecord], blobs: Sequence[bytes], model: str
    ) -> int:
        """Store ``blobs[i]`` (a ``keepstone.db.vectors`` blob made by ``model``) as the
        vector of ``rows[i]`` in one transaction, bumping the teams' ``vectors_version``;
        a record deleted, or embedded by ``model``, since it was read is left alone.
        Returns the number stored."""
        return self._embedding.write(rows, blobs, model)

    @property
    def _embedding(self) -> EmbeddingTable[PendingRecord]:
        """The claim and vector plumbing of ``records``."""
        return EmbeddingTable(
            self.engine, _pending_rows, _pending_key, self._store_vectors, self.vectors, R.name
        )

    def _store_vectors(
        self, conn: Connection, pairs: Sequence[tuple[PendingRecord, bytes]], model: str
    ) -> int:
        vecs = None if self.vectors is None else self.vectors.vec_values([b for _, b in pairs])
        return _store_vectors(conn, pairs, model, self._store_vector, vecs)

    def drop_embeddings(self) -> int:
        """Forget every record's vector (``keepstone reindex --rebuild``): all pending again.
        Returns the number of records that had one."""
        with write_transaction(self.engine) as conn:
            dropped = conn.execute(
                R.update()
                .where(R.c.model.is_not(None))
                .values(embedding=None, model=None, vector_version=None)
            ).rowcount
            teams = conn.execute(sa.select(V.c.team_id)).scalars().all()
            bump_teams(conn, search_counters(conn).reset_vectors, teams)
        return int(dropped)


def pending_params(limit: int, model: str, team: str = "") -> dict[str, object]:
    """The parameters of the pending counts (``team``: :data:`PENDING_IN_TEAM`'s)."""
    return {"limit": limit, "model": model, "now": utcnow(), "team": team}


def _pending_rows(
    conn: Connection, limit: int, model: str, lock: bool, since: datetime | None = None
) -> list[PendingRecord]:
    """Up to ``limit`` unexpired records to embed (``lock``: claimed ``FOR UPDATE SKIP
    LOCKED``): those never embedded first, newest first, then, while the batch has room,
    those of each other model that made vectors (in model order), newest first. With
    ``since`` (the fresh lane), only records never embedded saved then or later."""
    params: dict[str, object] = {"limit": limit, "now": utcnow()}
    if since is not None:
        return _pending(conn.execute(_FRESH_CLAIM if lock else _FRESH, {**params, "since": since}))
    rows = _pending(conn.execute(_CLAIM if lock else _PENDING, params))
    after = ""
    while len(rows) < limit:
        other = conn.execute(_NEXT_MODEL, {"after": after}).scalar()
        if other is None:
            break
        after = other
        if other != model:
            params.update(other=other, limit=limit - len(rows))
            rows += _pending(conn.execute(_CLAIM_OTHER if lock else _PENDING_OTHER, params))
    return rows


def _pending(rows: Iterable[Any]) -> list[PendingRecord]:
    return [PendingRecord(str(r.team_id), str(r.id), str(r.text)) for r in rows]


def _store_vectors(
    conn: Connection,
    pairs: Sequence[tuple[PendingRecord, bytes]],
    model: str,
    statement: Any = _STORE_VECTOR,
    vecs: Sequence[tuple[str, int]] | None = None,
) -> int:
    """Write the vectors of ``pairs``: per team, in key order, bump its
    ``vectors_version`` and stamp the team's rows with it (so a cached matrix is
    extended by exactly the rows stored after it was loaded)."""
    if not pairs:
        return 0
    by_team: dict[str, list[tuple[PendingRecord, bytes, str | None]]] = {}
    for i, (row, blob) in enumerate(pairs):
        by_team.setdefault(row.team_id, []).append((row, blob, vecs[i][0] if vecs else None))
    stored = 0
    bump = search_counters(conn).bump_vectors
    for team in sorted(by_team):
        version = int(conn.execute(bump, {"team": team}).scalar_one())
        # Row by row: a driver need not report the rowcount of an executemany.
        for row, blob, vec in by_team[team]:
            params = {
                "k_team": team,
                "k_id": row.id,
                "model": model,
                "blob": blob,
                "by_model": model,
                "version": version,
                **({} if vec is None else {"vec": vec}),
            }
            stored += conn.execute(statement, params).rowcount
    return stored
