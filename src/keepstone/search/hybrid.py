"""Ranking one scope — a space's chunks, a team's records — by keyword and by meaning.

The part of a search that documents and records share (docs/search.md, "How it ranks"):
the keyword side is the top :data:`CANDIDATES` of BM25 relative to the query's full match
over the scope's rows a mask allows; the dense side the top :data:`CANDIDATES` by cosine
over the scope's cached vectors the same mask allows (:class:`ExactDense`, or any
:class:`DenseSide`: one call, so a scope can answer it another way, e.g. an HNSW index);
the two are fused with the fixed-scale weighted sum at :data:`~keepstone.search.fusion.ALPHA`,
each hit saying which signals matched. A scope with no vector to compare (no embedder,
nothing embedded yet, nothing the mask allows, or an embedder that failed on the query:
:func:`query_vector`) is ranked by keyword alone (alpha 0, so its scores stay on the
keyword scale).

Rows are numbered by their position in the scope's keyword rows (the corpus the
:class:`~keepstone.search.bm25.BM25Index` was built from); :class:`RowMap` maps a cached
vector entry's ids onto those numbers. :class:`ScopeCache` keeps one built object per
scope, stamped with the scope's version. Pure code: no I/O but the embedder it is given.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from keepstone.db.vectors import Float32Array, IndexArray, QuantizedMatrix
from keepstone.errors import KeepstoneError
from keepstone.search.bm25 import BM25Index
from keepstone.search.cache import Entry
from keepstone.search.fusion import ALPHA, KEYWORD, FusedHit, weighted_sum
from keepstone.search.vectors import Matrix, scores, top_k

#: An embedder's one call (:class:`keepstone.embed.Embedder` ``.embed``): texts to unit vectors.
Embed = Callable[[Sequence[str]], npt.NDArray[np.float32]]

#: Candidates taken from each side before fusing.
CANDIDATES = 50
#: What a hit ranked by keyword alone matched.
_KEYWORD_ONLY = (KEYWORD,)

BoolArray = npt.NDArray[np.bool_]
T = TypeVar("T")


class DenseSide(Protocol):
    """The dense side of one scope: its ``k`` nearest rows (keyword row numbers) to the
    query, with their cosine, best first, among the rows ``allowed`` marks (None: all)."""

    def top(self, allowed: BoolArray | None, k: int) -> list[tuple[int, float]]: ...

    def similarity(self, rows: Sequence[int]) -> list[float | None]:
        """The cosine of each of ``rows`` (keyword row numbers) to the query; None for
        a row this side cannot score (no vector, or an index that only answers top-k)."""
        ...


@dataclass(frozen=True, slots=True)
class ExactDense:
    """Exact top-k over a cached matrix (:func:`keepstone.search.vectors.top_k`). ``rows``
    is the keyword row of each vector (-1: a vector of no current row)."""

    matrix: Matrix
    rows: IndexArray
    query: Float32Array

    def top(self, allowed: BoolArray | None, k: int) -> list[tuple[int, float]]:
        mask = self.rows >= 0  # a new array: the cached rows stay as they are
        if allowed is not None:
            mask &= allowed[np.maximum(self.rows, 0)]
        # Every vector a candidate: score them all, without gathering the masked ones.
        picked, scores = top_k(self.matrix, self.query, k, mask=None if mask.all() else mask)
        return [(int(self.rows[i]), float(s)) for i, s in zip(picked, scores, strict=True)]

    def similarity(self, rows: Sequence[int]) -> list[float | None]:
        wanted = np.asarray(rows, dtype=np.int64)
        found = np.flatnonzero(np.isin(self.rows, wanted))
        vector_of = {int(self.rows[i]): int(i) for i in found}
        present = [vector_of[r] for r in rows if r in vector_of]
        if not present:
            return [None] * len(rows)
        picked = np.asarray(present, dtype=np.int64)
        gathered = (
            self.matrix.take(picked)
            if isinstance(self.matrix, QuantizedMatrix)
            else self.matrix[picked]
        )
        cosines = dict(zip(present, scores(gathered, self.query).tolist(), strict=True))
        return [cosines[vector_of[r]] if r in vector_of else None for r in rows]


@dataclass(frozen=True, slots=True)
class IndexedDense:
    """The dense side answered by an index outside the process (pgvector's HNSW, see
    :mod:`keepstone.db.pgvector`): ``nearest(k)`` is the scope's ``k`` nearest rows as
    (row key, cosine), best first, the scope's own conditions applied by the index's
    query; ``position`` maps a key to its keyword row. A key that is not among the rows
    (loaded at another version) or that ``allowed`` masks out is dropped."""

    nearest: Callable[[int], Sequence[tuple[Hashable, float]]]
    position: Mapping[Hashable, int]
    #: ``score(keys)``: the cosine of each of those keys the index can score, as (key,
    #: cosine); ``key_of(row)`` is a keyword row's key. Without them, rows the index did
    #: not list stay unscored.
    score: Callable[[Sequence[Hashable]], Sequence[tuple[Hashable, float]]] | None = None
    key_of: Callable[[int], Hashable] | None = None

    def top(self, allowed: BoolArray | None, k: int) -> list[tuple[int, float]]:
        out = []
        for key, cosine in self.nearest(k):
            row = self.position.get(key, -1)
            if row >= 0 and (allowed is None or allowed[row]):
                out.append((row, cosine))
        return out[:k]

    def similarity(self, rows: Sequence[int]) -> list[float | None]:
        if self.score is None or self.key_of is None or not rows:
            return [None] * len(rows)
        keys = [self.key_of(row) for row in rows]
        cosines = dict(self.score(keys))
        return [cosines.get(key) for key in keys]


def dense_side(
    vectors: int,
    min_vectors: int | None,
    exact: Callable[[], DenseSide | None],
    indexed: Callable[[], DenseSide | None],
) -> DenseSide | None:
    """The dense side of one scope holding ``vectors`` vectors of the query's model: the
    index (``indexed()``) from ``min_vectors`` on — None: there is no index here — and
    exact top-k over the cached matrix (``exact()``) below it, where it is exact and
    faster (docs/search.md, "pgvector"). No vector: no dense side."""
    if vectors <= 0:
        return None
    if min_vectors is not None and vectors >= min_vectors:
        return indexed()
    return exact()


def keyword_top(
    index: BM25Index, terms: Sequence[str], allowed: BoolArray | None, k: int = CANDIDATES
) -> list[tuple[int, float]]:
    """The ``k`` best BM25 matches among the rows ``allowed`` marks, scores relative to
    the query's full match."""
    return [(h.doc, h.score) for h in index.top(terms, k, relative=True, allowed=allowed)]


def rank(
    index: BM25Index,
    terms: Sequence[str],
    *,
    allowed: BoolArray | None = None,
    dense: DenseSide | None = None,
    k: int = CANDIDATES,
) -> list[FusedHit[int]]:
    """The scope's rows for the query, best first: keyword and dense candidates fused
    (keyword alone when the dense side has none). Keys are keyword row numbers."""
    keyword = keyword_top(index, terms, allowed, k)
    nearest = dense.top(allowed, k) if dense is not None else []
    if dense is None or not nearest:
        # No vector to compare (no embedder, nothing embedded yet): keyword scores as such,
        # in the keyword order — what ``weighted_sum`` with no dense side and ``alpha`` 0
        # makes of them, without its tables (the hot path of a keyword-only search).
        return [FusedHit(row, score, score, None, _KEYWORD_ONLY) for row, score in keyword]
    keyword, nearest = complete(index, terms, keyword, nearest, dense)
    return weighted_sum(keyword, nearest, alpha=ALPHA, normalisation="fixed")


def complete(
    index: BM25Index,
    terms: Sequence[str],
    keyword: list[tuple[int, float]],
    nearest: list[tuple[int, float]],
    dense: DenseSide,
) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """Both candidate lists with every candidate of the other side scored exactly: the
    dense side's candidates get their own relative BM25 (when they match the query at
    all), the keyword side's their own cosine (when the dense side can score them), each
    appended to its side's list, best first. A row one side cut off then weighs in with
    what it really scores there instead of a stand-in (no keyword score; the lowest
    listed cosine): measured on the labelled sets, the fused top 10 from 50 candidates a
    side then matches fusing every row (docs/search.md, "How it ranks"). Appended rows
    score no better than the side's last listed one, so each list stays in order and a
    row's rank on the dense side (what "meaning" is judged by) is unchanged."""
    listed_kw = {row for row, _ in keyword}
    listed_dense = {row for row, _ in nearest}
    need_kw = [row for row, _ in nearest if row not in listed_kw]
    need_dense = [row for row, _ in keyword if row not in listed_dense]
    if need_kw:
        extra = [
            (row, score)
            for row, score in zip(need_kw, index.relative_scores(terms, need_kw), strict=True)
            if score is not None
        ]
        keyword = keyword + sorted(extra, key=lambda pair: -pair[1])
    if need_dense:
        extra_dense = [
            (row, cosine)
            for row, cosine in zip(need_dense, dense.similarity(need_dense), strict=True)
            if cosine is not None
        ]
        nearest = nearest + sorted(extra_dense, key=lambda pair: -pair[1])
    return keyword, nearest


class RowMap:
    """The keyword row of each vector of a cached entry, through ``position`` (a row's key
    → its number) and ``key`` (an entry id → a row's key), remembered for the last entry
    mapped (a newer entry replaces it). The entry is remembered weakly: the vector cache
    alone decides how long a matrix lives, so an entry it dropped is not kept alive by the
    rows (which outlive it in their own cache) — that would unbound the cache's bound."""

    __slots__ = ("_key", "_mapped", "_position")

    _mapped: list[tuple[weakref.ref[Entry], IndexArray, bool]]

    def __init__(
        self,
        position: Mapping[Hashable, int],
        key: Callable[[object], Hashable] = lambda i: i,
    ) -> None:
        self._position = position
        self._key = key
        self._mapped = []

    def rows_of(self, entry: Entry) -> IndexArray:
        """The row number of each vector of ``entry`` (-1: not among these rows, as when
        the two were loaded at different versions)."""
        for known, rows, _ in self._mapped:
            if known() is entry:
                return rows
        get, key = self._position.get, self._key
        rows = np.fromiter((get(key(i), -1) for i in entry.ids), dtype=np.int64, count=len(entry))
        self._remember(entry, rows, made=False)
        return rows

    def made(self, entry: Entry, rows: IndexArray) -> None:
        """``entry`` was made from these rows, its vector ``i`` from row ``rows[i]`` (-1:
        none): :meth:`rows_of` answers that without looking ids up, and
        :meth:`made_from` knows it."""
        self._remember(entry, rows, made=True)

    def made_from(self, entry: Entry) -> IndexArray | None:
        """The row of each vector of ``entry`` when it was :meth:`made` from these rows
        (so it holds every vector they had of its model), else None."""
        for known, rows, made in self._mapped:
            if known() is entry:
                return rows if made else None
        return None

    def _remember(self, entry: Entry, rows: IndexArray, *, made: bool) -> None:
        rows.flags.writeable = False
        self._mapped[:] = [(weakref.ref(entry), rows, made)]


class ScopeCache(Generic[T]):
    """One built object per scope (a space's or a team's BM25 index and rows), at most
    ``max_scopes``, least recently used dropped first. An object built after reading the
    scope's version ``v`` serves every search that reads a version up to ``v``."""

    def __init__(self, max_scopes: int) -> None:
        self.max_scopes = max_scopes
        self._items: OrderedDict[Hashable, tuple[int, T]] = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self,
        scope: Hashable,
        version: int,
        build: Callable[[], T],
        extend: Callable[[int, T], T | None] | None = None,
    ) -> T:
        """The scope's object at ``version`` or newer; ``build()`` (called after the
        caller read ``version``) when the cached one is older or absent. ``extend(v,
        older)``, when given, makes the object at ``version`` from the one cached at ``v``
        (None: it cannot, and ``build()`` does)."""
        with self._lock:
            cached = self._items.get(scope)
            if cached is not None and cached[0] >= version:
                self._items.move_to_end(scope)
                return cached[1]
        extended = None if cached is None or extend is None else extend(*cached)
        built = build() if extended is None else extended
        with self._lock:
            current = self._items.get(scope)
            if current is None or current[0] <= version:
                self._items[scope] = (version, built)
            self._items.move_to_end(scope)
            while len(self._items) > self.max_scopes:
                self._items.popitem(last=False)
        return built

    def peek(self, scope: Hashable) -> T | None:
        """The scope's object as cached now, whatever its version (None: none)."""
        with self._lock:
            cached = self._items.get(scope)
        return None if cached is None else cached[1]

    def discard(self, scope: Hashable) -> None:
        with self._lock:
            self._items.pop(scope, None)

    def __len__(self) -> int:
        return len(self._items)


def query_vector(embed: Embed, query: str, log: logging.Logger, what: str) -> Float32Array | None:
    """The unit vector of ``query``, or None when the embedder fails (an unreachable
    ``KEEPSTONE_EMBEDDINGS_URL``, a model that cannot load): the search ranks ``what`` by
    keyword alone, with a warning in ``log``, rather than answering ``503`` while its
    keyword side works."""
    try:
        vector: Float32Array = embed([query])[0]
    except KeepstoneError as exc:
        log.warning("%s search by keyword only: the embedder failed: %s", what, exc.message)
        return None
    return vector
