"""The three labelled search sets of tests/data/ as rankable units and queries, the
metrics, and the rankers of Keepstone's chosen design: shared by the quality floors
(``test_quality_floors.py``) and the study that chose the design
(``bench/bench_search_study.py``), so both measure the same thing.

* *records*: 2,057 work summaries; a query searches them all.
* *docs*: 326 Markdown documents as :func:`keepstone.search.chunking.chunk_markdown` chunks,
  indexed by their ``search_text``; a result is a section (a document and heading
  trail, its best chunk standing for it), and a ``""`` label is answered by any
  section of its document.
* *chats*: 846 turns of six conversations; a query searches only its conversation.

Figures are recall@10 and MRR@10 (the reciprocal rank of the first answer within the
top 10; 0 if none), per query, averaged overall and per kind.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from keepstone.search import fusion
from keepstone.search.bm25 import BM25Index
from keepstone.search.chunking import MAX_CHARS, OVERLAP_CHARS, chunk_markdown
from keepstone.search.text import ANALYZER, Analyzer

DATA = Path(__file__).resolve().parent.parent / "data"
#: The dense vectors of every unit and query, float16, for the quality floors.
VECTORS = DATA / "search_vectors.npz"
#: The model those vectors come from.
MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
K = 10
#: Candidates taken from each side before fusion.
DEPTH = 100
KINDS = {
    "records": ["keyword", "paraphrase"],
    "docs": ["keyword", "paraphrase"],
    "chats": ["keyword", "paraphrase", "temporal"],
}


@dataclass
class Unit:
    """One searchable thing: a record, a chunk or a turn."""

    section: str  # what a result is: a record id, "space/path#trail", a turn id
    doc: str  # what a "" label names: a record id, "space/path", a turn id
    text: str
    group: str = ""  # a query searches only its group (chats: the conversation)


@dataclass
class Query:
    text: str
    kind: str
    targets: list[tuple[str, str | None]]  # (doc, section; None = any of the doc)
    group: str = ""


@dataclass
class EvalSet:
    name: str
    units: list[Unit]
    queries: list[Query]
    groups: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        by: dict[str, list[int]] = defaultdict(list)
        for i, u in enumerate(self.units):
            by[u.group].append(i)
        self.groups = {g: np.array(ix, dtype=np.int64) for g, ix in by.items()}

    def kinds(self) -> np.ndarray:
        return np.array([q.kind for q in self.queries])

    def digest(self) -> str:
        """What the stored vectors were made from: every unit's and query's text."""
        h = hashlib.sha256()
        for text in [u.text for u in self.units] + [q.text for q in self.queries]:
            h.update(text.encode())
            h.update(b"\0")
        return h.hexdigest()


def jsonl(name: str) -> list[dict[str, Any]]:
    lines = (DATA / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def load_records() -> EvalSet:
    return EvalSet(
        "records",
        [Unit(r["id"], r["id"], r["text"]) for r in jsonl("records_corpus.jsonl")],
        [
            Query(q["query"], q["kind"], [(t, t) for t in q["relevant"]])
            for q in jsonl("records_queries.jsonl")
        ],
    )


def load_docs(max_chars: int = MAX_CHARS, overlap: int = OVERLAP_CHARS) -> EvalSet:
    units = []
    for d in jsonl("docs_corpus.jsonl"):
        doc = f"{d['space']}/{d['path']}"
        for c in chunk_markdown(d["content"], max_chars=max_chars, overlap=overlap):
            units.append(Unit(f"{doc}#{c.heading}", doc, c.search_text))
    queries = []
    for q in jsonl("docs_queries.jsonl"):
        targets: list[tuple[str, str | None]] = []
        for r in q["relevant"]:
            doc = f"{r['space']}/{r['path']}"
            targets.append((doc, f"{doc}#{r['heading']}" if r["heading"] else None))
        queries.append(Query(q["query"], q["kind"], targets))
    return EvalSet("docs", units, queries)


def load_chats() -> EvalSet:
    return EvalSet(
        "chats",
        [Unit(t["id"], t["id"], t["text"], t["conversation"]) for t in jsonl("chats_corpus.jsonl")],
        [
            Query(q["query"], q["kind"], [(t, t) for t in q["relevant"]], q["conversation"])
            for q in jsonl("chats_queries.jsonl")
        ],
    )


def load_sets() -> dict[str, EvalSet]:
    return {"records": load_records(), "docs": load_docs(), "chats": load_chats()}


# --- metrics ------------------------------------------------------------------------

Ranking = list[tuple[int, float]]  # (unit index, score), best first


def score_query(es: EvalSet, q: Query, ranked: Sequence[int]) -> tuple[float, float]:
    """recall@K and reciprocal rank (within K) of a ranking of units, by section."""
    sections: list[Unit] = []
    seen: set[str] = set()
    for i in ranked:
        u = es.units[i]
        if u.section not in seen:
            seen.add(u.section)
            sections.append(u)
            if len(sections) == K:
                break

    def hits(u: Unit, t: tuple[str, str | None]) -> bool:
        return u.section == t[1] if t[1] is not None else u.doc == t[0]

    found = sum(1 for t in q.targets if any(hits(u, t) for u in sections))
    rank = next((r for r, u in enumerate(sections, 1) if any(hits(u, t) for t in q.targets)), 0)
    return found / len(q.targets), 1.0 / rank if rank else 0.0


@dataclass
class Scores:
    """Per-query recall@K and reciprocal rank of one ranker on one set."""

    recall: np.ndarray
    rr: np.ndarray

    def objective(self, mask: np.ndarray | None = None) -> float:
        """The mean of recall@K and MRR (over the masked queries)."""
        m = np.ones(len(self.recall), bool) if mask is None else mask
        return float((self.recall[m].mean() + self.rr[m].mean()) / 2)

    def summary(self, es: EvalSet, mask: np.ndarray | None = None) -> dict[str, list[float]]:
        """``{"all" | kind: [recall@K, MRR]}``."""
        kinds = es.kinds()
        sel = np.ones(len(kinds), bool) if mask is None else mask
        out = {"all": [float(self.recall[sel].mean()), float(self.rr[sel].mean())]}
        for kind in KINDS[es.name]:
            m = sel & (kinds == kind)
            if m.any():
                out[kind] = [float(self.recall[m].mean()), float(self.rr[m].mean())]
        return out

    @staticmethod
    def mean(many: Sequence[Scores]) -> Scores:
        return Scores(
            np.mean([s.recall for s in many], axis=0), np.mean([s.rr for s in many], axis=0)
        )


def evaluate(es: EvalSet, rankings: Sequence[Sequence[int]]) -> Scores:
    pairs = [score_query(es, q, r) for q, r in zip(es.queries, rankings, strict=True)]
    return Scores(np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]))


def keys_of(rankings: Sequence[Ranking]) -> list[list[int]]:
    return [[i for i, _ in r] for r in rankings]


# --- the chosen design's rankers ------------------------------------------------------


def bm25_rankings(
    es: EvalSet,
    analyzer: Analyzer = ANALYZER,
    depth: int = DEPTH,
    *,
    k1: float = 1.2,
    b: float = 0.75,
    weights: Mapping[str, float] | None = None,
) -> list[Ranking]:
    """BM25 (keepstone.search.bm25) per group, scores relative to the query's full match."""
    indexes = {
        g: BM25Index([analyzer.terms(es.units[i].text) for i in ix], k1=k1, b=b)
        for g, ix in es.groups.items()
    }
    out = []
    for q in es.queries:
        ix = es.groups[q.group]
        hits = indexes[q.group].top(analyzer.query_terms(q.text), depth, weights, relative=True)
        out.append([(int(ix[h.doc]), h.score) for h in hits])
    return out


def dense_rankings(
    es: EvalSet, units: np.ndarray, queries: np.ndarray, depth: int = DEPTH
) -> list[Ranking]:
    """Exact cosine top-``depth`` of each query within its group."""
    out = []
    for q, qv in zip(es.queries, queries, strict=True):
        ix = es.groups[q.group]
        sims = units[ix] @ qv
        order = np.argsort(-sims, kind="stable")[:depth]
        out.append([(int(ix[o]), float(sims[o])) for o in order])
    return out


Config = tuple[str, float]  # ("rrf", k) | ("fixed" | "minmax" | "zscore", alpha)
#: Keepstone's fusion (keepstone.search.fusion's defaults).
CHOSEN: Config = (fusion.NORMALISATION, fusion.ALPHA)


def fuse(kw: Sequence[Ranking], dn: Sequence[Ranking], config: Config = CHOSEN) -> list[list[int]]:
    family, p = config
    out = []
    for a, b in zip(kw, dn, strict=True):
        if family == "rrf":
            hits = fusion.reciprocal_rank(a, b, k=p)
        else:
            hits = fusion.weighted_sum(a, b, alpha=p, normalisation=family)  # type: ignore[arg-type]
        out.append([h.key for h in hits])
    return out


def hybrid_rankings(es: EvalSet, units: np.ndarray, queries: np.ndarray) -> list[list[int]]:
    """What the product ranks (:func:`keepstone.search.hybrid.rank`: its own candidate depth,
    each side's candidates scored exactly on the other side, the fixed-scale sum), per
    group, as unit indices best first."""
    from keepstone.search.hybrid import ExactDense, rank

    indexes = {
        g: BM25Index([ANALYZER.terms(es.units[i].text) for i in ix]) for g, ix in es.groups.items()
    }
    matrices = {g: np.ascontiguousarray(units[ix], dtype=np.float32) for g, ix in es.groups.items()}
    out = []
    for q, qv in zip(es.queries, queries, strict=True):
        ix = es.groups[q.group]
        matrix = matrices[q.group]
        dense = ExactDense(matrix, np.arange(len(ix), dtype=np.int64), qv.astype(np.float32))
        hits = rank(indexes[q.group], ANALYZER.query_terms(q.text), dense=dense)
        out.append([int(ix[h.key]) for h in hits])
    return out


# --- the stored vectors ---------------------------------------------------------------


def save_vectors(
    sets: Mapping[str, EvalSet], vectors: Mapping[str, tuple[np.ndarray, np.ndarray]]
) -> None:
    """Write every set's unit and query vectors (float16) with what they were made of."""
    arrays: dict[str, np.ndarray] = {}
    meta = {"model": MODEL_ID, "digests": {}}
    for name, es in sets.items():
        units, queries = vectors[name]
        arrays[f"{name}_units"] = units.astype(np.float16)
        arrays[f"{name}_queries"] = queries.astype(np.float16)
        meta["digests"][name] = es.digest()  # type: ignore[index]
    arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
    np.savez_compressed(VECTORS, **arrays)


def load_vectors(sets: Mapping[str, EvalSet]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The stored vectors, as float32; refuses vectors of other texts or another model."""
    with np.load(VECTORS) as z:
        meta = json.loads(str(z["meta"]))
        if meta["model"] != MODEL_ID:
            raise ValueError(f"{VECTORS.name} holds {meta['model']} vectors, not {MODEL_ID}")
        out = {}
        for name, es in sets.items():
            if meta["digests"].get(name) != es.digest():
                raise ValueError(
                    f"{VECTORS.name}: the {name} texts changed (chunking or the set);"
                    " rewrite it with `python bench/bench_search_study.py --write-test-vectors`"
                )
            out[name] = (
                z[f"{name}_units"].astype(np.float32),
                z[f"{name}_queries"].astype(np.float32),
            )
    return out
