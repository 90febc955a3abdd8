"""Fusion scores every candidate on both sides (keepstone.search.hybrid.complete): a row one
side cut off weighs in with what it really scores there."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from keepstone.search.bm25 import BM25Index
from keepstone.search.fusion import ALPHA, KEYWORD, MEANING, weighted_sum
from keepstone.search.hybrid import ExactDense, IndexedDense, complete, keyword_top, rank
from tests.search.labelled import (
    bm25_rankings,
    dense_rankings,
    fuse,
    hybrid_rankings,
    load_sets,
    load_vectors,
)


def _corpus(n: int, rng: np.random.Generator) -> tuple[BM25Index, np.ndarray]:
    words = [f"w{i}" for i in range(40)]
    docs = [list(rng.choice(words, size=int(rng.integers(3, 12)))) for _ in range(n)]
    vectors = rng.standard_normal((n, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return BM25Index(docs), vectors


def _query(rng: np.random.Generator) -> np.ndarray:
    q = rng.standard_normal(16).astype(np.float32)
    return q / np.linalg.norm(q)


def test_each_fused_score_is_both_sides_exact_scores() -> None:
    rng = np.random.default_rng(3)
    index, vectors = _corpus(300, rng)
    q = _query(rng)
    dense = ExactDense(vectors, np.arange(300, dtype=np.int64), q)
    terms = ["w1", "w7", "w22"]
    full, matched = index.scores(terms)
    scale = index.full_match(terms)
    cosines = vectors @ q
    hits = rank(index, terms, dense=dense, k=10)
    assert hits
    for hit in hits:
        keyword = float(full[hit.key]) / scale if matched[hit.key] else 0.0
        expected = ALPHA * float(cosines[hit.key]) + (1 - ALPHA) * keyword
        assert abs(hit.score - expected) < 1e-5, hit


def test_fifty_candidates_a_side_rank_as_fusing_every_row_on_the_labelled_sets() -> None:
    """The product's depth (hybrid.CANDIDATES) with both sides completed gives the top 10
    that fusing every row gives, on the labelled sets (real text, real vectors)."""
    sets = load_sets()
    vectors = load_vectors(sets)
    for name in ("records", "docs"):
        es = sets[name]
        units, queries = vectors[name]
        product = hybrid_rankings(es, units, queries)
        depth = max(len(ix) for ix in es.groups.values())
        every = fuse(bm25_rankings(es, depth=depth), dense_rankings(es, units, queries, depth))
        same = sum(a[:10] == b[:10] for a, b in zip(product, every, strict=True))
        assert same >= 0.95 * len(es.queries), (name, same, len(es.queries))


def test_appended_rows_keep_each_list_in_order_and_meaning_ranks_unchanged() -> None:
    rng = np.random.default_rng(9)
    index, vectors = _corpus(200, rng)
    q = _query(rng)
    dense = ExactDense(vectors, np.arange(200, dtype=np.int64), q)
    terms = ["w3", "w4"]
    keyword = [(h.doc, h.score) for h in index.top(terms, 5, relative=True)]
    nearest = dense.top(None, 5)
    kw, dn = complete(index, terms, keyword, nearest, dense)
    assert kw[: len(keyword)] == keyword and dn[: len(nearest)] == nearest
    assert [s for _, s in kw] == sorted((s for _, s in kw), reverse=True)
    assert [s for _, s in dn] == sorted((s for _, s in dn), reverse=True)
    # Every keyword candidate now has its cosine; every dense one that matches, its BM25.
    assert {row for row, _ in keyword} <= {row for row, _ in dn}
    _, matched = index.scores(terms)
    assert {row for row, _ in nearest if matched[row]} <= {row for row, _ in kw}
    for hit in rank(index, terms, dense=dense, k=5):
        in_top = hit.key in {row for row, _ in nearest[:10]}
        assert (MEANING in hit.matched) <= in_top
        assert (KEYWORD in hit.matched) == bool(matched[hit.key])


def test_a_row_without_a_vector_is_left_unscored_on_the_dense_side() -> None:
    rng = np.random.default_rng(1)
    index, vectors = _corpus(50, rng)
    q = _query(rng)
    rows = np.arange(50, dtype=np.int64)
    rows[:25] = -1  # the first 25 rows have no vector of this model
    dense = ExactDense(vectors, rows, q)
    missing, present = dense.similarity([0, 30])
    assert missing is None
    assert present is not None and abs(present - float(vectors[30] @ q)) < 1e-6
    assert dense.similarity([0, 1]) == [None, None]


def test_an_index_scores_the_keys_it_is_asked_for() -> None:
    asked: list[Sequence[Hashable]] = []

    def score(keys: Sequence[Hashable]) -> list[tuple[Hashable, float]]:
        asked.append(list(keys))
        return [(key, 0.5) for key in keys if key != "b"]

    side = IndexedDense(lambda k: [], {"a": 0, "b": 1, "c": 2}, score, ["a", "b", "c"].__getitem__)
    assert side.similarity([0, 1, 2]) == [0.5, None, 0.5]
    assert asked == [["a", "b", "c"]]
    assert IndexedDense(lambda k: [], {"a": 0}).similarity([0]) == [None]


def test_a_keyword_only_ranking_is_the_fusion_of_the_keyword_side_alone() -> None:
    rng = np.random.default_rng(5)
    for _ in range(40):
        index, _vectors = _corpus(int(rng.integers(1, 300)), rng)
        terms = [f"w{i}" for i in rng.choice(40, size=int(rng.integers(1, 5)), replace=False)]
        allowed = rng.random(len(index)) < 0.8 if rng.random() < 0.5 else None
        k = int(rng.integers(1, 60))
        keyword = keyword_top(index, terms, allowed, k)
        fused = weighted_sum(keyword, [], alpha=0.0, normalisation="fixed")
        assert rank(index, terms, allowed=allowed, k=k) == fused
        assert all(hit.matched == (KEYWORD,) for hit in fused)
