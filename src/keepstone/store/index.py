"""The search index: what a store implements so that its documents can be searched
(docs/search.md, "How search is wired"; docs/architecture.md, "Where to add a store
adapter").

A store is searchable in one of two ways, and the services ask which by capability,
never by the store's class:

* It keeps an index of its own: :class:`SearchIndex`. The SQL stores
  (``store/sql_index.py``, a mixin of ``SqlStore``) and the filesystem store (its sidecar,
  ``store/fs_index.py``) do. The index chunks the documents, holds each chunk's analysed
  terms and vector, and never ranks: :class:`keepstone.service.search.DocumentSearch`
  ranks its chunk rows, and :class:`keepstone.service.indexer.Indexer` embeds what it
  has pending.
* It answers searches itself: :class:`SearchingStore`. The client of a Keepstone server
  (``store/http.py``) does; its server searches.

A store that does neither is refused when the search service is built
(:func:`search_capability`), so a new adapter can never be silently unsearchable.

An index may have optional capabilities, each a small protocol of its own, asked for
with ``isinstance`` (they are runtime-checkable):

* :class:`VectorIndexed`: the index may have a nearest-neighbour index in its database
  (the SQL stores: pgvector's HNSW). Its ``vector_index`` is a :class:`ChunkVectorIndex`
  when that database has one and searches use it, None otherwise (SQLite, a PostgreSQL
  without pgvector, ``KEEPSTONE_PGVECTOR=off``): whether it is there depends on the
  database a store runs on, not on the store's class. :func:`vector_index_of` asks both
  questions. Without one, the ranking takes exact top-k over the space's matrix.
* :class:`PendingCount`: the index counts a few spaces' chunks still waiting for a vector
  (what a search answer reports as ``pending``) from an index of its own.
* :class:`ChunkBackfill`: the index can chunk the unindexed documents of every space in
  one sweep (the SQL store: the background indexer runs it on every pass). An index
  without it chunks a space when it reconciles it.
* :class:`ChunkStamps`: the index says cheaply which of a space's documents have chunks
  that changed (a digest of each document's chunk rows'
  :attr:`~keepstone.store.base.ChunkRow.stamp`, summed in the database from an index), and
  reads the chunks of some documents only: a search after a write then reads the written
  document's chunks, not the space's. Without it, a search reads a space's rows
  again whenever its version moved.
* :class:`StoredTotals`: the store can say what it holds in all, every team together:
  documents and index (the operator's figures, ``keepstone doctor``). The stores that keep an
  index keep each chunk's :func:`chunk_bytes` on its row, under an index of the database
  led by the space, so a space's ``index_bytes`` (``Usage``) and the total are sums of that
  column read from the index alone, never of the chunks' text.

The rules every index keeps:

* **Reconcile first.** :meth:`SearchIndex.reconcile` brings a space's rows in line with
  its documents (a write never waits for chunking; a hand edit of a plain tree is found
  too). A search reconciles, then reads the space's version, then its rows.
* **Versions only grow.** :meth:`SearchIndex.search_version` moves whenever the space's
  chunk rows or vectors change and never goes back, so a cache stamped with a version is
  never served for newer rows; rows read after the version are at least as new.
* **A claim stores all or nothing.** The vectors given to a claim
  (:meth:`SearchIndex.claim_pending_chunks`) are written when its block exits normally;
  an exception, or a crash, leaves the rows pending. A chunk whose document changed
  meanwhile keeps its new, unembedded text.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from keepstone.documents import StoredBytes
from keepstone.errors import InvalidRequest
from keepstone.spaces import SpaceRef
from keepstone.store.base import ChunkRow, Progress

if TYPE_CHECKING:
    from keepstone.db.vectors import Float32Array

#: (path, seq, cosine) of chunks of a space, best first.
Neighbours = list[tuple[str, int, float]]


class ChunkToEmbed(Protocol):
    """A chunk an index has pending: no vector, or a vector of another model than the
    one asked for. Each index has its own row class; a caller reads these two fields and
    hands the rows back only to the claim that gave them."""

    @property
    def space_id(self) -> str:
        """The :attr:`~keepstone.spaces.SpaceRef.id` of the chunk's space."""
        ...

    @property
    def search_text(self) -> str:
        """What to embed: the headings above the chunk its text does not show, then its
        text (``keepstone.search.chunking.Chunk.search_text``)."""
        ...


R = TypeVar("R", bound=ChunkToEmbed)


class ClaimedChunks(Protocol[R]):
    """Chunks claimed to embed, as :class:`keepstone.search.claim.EmbeddingClaim` holds
    them."""

    @property
    def rows(self) -> Sequence[R]:
        """What to embed, at most the claim's limit."""
        ...

    def store_embeddings(self, blobs: Sequence[bytes], rows: Sequence[R] | None = None) -> None:
        """Give ``blobs[i]`` (a :mod:`keepstone.search.vectors` blob) to ``rows[i]``
        (default: every claimed row, in order); stored when the claim's block exits
        without an exception. A row this claim does not hold is a ValueError."""
        ...


class ChunkVectorIndex(Protocol):
    """A database's own nearest-neighbour index over a store's chunk vectors (pgvector's
    HNSW): the dense side of a large space, without loading its matrix."""

    @property
    def min_vectors(self) -> int:
        """A space with at least this many vectors of a model is searched through the
        index, a smaller one exactly (``KEEPSTONE_HNSW_MIN_VECTORS``)."""
        ...

    def nearest(
        self, ref: SpaceRef, model: str, query: Float32Array, k: int, *, path_prefix: str = ""
    ) -> Neighbours:
        """The ``k`` chunks of the space (under ``path_prefix``) embedded by ``model``
        nearest to ``query`` (a unit vector), best first."""
        ...

    def similarity(
        self, ref: SpaceRef, model: str, query: Float32Array, keys: Sequence[tuple[str, int]]
    ) -> Neighbours:
        """The cosine to ``query`` of the space's chunks ``keys`` ((path, seq)) that
        ``model`` embedded; a key with no such vector is left out."""
        ...


@runtime_checkable
class SearchIndex(Protocol):
    """A store's own index of its documents' chunks: what makes a store searchable."""

    def reconcile(self, ref: SpaceRef, *, progress: Progress | None = None) -> int:
        """Index the space's documents the index does not hold as they are now (written
        since, edited by hand, removed); return how many documents it looked at or
        changed. ``progress(1)`` per document."""
        ...

    def search_version(self, ref: SpaceRef) -> int:
        """The space's index version (0 for a space never indexed): it moves whenever the
        space's chunk rows or vectors change, and never goes back."""
        ...

    def reconciled_versions(self, refs: Sequence[SpaceRef]) -> dict[str, int]:
        """:meth:`reconcile` then :meth:`search_version` of every space of ``refs``, by
        space id: what a search over several spaces (``scope=readable``) asks first."""
        ...

    def chunk_rows(self, ref: SpaceRef) -> list[ChunkRow]:
        """Every chunk of the space, by path then position; read :meth:`search_version`
        before it, so the rows are at least as new as the version they are cached under."""
        ...

    def claim_pending_chunks(
        self, limit: int, model: str
    ) -> AbstractContextManager[ClaimedChunks[Any]]:
        """Up to ``limit`` chunks, across every space, with no vector of ``model`` (none,
        or another model's), to embed::

            with index.claim_pending_chunks(32, embedder.model_id) as claim:
                claim.store_embeddings(encode_many(embed([c.search_text for c in claim.rows])))

        Indexers of several processes sharing a database never claim the same row. The
        rows are of the index's own class (``Any`` here): hand them back only to their
        claim."""
        ...


@runtime_checkable
class VectorIndexed(Protocol):
    """An index whose database may answer nearest-neighbour queries over its chunk
    vectors itself."""

    @property
    def vector_index(self) -> ChunkVectorIndex | None:
        """The database's own nearest-neighbour index over the chunk vectors, when
        searches use one now; None: the dense side is exact over the space's matrix."""
        ...


def vector_index_of(index: SearchIndex) -> ChunkVectorIndex | None:
    """The nearest-neighbour index of ``index``'s database, when it may have one
    (:class:`VectorIndexed`) and has it; None otherwise."""
    return index.vector_index if isinstance(index, VectorIndexed) else None


@runtime_checkable
class ChunkBackfill(Protocol):
    """An index that chunks the unindexed documents of every space in one sweep."""

    def backfill_chunks(
        self, progress: Progress | None = None, *, skip_locked: bool = False
    ) -> int:
        """Chunk every document that has no chunks; return how many it looked at,
        ``progress(1)`` per document. ``skip_locked``: leave a document another
        transaction holds for a later pass instead of waiting for it."""
        ...


def chunk_bytes(*parts: str | bytes | None) -> int:
    """The bytes a chunk row holds for search: its heading, context, text and analysed
    terms in UTF-8, and its vector blob (None: none yet). What ``index_bytes`` sums."""
    return sum(len(p.encode("utf-8") if isinstance(p, str) else p) for p in parts if p)


#: The two primes a document's :func:`stamp_digest` sums its chunks' stamps modulo.
DIGEST_PRIMES = (2_147_483_647, 2_147_483_629)


@runtime_checkable
class ChunkStamps(Protocol):
    """An index whose chunk rows carry a stamp that is new whenever a row is written
    (chunked, or given a vector), so a reader holding a space's rows can ask which
    documents changed and read only those again."""

    def chunk_digests(self, ref: SpaceRef) -> dict[str, tuple[int, int, int]]:
        """Each document of the space that has chunks, with the :func:`stamp_digest` of
        its chunks' stamps, without their text: a document's chunks are new, gone or
        rewritten exactly where this differs from the rows a reader holds. Read
        :meth:`SearchIndex.search_version` before it."""
        ...

    def chunk_rows_of(self, ref: SpaceRef, paths: Sequence[str]) -> list[ChunkRow]:
        """Every chunk of the documents ``paths`` of the space (a path with none: no
        rows), by path then position, each with its stamp."""
        ...


def stamp_digest(stamps: Iterable[int]) -> tuple[int, int, int]:
    """How many stamps, and their sums modulo each of :data:`DIGEST_PRIMES`: two
    documents' chunks that differ in a stamp differ here but with odds of about 2**-62.
    An index computes the same in its database (sums of residues fit 64 bits)."""
    count = first = second = 0
    p, q = DIGEST_PRIMES
    for stamp in stamps:
        count += 1
        first += stamp % p
        second += stamp % q
    return count, first, second


def new_stamp() -> int:
    """A stamp for a chunk row being written (:class:`ChunkStamps`): random, 63 bits from
    the OS, so no writer (a process forked from another included) gives a row the stamp it
    had, and it fits a signed 64-bit column."""
    return secrets.randbits(63)


@runtime_checkable
class StoredTotals(Protocol):
    """A store that can sum what it holds across every team and global space."""

    def stored_totals(self) -> StoredBytes:
        """Document and index bytes of every space (each a sum of the figures the
        spaces' ``usage`` reports)."""
        ...


@runtime_checkable
class PendingCount(Protocol):
    """An index that counts the chunks of some spaces still waiting for a vector, from
    an index of its own (every search answer says it, ``pending``)."""

    def count_pending(self, refs: Sequence[SpaceRef], model: str) -> int:
        """How many chunks of the spaces ``refs`` have no vector of ``model`` (none, or
        another model's)."""
        ...


def pending_of(index: SearchIndex, refs: Sequence[SpaceRef], model: str) -> int:
    """What the spaces ``refs`` of ``index`` have pending for ``model``; 0 for an index
    that cannot count (:class:`PendingCount`)."""
    return index.count_pending(refs, model) if isinstance(index, PendingCount) else 0


class RemoteHitLike(Protocol):
    """A hit as a searching store answers it (``keepstone.store.http.SearchHit``)."""

    @property
    def path(self) -> str: ...
    @property
    def heading(self) -> str: ...
    @property
    def snippet(self) -> str: ...
    @property
    def score(self) -> float: ...
    @property
    def also_in(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def matched(self) -> tuple[str, ...]: ...


@runtime_checkable
class SearchingStore(Protocol):
    """A store that keeps no index but answers searches itself (a client of a Keepstone
    server, which searches)."""

    def search(
        self,
        ref: SpaceRef,
        q: str,
        limit: int,
        path_prefix: str,
        filters: Mapping[str, str] | None = None,
    ) -> Sequence[RemoteHitLike]:
        """The best sections of the space for ``q`` (stripped, checked), best first;
        ``filters``: the search's filters as query parameters (since, until, min_score,
        tags, recency_days), which the server applies."""
        ...


def search_capability(store: object) -> SearchIndex | SearchingStore:
    """How ``store`` is searched: it answers searches itself (asked first), or it keeps
    an index. A store that does neither is :class:`~keepstone.errors.InvalidRequest`,
    raised where a search service is built, so it fails at start rather than at the
    first search."""
    if isinstance(store, SearchingStore):
        return store
    if isinstance(store, SearchIndex):
        return store
    raise InvalidRequest(
        f"this store ({type(store).__name__}) keeps no search index and answers no "
        "search itself: a store adapter implements keepstone.store.index.SearchIndex, or "
        "SearchingStore, to be searchable (docs/architecture.md)"
    )


__all__ = [
    "ChunkBackfill",
    "ChunkStamps",
    "ChunkToEmbed",
    "ChunkVectorIndex",
    "ClaimedChunks",
    "Neighbours",
    "PendingCount",
    "RemoteHitLike",
    "SearchIndex",
    "SearchingStore",
    "DIGEST_PRIMES",
    "StoredTotals",
    "VectorIndexed",
    "chunk_bytes",
    "new_stamp",
    "pending_of",
    "search_capability",
    "stamp_digest",
    "vector_index_of",
]
