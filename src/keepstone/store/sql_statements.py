"""The statements :class:`~keepstone.store.sql.SqlStore` runs (reads, listings, the index's
chunk work, moves, counters, audit rows), built once per dialect so SQLAlchemy caches their
compilation. The change statement of a write, delete or move is :mod:`keepstone.store.sql_write`'s;
the history's are :mod:`keepstone.store.sql_history`'s."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect

from keepstone.db import PointRead, pgvector
from keepstone.store.index import DIGEST_PRIMES
from keepstone.store.sql_schema import (
    SPACE_WIDE,
    UNCHUNKED,
    UNEMBEDDED,
    memory_chunks,
    memory_document_versions,
    memory_documents,
    memory_space_usage,
    memory_tenant_usage,
)

D = memory_documents
S = memory_space_usage
T = memory_tenant_usage
C = memory_chunks
V = memory_document_versions

#: iter_documents lists a space's paths and sizes this many at a time.
ITER_META_PAGE = 256
#: Documents a backfill reads per batch (the ``LIMIT`` of ``unindexed``), and so chunks per
#: write transaction.
BACKFILL_BATCH_DOCS = 64


def bp(name: str, type_: Any = None) -> sa.BindParameter[Any]:
    """A bound parameter named ``name`` (the statements' one way to bind)."""
    return sa.bindparam(name, type_=type_)


def _address() -> dict[str, sa.BindParameter[Any]]:
    """A space's row address, bound from ``SqlStore._address``."""
    return {"tenant_id": bp("t"), "space_key": bp("k"), "space_id": bp("sid")}


def _space_of(table: sa.FromClause) -> list[sa.ColumnElement[bool]]:
    """The rows of ``table`` in the space of :func:`_address`."""
    return [table.c[name] == value for name, value in _address().items()]


def _one_doc(table: sa.FromClause) -> tuple[sa.ColumnElement[bool], ...]:
    """The rows of ``table`` of the document at path ``:p`` of the space."""
    return (*_space_of(table), table.c.path == bp("p"))


def _list_pages(
    listing: sa.Select[Any], in_dir: tuple[sa.ColumnElement[bool], ...]
) -> dict[tuple[bool, str, bool], PointRead]:
    """A page of a listing (``:n`` rows), by whether it is of a directory (``:lo``,
    ``:hi``), its order (``path``; ``updated``: newest first, then by path) and whether it
    follows a page (after ``:after_path``, and ``:after_updated`` in the order by change)."""
    by_path = (D.c.path > bp("after_path"),)
    by_change = (
        sa.or_(
            D.c.updated_at < bp("after_updated", type_=D.c.updated_at.type),
            sa.and_(
                D.c.updated_at == bp("after_updated", type_=D.c.updated_at.type),
                D.c.path > bp("after_path"),
            ),
        ),
    )
    orders = {"path": (D.c.path,), "updated": (D.c.updated_at.desc(), D.c.path)}
    follows = {"path": by_path, "updated": by_change}
    # By change: along the partial index by time, whose condition only a reader states.
    by_time = {"path": (), "updated": (D.c.updated_at.isnot(None),)}
    pages = {}
    for of_dir in (False, True):
        for sort, order in orders.items():
            for after in (False, True):
                follow = follows[sort] if after else ()
                where = (*(in_dir if of_dir else ()), *by_time[sort], *follow)
                stmt = listing.where(*where).order_by(*order).limit(bp("n"))
                pages[of_dir, sort, after] = PointRead(stmt)
    return pages


def _wire_time(dialect: str, at: Any) -> sa.ColumnElement[str]:
    """The stored time ``at`` as ``datetime.isoformat`` writes an aware UTC one (the wire
    form): ``YYYY-MM-DDTHH:MM:SS``, ``.ffffff`` unless zero, ``+00:00``."""
    whole: sa.ColumnElement[str]
    if dialect == "postgresql":
        utc = sa.func.timezone("UTC", at)
        whole = sa.func.to_char(utc, 'YYYY-MM-DD"T"HH24:MI:SS', type_=sa.Text)
        micro = sa.func.to_char(utc, ".US", type_=sa.Text)
        exact = sa.extract("microseconds", at) % 1000000 == 0
    else:  # SQLite keeps 'YYYY-MM-DD HH:MM:SS.ffffff' (UTC)
        whole = sa.func.substr(at, 1, 10, type_=sa.Text) + "T" + sa.func.substr(at, 12, 8)
        micro = sa.func.substr(at, 20, type_=sa.Text)
        exact = sa.or_(micro == "", micro == ".000000")
    return whole + sa.case((exact, ""), else_=micro) + "+00:00"


def _as_json_array(dialect: str, listing: sa.Select[Any]) -> PointRead:
    """``listing`` (path, size, time, etag; in path order), its first ``:n`` rows (SQLite:
    -1, PostgreSQL: null, for all), read as one JSON array of the documents' wire form
    built by the database, and how many it holds: one value to fetch, where a row per
    document cost more than the rest of the request."""
    rows = listing.limit(bp("n")).subquery()
    c = rows.c
    fields = ("path", c.path, "size_bytes", c.size_bytes, "updated_at")
    tail = (_wire_time(dialect, c.updated_at), "etag", c.etag)
    documents: sa.ColumnElement[Any]
    if dialect == "postgresql":
        item = sa.func.json_build_object(*fields, *tail)
        array = sa.cast(sa.func.json_agg(pg_dialect.aggregate_order_by(item, c.path)), sa.Text)
        documents = sa.func.coalesce(array, "[]")
    else:  # SQLite aggregates the rows in the order the subquery gives them.
        documents = sa.func.json_group_array(sa.func.json_object(*fields, *tail))
    count: sa.ColumnElement[Any] = sa.func.count()
    return PointRead(sa.select(documents.label("documents"), count.label("count")))


class Statements:
    """Every statement the store runs, built once per dialect so compilation is cached:
    the documents', the document index's, the counters'."""

    def __init__(self, dialect: str, vec: pgvector.Pgvector | None = None) -> None:
        self._documents()
        self._listings_as_json(dialect)
        self._chunks(vec)
        self._pending()
        self._unindexed()
        self._counters(dialect)

    def _documents(self) -> None:
        """Reads, listings and pages of a space's documents, and a document's move."""
        doc_where = _space_of(D)
        one_doc = _one_doc(D)
        in_dir = (D.c.path >= bp("lo"), D.c.path < bp("hi"))
        after = D.c.path > bp("after")
        meta_cols = (D.c.path, D.c.size_bytes, D.c.updated_at, D.c.etag)

        self.read_doc = sa.select(D.c.content, D.c.size_bytes, D.c.updated_at, D.c.etag).where(
            *one_doc
        )
        #: The same, as every GET of a document runs it (a point read off the pool).
        self.read_point = PointRead(self.read_doc)
        # The moved document becomes the target path's next version.
        target_versions = sa.select(sa.func.coalesce(sa.func.max(V.c.version), 0) + 1).where(
            V.c.tenant_id == D.c.tenant_id,
            V.c.space_key == D.c.space_key,
            V.c.space_id == D.c.space_id,
            V.c.path == bp("to"),
        )
        self.move_doc = (
            sa.update(D)
            .where(*one_doc)
            .values(
                path=bp("to"),
                updated_at=bp("now"),
                actor=bp("actor"),
                action="move",
                actor_kind=bp("kind"),
                version=target_versions.scalar_subquery(),
            )
            .returning(D.c.version)
        )
        listing = sa.select(*meta_cols).where(*doc_where)
        #: A whole listing, off the pool as a point read: a listing of a space's documents
        #: is one statement, and a ``Connection``'s overhead was most of its cost.
        self.list_all = PointRead(listing.order_by(D.c.path))
        self.list_dir = PointRead(listing.where(*in_dir).order_by(D.c.path))
        self.list_pages = _list_pages(listing, in_dir)
        #: The listing's page (a page shorter than this is the last).
        self.meta_page = ITER_META_PAGE
        page = sa.select(D.c.path, D.c.size_bytes).order_by(D.c.path).limit(self.meta_page)
        self.page_all = page.where(*doc_where, after)
        self.page_dir = page.where(*doc_where, *in_dir, after)
        self.fetch_docs = (
            sa.select(D.c.path, D.c.content, D.c.size_bytes, D.c.updated_at, D.c.etag)
            .where(*doc_where, D.c.path.in_(sa.bindparam("paths", expanding=True)))
            .order_by(D.c.path)
        )

    def _listings_as_json(self, dialect: str) -> None:
        """A whole listing as the JSON array of its documents (:func:`_as_json_array`)."""
        listing = sa.select(D.c.path, D.c.size_bytes, D.c.updated_at, D.c.etag)
        listing = listing.where(*_space_of(D)).order_by(D.c.path)
        in_dir = (D.c.path >= bp("lo"), D.c.path < bp("hi"))
        self.list_json_all = _as_json_array(dialect, listing)
        self.list_json_dir = _as_json_array(dialect, listing.where(*in_dir))

    def _chunks(self, vec: pgvector.Pgvector | None) -> None:
        """The document index: a document's chunks, and the chunks to embed."""
        chunk_space = _space_of(C)
        chunk_doc = _one_doc(C)
        self.delete_chunks = sa.delete(C).where(*chunk_doc)
        # A chunk is its text's alone (no path in it): a moved document keeps its vectors.
        self.move_chunks = sa.update(C).where(*chunk_doc).values(path=bp("to"))
        self.insert_chunks = sa.insert(C)
        row = (C.c.path, C.c.seq, C.c.heading, C.c.text, C.c.terms, C.c.embedding, C.c.model)
        self.chunk_rows = sa.select(*row, C.c.stamp).where(*chunk_space).order_by(C.c.path, C.c.seq)
        self.chunk_rows_of = self.chunk_rows.where(
            C.c.path.in_(sa.bindparam("paths", expanding=True))
        )
        #: Each document's chunk count and sums of stamp residues (store.index.stamp_digest),
        #: along ix_memory_chunks_space_stamps alone (the space key names one space, as for
        #: ``index_used``), in its order: nothing sorted, nothing of the rows' text read.
        p, q = DIGEST_PRIMES
        sums = (sa.cast(sa.func.sum(C.c.stamp % n), sa.BigInteger) for n in (p, q))
        self.chunk_digests = (
            sa.select(C.c.path, sa.func.count(), *sums)
            .where(C.c.tenant_id == bp("t"), C.c.space_key == bp("k"), SPACE_WIDE)
            .group_by(C.c.path)
        )
        # With pgvector, the same statement sets the vector's ``vec`` (pgvector.py).
        into = C if vec is None else vec.with_vec(C)
        vector = {} if vec is None else {"vec": vec.vec_param()}
        self.store_embedding = (
            sa.update(into)
            .where(
                into.c.tenant_id == bp("t"),
                into.c.space_key == bp("k"),
                into.c.path == bp("p"),
                into.c.seq == bp("n"),
                # Not a chunk rewritten since it was read (SQLite claims hold no lock).
                into.c.text == bp("was_text"),
                into.c.context == bp("was_context"),
            )
            .values(
                embedding=bp("blob"),
                model=bp("by_model"),
                stamp=bp("stamp"),
                # The row's bytes with this vector in place of the one it had, if any.
                stored_bytes=into.c.stored_bytes
                - sa.func.coalesce(sa.func.length(into.c.embedding), 0)
                + bp("blob_bytes", sa.BigInteger),
                **vector,
            )
        )
        #: The bytes a space's chunks hold, summed along ix_memory_chunks_space_bytes alone
        #: (the space key is the hash of the full id, so it names one space).
        self.index_used = sa.select(sa.func.coalesce(sa.func.sum(C.c.stored_bytes), 0)).where(
            C.c.tenant_id == bp("t"), C.c.space_key == bp("k"), SPACE_WIDE
        )
        #: Every space's, and every space's document bytes (the operator's totals).
        self.all_index_used = sa.select(sa.func.coalesce(sa.func.sum(C.c.stored_bytes), 0)).where(
            SPACE_WIDE
        )
        self.all_used = sa.select(sa.func.coalesce(sa.func.sum(S.c.used_bytes), 0))

    def _pending(self) -> None:
        """The indexer's scan: the chunks with no vector of the configured model, newest
        first, in statements an index drives whatever the planner's statistics say; the
        fresh lane; and the counts of what is pending."""
        rows = sa.select(
            C.c.tenant_id, C.c.space_key, C.c.space_id, C.c.path, C.c.seq, C.c.context, C.c.text
        )
        # Newest first: a chunk just written is embedded before an older backlog, so it is
        # found by meaning within a batch or two (docs/search.md, "Freshness"); the partial
        # index is read backwards, the ties sorted within one instant.
        order = (C.c.updated_at.desc(), C.c.tenant_id, C.c.space_key, C.c.path, C.c.seq)
        #: Chunks never embedded (model is NULL exactly when embedding is: store_embeddings
        #: sets both), along ix_memory_chunks_unembedded, which holds them alone, in order.
        self.pending = rows.where(UNEMBEDDED).order_by(*order).limit(bp("limit"))
        #: Chunks embedded by the model ``:other`` (not the configured one: it changed),
        #: from its range of ix_memory_chunks_model.
        of_other = rows.where(C.c.model == bp("other")).order_by(*order).limit(bp("limit"))
        self.pending_other = of_other
        self.claim = self.pending.with_for_update(skip_locked=True)
        self.claim_other = of_other.with_for_update(skip_locked=True)
        #: The fresh lane: what was chunked since ``:since`` (a fresh chunk has no vector).
        self.pending_since = self.pending.where(C.c.updated_at >= bp("since"))
        self.claim_since = self.pending_since.with_for_update(skip_locked=True)
        #: The next model after ``:after`` that made a vector (None: none): one probe of
        #: ix_memory_chunks_model, in its order, with or without statistics.
        self.next_model = (
            sa.select(C.c.model).where(C.c.model > bp("after")).order_by(C.c.model).limit(1)
        )
        model = bp("model")
        # Three conditions rather than IS DISTINCT FROM, so the ``model`` indexes serve them.
        not_of_model = sa.or_(C.c.model.is_(None), C.c.model < model, C.c.model > model)
        #: What every space has pending (the backlog of /metrics, /readyz and doctor).
        self.backlog = sa.select(sa.func.count()).select_from(C).where(not_of_model)

        #: What one space has pending: three ranges of ix_memory_chunks_space_model summed,
        #: not one OR that a planner may answer by reading every chunk of the space.
        def in_space(model_is: sa.ColumnElement[bool]) -> sa.ScalarSelect[int]:
            where = (C.c.tenant_id == bp("t"), C.c.space_key == bp("k"), SPACE_WIDE, model_is)
            return sa.select(sa.func.count()).select_from(C).where(*where).scalar_subquery()

        self.pending_in_space = sa.select(
            in_space(C.c.model.is_(None))
            + in_space(C.c.model < model)
            + in_space(C.c.model > model)
        )

    def _unindexed(self) -> None:
        """The document index's backfill: the documents without chunks, and the lock of one
        being chunked."""
        one_doc = _one_doc(D)
        doc_key = sa.tuple_(D.c.tenant_id, D.c.space_key, D.c.path)
        # Read from the partial index of the documents still to chunk (UNCHUNKED), in its
        # order: what a reconcile costs is what is pending, not the size of the space.
        unindexed = (
            sa.select(D.c.tenant_id, D.c.space_key, D.c.space_id, D.c.path)
            .where(UNCHUNKED, doc_key > sa.tuple_(bp("after_t"), bp("after_k"), bp("p")))
            .order_by(D.c.tenant_id, D.c.space_key, D.c.path)
            .limit(BACKFILL_BATCH_DOCS)
        )
        self.unindexed = unindexed
        self.unindexed_in_space = unindexed.where(
            D.c.tenant_id == bp("t"), D.c.space_key == bp("k")
        )
        # The indexer's lock of a document it chunks, a row update that marks it chunked
        # (in the transaction that inserts its chunks). On PostgreSQL an update, not FOR
        # UPDATE, matters too: the row then changes under a one-statement write that
        # waited for it, which so learns that its snapshot misses the new chunks
        # (sql_write.ChangeStatements.put).
        self.lock_content = (
            sa.update(D).where(*one_doc).values(chunked=True).returning(D.c.visibility, D.c.content)
        )
        # The same, unless another transaction holds the document (then nothing): for the
        # indexer while it holds a claim, as a writer holding the document may be waiting
        # for the claimed chunks (PostgreSQL; SQLite's writers queue).
        held = D.alias("held")
        free = sa.select(held.c.tenant_id, held.c.space_key, held.c.path).where(*_one_doc(held))
        self.lock_content_if_free = (
            sa.update(D)
            .where(doc_key.in_(free.with_for_update(skip_locked=True)))
            .values(chunked=True)
            .returning(D.c.visibility, D.c.content)
        )
        self.has_chunks = sa.select(C.c.seq).where(*_one_doc(C)).limit(1)
        #: Every document to chunk again (``reindex --rebuild`` drops every chunk).
        self.unmark_chunked = sa.update(D).where(D.c.chunked == sa.true()).values(chunked=False)

    def _counters(self, dialect: str) -> None:
        """The space and team counters outside a change: bumps, attributions, quotas, reads."""
        insert: Any = pg_dialect.insert if dialect == "postgresql" else sqlite_dialect.insert
        # A change's charges are steps of its change statement (keepstone.store.sql_steps).
        # A change of the space's index that charges nothing: bump its version only.
        self.bump_space = (
            insert(S)
            .values(**_address(), used_bytes=0, search_version=1)
            .on_conflict_do_update(
                index_elements=[S.c.tenant_id, S.c.space_key],
                set_={S.c.search_version: S.c.search_version + 1},
            )
        )
        self.search_version = sa.select(S.c.search_version).where(*_space_of(S))
        # Attribution of a global write: debit (or credit) without enforcement; used + d,
        # clamped at zero for credits.
        delta = bp("d", sa.BigInteger)
        t_new = sa.case((T.c.used_bytes + delta < 0, 0), else_=T.c.used_bytes + delta)
        self.attribute_tenant = (
            insert(T)
            .values(
                tenant_id=bp("t"),
                used_bytes=bp("fresh", sa.BigInteger),
                quota_bytes=bp("default_quota", sa.BigInteger),
            )
            .on_conflict_do_update(index_elements=[T.c.tenant_id], set_={T.c.used_bytes: t_new})
        )
        self.set_quota = (
            insert(T)
            .values(tenant_id=bp("t"), used_bytes=0, quota_bytes=bp("q", sa.BigInteger))
            .on_conflict_do_update(
                index_elements=[T.c.tenant_id],
                set_={T.c.quota_bytes: bp("q", sa.BigInteger)},
            )
        )
        self.space_used = sa.select(S.c.used_bytes).where(*_space_of(S))
        self.tenant_used = sa.select(T.c.used_bytes, T.c.quota_bytes).where(
            T.c.tenant_id == bp("t")
        )
