"""Fusing a keyword and a dense ranking (keepstone.search.fusion), and the reference BM25
(keepstone.search.bm25) whose matches feed it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepstone.search.bm25 import BM25Index
from keepstone.search.fusion import (
    ALPHA,
    MEANING_FLOOR,
    MEANING_RANK,
    NORMALISATION,
    FusedHit,
    matched_signals,
    reciprocal_rank,
    weighted_sum,
)
from keepstone.search.text import analyze, query_terms

KW = [("a", 9.0), ("b", 5.0), ("c", 1.0)]
DENSE = [("c", 0.8), ("d", 0.6), ("a", 0.2)]


def keys(hits: list[FusedHit[str]]) -> list[str]:
    return [h.key for h in hits]


def test_the_default_is_the_fixed_scale_sum() -> None:
    assert (NORMALISATION, ALPHA) == ("fixed", 0.65)
    assert weighted_sum(KW, DENSE) == weighted_sum(KW, DENSE, alpha=0.65, normalisation="fixed")


@pytest.mark.parametrize("normalisation", ["fixed", "minmax", "zscore"])
def test_alpha_zero_is_keyword_order_then_dense_only_keys(normalisation: str) -> None:
    hits = weighted_sum(KW, DENSE, alpha=0.0, normalisation=normalisation)  # type: ignore[arg-type]
    assert keys(hits) == ["a", "b", "c", "d"]


@pytest.mark.parametrize("normalisation", ["fixed", "minmax", "zscore"])
def test_alpha_one_is_dense_order(normalisation: str) -> None:
    hits = weighted_sum(KW, DENSE, alpha=1.0, normalisation=normalisation)  # type: ignore[arg-type]
    assert keys(hits)[:3] == ["c", "d", "a"]


def test_fixed_scale_sum_by_hand() -> None:
    kw = [("a", 0.9), ("b", 0.5), ("c", 0.1)]  # BM25 relative to the full match
    hits = {h.key: h.score for h in weighted_sum(kw, DENSE, alpha=0.6, normalisation="fixed")}
    # Scores as given; no keyword match scores 0; unlisted on the dense side: its lowest.
    assert hits["a"] == pytest.approx(0.6 * 0.2 + 0.4 * 0.9)
    assert hits["b"] == pytest.approx(0.6 * 0.2 + 0.4 * 0.5)
    assert hits["c"] == pytest.approx(0.6 * 0.8 + 0.4 * 0.1)
    assert hits["d"] == pytest.approx(0.6 * 0.6)


def test_a_weak_keyword_match_is_not_stretched_by_the_fixed_scale() -> None:
    """Min-max makes the best of weak keyword matches look perfect; fixed does not."""
    weak_kw = [("x", 0.05)]  # a twentieth of the query's weight matched
    dense = [("w", 0.70), ("x", 0.55), ("v", 0.30)]
    assert keys(weighted_sum(weak_kw, dense, alpha=0.65, normalisation="minmax"))[0] == "x"
    assert keys(weighted_sum(weak_kw, dense, alpha=0.65, normalisation="fixed"))[0] == "w"


def test_min_max_sum_by_hand() -> None:
    hits = {h.key: h for h in weighted_sum(KW, DENSE, alpha=0.5, normalisation="minmax")}
    # keyword: a 1, b 0.5, c 0; dense: c 1, d 2/3, a 0; missing = 0.
    assert hits["a"].score == pytest.approx(0.5)
    assert hits["b"].score == pytest.approx(0.25)
    assert hits["c"].score == pytest.approx(0.5)
    assert hits["d"].score == pytest.approx(1 / 3)
    # a and c tie: the better single-side rank first (both first on a side: order seen).
    assert keys(weighted_sum(KW, DENSE, alpha=0.5, normalisation="minmax")) == ["a", "c", "d", "b"]


def test_z_score_sum() -> None:
    hits = {h.key: h for h in weighted_sum(KW, DENSE, alpha=0.5, normalisation="zscore")}
    mean, std = 5.0, math.sqrt(((9 - 5) ** 2 + 0 + (1 - 5) ** 2) / 3)
    z_a_kw = (9 - mean) / std
    d_mean = (0.8 + 0.6 + 0.2) / 3
    d_std = math.sqrt(sum((x - d_mean) ** 2 for x in (0.8, 0.6, 0.2)) / 3)
    assert hits["a"].score == pytest.approx(0.5 * z_a_kw + 0.5 * (0.2 - d_mean) / d_std)
    # b is missing on the dense side: it takes the dense side's lowest z.
    assert hits["b"].score == pytest.approx(0.5 * 0 + 0.5 * (0.2 - d_mean) / d_std)


def test_rrf_k60_by_hand() -> None:
    hits = {h.key: h.score for h in reciprocal_rank(KW, DENSE, k=60)}
    assert hits["a"] == pytest.approx(0.5 / 61 + 0.5 / 63)
    assert hits["d"] == pytest.approx(0.5 / 62)
    assert keys(reciprocal_rank(KW, DENSE))[0] in {"a", "c"}


def test_matched_signals() -> None:
    hits = {h.key: h for h in weighted_sum(KW, DENSE)}
    assert hits["a"].matched == ("keyword",)  # cosine 0.2 is below the floor
    assert hits["b"].matched == ("keyword",)
    assert hits["c"].matched == ("keyword", "meaning")
    assert hits["d"].matched == ("meaning",)
    assert (hits["b"].keyword, hits["b"].meaning) == (5.0, None)
    assert matched_signals(None, MEANING_FLOOR, 1) == ("meaning",)
    assert matched_signals(None, 0.9, MEANING_RANK + 1) == ()  # meaning alone would not find it
    assert matched_signals(1.0, 0.9, None) == ("keyword",)
    assert matched_signals(None, None, None) == ()


def test_meaning_needs_a_dense_rank_within_the_first_ten() -> None:
    dense = [(i, 0.9 - i / 100) for i in range(15)]
    hits = {h.key: h for h in weighted_sum([], dense)}
    assert all(("meaning" in hits[i].matched) == (i < MEANING_RANK) for i in range(15))


def test_limit_empty_sides_and_bad_arguments() -> None:
    assert keys(weighted_sum(KW, DENSE, limit=2)) == keys(weighted_sum(KW, DENSE))[:2]
    assert weighted_sum([], []) == []
    assert keys(weighted_sum([], DENSE)) == ["c", "d", "a"]
    assert keys(weighted_sum(KW, [])) == ["a", "b", "c"]
    assert keys(reciprocal_rank(KW, [])) == ["a", "b", "c"]
    assert keys(weighted_sum([("x", 3.0)], [("x", 0.5)], alpha=ALPHA)) == ["x"]
    with pytest.raises(ValueError):
        weighted_sum(KW, DENSE, alpha=1.5)
    with pytest.raises(ValueError):
        reciprocal_rank(KW, DENSE, k=-1)


# --- properties ---------------------------------------------------------------------

_scores = st.floats(0.0, 100.0, allow_nan=False, width=32)


@st.composite
def rankings(draw: st.DrawFn) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    pool = draw(st.lists(st.integers(0, 30), unique=True, min_size=1, max_size=20))
    kw_keys = draw(st.lists(st.sampled_from(pool), unique=True, max_size=len(pool)))
    dn_keys = draw(st.lists(st.sampled_from(pool), unique=True, max_size=len(pool)))
    kw = sorted(((k, draw(_scores)) for k in kw_keys), key=lambda p: -p[1])
    dn = sorted(((k, draw(_scores) / 100) for k in dn_keys), key=lambda p: -p[1])
    return kw, dn


def _position(hits: list[FusedHit[int]], key: int) -> int:
    return [h.key for h in hits].index(key)


@settings(max_examples=300)
@given(rankings(), st.floats(0.0, 1.0), st.sampled_from(["fixed", "minmax"]), st.data())
def test_weighted_sum_is_monotone_in_each_side(
    sides: tuple[list[tuple[int, float]], list[tuple[int, float]]],
    alpha: float,
    normalisation: str,
    data: st.DataObject,
) -> None:
    """Raising one key's score on one side never lets a key it beat overtake it."""
    kw, dn = sides
    side = data.draw(st.sampled_from(["kw", "dn"]))
    ranking = kw if side == "kw" else dn
    if not ranking:
        return
    i = data.draw(st.integers(0, len(ranking) - 1))
    key, score = ranking[i]
    raised_to = score + data.draw(st.floats(0.0, 50.0))
    raised = sorted([(k, raised_to if k == key else s) for k, s in ranking], key=lambda p: -p[1])
    how = normalisation
    before = weighted_sum(kw, dn, alpha=alpha, normalisation=how)  # type: ignore[arg-type]
    after = (
        weighted_sum(raised, dn, alpha=alpha, normalisation=how)  # type: ignore[arg-type]
        if side == "kw"
        else weighted_sum(kw, raised, alpha=alpha, normalisation=how)  # type: ignore[arg-type]
    )
    assert {h.key for h in before} == {h.key for h in after}
    by_key_before = {h.key: h.score for h in before}
    by_key_after = {h.key: h.score for h in after}
    for other in by_key_before:
        if other == key:
            continue
        # Whoever the key beat strictly before, it still beats (ties aside).
        if by_key_before[key] > by_key_before[other] + 1e-9:
            assert by_key_after[key] >= by_key_after[other] - 1e-9


@settings(max_examples=300)
@given(rankings(), st.floats(0.0, 100.0), st.floats(0.0, 1.0))
def test_rrf_rewards_being_on_both_sides(
    sides: tuple[list[tuple[int, float]], list[tuple[int, float]]], k: float, alpha: float
) -> None:
    kw, dn = sides
    hits = reciprocal_rank(kw, dn, k=k, alpha=alpha)
    assert len({h.key for h in hits}) == len(hits) == len({k for k, _ in kw} | {k for k, _ in dn})
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:], strict=False))
    kw_rank = {key: r for r, (key, _) in enumerate(kw, 1)}
    dn_rank = {key: r for r, (key, _) in enumerate(dn, 1)}
    for h in hits:
        expected = (1 - alpha) / (k + kw_rank[h.key]) if h.key in kw_rank else 0.0
        expected += alpha / (k + dn_rank[h.key]) if h.key in dn_rank else 0.0
        assert h.score == pytest.approx(expected)


@settings(max_examples=200)
@given(rankings(), st.floats(0.0, 1.0), st.sampled_from(["fixed", "minmax", "zscore"]))
def test_weighted_sum_is_sorted_and_complete(
    sides: tuple[list[tuple[int, float]], list[tuple[int, float]]],
    alpha: float,
    normalisation: str,
) -> None:
    kw, dn = sides
    hits = weighted_sum(kw, dn, alpha=alpha, normalisation=normalisation)  # type: ignore[arg-type]
    assert [h.key for h in hits] == list(dict.fromkeys(h.key for h in hits))
    assert {h.key for h in hits} == {k for k, _ in kw} | {k for k, _ in dn}
    assert all(a.score >= b.score - 1e-12 for a, b in zip(hits, hits[1:], strict=False))
    for h in hits:
        assert ("keyword" in h.matched) == (h.keyword is not None)


# --- the reference BM25 -------------------------------------------------------------

CORPUS = [
    "The refund webhook never arrived because the signing secret rotated",
    "Rotated the signing secret for the Stripe webhook",
    "Lunch order for the team offsite",
    "Deploy runbook: roll back the storefront, then purge the CDN",
    "the the the the",
]


def _brute_force(docs: list[list[str]], query: list[str], k1: float, b: float) -> list[float]:
    n = len(docs)
    avg = sum(map(len, docs)) / n or 1.0
    out = []
    for d in docs:
        score = 0.0
        for t in dict.fromkeys(query):
            df = sum(1 for x in docs if t in x)
            if not df:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            tf = d.count(t)
            if not tf:
                continue
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avg))
        out.append(score)
    return out


def test_bm25_scores_match_the_formula() -> None:
    docs = [analyze(t) for t in CORPUS]
    index = BM25Index(docs)
    q = query_terms("the signing secret of the webhook")
    scores, matched = index.scores(q)
    assert np.allclose(scores, _brute_force(docs, q, 1.2, 0.75), rtol=1e-5)
    assert matched.tolist() == [True, True, False, False, False]


def test_bm25_matches_and_weights() -> None:
    index = BM25Index([analyze(t) for t in CORPUS])
    assert [h.doc for h in index.top(query_terms("the webhook"), 10)] == [1, 0]
    assert index.top(query_terms("the"), 10) == []  # function words are not terms
    assert index.top(query_terms("absent words"), 10) == []
    assert index.top(query_terms("webhook"), 0) == []
    # A term of weight 0 neither scores nor matches; other weights scale its part.
    assert [h.doc for h in index.top(["webhook", "lunch"], 10, {"lunch": 0.0})] == [1, 0]
    full = index.top(["webhook"], 10)
    half = index.top(["webhook"], 10, {"webhook": 0.5})
    assert [h.score / 2 for h in full] == pytest.approx([h.score for h in half])


def test_bm25_relative_scores() -> None:
    index = BM25Index([analyze(t) for t in CORPUS])
    q = query_terms("signing secret webhook")
    raw = index.top(q, 10)
    rel = index.top(q, 10, relative=True)
    assert [h.doc for h in raw] == [h.doc for h in rel]
    full = sum(index.idf(t) for t in q)
    assert index.full_match(q) == pytest.approx(full)
    assert [h.score / full for h in raw] == pytest.approx([h.score for h in rel])
    # A word no document holds counts in the full match: the query is matched less.
    assert index.full_match([*q, "zeppelin"]) > full
    assert index.top([*q, "zeppelin"], 1, relative=True)[0].score < rel[0].score


def test_bm25_ties_keep_corpus_order() -> None:
    index = BM25Index([["x"], ["y"], ["x"], ["x"]])
    assert [h.doc for h in index.top(["x"], 2)] == [0, 2]


def test_bm25_on_an_empty_corpus() -> None:
    index = BM25Index([])
    assert len(index) == 0 and index.top(["x"], 5) == []


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from("bcdefghj"), max_size=12), min_size=1, max_size=15),
    st.lists(st.sampled_from("bcdefghjz"), min_size=1, max_size=5),
    st.floats(0.1, 3.0),
    st.floats(0.0, 1.0),
    st.integers(1, 20),
)
def test_bm25_top_is_the_brute_force_ranking(
    docs: list[list[str]], query: list[str], k1: float, b: float, k: int
) -> None:
    index = BM25Index(docs, k1=k1, b=b)
    expected = _brute_force(docs, query, k1, b)
    hits = index.top(query, k)
    matching = [i for i, d in enumerate(docs) if set(d) & set(query)]
    assert len(hits) == min(k, len(matching))
    for hit in hits:
        assert hit.score == pytest.approx(expected[hit.doc], rel=1e-4)
    # No better match was left out, and the order is by score.
    worst = min((h.score for h in hits), default=0.0)
    chosen = {h.doc for h in hits}
    assert all(expected[i] <= worst * (1 + 1e-4) for i in matching if i not in chosen)
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:], strict=False))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from("bcdefg"), max_size=8), min_size=1, max_size=15),
    st.lists(st.sampled_from("bcdefgz"), min_size=1, max_size=4),
    st.lists(st.booleans(), min_size=15, max_size=15),
    st.integers(1, 20),
)
def test_bm25_top_under_a_mask_is_the_full_ranking_filtered(
    docs: list[list[str]], query: list[str], mask: list[bool], k: int
) -> None:
    # Selecting the top k among the allowed documents answers what sorting every match
    # and dropping the others did: the same documents, scores and tie order.
    index = BM25Index(docs)
    allowed = np.asarray(mask[: len(docs)], dtype=np.bool_)
    everything = index.top(query, len(docs), relative=True)
    expected = [h for h in everything if allowed[h.doc]][:k]
    assert index.top(query, k, relative=True, allowed=allowed) == expected


@given(
    st.lists(st.lists(st.sampled_from("bcdefghj"), max_size=10), max_size=12),
    st.lists(
        st.lists(st.lists(st.sampled_from("bcdefghjkm"), max_size=10), max_size=6), max_size=3
    ),
    st.lists(st.sampled_from("bcdefghjkmz"), min_size=1, max_size=5),
)
def test_bm25_extended_is_the_index_of_the_whole_corpus(
    first: list[list[str]], batches: list[list[list[str]]], query: list[str]
) -> None:
    # A team's index extended by each batch of records saved since, new words among them,
    # scores and ranks exactly as one built from every record at once.
    index, corpus = BM25Index(first), list(first)
    for batch in batches:
        index, corpus = index.extended(batch), corpus + batch
    whole = BM25Index(corpus)
    assert len(index) == len(whole)
    scores, matched = index.scores(query)
    expected, expected_matched = whole.scores(query)
    assert np.array_equal(scores, expected) and np.array_equal(matched, expected_matched)
    assert index.top(query, len(corpus), relative=True) == whole.top(
        query, len(corpus), relative=True
    )
    assert [index.idf(t) for t in query] == [whole.idf(t) for t in query]


@given(
    st.lists(st.lists(st.sampled_from("bcdefghj"), max_size=10), min_size=1, max_size=12),
    st.lists(st.booleans(), min_size=12, max_size=12),
    st.lists(st.lists(st.sampled_from("bcdefghjkm"), max_size=10), max_size=4),
    st.lists(st.sampled_from("bcdefghjkmz"), min_size=1, max_size=5),
)
def test_bm25_without_some_documents_is_the_index_of_the_rest(
    first: list[list[str]], flags: list[bool], added: list[list[str]], query: list[str]
) -> None:
    # A space's index less the chunks rewritten or deleted, plus the new ones, scores and
    # ranks exactly as one built from the chunks that are left and the new ones; words
    # left in no chunk (the vocabulary compacted or not) count as words never seen.
    keep = np.asarray(flags[: len(first)], dtype=np.bool_)
    index = BM25Index(first).without(keep).extended(added)
    whole = BM25Index([doc for doc, kept in zip(first, keep, strict=True) if kept] + added)
    assert len(index) == len(whole)
    scores, matched = index.scores(query)
    expected, expected_matched = whole.scores(query)
    assert np.allclose(scores, expected, rtol=1e-6) and np.array_equal(matched, expected_matched)
    assert [h.doc for h in index.top(query, len(whole), relative=True)] == [
        h.doc for h in whole.top(query, len(whole), relative=True)
    ]
    assert [index.idf(t) for t in query] == [whole.idf(t) for t in query]
    assert index.full_match(query) == whole.full_match(query)
