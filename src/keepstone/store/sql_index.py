"""The SQL store's document search index (docs/search.md, "How search is wired"): the
part of :class:`keepstone.store.sql.SqlStore` that chunks documents into ``memory_chunks``
after their writes commit, hands the indexer what it has to embed, stores vectors, and
reads a space's chunks, versions and nearest neighbours for a search. It is the SQL
stores' :class:`keepstone.store.index.SearchIndex`, with both optional capabilities:
``vector_index`` (``VectorIndexed``: :class:`ChunkVectors` where pgvector searches) and
``backfill_chunks`` (``ChunkBackfill``).

:class:`DocumentIndex` is a mixin of :class:`~keepstone.store.sql.SqlStore`: it uses the
store's engine, compiled statements (``_sql``), pgvector handle (``_vec``) and row
addressing (``_address``). Writes never call into it; a write only drops a document's
chunks and moves its space's ``search_version``, in the write's own transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from keepstone.db import (
    pgvector,
    read_transaction,
    refresh_statistics,
    utcnow,
    write_transaction,
)
from keepstone.db.vectors import Float32Array as FloatVector
from keepstone.errors import InsufficientStorage, InvalidSpaceRef
from keepstone.search.chunking import TRAIL_SEPARATOR, chunk_markdown
from keepstone.search.claim import EmbeddingClaim
from keepstone.search.embedding_table import EmbeddingTable
from keepstone.search.text import analyze
from keepstone.spaces import SpaceRef
from keepstone.store.base import ChunkRow, Progress
from keepstone.store.index import chunk_bytes, new_stamp
from keepstone.store.reserve import DiskReserve
from keepstone.store.sql_schema import (
    UNCHUNKED,
    memory_chunks,
    memory_documents,
    memory_space_usage,
    space_key,
)
from keepstone.store.sql_statements import BACKFILL_BATCH_DOCS, Statements

D = memory_documents
S = memory_space_usage
C = memory_chunks

log = logging.getLogger("keepstone.store")

#: The reserved ``tenant_id`` of global rows and of the instance counter.
NO_TENANT = ""


@dataclass(frozen=True, slots=True)
class PendingChunk:
    """A chunk the indexer has to embed (no vector, or one of another model)."""

    tenant_id: str
    space_key: str
    space_id: str
    path: str
    seq: int
    #: The headings above the chunk its text does not show, " > "-joined ('' for none).
    context: str
    text: str

    @property
    def search_text(self) -> str:
        """What to embed: ``keepstone.search.chunking.Chunk.search_text`` of the chunk."""
        return self.context + "\n" + self.text if self.context else self.text


# Aliases: SqlStore defines a method called ``list``.
ChunkRows = list[ChunkRow]
PendingChunks = list[PendingChunk]
#: (path, seq, cosine) of the chunks nearest to a query.
Neighbours = list[tuple[str, int, float]]


def _chunk_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``memory_chunks`` rows of a document (``doc``: its address, path, visibility,
    content and time, as SqlStore._write binds them)."""
    rows = []
    for seq, chunk in enumerate(chunk_markdown(doc["content"])):
        context = TRAIL_SEPARATOR.join(chunk.context)
        terms = " ".join(analyze(chunk.search_text))
        rows.append(
            {
                "tenant_id": doc["t"],
                "space_key": doc["k"],
                "path": doc["p"],
                "seq": seq,
                "space_id": doc["sid"],
                "visibility": doc["vis"],
                "heading": chunk.heading,
                "context": context,
                "start_offset": chunk.start,
                "end_offset": chunk.end,
                "text": chunk.text,
                "terms": terms,
                "embedding": None,
                "model": None,
                "updated_at": doc["now"],
                "stored_bytes": chunk_bytes(chunk.heading, context, chunk.text, terms),
                "stamp": new_stamp(),
            }
        )
    return rows


class DocumentIndex:
    """The document index of :class:`~keepstone.store.sql.SqlStore` (a mixin: see the module
    docstring)."""

    engine: Engine
    _sql: Statements
    _vec: pgvector.Pgvector | None
    reserve: DiskReserve | None

    @staticmethod
    def _address(ref: SpaceRef) -> dict[str, str]:
        """Validate ``ref`` and return its row address; refuse a tenant-less team ref."""
        if not ref.is_global and not ref.tenant:
            raise InvalidSpaceRef(
                f"space {ref.id!r} has no tenant; every {ref.visibility.value!r} space "
                "belongs to a team, so the caller must stamp the team id onto the ref",
                field="tenant",
            )
        return {"t": ref.tenant or NO_TENANT, "k": space_key(ref.id), "sid": ref.id}

    def chunk_rows(self, ref: SpaceRef) -> ChunkRows:
        """Every chunk of every document of the space, by path then position; a chunk not
        yet embedded has ``embedding`` and ``model`` None. Read :meth:`search_version`
        *before* this, so what is loaded is at least as new as the version it is cached
        under."""
        addr = self._address(ref)
        with read_transaction(self.engine) as conn:
            return _rows_of(conn.execute(self._sql.chunk_rows, addr).all())

    def chunk_digests(self, ref: SpaceRef) -> dict[str, tuple[int, int, int]]:
        """Each document of the space that has chunks, with the digest of its chunks'
        stamps (:class:`keepstone.store.index.ChunkStamps`), summed from an index alone: a
        row's stamp is new whenever it is chunked or given a vector."""
        addr = self._address(ref)
        with read_transaction(self.engine) as conn:
            rows = conn.execute(self._sql.chunk_digests, addr).all()
        return {path: (int(n), int(first), int(second)) for path, n, first, second in rows}

    def chunk_rows_of(self, ref: SpaceRef, paths: Sequence[str]) -> ChunkRows:
        """Every chunk of the documents ``paths`` of the space, by path then position."""
        if not paths:
            return []
        addr = self._address(ref)
        with read_transaction(self.engine) as conn:
            return _rows_of(conn.execute(self._sql.chunk_rows_of, {**addr, "paths": paths}).all())

    @property
    def vector_index(self) -> ChunkVectors | None:
        """pgvector's HNSW index over the chunks, when searches use it (PostgreSQL with
        pgvector, ``KEEPSTONE_PGVECTOR`` not ``off``); None on SQLite, a plain PostgreSQL
        or with ``off``: the ranking takes exact top-k over the space's matrix
        (:class:`keepstone.store.index.VectorIndexed`)."""
        if self._vec is None or not self._vec.search:
            return None
        return ChunkVectors(self._vec)

    def nearest_chunks(
        self, ref: SpaceRef, model: str, query: FloatVector, k: int, *, path_prefix: str = ""
    ) -> Neighbours | None:
        """:meth:`ChunkVectors.nearest` through :attr:`vector_index`; None when this store
        does not search with pgvector."""
        index = self.vector_index
        return (
            None if index is None else index.nearest(ref, model, query, k, path_prefix=path_prefix)
        )

    def chunk_similarity(
        self, ref: SpaceRef, model: str, query: FloatVector, keys: Sequence[tuple[str, int]]
    ) -> Neighbours | None:
        """:meth:`ChunkVectors.similarity` through :attr:`vector_index`; None when this
        store does not search with pgvector."""
        index = self.vector_index
        return None if index is None else index.similarity(ref, model, query, keys)

    def reconciled_versions(self, refs: Sequence[SpaceRef]) -> dict[str, int]:
        """:meth:`reconcile` then :meth:`search_version` of every space of ``refs``, by
        space id, in two queries however many spaces there are (plus a reconcile of each
        space that has unindexed documents): a search over many spaces
        (``scope=readable``) pays per space only for what changed."""
        addrs = [self._address(ref) for ref in refs]
        if not addrs:
            return {}
        spaces = sa.tuple_(D.c.tenant_id, D.c.space_key).in_([(a["t"], a["k"]) for a in addrs])
        # From the partial index of the documents still to chunk: nothing to read in a
        # space with nothing pending, however many documents it holds.
        stale = sa.select(D.c.tenant_id, D.c.space_key).where(spaces, UNCHUNKED).distinct()
        with read_transaction(self.engine) as conn:
            behind = {(r.tenant_id, r.space_key) for r in conn.execute(stale)}
        for a in addrs:
            if (a["t"], a["k"]) in behind and not self._backfilled(a):
                # Indexing writes: on a full disk the search goes on over what is indexed;
                # the documents still to chunk are found once there is room.
                log.warning("disk full: searching %s without indexing it first", a["sid"])
        versions = sa.select(S.c.tenant_id, S.c.space_key, S.c.search_version).where(
            sa.tuple_(S.c.tenant_id, S.c.space_key).in_([(a["t"], a["k"]) for a in addrs])
        )
        with read_transaction(self.engine) as conn:
            found = {
                (r.tenant_id, r.space_key): int(r.search_version or 0)
                for r in conn.execute(versions)
            }
        return {a["sid"]: found.get((a["t"], a["k"]), 0) for a in addrs}

    def _backfilled(self, addr: dict[str, str]) -> bool:
        """Chunk the space's documents still to chunk; False when the disk is full."""
        try:
            if self.reserve is not None:
                self.reserve.ensure()  # indexing writes: only while the reserve is there
            self.backfill_chunks(space=(addr["t"], addr["k"]))
        except InsufficientStorage:
            return False
        return True

    def search_version(self, ref: SpaceRef) -> int:
        """The space's index version: it grows with every write and delete of the space
        and every batch of its chunks embedded (0 for a space never written)."""
        addr = self._address(ref)
        with read_transaction(self.engine) as conn:
            version = conn.execute(self._sql.search_version, addr).scalar()
        return int(version or 0)

    def count_pending(self, refs: Sequence[SpaceRef], model: str) -> int:
        """How many chunks of the spaces ``refs`` have no vector of ``model`` (none, or
        another model's): one index range per space, in one read transaction
        (:class:`keepstone.store.index.PendingCount`)."""
        addrs = [self._address(ref) for ref in refs]
        if not addrs:
            return 0
        with read_transaction(self.engine) as conn:
            return sum(
                int(conn.execute(self._sql.pending_in_space, {**a, "model": model}).scalar() or 0)
                for a in addrs
            )

    def count_backlog(self, model: str) -> int:
        """How many chunks of every space have no vector of ``model``: the indexer's
        backlog."""
        with read_transaction(self.engine) as conn:
            return int(conn.execute(self._sql.backlog, {"model": model}).scalar() or 0)

    def pending_chunks(self, limit: int, model: str) -> PendingChunks:
        """Up to ``limit`` chunks with no vector, then with one made by another model than
        ``model``, each newest first, across every space. Reads without claiming: the
        indexer of several replicas uses :meth:`claim_pending_chunks`."""
        with read_transaction(self.engine) as conn:
            return self._pending_rows(conn, limit, model, lock=False)

    def claim_pending_chunks(self, limit: int, model: str) -> AbstractContextManager[ChunkClaim]:
        """Claim up to ``limit`` pending chunks (see :meth:`pending_chunks`) to embed::

            with store.claim_pending_chunks(32, embedder.model_id) as claim:
                claim.store_embeddings(embed([c.search_text for c in claim.rows]))

        On PostgreSQL the rows are locked ``FOR UPDATE SKIP LOCKED`` in a transaction
        held until the block ends, so concurrent indexers (threads, replicas) never
        claim the same row, and the vectors commit with the claim when the block exits
        normally (an exception, or a crash, rolls back and leaves the rows pending). A
        write of a claimed chunk's document waits for the claim: keep batches small.
        On SQLite the claim holds no lock (a lock would stop every writer while the
        model runs): rows are read, and the vectors are written in one short write
        transaction when the block exits; a chunk rewritten meanwhile keeps its new,
        unembedded text. Either way the spaces' ``search_version`` is bumped.
        """
        return self._embedding.claim(limit, model)

    def claim_fresh_chunks(
        self, limit: int, model: str, since: datetime
    ) -> AbstractContextManager[ChunkClaim]:
        """:meth:`claim_pending_chunks` of the chunks chunked at ``since`` or later only:
        the indexer's fresh lane, claimed before each batch of the backlog."""
        return self._embedding.claim(limit, model, since)

    @property
    def _embedding(self) -> EmbeddingTable[PendingChunk]:
        """The claim and vector plumbing of ``memory_chunks``."""
        return EmbeddingTable(
            self.engine, self._pending_rows, _chunk_key, self._store_embeddings, self._vec, C.name
        )

    def _pending_rows(
        self,
        conn: Connection,
        limit: int,
        model: str,
        lock: bool,
        since: datetime | None = None,
    ) -> PendingChunks:
        """Up to ``limit`` chunks to embed (``lock``: claimed ``FOR UPDATE SKIP LOCKED``):
        those never embedded first, newest first, then, while the batch has room, those
        of each other model that made vectors (in model order), newest first. With
        ``since`` (the fresh lane), only chunks never embedded that were chunked then or
        later: a fresh chunk has no vector of any model."""
        sql = self._sql
        params: dict[str, Any] = {"limit": limit}
        if since is not None:
            fresh = conn.execute(
                sql.claim_since if lock else sql.pending_since, {**params, "since": since}
            )
            return [_pending(r) for r in fresh]
        rows = [_pending(r) for r in conn.execute(sql.claim if lock else sql.pending, params)]
        after = ""
        while len(rows) < limit:
            other = conn.execute(sql.next_model, {"after": after}).scalar()
            if other is None:
                break
            after = other
            if other != model:
                params.update(other=other, limit=limit - len(rows))
                found = conn.execute(sql.claim_other if lock else sql.pending_other, params)
                rows += [_pending(r) for r in found]
        return rows

    def store_embeddings(
        self, rows: Sequence[PendingChunk], blobs: Sequence[bytes], model: str
    ) -> int:
        """Store ``blobs[i]`` (a ``keepstone.db.vectors`` blob made by ``model``) as the
        vector of ``rows[i]`` in one transaction, bumping the spaces' versions; a chunk
        rewritten since it was read is left alone. Returns the number stored."""
        return self._embedding.write(rows, blobs, model)

    def _store_embeddings(
        self, conn: Connection, pairs: Sequence[tuple[PendingChunk, bytes]], model: str
    ) -> int:
        if not pairs:
            return 0
        stored = 0
        vecs = pgvector.blob_values([b for _, b in pairs]) if self._vec is not None else None
        # Row by row: a driver need not report the rowcount of an executemany.
        for i, (row, blob) in enumerate(pairs):
            params = {
                "t": row.tenant_id,
                "k": row.space_key,
                "p": row.path,
                "n": row.seq,
                "was_text": row.text,
                "was_context": row.context,
                "blob": blob,
                "blob_bytes": len(blob),
                "by_model": model,
                "stamp": new_stamp(),
                **({"vec": vecs[i][0]} if vecs is not None else {}),
            }
            stored += conn.execute(self._sql.store_embedding, params).rowcount
        # Space counters in key order, so two indexers cannot deadlock one another.
        spaces = sorted({(r.tenant_id, r.space_key, r.space_id) for r, _ in pairs})
        for tenant, key, space_id in spaces:
            conn.execute(self._sql.bump_space, {"t": tenant, "k": key, "sid": space_id})
        return stored

    def reindex(self, progress: Progress | None = None, *, rebuild: bool = False) -> int:
        """Chunk every unindexed document (``rebuild``: drop every chunk, and its vector,
        first); return how many documents were looked at."""
        if rebuild:
            with write_transaction(self.engine) as conn:
                conn.execute(self._sql.unmark_chunked)  # documents first: the lock order
                conn.execute(sa.delete(C))
                conn.execute(sa.update(S).values(search_version=S.c.search_version + 1))
        return self.backfill_chunks(progress)

    def reconcile(self, ref: SpaceRef, *, progress: Progress | None = None) -> int:
        """Chunk the space's documents that have no chunks (written since its last
        search, or before the index existed); return how many were looked at. A search
        calls it first, so a document is keyword-searchable as soon as its write commits
        while the write itself never waits on chunking."""
        addr = self._address(ref)
        return self.backfill_chunks(progress, space=(addr["t"], addr["k"]))

    def backfill_chunks(
        self,
        progress: Progress | None = None,
        *,
        space: tuple[str, str] | None = None,
        skip_locked: bool = False,
    ) -> int:
        """Chunk every document (of ``space``, a (tenant, space key) pair, when given) that
        has no chunks; return how many documents were looked at. ``progress(1)`` per
        document.

        Documents are taken in key order, :data:`BACKFILL_BATCH_DOCS` per write
        transaction; each is locked and checked again, so a concurrent write of it wins.
        ``skip_locked``: a document another transaction holds is left for a later pass
        rather than waited for (the indexer, while its claim holds chunks a writer of that
        document may be waiting for).
        A backfill that chunked many documents (a reindex, the first search after a bulk
        import) then refreshes the planner's statistics of the tables it filled
        (:func:`keepstone.db.refresh_statistics`).
        """
        done, chunked = self._backfill(progress, space, skip_locked)
        refresh_statistics(self.engine, (C.name, D.name), chunked)
        return done

    def _backfill(
        self, progress: Progress | None, space: tuple[str, str] | None, skip_locked: bool
    ) -> tuple[int, int]:
        """:meth:`backfill_chunks`' work: (documents looked at, documents chunked)."""
        lock = self._sql.lock_content_if_free if skip_locked else self._sql.lock_content
        done = chunked = 0
        after: dict[str, str] = {"after_t": "", "after_k": "", "p": ""}
        query = self._sql.unindexed
        if space is not None:
            query = self._sql.unindexed_in_space
            after.update(t=space[0], k=space[1], after_t=space[0], after_k=space[1])
        while True:
            with read_transaction(self.engine) as conn:
                batch = conn.execute(query, after).all()
            if not batch:
                return done, chunked
            with write_transaction(self.engine, durable=False) as conn:  # chunks: derived
                touched: set[tuple[str, str, str]] = set()
                for r in batch:
                    key = {"t": r.tenant_id, "k": r.space_key, "sid": r.space_id, "p": r.path}
                    doc = conn.execute(lock, key).first()
                    if doc is None or conn.execute(self._sql.has_chunks, key).first():
                        continue  # removed, or written (or, skip_locked, held), meanwhile
                    bound = {**key, "vis": doc.visibility, "content": doc.content}
                    chunks = _chunk_rows({**bound, "now": utcnow()})
                    if chunks:  # a blank document has none, and changes nothing
                        conn.execute(self._sql.insert_chunks, chunks)
                        touched.add((r.tenant_id, r.space_key, r.space_id))
                        chunked += 1
                # Space counters last, in key order, after every document lock: a write
                # locks its document, then its space's counter, so taking a counter before
                # the next document's lock would deadlock with a write of that document.
                for tenant, k, space_id in sorted(touched):
                    conn.execute(self._sql.bump_space, {"t": tenant, "k": k, "sid": space_id})
            for _ in batch:
                done += 1
                if progress is not None:
                    progress(1)
            if len(batch) < BACKFILL_BATCH_DOCS:
                return done, chunked
            last = batch[-1]
            after.update(after_t=last.tenant_id, after_k=last.space_key, p=last.path)


def space_chunks(ref: SpaceRef, path_prefix: str = "") -> pgvector.VectorRows:
    """The chunks of the space ``ref`` (under ``path_prefix``) as pgvector rows, named by
    (path, seq)."""
    where = "tenant_id = :t AND space_key = :k AND space_id = :sid"
    if path_prefix:
        where += " AND starts_with(path, :prefix)"
    params = {**DocumentIndex._address(ref), "prefix": path_prefix}
    return pgvector.VectorRows(C.name, ("path", "seq"), where, params)


@dataclass(frozen=True, slots=True)
class ChunkVectors:
    """pgvector's HNSW index over ``memory_chunks``, as a search asks it for a space's
    dense side (:class:`keepstone.store.index.ChunkVectorIndex`): ``vec`` is the store's
    handle, read at each call, so a changed ``min_vectors`` takes effect at once."""

    vec: pgvector.Pgvector

    @property
    def min_vectors(self) -> int:
        return self.vec.min_vectors

    def nearest(
        self, ref: SpaceRef, model: str, query: FloatVector, k: int, *, path_prefix: str = ""
    ) -> Neighbours:
        """The ``k`` chunks of the space (under ``path_prefix``) embedded by ``model``
        nearest to ``query``, as (path, seq, cosine), best first."""
        found = self.vec.nearest(space_chunks(ref, path_prefix), model, query, k)
        return [(str(n.key[0]), int(n.key[1]), n.cosine) for n in found]

    def similarity(
        self, ref: SpaceRef, model: str, query: FloatVector, keys: Sequence[tuple[str, int]]
    ) -> Neighbours:
        """The cosine to ``query`` of the space's chunks ``keys`` ((path, seq)) that
        ``model`` embedded, as (path, seq, cosine)."""
        found = self.vec.similarity(space_chunks(ref), model, query, keys)
        return [(str(n.key[0]), int(n.key[1]), n.cosine) for n in found]


#: Chunks claimed by :meth:`SqlStore.claim_pending_chunks`, and their vectors (the claim
#: shape every index shares).
ChunkClaim = EmbeddingClaim[PendingChunk]


def _rows_of(rows: Sequence[Any]) -> ChunkRows:
    # Unpacked as tuples: a space's every row is read when its cache is cold, and a Row's
    # attribute lookups cost more than the rest of making the row.
    return [
        ChunkRow(
            path, int(seq), heading, text, terms, None if vec is None else bytes(vec), model, stamp
        )
        for path, seq, heading, text, terms, vec, model, stamp in rows
    ]


def _chunk_key(r: PendingChunk) -> tuple[str, str, str, int]:
    return r.tenant_id, r.space_key, r.path, r.seq


def _pending(r: Any) -> PendingChunk:
    return PendingChunk(r.tenant_id, r.space_key, r.space_id, r.path, int(r.seq), r.context, r.text)
