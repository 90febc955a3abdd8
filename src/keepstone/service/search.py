"""Searching a space's documents by keyword and by meaning (docs/search.md, "Searching
documents").

:class:`DocumentSearch` ranks the chunks of the spaces it is given: first the store's
``reconcile(ref)`` (so every committed write, and on the filesystem every hand edit, is
keyword-searchable), then the space's BM25 index and its matrix of embedded chunks, both
loaded through caches stamped with the space's ``search_version``; the keyword side (BM25
relative to the query's full match) and the dense side (cosine, when an embedder is
given and chunks of its model are embedded) are fused with the fixed-scale weighted sum
(:mod:`keepstone.search.fusion`). A hit is a section: the best chunk of each (space, path,
heading). Isolation is structural: the rows searched are the rows of the refs given,
and a ref is always the caller's own (:func:`keepstone.service.access.space_ref`).

The store is asked by capability (:mod:`keepstone.store.index`): one that keeps an index
(:class:`~keepstone.store.index.SearchIndex`) is ranked here; one that keeps none but
answers searches itself (the HTTP client store, whose server searches) is asked
directly; one that does neither is refused when the search is built.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt

from keepstone.db import utcnow
from keepstone.db.vectors import Float32Array, encode_many
from keepstone.errors import InvalidRequest, KeepstoneError
from keepstone.paths import check_path_prefix
from keepstone.search import hybrid
from keepstone.search.cache import Entry, VectorCache
from keepstone.search.chunking import snippet
from keepstone.search.filters import NO_FILTERS, SearchFilters, front_matter_tags
from keepstone.search.floor import Floor, duplicate_key, empty_hint, floor_for
from keepstone.search.found import Found, pending_of
from keepstone.search.hybrid import CANDIDATES as CANDIDATES
from keepstone.search.text import query_terms
from keepstone.service.space_rows import (
    SpaceRows,
    patched_entry,
    space_rows,
    vector_entry,
)
from keepstone.spaces import SpaceRef
from keepstone.store.base import ChunkRow, MemoryStore
from keepstone.store.index import (
    ChunkToEmbed,
    ClaimedChunks,
    SearchIndex,
    SearchingStore,
    search_capability,
    vector_index_of,
)
from keepstone.store.index import pending_of as index_pending

if TYPE_CHECKING:
    from keepstone.embed.base import Embedder

log = logging.getLogger(__name__)

#: The most hits one search returns.
MAX_LIMIT = 50
#: BM25 indexes kept in memory (one per space searched lately).
BM25_CACHE_SPACES = 256
#: Pending chunks a local command embeds per claim before it searches: a few, so the time
#: budget is overrun by one short batch at most.
LOCAL_BATCH = 8
#: Seconds of embedding after which a local command says, once, what it is doing.
SLOW_NOTICE_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class DocumentHit:
    """One section found: its document, heading trail, a snippet, the fused score, which
    signals matched (``"keyword"``, ``"meaning"``) and the space it is in. ``also_in``:
    the (space id, path) of each near-duplicate section this hit stands for."""

    path: str
    heading: str
    snippet: str
    score: float
    matched: tuple[str, ...]
    space_id: str
    also_in: tuple[tuple[str, str], ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The API's shape of a hit (``GET /api/memory/search``)."""
        return {
            "path": self.path,
            "heading": self.heading,
            "snippet": self.snippet,
            "score": self.score,
            "matched": list(self.matched),
            "also_in": [{"path": path, "space_id": space} for space, path in self.also_in],
        }


R = TypeVar("R", bound=ChunkToEmbed)


@dataclass(frozen=True, slots=True)
class _Found:
    """A fused chunk before it is a hit."""

    score: float
    matched: tuple[str, ...]
    space_id: str
    row: ChunkRow
    #: The relative BM25 and cosine the floor reads (None: that side has none), and
    #: whether the dense side ranked the space at all.
    keyword: float | None = None
    meaning: float | None = None
    hybrid: bool = False


def check_query(q: str, limit: int) -> str:
    """The query stripped; ``400 invalid_request`` naming ``query`` (the REST route's ``q``
    renames it) or ``limit`` otherwise."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be a whole number from 1 to {MAX_LIMIT}", field="limit")
    if not isinstance(q, str) or not q.strip():
        raise InvalidRequest("query must be a non-empty search query", field="query")
    return q.strip()


class DocumentSearch:
    """Keyword and meaning search over the documents of a store's spaces.

    ``embedder`` None is keyword-only. ``cache`` holds the spaces' vector matrices (one
    per process is enough; it is bounded by bytes). ``embed_budget`` > 0 (local commands,
    with no indexer running) embeds pending chunks, newest first, for up to that many
    seconds before each search; past :data:`SLOW_NOTICE_SECONDS` it calls ``notice``
    once with one line saying so (the CLI prints it). A
    store that keeps no index and answers no search itself is refused here, when the
    search is built (:func:`keepstone.store.index.search_capability`).
    """

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder | None = None,
        cache: VectorCache | None = None,
        *,
        embed_budget: float = 0.0,
        notice: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        capability = search_capability(store)
        #: The store's own search (it keeps no index), or its index, ranked here.
        self._searching: SearchingStore | None = None
        self._index: SearchIndex | None = None
        if isinstance(capability, SearchingStore):
            self._searching = capability
        else:
            self._index = capability
        self.embedder = embedder
        self.cache = cache if cache is not None else VectorCache()
        self.embed_budget = embed_budget
        self.notice = notice
        self._keyword: hybrid.ScopeCache[SpaceRows] = hybrid.ScopeCache(BM25_CACHE_SPACES)

    def search(
        self,
        refs: Sequence[SpaceRef],
        query: str,
        *,
        limit: int = 10,
        path_prefix: str = "",
        filters: SearchFilters = NO_FILTERS,
    ) -> Found[DocumentHit]:
        """The best sections of the spaces ``refs`` for ``query``, best first: those the
        relevance floor (or ``filters.min_score``) lets through, within ``filters``;
        near-duplicates folded into the best of them (its ``also_in``); and how many chunks
        of them are not yet embedded (``pending``)."""
        q = check_query(query, limit)
        path_prefix = check_path_prefix(path_prefix)
        index = self._index
        if index is None:
            assert self._searching is not None
            return self._ask_store(self._searching, refs, q, limit, path_prefix, filters)
        terms = query_terms(q)
        versions = self._versions(index, refs)
        embedded = self._query_vector(q)
        found: list[_Found] = []
        for ref in refs:
            found += self._rank_space(
                index, ref, versions[ref.id], terms, embedded, path_prefix, filters
            )
        model = self.embedder.model_id if self.embedder is not None else None
        pending = 0 if model is None else index_pending(index, refs, model)
        hits = _sections(found, terms, limit, floor_for(model, filters.min_score))
        return Found(hits, pending, empty_hint(filtered=filters.narrows))

    def _ask_store(
        self,
        store: SearchingStore,
        refs: Sequence[SpaceRef],
        q: str,
        limit: int,
        prefix: str,
        filters: SearchFilters,
    ) -> Found[DocumentHit]:
        """The store's own search of each space (its server floors and filters), merged
        (``pending``: the sum of what each answer said)."""
        params = filters.as_params()
        remote: list[DocumentHit] = []
        pending = 0
        for ref in refs:
            answer = store.search(ref, q, limit, prefix, params)
            pending += pending_of(answer)
            remote += [
                DocumentHit(
                    h.path, h.heading, h.snippet, h.score, tuple(h.matched), ref.id, h.also_in
                )
                for h in answer
            ]
        return Found(self._merge(remote, limit), pending, empty_hint(filtered=filters.narrows))

    def _versions(self, index: SearchIndex, refs: Sequence[SpaceRef]) -> dict[str, int]:
        """Each space's version once reconciled (and, for a local command, once its
        pending chunks are embedded): what its cached rows and vectors are stamped with."""
        versions = index.reconciled_versions(refs)
        if self.embed_budget > 0 and self._embed_pending(index):
            versions = {ref.id: index.search_version(ref) for ref in refs}
        return versions

    def _query_vector(self, q: str) -> Callable[[], Float32Array | None] | None:
        """The query's vector, embedded on first use (only a space holding vectors of the
        model needs it) and once for every space; None without an embedder. When the
        embedder fails, every space of this search ranks by keyword alone."""
        embedder = self.embedder
        if embedder is None:
            return None

        @functools.cache
        def embedded() -> Float32Array | None:
            return hybrid.query_vector(embedder.embed, q, log, "documents")

        return embedded

    def _rank_space(
        self,
        index: SearchIndex,
        ref: SpaceRef,
        version: int,
        terms: Sequence[str],
        query: Callable[[], Float32Array | None] | None,
        path_prefix: str,
        filters: SearchFilters,
    ) -> list[_Found]:
        """The fused chunks of one space: BM25 over its cached index, fused with the
        dense side where the embedder's model has vectors in it."""
        keyword = self._keyword_entry(index, ref, version)
        written = self._written(ref, filters)
        allowed = _allowed(keyword.rows, path_prefix, filters, written)
        dense = None
        embedder = self.embedder
        if embedder is not None and query is not None and keyword.vectors.get(embedder.model_id):
            vector = query()
            if vector is not None:
                dense = self._dense(index, ref, version, keyword, vector, path_prefix)
        now = utcnow()
        out = []
        for fused in hybrid.rank(keyword.index, terms, allowed=allowed, dense=dense):
            row = keyword.rows[fused.key]
            score = fused.score
            if filters.recency_days is not None and row.path in written:
                score = filters.prior(score, written[row.path], now)
            out.append(
                _Found(
                    round(score, 6),
                    fused.matched,
                    ref.id,
                    row,
                    fused.keyword,
                    fused.meaning,
                    dense is not None,
                )
            )
        # Ties by path and position, whatever order the cached rows are in.
        out.sort(key=lambda f: (-f.score, f.row.path, f.row.seq))
        return out

    def _written(self, ref: SpaceRef, filters: SearchFilters) -> dict[str, datetime]:
        """When each document of the space was last written, when the filters need it."""
        if filters.since is None and filters.until is None and filters.recency_days is None:
            return {}
        return {info.path: info.updated_at for info in self.store.list(ref)}

    @staticmethod
    def _merge(hits: list[DocumentHit], limit: int) -> list[DocumentHit]:
        """Best first across spaces, the best chunk of each (space, path, heading)."""
        hits.sort(key=lambda h: -h.score)  # stable: each space's order kept on ties
        seen: set[tuple[str, str, str]] = set()
        out: list[DocumentHit] = []
        for hit in hits:
            key = (hit.space_id, hit.path, hit.heading)
            if key in seen:
                continue
            seen.add(key)
            out.append(hit)
            if len(out) >= limit:
                break
        return out

    def _keyword_entry(self, index: SearchIndex, ref: SpaceRef, version: int) -> SpaceRows:
        def build() -> SpaceRows:
            # Read after the version: at least as new.
            return space_rows(index, ref, self._keyword.peek(ref.id))

        return self._keyword.get(ref.id, version, build)

    def _dense(
        self,
        index: SearchIndex,
        ref: SpaceRef,
        version: int,
        keyword: SpaceRows,
        query: Float32Array,
        path_prefix: str,
    ) -> hybrid.DenseSide | None:
        """The space's dense side: the store's vector index (pgvector's HNSW) for a space
        of at least its ``min_vectors`` vectors of the model, else exact top-k over the
        cached matrix."""
        assert self.embedder is not None
        model = self.embedder.model_id
        vectors = vector_index_of(index)
        min_vectors = None if vectors is None else vectors.min_vectors

        def exact() -> hybrid.DenseSide | None:
            entry = self._vector_entry(ref, version, keyword)
            return hybrid.ExactDense(entry.matrix, keyword.row_map.rows_of(entry), query)

        def nearest(k: int) -> list[tuple[Hashable, float]]:
            assert vectors is not None
            found = vectors.nearest(ref, model, query, k, path_prefix=path_prefix)
            return [((path, seq), cosine) for path, seq, cosine in found]

        def score(keys: Sequence[Hashable]) -> list[tuple[Hashable, float]]:
            assert vectors is not None
            pairs = [key for key in keys if isinstance(key, tuple)]
            found = vectors.similarity(ref, model, query, pairs)
            return [((path, seq), cosine) for path, seq, cosine in found]

        def key_of(row: int) -> Hashable:
            chunk = keyword.rows[row]
            return (chunk.path, chunk.seq)

        def indexed() -> hybrid.DenseSide:
            return hybrid.IndexedDense(nearest, keyword.position, score, key_of)

        return hybrid.dense_side(keyword.vectors.get(model, 0), min_vectors, exact, indexed)

    def _vector_entry(self, ref: SpaceRef, version: int, keyword: SpaceRows) -> Entry:
        assert self.embedder is not None
        model = self.embedder.model_id
        dim = self.embedder.dim

        def load() -> Entry:
            # Rows of the keyword entry: loaded after reading a version >= ``version``.
            return vector_entry(keyword, model, dim)

        def patch(stale: Entry) -> Entry | None:
            return patched_entry(keyword, stale, model, dim)

        # Keyed by space and model: vectors of one model are never compared with another's.
        return self.cache.get((ref.id, model), version, load, patch=patch)

    def _embed_pending(self, index: SearchIndex) -> int:
        """Embed pending chunks of the index (no vector of this embedder's model), a few
        at a time, until none is left or :attr:`embed_budget` seconds are spent (a local
        command, before it searches; what is left is the answer's ``pending``); return
        how many. Past :data:`SLOW_NOTICE_SECONDS`, ``notice`` gets one line; an embedder
        that fails stops it (a warning), and the search goes on with what is embedded."""
        embedder = self.embedder
        if embedder is None:
            return 0
        started = time.monotonic()
        done = 0
        told = False
        while time.monotonic() - started < self.embed_budget:
            try:
                with index.claim_pending_chunks(LOCAL_BATCH, embedder.model_id) as claim:
                    embedded = _embed_claimed(claim, embedder)
            except KeepstoneError as exc:
                # The claim is released; what is embedded already is searched by meaning.
                log.warning("pending chunks left unembedded: the embedder failed: %s", exc.message)
                break
            if not embedded:
                break
            done += embedded
            spent = time.monotonic() - started
            # Said once, past the mark, while there may be more (the batch was full).
            more = embedded >= LOCAL_BATCH
            if more and not told and spent > SLOW_NOTICE_SECONDS and self.notice is not None:
                told = True
                self.notice(
                    f"embedding pending chunks for search by meaning: {done} in {spent:.1f} s, "
                    f"for up to {self.embed_budget:g} s; what is left is searched by keyword "
                    "(`keepstone reindex` embeds everything)"
                )
        return done


def _allowed(
    rows: Sequence[ChunkRow], path_prefix: str, filters: SearchFilters, written: dict[str, Any]
) -> npt.NDArray[np.bool_] | None:
    """The rows a search may return (None: all): under ``path_prefix``, written within
    ``since``/``until``, tagged with every one of ``tags`` (front matter, read from each
    document's first chunk)."""
    if not (path_prefix or filters.since or filters.until or filters.tags):
        return None
    tagged: set[str] | None = None
    if filters.tags:
        wanted = set(filters.tags)
        tagged = {r.path for r in rows if r.seq == 0 and wanted <= front_matter_tags(r.text)}

    def keep(row: ChunkRow) -> bool:
        if path_prefix and not row.path.startswith(path_prefix):
            return False
        if (filters.since or filters.until) and not (
            row.path in written and filters.in_time(written[row.path])
        ):
            return False
        return tagged is None or row.path in tagged

    return np.fromiter((keep(row) for row in rows), dtype=bool, count=len(rows))


def _sections(
    found: list[_Found], terms: Sequence[str], limit: int, floor: Floor
) -> list[DocumentHit]:
    """Best first across spaces, the best chunk of each (space, path, heading) that the
    floor lets through, as hits with their snippets; a section whose text repeats a
    better one's is listed in that one's ``also_in`` instead."""
    found.sort(key=lambda f: -f.score)  # stable: each space's order kept on ties
    seen: set[tuple[str, str, str]] = set()
    kept: list[_Found] = []
    also: dict[int, list[tuple[str, str]]] = {}
    for f in found:
        key = (f.space_id, f.row.path, f.row.heading)
        if key in seen:
            continue
        seen.add(key)
        if not floor.qualifies(f.score, f.keyword, f.meaning, hybrid=f.hybrid):
            continue
        same = duplicate_key(f.row.text)
        if same in also:
            also[same].append((f.space_id, f.row.path))
            continue
        also[same] = []
        kept.append(f)
        if len(kept) >= limit:
            break
    # The snippet only for what is returned: analysing text is the costly part.
    return [
        DocumentHit(
            f.row.path,
            f.row.heading,
            snippet(f.row.text, terms),
            f.score,
            f.matched,
            f.space_id,
            tuple(also[duplicate_key(f.row.text)]),
        )
        for f in kept
    ]


def _embed_claimed(claim: ClaimedChunks[R], embedder: Embedder) -> int:
    """Give the claimed chunks their vectors; return how many."""
    rows = list(claim.rows)
    if rows:
        claim.store_embeddings(encode_many(embedder.embed([r.search_text for r in rows])), rows)
    return len(rows)
