"""Ranking a team's records by keyword and by meaning (docs/records.md, "Search").

:class:`RecordSearch` is the ranking half of :meth:`RecordService.search
<keepstone.service.records.RecordService.search>`; it runs inside the search's one read
transaction. It reads the team's two search counters (one query), takes the team's rows
and BM25 index from a cache stamped with ``terms_version`` (patched by the records stored
and removed since) and its vectors of the embedder's model from the shared
:class:`~keepstone.search.cache.VectorCache` stamped with ``vectors_version`` (extended by
the rows stored since, unless vectors were dropped), masks what the caller may not
see — expired, another repository than the one asked for, outside a limited caller's
projects (a record without a repository is never visible to a limited caller) — and
ranks the rest with the scope ranking documents use (:func:`keepstone.search.hybrid.rank`:
BM25 relative to the query's full match, cosine, fixed-scale weighted sum, matched
signals). Only the texts of the hits returned are read, by id, in the same
transaction.

Without an embedder, with no vector of its model yet, or when the embedder fails, the
ranking is by keyword alone. Isolation is structural: every read takes the team id, and
every cache is keyed by it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import compress
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from keepstone.db.vectors import Float32Array, decode_many
from keepstone.records.store import (
    RankingRow,
    Record,
    RecordReader,
    RemovedRecord,
    Scope,
    SearchVersions,
)
from keepstone.records.store import StoredVector as StoredVector
from keepstone.search.bm25 import BM25Index
from keepstone.search.cache import Entry, VectorCache
from keepstone.search.filters import NO_FILTERS, SearchFilters
from keepstone.search.floor import floor_for
from keepstone.search.fusion import FusedHit
from keepstone.search.hybrid import (
    CANDIDATES,
    BoolArray,
    DenseSide,
    ExactDense,
    IndexedDense,
    RowMap,
    ScopeCache,
    dense_side,
    query_vector,
    rank,
)
from keepstone.search.text import query_terms

if TYPE_CHECKING:
    from keepstone.embed.base import Embedder

log = logging.getLogger("keepstone.records")

#: Teams whose rows and BM25 index are kept in memory (the most recently searched).
BM25_CACHE_TEAMS = 1024
#: The first element of a team's key in the shared vector cache (documents' keys are
#: (space id, model) pairs, so the two never meet).
VECTOR_SCOPE = "records"


@dataclass(frozen=True, slots=True)
class RankedRecord:
    """A hit: the record, its fused score (higher is better, comparable within one search)
    and the signals that matched it (``"keyword"``, ``"meaning"``)."""

    record: Record
    score: float
    matched: tuple[str, ...]
    #: The ids of the records with the same text that this hit stands for.
    also_in: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _TeamRows:
    """A team's records at one ``terms_version``: ids, BM25 index, what the masks read."""

    ids: list[str]
    index: BM25Index
    #: The number of each row's repository in ``repos`` (-1: no repository).
    repo_codes: npt.NDArray[np.int32]
    repos: dict[str, int]
    #: ``expires_at`` and ``created_at`` as POSIX seconds.
    expires: npt.NDArray[np.float64]
    created: npt.NDArray[np.float64]
    row_map: RowMap
    #: Each record's row number by its id.
    position: dict[Hashable, int]
    #: Each row's near-duplicate key (0: stored without one, folds with nothing).
    dup_keys: npt.NDArray[np.int64]

    def allowed(
        self, scope: Scope, visible: frozenset[str] | None, filters: SearchFilters = NO_FILTERS
    ) -> BoolArray:
        """The rows ``scope`` sees: not expired at ``scope.now``, of ``scope.repo_id``
        when given, of a repository in ``visible`` when the caller is limited, created
        within ``filters.since`` and ``filters.until``."""
        mask: BoolArray = self.expires > scope.now.timestamp()
        if filters.since is not None:
            mask &= self.created >= filters.since.timestamp()
        if filters.until is not None:
            mask &= self.created <= filters.until.timestamp()
        if scope.repo_id is not None:
            mask &= self.repo_codes == self.repos.get(scope.repo_id, -2)
        if visible is not None:
            codes = [self.repos[r] for r in visible if r in self.repos]
            mask &= np.isin(self.repo_codes, np.asarray(codes, dtype=np.int32))
        return mask

    def patched(self, removed: Collection[str], rows: Sequence[RankingRow]) -> _TeamRows:
        """These rows less the records ``removed`` (an id not among them is ignored), then
        ``rows`` (stored since) after them: what :func:`_team_rows` of the whole would be,
        at the cost of the changed rows and one pass over the arrays and postings."""
        gone = [self.position[i] for i in removed if i in self.position]
        if not gone:
            return self.extended(rows)
        keep: BoolArray = np.ones(len(self.ids), dtype=np.bool_)
        keep[gone] = False
        ids = list(compress(self.ids, keep.tolist()))
        position: dict[Hashable, int] = dict(zip(ids, range(len(ids)), strict=True))
        lean = _TeamRows(
            ids,
            self.index.without(keep),
            self.repo_codes[keep],
            self.repos,
            self.expires[keep],
            self.created[keep],
            RowMap(position),
            position,
            self.dup_keys[keep],
        )
        return lean.extended(rows)

    def extended(self, rows: Sequence[RankingRow]) -> _TeamRows:
        """These rows and ``rows`` (stored since) after them: what :func:`_team_rows` of
        the whole would be, at the cost of the new rows and copies of the arrays."""
        if not rows:
            return self
        index = self.index.extended([r.terms.split() for r in rows])
        new = _team_rows(rows, dict(self.repos), len(self.ids), index)
        position = {**self.position, **new.position}
        return _TeamRows(
            self.ids + new.ids,
            index,
            np.concatenate([self.repo_codes, new.repo_codes]),
            new.repos,
            np.concatenate([self.expires, new.expires]),
            np.concatenate([self.created, new.created]),
            RowMap(position),
            position,
            np.concatenate([self.dup_keys, new.dup_keys]),
        )


def _team_rows(
    rows: Sequence[RankingRow],
    repos: dict[str, int] | None = None,
    first: int = 0,
    index: BM25Index | None = None,
) -> _TeamRows:
    """The team rows of ``rows``, numbered from ``first``; ``repos``: the repository codes
    given already, to which new ones are added, and ``index`` the BM25 index made already
    (:meth:`_TeamRows.extended`); else one of ``rows``."""
    repos = {} if repos is None else repos
    codes = np.fromiter(
        (-1 if r.repo_id is None else repos.setdefault(r.repo_id, len(repos)) for r in rows),
        dtype=np.int32,
        count=len(rows),
    )
    expires = np.fromiter((r.expires_at.timestamp() for r in rows), np.float64, len(rows))
    created = np.fromiter((r.created_at.timestamp() for r in rows), np.float64, len(rows))
    ids = [r.id for r in rows]
    position: dict[Hashable, int] = {record_id: first + i for i, record_id in enumerate(ids)}
    index = index if index is not None else BM25Index([r.terms.split() for r in rows])
    dup_keys = np.fromiter((r.dup_key or 0 for r in rows), np.int64, len(rows))
    return _TeamRows(
        ids, index, codes, repos, expires, created, RowMap(position), position, dup_keys
    )


def _patched(
    tx: RecordReader, team: str, versions: SearchVersions, cached: int, older: _TeamRows
) -> _TeamRows | None:
    """The team's rows at ``versions.terms`` made from ``older``, cached at ``cached``: less
    the records removed since, plus those stored since. None when they cannot be: a removal
    no longer listed (before ``terms_reset``), or a version since that neither stored a
    record still there nor lists one removed — a writer that tags nothing (a replica of a
    release before, mid rolling upgrade), or a listing forgotten after the counters were
    read. Every version since is accounted for, or the rows are read whole."""
    if versions.terms_reset > cached:
        return None
    since = tx.ranking_rows(team, versions.terms, after=cached)
    wanted = set(range(cached + 1, versions.terms + 1))
    seen = {r.terms_version for r in since}
    removed: list[RemovedRecord] = []
    if seen != wanted:  # a version with no record stored: a removal, or one saved and removed
        removed = tx.removed_records(team, versions.terms, after=cached)
        seen.update(g.version for g in removed)
        seen.update(g.stored_version for g in removed if g.stored_version > cached)
        if seen != wanted:
            return None
    return older.patched({g.id for g in removed}, since)


def _entry(vectors: Sequence[StoredVector], dim: int) -> Entry:
    ids = np.array([v.id for v in vectors], dtype=object)
    return Entry(ids, decode_many([v.blob for v in vectors], dim))


class RecordSearch:
    """Keyword and meaning ranking of team records. ``embedder`` None is keyword-only;
    ``cache`` holds the teams' vector matrices (share the process's one with document
    search: it is bounded by bytes)."""

    def __init__(
        self,
        embedder: Embedder | None = None,
        cache: VectorCache | None = None,
        *,
        max_teams: int = BM25_CACHE_TEAMS,
    ) -> None:
        self.embedder = embedder
        self.cache = cache if cache is not None else VectorCache()
        self._rows: ScopeCache[_TeamRows] = ScopeCache(max_teams)
        # The query is embedded on a thread of its own while the search reads the team's
        # rows and ranks by keyword (numpy and the tokenizer release the GIL): a hybrid
        # search then costs about the longer of the two, not their sum.
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="keepstone-query-embed")

    def pending(self, tx: RecordReader, team_id: str) -> int:
        """How many of the team's records wait for a vector of the embedder's model (the
        answer's ``pending``); 0 with keyword-only search."""
        return 0 if self.embedder is None else tx.count_pending(team_id, self.embedder.model_id)

    def rank(
        self,
        tx: RecordReader,
        scope: Scope,
        query: str,
        limit: int,
        versions: SearchVersions | None = None,
        filters: SearchFilters = NO_FILTERS,
    ) -> list[RankedRecord]:
        """The best ``limit`` records of ``scope`` for ``query`` (already masked), best
        first, read through ``tx`` (the search's transaction): those the relevance floor
        (or ``filters.min_score``) lets through, created within ``filters``, records of
        the same text folded into the best one (its ``also_in``). ``versions``: the
        team's counters when the caller read them already in ``tx``
        (:meth:`~keepstone.records.store.RecordReader.search_state`)."""
        if versions is None:
            versions = tx.search_versions(scope.team_id)
        if self.embedder is not None and versions.vectors > 0:
            embedded: Future[Float32Array | None] | None = self._pool.submit(self._embed, query)
        else:
            embedded = None  # no vector stored yet: nothing to compare a query with
        try:
            return self._rank(tx, scope, query, limit, versions, embedded, filters)
        finally:
            if embedded is not None:
                embedded.cancel()  # not needed after all (nothing allowed, no vectors)

    def _rank(
        self,
        tx: RecordReader,
        scope: Scope,
        query: str,
        limit: int,
        versions: SearchVersions,
        embedded: Future[Float32Array | None] | None,
        filters: SearchFilters,
    ) -> list[RankedRecord]:
        team = scope.team_id

        def extend(cached: int, older: _TeamRows) -> _TeamRows | None:
            return _patched(tx, team, versions, cached, older)

        rows = self._rows.get(
            team, versions.terms, lambda: _team_rows(tx.ranking_rows(team, versions.terms)), extend
        )
        if not rows.ids:
            return []
        visible = None
        if scope.project_ids is not None:
            visible = tx.visible_repos(team, scope.project_ids)
        allowed = rows.allowed(scope, visible, filters)
        if not allowed.any():
            return []
        dense = self._dense(tx, scope, versions, rows, embedded)
        # By keyword alone the fused order is the keyword order: its top ``2 * limit``
        # is all a search needs, duplicates folded (fusing CANDIDATES would build and
        # sort hits it drops).
        k = CANDIDATES if dense is not None else min(2 * limit, CANDIDATES)
        ranked = rank(rows.index, query_terms(query), allowed=allowed, dense=dense, k=k)
        model = self.embedder.model_id if self.embedder is not None else None
        floor = floor_for(model, filters.min_score)
        scored = _weighted(ranked, rows, filters, scope.now)
        kept = [
            (h, score)
            for h, score in scored
            if floor.qualifies(score, h.keyword, h.meaning, hybrid=dense is not None)
        ][: 2 * limit]
        return _folded(tx, team, kept, rows, limit)

    def _dense(
        self,
        tx: RecordReader,
        scope: Scope,
        versions: SearchVersions,
        rows: _TeamRows,
        embedded: Future[Float32Array | None] | None,
    ) -> DenseSide | None:
        """The dense side over the team's vectors of the embedder's model (None: keyword
        only — no embedder, no vector yet, or the embedder failed): pgvector's HNSW
        index for a team of at least its ``min_vectors`` records, else exact top-k over
        the cached matrix."""
        embedder = self.embedder
        if embedder is None or embedded is None:
            return None
        team, model = scope.team_id, embedder.model_id

        def exact() -> DenseSide | None:
            return self._exact(tx, team, versions, rows, embedded)

        def indexed() -> DenseSide | None:
            vector = embedded.result()
            if vector is None:
                return None

            def nearest(k: int) -> list[tuple[Hashable, float]]:
                return list(tx.nearest_records(scope, model, vector, k) or [])

            def score(keys: Sequence[Hashable]) -> list[tuple[Hashable, float]]:
                ids = [str(key) for key in keys]
                return list(tx.record_similarity(scope, model, vector, ids) or [])

            return IndexedDense(nearest, rows.position, score, rows.ids.__getitem__)

        return dense_side(len(rows.ids), tx.index_min_vectors(), exact, indexed)

    def _embed(self, query: str) -> Float32Array | None:
        assert self.embedder is not None
        return query_vector(self.embedder.embed, query, log, "records")

    def _exact(
        self,
        tx: RecordReader,
        team: str,
        versions: SearchVersions,
        rows: _TeamRows,
        embedded: Future[Float32Array | None],
    ) -> DenseSide | None:
        embedder = self.embedder
        assert embedder is not None
        model, upto = embedder.model_id, versions.vectors

        def load() -> Entry:
            return _entry(tx.record_vectors(team, model, upto), embedder.dim)

        def load_since(cached: int) -> Entry | None:
            if versions.vectors_reset > cached:
                return None  # vectors were removed since: reload them all
            return _entry(tx.record_vectors(team, model, upto, after=cached), embedder.dim)

        # Keyed by team and model: vectors of one model are never compared with another's.
        key = (VECTOR_SCOPE, team, model)
        entry = self.cache.get(key, upto, load, load_since=load_since)
        mapped = rows.row_map.rows_of(entry)
        if 2 * int(np.count_nonzero(mapped < 0)) > len(entry):
            # Mostly vectors of records removed since it was loaded (a removal leaves them:
            # they match no row, so ranking skips them): reloaded once they outnumber the
            # rest, so a matrix holds at most twice the team's vectors, and a removal costs
            # a search a share of a reload, not a whole one.
            self.cache.discard(key)
            entry = self.cache.get(key, upto, load)
            mapped = rows.row_map.rows_of(entry)
        if not len(entry):
            return None
        vector = embedded.result()
        if vector is None:
            return None
        return ExactDense(entry.matrix, mapped, vector)


def _weighted(
    ranked: list[FusedHit[int]], rows: _TeamRows, filters: SearchFilters, now: datetime
) -> list[tuple[FusedHit[int], float]]:
    """Each hit with its score, weighted by the recency prior when one is asked for (and
    then re-ordered), best first."""
    if filters.recency_days is None:
        return [(h, h.score) for h in ranked]
    weighted = [
        (h, filters.prior(h.score, datetime.fromtimestamp(rows.created[h.key], UTC), now))
        for h in ranked
    ]
    return sorted(weighted, key=lambda pair: -pair[1])


def _folded(
    tx: RecordReader,
    team: str,
    kept: list[tuple[FusedHit[int], float]],
    rows: _TeamRows,
    limit: int,
) -> list[RankedRecord]:
    """The first ``limit`` of ``kept`` as ranked records, each record whose text repeats
    a better one's (by the keys of the team's cached rows) listed in that one's
    ``also_in`` instead of returned. Reads the records returned alone: one of them gone
    since the rows were cached (a delete racing the search) is no hit, and the fold is
    made again without it, its next duplicate standing in."""
    ids = [rows.ids[h.key] for h, _ in kept]
    stored = rows.dup_keys[[h.key for h, _ in kept]].tolist()
    keys: list[Hashable | None] = [k or ("no key", i) for k, i in zip(stored, ids, strict=True)]
    found: dict[str, Record] = {}
    while True:
        folded = _fold(keys, limit)
        wanted = [ids[p] for p, _ in folded if ids[p] not in found]
        if not wanted:
            break
        found.update(tx.records_by_id(team, wanted))
        gone = set(wanted).difference(found)
        if not gone:
            break
        keys = [None if i in gone else k for i, k in zip(ids, keys, strict=True)]
    return [
        RankedRecord(
            found[ids[p]],
            round(kept[p][1], 6),
            kept[p][0].matched,
            tuple(ids[a] for a in also),
        )
        for p, also in folded
    ]


def _fold(keys: Sequence[Hashable | None], limit: int) -> list[tuple[int, list[int]]]:
    """The positions of the first ``limit`` distinct ``keys`` (None: no hit), each with
    the positions of the later hits of its key."""
    best: dict[Hashable, int] = {}
    out: list[tuple[int, list[int]]] = []
    for p, key in enumerate(keys):
        if key is None:
            continue
        if key in best:
            out[best[key]][1].append(p)
            continue
        if len(out) >= limit:
            continue
        best[key] = len(out)
        out.append((p, []))
    return out
