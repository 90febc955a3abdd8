"""Okapi BM25 over an in-memory corpus of analysed texts, on numpy postings.

One ranking for both SQL dialects: the engines find and store; this module ranks, the
same way on SQLite and PostgreSQL (FTS5's ``bm25()`` and PostgreSQL's ``ts_rank_cd``
order the same matches differently, and ``ts_rank_cd`` ranked worse on the labelled
records). A :class:`BM25Index` is built from the analysed terms of a team's records or
a space's chunks (:func:`keepstone.search.text.analyze`) and is immutable: a cache keeps one
per team or space and builds a new one when the team's version moves, or, when only some
documents changed, drops and adds those (:meth:`BM25Index.without`,
:meth:`BM25Index.extended`; docs/search.md, "How it ranks", has what a build and a query
cost).

Scoring (Lucene's BM25): for each query term ``t`` with weight ``w``,

    w · idf(t) · tf · (k1 + 1) / (tf + k1 · (1 − b + b · len / avglen))
    idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5))

This ``idf`` is never negative (FTS5's can be, for a word in most documents), so a
common word adds a little and never subtracts. A document *matches* when it holds at
least one query term of positive weight.

A raw BM25 score means nothing outside its query. :meth:`BM25Index.full_match` is the
score of a document of average length holding every query term once (``Σ w · idf``,
a term no document holds counted at the largest idf), and ``top(..., relative=True)``
divides by it: 1.0 is "as good as a document with all the query's words", 0.3 "about a
third of the query's weight matched", whatever the query. That fixed scale is what lets
a weighted sum set keyword evidence against cosine similarity without stretching a weak
side's scores to look strong (:mod:`keepstone.search.fusion`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

#: Term-frequency saturation (Lucene's and FTS5's default).
K1 = 1.2
#: Length normalisation (Lucene's and FTS5's default).
B = 0.75

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class BM25Hit:
    """A matching document: its position in the corpus and its BM25 score."""

    doc: int
    score: float


class BM25Index:
    """BM25 over a fixed corpus of analysed documents (lists of terms).

    Documents are numbered by their position in the sequence given to the
    constructor; :meth:`top` answers those numbers.
    """

    __slots__ = (
        "_avg_len",
        "_docs_of",
        "_len_norm",
        "_lengths",
        "_offsets",
        "_tfs",
        "_vocab",
        "k1",
        "b",
    )

    def __init__(self, documents: Sequence[Sequence[str]], *, k1: float = K1, b: float = B) -> None:
        self.k1 = k1
        self.b = b
        vocab: dict[str, int] = {}
        terms, docs, tfs, lengths = _postings(vocab, documents, 0)
        self._arrange(
            vocab, docs, tfs, lengths, _offsets_of(np.bincount(terms, minlength=len(vocab)))
        )

    def extended(self, documents: Sequence[Sequence[str]]) -> BM25Index:
        """This corpus with ``documents`` after its own, numbered on from :func:`len`: the
        same index as one built from the whole corpus, at the cost of the new documents'
        terms and one copy of the postings in numpy, not of every document's terms again
        (a team's index after each save)."""
        if not documents:
            return self
        grown = BM25Index.__new__(BM25Index)
        grown.k1, grown.b = self.k1, self.b
        vocab = dict(self._vocab)
        terms, docs, tfs, lengths = _postings(vocab, documents, len(self))
        # The new documents are numbered after every old one: a term's new postings go
        # right after its old ones, and those of terms new to the vocabulary after every
        # old posting, in term order (``_postings`` gives them in (term, document) order).
        known = len(self._vocab)
        at = self._offsets[np.minimum(terms + 1, known)]
        counts = np.bincount(terms, minlength=len(vocab))
        counts[:known] += np.diff(self._offsets)
        grown._arrange(
            vocab,
            np.insert(self._docs_of, at, docs.astype(np.int32)),
            np.insert(self._tfs, at, tfs),
            np.concatenate([self._lengths, lengths]),
            _offsets_of(counts),
        )
        return grown

    def without(self, keep: npt.NDArray[np.bool_]) -> BM25Index:
        """This corpus with only the documents ``keep`` flags, renumbered in their order:
        the same index as one built from those documents alone, at the cost of one pass
        over the postings in numpy (a space's index after a document is rewritten or
        deleted). A term left in no document scores and matches as one never seen; once
        such terms are half the vocabulary, the vocabulary is compacted."""
        if keep.all():
            return self
        lean = BM25Index.__new__(BM25Index)
        lean.k1, lean.b = self.k1, self.b
        kept = keep[self._docs_of]
        docs = (np.cumsum(keep, dtype=np.int32) - 1)[self._docs_of[kept]]
        # Each term's postings kept: its count less those dropped, found by where they are.
        dropped = np.searchsorted(self._offsets, np.flatnonzero(~kept), side="right") - 1
        counts = np.diff(self._offsets) - np.bincount(dropped, minlength=len(self._vocab))
        vocab = self._vocab
        live = counts > 0
        if 2 * np.count_nonzero(live) < len(vocab):
            # Ids stay in the same order, so the postings stay in (term, document) order.
            renumber = np.cumsum(live, dtype=np.int64) - 1
            vocab = {term: int(renumber[tid]) for term, tid in vocab.items() if live[tid]}
            counts = counts[live]
        lean._arrange(vocab, docs, self._tfs[kept], self._lengths[keep], _offsets_of(counts))
        return lean

    def _arrange(
        self,
        vocab: dict[str, int],
        docs: npt.NDArray[np.int64] | npt.NDArray[np.int32],
        tfs: FloatArray,
        lengths: npt.NDArray[np.int64],
        offsets: npt.NDArray[np.int64],
    ) -> None:
        """Set the index from its postings in (term, document) order, term ``t``'s from
        ``offsets[t]`` to ``offsets[t + 1]``."""
        self._vocab = vocab
        self._docs_of = docs.astype(np.int32, copy=False)
        self._tfs = tfs
        self._offsets = offsets
        self._lengths = lengths
        self._avg_len = float(lengths.mean()) if len(lengths) else 0.0
        avg = self._avg_len or 1.0
        k1, b = self.k1, self.b
        self._len_norm = (k1 * (1.0 - b + b * lengths / avg)).astype(np.float32)

    def __len__(self) -> int:
        return len(self._len_norm)

    def idf(self, term: str) -> float:
        """The inverse document frequency of ``term`` (0 for a term no document has)."""
        df = self._df(term)
        if not df:
            return 0.0
        return float(np.log1p((len(self) - df + 0.5) / (df + 0.5)))

    def _df(self, term: str) -> int:
        """How many documents hold ``term`` (0 for one in the vocabulary that no document
        holds any longer: see :meth:`without`)."""
        tid = self._vocab.get(term)
        return 0 if tid is None else int(self._offsets[tid + 1] - self._offsets[tid])

    def full_match(
        self, query_terms: Sequence[str], weights: Mapping[str, float] | None = None
    ) -> float:
        """``Σ w · idf(t)`` over the distinct query terms: the score of an average-length
        document holding each once. A term no document holds counts at the largest
        idf, so a query whose words the corpus lacks cannot look fully matched."""
        unseen = float(np.log1p((len(self) + 0.5) / 0.5))
        total = 0.0
        for term in dict.fromkeys(query_terms):
            weight = 1.0 if weights is None else weights.get(term, 1.0)
            if weight > 0.0:
                total += weight * (self.idf(term) if self._df(term) else unseen)
        return total

    def scores(
        self, query_terms: Sequence[str], weights: Mapping[str, float] | None = None
    ) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
        """Every document's score for the query, and which documents match it.

        A repeated query term counts once; ``weights`` scales a term's part (1 when
        absent; a term of weight 0 neither scores nor matches).
        """
        scores = np.zeros(len(self), dtype=np.float32)
        matched = np.zeros(len(self), dtype=np.bool_)
        for term in dict.fromkeys(query_terms):
            tid = self._vocab.get(term)
            weight = 1.0 if weights is None else weights.get(term, 1.0)
            if tid is None or weight <= 0.0:
                continue
            lo, hi = self._offsets[tid], self._offsets[tid + 1]
            docs = self._docs_of[lo:hi]
            tf = self._tfs[lo:hi]
            part = tf * np.float32(self.k1 + 1.0) / (tf + self._len_norm[docs])
            scores[docs] += np.float32(weight * self.idf(term)) * part
            matched[docs] = True
        return scores, matched

    def relative_scores(
        self, query_terms: Sequence[str], docs: Sequence[int]
    ) -> list[float | None]:
        """The score of each of ``docs`` relative to the query's full match (as
        :meth:`top` with ``relative``); None for a document that does not match."""
        scores, matched = self.scores(query_terms)
        scale = self.full_match(query_terms)
        return [float(scores[d]) / scale if matched[d] else None for d in docs]

    def top(
        self,
        query_terms: Sequence[str],
        k: int,
        weights: Mapping[str, float] | None = None,
        *,
        relative: bool = False,
        allowed: npt.NDArray[np.bool_] | None = None,
    ) -> list[BM25Hit]:
        """The ``k`` best-scoring matches, best first; equal scores in corpus order.
        ``relative``: scores divided by :meth:`full_match` (the same order). ``allowed``
        (one flag per document): only those documents are candidates, so a masked search
        still selects its top ``k`` by partition instead of sorting every match."""
        scores, matched = self.scores(query_terms, weights)
        if allowed is not None:
            matched &= allowed
        candidates = np.flatnonzero(matched)
        if k <= 0 or not len(candidates):
            return []
        cand_scores = scores[candidates]
        if len(candidates) > k:
            # Everything strictly above the k-th score, then the earliest of its ties.
            kth = np.partition(cand_scores, len(cand_scores) - k)[len(cand_scores) - k]
            keep = np.flatnonzero(cand_scores > kth)
            ties = np.flatnonzero(cand_scores == kth)[: k - len(keep)]
            chosen = np.concatenate([keep, ties])
            candidates, cand_scores = candidates[chosen], cand_scores[chosen]
        order = np.lexsort((candidates, -cand_scores))
        scale = self.full_match(query_terms, weights) if relative else 1.0
        return [BM25Hit(int(candidates[i]), float(cand_scores[i]) / scale) for i in order]


def _postings(
    vocab: dict[str, int], documents: Sequence[Sequence[str]], first: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], FloatArray, npt.NDArray[np.int64]]:
    """The postings of ``documents``, numbered from ``first``, in (term, document) order:
    each posting's term (ids given by ``vocab``, which grows by the terms it lacked), its
    document and the term's frequency there; and each document's length."""
    term_ids: list[int] = []
    lengths = np.zeros(len(documents), dtype=np.int64)
    for i, terms in enumerate(documents):
        lengths[i] = len(terms)
        term_ids.extend(vocab.setdefault(t, len(vocab)) for t in terms)
    count = max(first + len(documents), 1)
    doc_of_token = np.repeat(np.arange(first, first + len(documents), dtype=np.int64), lengths)
    # One (term, document) key per token; unique keys give the postings and their tf.
    keys = np.asarray(term_ids, dtype=np.int64) * count + doc_of_token
    pairs, tfs = np.unique(keys, return_counts=True)
    return pairs // count, pairs % count, tfs.astype(np.float32), lengths


def _offsets_of(counts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Where each term's postings start (and, last, where they end) from their counts."""
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets
