"""Fusing a keyword ranking and a dense (meaning) ranking into one.

Both sides arrive as rankings, best first, of ``(key, score)`` pairs with distinct keys:
the keyword side lists its *matches* (BM25 scores), the dense side its nearest
neighbours (cosine similarities). Two families:

* :func:`weighted_sum` — ``alpha · dense + (1 − alpha) · keyword`` over the union of
  both rankings, each side's scores first put on a common footing:

  - ``"fixed"`` (Keepstone's choice, :data:`NORMALISATION`): the scores are already on
    fixed scales — BM25 relative to the query's full match
    (``BM25Index.top(..., relative=True)``) and cosine similarity — and are used as
    they are. A query whose best keyword match covers a sliver of it keeps a small
    keyword score, and a query whose nearest neighbours are all lukewarm keeps
    lukewarm similarities, so neither side is stretched to look sure of itself.
  - ``"minmax"``: each side rescaled to [0, 1] over its own candidates, per query.
  - ``"zscore"``: each side to mean 0 and unit deviation, per query.

* :func:`reciprocal_rank` — ``alpha / (k + dense rank) + (1 − alpha) / (k + keyword
  rank)``; with ``alpha = 0.5`` and ``k = 60`` the usual RRF.

On the labelled sets, cross-validated, and with the dense side weakened to how it
fares on chats between people (docs/search.md, "How it ranks"): RRF with k = 60 ranked
below dense-only; min-max and z-score sums beat both sides only while the dense side
was strong, and fell below keyword-only once it was weak; the fixed-scale sum with
:data:`ALPHA` stayed at or above the better side in both conditions.

Each fused hit says which signals matched: ``"keyword"`` when the keyword side
matched it (it shares a term with the query), ``"meaning"`` when a search by meaning
alone would have returned it too: it is among the dense side's first
:data:`MEANING_RANK` and its cosine similarity reaches :data:`MEANING_FLOOR`. (No
similarity threshold alone separates answers from the rest: on the labelled sets the
answers' cosines overlap the other top-10 hits', and nonsense queries come close to both
(docs/search.md, "How it ranks", has the figures). The rank says "this is what meaning
found"; the floor keeps a query with no neighbour from claiming one.)
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

K = TypeVar("K", bound=Hashable)
Normalisation = Literal["fixed", "minmax", "zscore"]

#: Weight of the dense side in :func:`weighted_sum` (chosen by cross-validation).
ALPHA = 0.65
#: How :func:`weighted_sum` puts the two sides' scores on a common footing.
NORMALISATION: Normalisation = "fixed"
#: Reciprocal-rank fusion's customary constant.
RRF_K = 60.0
#: A hit "matches by meaning" when it is among the dense side's first this many ...
MEANING_RANK = 10
#: ... with at least this cosine similarity (all-MiniLM-L6-v2).
MEANING_FLOOR = 0.3

KEYWORD = "keyword"
MEANING = "meaning"


@dataclass(frozen=True, slots=True)
class FusedHit(Generic[K]):
    """One fused result. ``keyword`` and ``meaning`` are the sides' raw scores (None
    when that side did not rank the key); ``matched`` names the signals that matched."""

    key: K
    score: float
    keyword: float | None
    meaning: float | None
    matched: tuple[str, ...]


def matched_signals(
    keyword: float | None, meaning: float | None, meaning_rank: int | None
) -> tuple[str, ...]:
    """The signals a hit matched, in the order ``("keyword", "meaning")``: from its
    keyword score (None: no keyword match), its cosine and its rank on the dense side
    (from 1; None: not ranked there)."""
    signals: list[str] = []
    if keyword is not None:
        signals.append(KEYWORD)
    if (
        meaning is not None
        and meaning_rank is not None
        and meaning_rank <= MEANING_RANK
        and meaning >= MEANING_FLOOR
    ):
        signals.append(MEANING)
    return tuple(signals)


def _normalised(scores: Sequence[float], how: Normalisation) -> tuple[list[float], float]:
    """The scores normalised, and the value of a key the side does not list."""
    if how == "fixed":
        return list(scores), 0.0  # the caller sets the dense side's own floor
    if not scores or max(scores) <= min(scores):
        # Nothing to spread (one candidate, or all equal): listed keys sit above the rest.
        top, below = (1.0, 0.0) if how == "minmax" else (0.0, -1.0)
        return [top] * len(scores), below
    if how == "minmax":
        low, high = min(scores), max(scores)
        return [(s - low) / (high - low) for s in scores], 0.0
    mean = sum(scores) / len(scores)
    std = (sum((s - mean) ** 2 for s in scores) / len(scores)) ** 0.5
    values = [(s - mean) / std for s in scores]
    return values, min(values)


def _fuse(
    keyword: Sequence[tuple[K, float]],
    dense: Sequence[tuple[K, float]],
    kw_values: Sequence[float],
    dense_values: Sequence[float],
    kw_missing: float,
    dense_missing: float,
    alpha: float,
    limit: int | None,
) -> list[FusedHit[K]]:
    """``alpha · dense + (1 − alpha) · keyword`` over the union of both rankings, best
    first; ties keep the better single-side rank, then the order first seen."""
    kw = {
        key: (i, v, raw) for i, ((key, raw), v) in enumerate(zip(keyword, kw_values, strict=True))
    }
    dn = {
        key: (i, v, raw) for i, ((key, raw), v) in enumerate(zip(dense, dense_values, strict=True))
    }
    rows: list[tuple[float, int, int, FusedHit[K]]] = []
    for order, key in enumerate(dict.fromkeys([k for k, _ in keyword] + [k for k, _ in dense])):
        k_rank, k_value, k_raw = kw.get(key, (len(keyword), kw_missing, None))
        d_rank, d_value, d_raw = dn.get(key, (len(dense), dense_missing, None))
        score = alpha * d_value + (1.0 - alpha) * k_value
        matched = matched_signals(k_raw, d_raw, d_rank + 1 if d_raw is not None else None)
        rows.append(
            (-score, min(k_rank, d_rank), order, FusedHit(key, score, k_raw, d_raw, matched))
        )
    rows.sort(key=lambda row: row[:3])
    hits = [row[3] for row in rows]
    return hits if limit is None else hits[:limit]


def weighted_sum(
    keyword: Sequence[tuple[K, float]],
    dense: Sequence[tuple[K, float]],
    *,
    alpha: float = ALPHA,
    normalisation: Normalisation = NORMALISATION,
    limit: int | None = None,
) -> list[FusedHit[K]]:
    """Fuse by ``alpha · dense + (1 − alpha) · keyword``, best first.

    ``alpha`` is the dense side's weight: 0 is keyword-only, 1 dense-only. With
    ``"fixed"`` scores a key the keyword side does not list scores 0 there (the
    keyword side lists every match it has), and one the dense side does not list takes
    the lowest similarity it does list (a neighbour it cut off is no closer). With
    ``"minmax"`` and ``"zscore"`` a missing key takes that side's lowest normalised
    value (0, the lowest z); when the side's candidates all score the same (one
    candidate, say), they normalise to 1 (z: 0) and a missing key to 0 (z: −1).
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError("alpha must be within [0, 1]")
    kw_values, kw_missing = _normalised([s for _, s in keyword], normalisation)
    dense_values, dense_missing = _normalised([s for _, s in dense], normalisation)
    if normalisation == "fixed":
        dense_missing = min(dense_values, default=0.0)
    return _fuse(keyword, dense, kw_values, dense_values, kw_missing, dense_missing, alpha, limit)


def reciprocal_rank(
    keyword: Sequence[tuple[K, float]],
    dense: Sequence[tuple[K, float]],
    *,
    k: float = RRF_K,
    alpha: float = 0.5,
    limit: int | None = None,
) -> list[FusedHit[K]]:
    """Fuse by reciprocal rank, best first: ``alpha / (k + dense rank) + (1 − alpha) /
    (k + keyword rank)``, ranks from 1; a side that does not list a key adds nothing
    for it. ``alpha = 0.5`` is the usual RRF (scaled by one half)."""
    if k < 0.0 or not 0.0 <= alpha <= 1.0:
        raise ValueError("need k >= 0 and alpha within [0, 1]")
    kw_values = [1.0 / (k + rank) for rank in range(1, len(keyword) + 1)]
    dense_values = [1.0 / (k + rank) for rank in range(1, len(dense) + 1)]
    return _fuse(keyword, dense, kw_values, dense_values, 0.0, 0.0, alpha, limit)
