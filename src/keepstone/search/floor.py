"""The relevance floor: which ranked hits are relevant enough to return (docs/search.md,
"The relevance floor").

A hit qualifies when any one of its signals clears its threshold: its cosine to the query
(the dense side), its BM25 relative to the query's full match (the keyword side), or its
fused score. Searched by keyword alone (no embedder, nothing embedded yet) a hit
qualifies by its keyword score against the keyword-only threshold. The thresholds are
chosen by ``bench/bench_search_floor.py`` (cross-validated on the labelled sets, with
queries that have no answer) and stored, per embedding model, in ``floor.json`` next to
this module: that script writes the file, this module only reads it. A model the file
does not know takes the ``"default"`` entry.

A caller's ``min_score`` replaces the floor for one search: a hit qualifies when its
fused score reaches it.

Near-duplicates (:func:`duplicate_key`): two hits whose texts are equal once case,
punctuation and spacing are set aside stand for one; the search returns the best and
lists the others in its ``also_in``. Pure code: no I/O but reading ``floor.json`` once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from keepstone.errors import InvalidRequest
from keepstone.text import parse_decimal

#: Where the calibrated thresholds are (written by bench/bench_search_floor.py).
THRESHOLDS_FILE = Path(__file__).with_name("floor.json")
#: What ``min_score`` may be: fused scores are weighted sums of cosines and relative BM25.
MIN_SCORE_RANGE = (-1.0, 1.0)

_WORDS = re.compile(r"\w+")
#: ASCII bytes as :data:`_WORDS` sees them: a word character kept, any other a space.
_ASCII_WORDS = bytes(c if chr(c).isalnum() or c == ord("_") else 32 for c in range(128)).ljust(
    256, b" "
)


@dataclass(frozen=True, slots=True)
class Floor:
    """One model's thresholds: ``dense`` (cosine), ``keyword`` (relative BM25) and
    ``fused`` (the fused score) when both sides ranked, ``keyword_only`` when the search
    ran by keyword alone or the hit has no vector yet. ``min_score`` (a caller's)
    replaces them all."""

    dense: float
    keyword: float
    fused: float
    keyword_only: float
    min_score: float | None = None

    def qualifies(
        self, score: float, keyword: float | None, meaning: float | None, *, hybrid: bool
    ) -> bool:
        """Whether a hit with this fused ``score``, relative BM25 ``keyword`` and cosine
        ``meaning`` (None: that side has no score for it) is returned. ``hybrid``: the
        dense side took part in the ranking."""
        if self.min_score is not None:
            return score >= self.min_score
        if not hybrid or meaning is None:
            # No cosine to judge it by (keyword-only search, or a row not embedded yet):
            # judged as a keyword-only search judges it.
            return keyword is not None and keyword >= self.keyword_only
        return (
            (meaning is not None and meaning >= self.dense)
            or (keyword is not None and keyword >= self.keyword)
            or score >= self.fused
        )

    def overridden(self, min_score: float | None) -> Floor:
        """This floor, or ``min_score`` in its place when one is given."""
        if min_score is None:
            return self
        return Floor(self.dense, self.keyword, self.fused, self.keyword_only, min_score)


@functools.cache
def _table() -> dict[str, dict[str, float | None]]:
    data = json.loads(THRESHOLDS_FILE.read_text(encoding="utf-8"))
    models: dict[str, dict[str, float | None]] = data["models"]
    return models


def floor_for(model_id: str | None, min_score: float | None = None) -> Floor:
    """The floor of the embedding model ``model_id`` (None: keyword-only search), with a
    caller's ``min_score`` in its place when given."""
    table = _table()
    entry = table.get(model_id or "", table["default"])
    fused = entry.get("fused")
    floor = Floor(
        float(entry["dense"] or 0.0),
        float(entry["keyword"] or 0.0),
        # No fused threshold (null): the fused score alone never qualifies a hit.
        math.inf if fused is None else float(fused),
        float(entry["keyword_only"] or 0.0),
    )
    return floor.overridden(min_score)


def check_min_score(value: object) -> float | None:
    """``min_score`` as a float within :data:`MIN_SCORE_RANGE`, None when not given;
    ``400 invalid_request`` naming ``min_score`` otherwise."""
    if value is None:
        return None
    low, high = MIN_SCORE_RANGE
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        number = parse_decimal(value)
    if number is None or not math.isfinite(number) or not low <= number <= high:
        raise InvalidRequest(
            f"min_score must be a number from {low:g} to {high:g} (a hit's fused score), "
            f"e.g. min_score=0.3; got {value!r}",
            field="min_score",
        )
    return number


def duplicate_key(text: str) -> int:
    """What near-duplicate texts share: a 64-bit digest of their words (runs of ``\\w``),
    casefolded; never 0 (a record stored without a key reads as 0: it folds with
    nothing). Records store theirs (``records.dup_key``), so changing this function
    needs a migration that rewrites them. An ASCII text takes a byte-table path to the
    same words, cheaper than the regex: documents' hits compute theirs per search."""
    if text.isascii():
        words = b" ".join(text.encode().lower().translate(_ASCII_WORDS).split())
    else:
        words = " ".join(_WORDS.findall(text.casefold())).encode()
    digest = hashlib.blake2b(words, digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True) or 1


def empty_hint(*, filtered: bool, tags: bool = True) -> str:
    """The one line an empty answer carries: why nothing came back and what to try.
    ``filtered``: the search was narrowed (since, until, tags or min_score); ``tags``:
    the search takes tags (the records' does not, so its hint does not offer them)."""
    if filtered:
        widen = "since/until/tags" if tags else "since/until"
        return (
            f"nothing relevant enough matched within the filters; widen {widen}, "
            "lower min_score, or try other words"
        )
    return (
        "nothing relevant enough matched; try other words or a broader question, or send "
        "a lower min_score (e.g. 0) to see weaker hits"
    )
