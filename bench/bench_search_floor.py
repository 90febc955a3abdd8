"""Calibrate the relevance floor (keepstone.search.floor) by cross-validation, and print
recall@10 / MRR@10 with and without it on the labelled sets, and how often a query with
no answer gets nothing back. Asserts nothing.

    python bench/bench_search_floor.py               # figures; thresholds chosen on all queries
    python bench/bench_search_floor.py --write       # ... and rewrite search/floor.json
    python bench/bench_search_floor.py --model-id X  # file the thresholds under model X

Re-run it whenever the embedder changes: the sets' vectors come from
tests/data/search_vectors.npz (:mod:`tests.search.labelled`, which follows the default
embedder), the off-topic questions are embedded by ``keepstone.embed.open_embedder()``
(the configured model; without one they are left out, and said so).

What is ranked is what the product ranks (:func:`keepstone.search.hybrid.rank` over the
scope's BM25 index and exact cosine, fixed-scale fusion), hybrid and keyword-only; a
document hit is a section, its best chunk standing for it (as the product does).

*Labelled* queries: the three sets of tests/data (records: all 2,057 records; docs: all
chunks of all spaces; chats: the query's conversation). *No-answer* queries (none of the
scope answers them): chats questions against the records and against the documents
(private lives against engineering work), records and docs queries against the chats,
and 40 hand-written off-topic questions (tests/data/offtopic_queries.jsonl) against
each corpus. Records and docs queries are not run against each other: they share a
domain, so some of those would have answers.

The floor (:class:`keepstone.search.floor.Floor`): a hit qualifies when its cosine >=
``dense`` OR its relative BM25 >= ``keyword`` OR its fused score >= ``fused``; keyword-only,
when its relative BM25 >= ``keyword_only``. A grid of thresholds is scored; a choice is
*feasible* when on every set recall@10 falls by at most ``--budget`` from no floor; among
feasible ones the largest share of empty no-answer answers wins (then fewer hits on
no-answer queries, then fewer irrelevant hits on labelled ones, then lower thresholds).

Cross-validation: (a) k-fold (``--folds``), every set's labelled queries and every
no-answer group split alike, thresholds chosen on k-1 folds and scored on the held-out
fold; (b) leave one set out: chosen on the two other sets (and no-answer queries not
built from the held-out set), scored on the held-out set, which stands for a set never
seen.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from keepstone.search import floor as floor_module  # noqa: E402
from keepstone.search.bm25 import BM25Index  # noqa: E402
from keepstone.search.hybrid import ExactDense, rank  # noqa: E402
from keepstone.search.text import ANALYZER  # noqa: E402
from tests.search.labelled import EvalSet, K, jsonl, load_sets, load_vectors  # noqa: E402

NAN = float("nan")
DENSE_GRID = np.round(np.arange(0.10, 0.701, 0.02), 3)
KEYWORD_GRID = np.round(np.arange(0.0, 1.001, 0.05), 3)
FUSED_GRID = np.append(np.round(np.arange(0.20, 0.851, 0.05), 3), np.inf)
KEYWORD_ONLY_GRID = np.round(np.arange(0.0, 1.001, 0.025), 3)


@dataclass
class Candidates:
    """One query's ranked sections (best first): fused score, relative BM25 and cosine
    (NaN: that side has none), and which of its targets each section answers."""

    group: str  # the labelled set, or "none:<query set>><corpus>" for no-answer queries
    score: np.ndarray
    keyword: np.ndarray
    meaning: np.ndarray
    answers: np.ndarray  # (sections, targets) bool; (sections, 0) for no-answer


@dataclass
class Scope:
    index: BM25Index
    matrix: np.ndarray
    units: np.ndarray  # unit index of each row


def scopes_of(es: EvalSet, units: np.ndarray, whole: bool) -> dict[str, Scope]:
    groups = {"": np.arange(len(es.units))} if whole else es.groups
    return {
        g: Scope(
            BM25Index([ANALYZER.terms(es.units[i].text) for i in ix]),
            np.ascontiguousarray(units[ix], dtype=np.float32),
            ix,
        )
        for g, ix in groups.items()
    }


def ranked(
    scope: Scope, text: str, vector: np.ndarray | None
) -> list[tuple[int, float, float, float]]:
    """(unit, fused, relative BM25, cosine) of the product's ranking, best first."""
    dense = None
    if vector is not None:
        rows = np.arange(len(scope.units), dtype=np.int64)
        dense = ExactDense(scope.matrix, rows, vector.astype(np.float32))
    hits = rank(scope.index, ANALYZER.query_terms(text), dense=dense)
    return [
        (
            int(scope.units[h.key]),
            h.score,
            NAN if h.keyword is None else h.keyword,
            NAN if h.meaning is None else h.meaning,
        )
        for h in hits
    ]


def candidates(
    es: EvalSet,
    scope: Scope,
    text: str,
    vector: np.ndarray | None,
    targets: Sequence[tuple[str, str | None]],
    group: str,
) -> Candidates:
    rows, seen = [], set()
    for unit, score, kw, cos in ranked(scope, text, vector):
        u = es.units[unit]
        if u.section in seen:
            continue  # the best chunk stands for its section
        seen.add(u.section)
        hits = [u.section == t[1] if t[1] is not None else u.doc == t[0] for t in targets]
        rows.append((score, kw, cos, hits))
    answers = np.array([r[3] for r in rows], dtype=bool).reshape(len(rows), len(targets))
    return Candidates(
        group,
        np.array([r[0] for r in rows]),
        np.array([r[1] for r in rows]),
        np.array([r[2] for r in rows]),
        answers,
    )


def offtopic(model_dim: int) -> tuple[list[str], np.ndarray | None, str]:
    texts = [q["query"] for q in jsonl("offtopic_queries.jsonl")]
    try:
        from keepstone.embed import open_embedder

        embedder = open_embedder()
        assert embedder is not None
        vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
    except Exception as exc:  # no model: hybrid no-answer figures without them
        return texts, None, f"off-topic questions not embedded ({type(exc).__name__}: {exc})"
    if vectors.shape[1] != model_dim:
        return texts, None, "off-topic questions not embedded (another model's dimension)"
    return texts, vectors, f"off-topic questions embedded by {embedder.model_id}"


def build(hybrid: bool) -> tuple[list[Candidates], str]:
    sets = load_sets()
    vectors = load_vectors(sets)
    out: list[Candidates] = []
    for name, es in sets.items():
        units, queries = vectors[name]
        scopes = scopes_of(es, units, whole=False)
        for q, qv in zip(es.queries, queries, strict=True):
            out.append(
                candidates(es, scopes[q.group], q.text, qv if hybrid else None, q.targets, name)
            )
    whole = {name: scopes_of(es, vectors[name][0], whole=True)[""] for name, es in sets.items()}
    pairs = [("chats", "records"), ("chats", "docs"), ("records", "chats"), ("docs", "chats")]
    for asked, corpus in pairs:
        for q, qv in zip(sets[asked].queries, vectors[asked][1], strict=True):
            vector = qv if hybrid else None
            out.append(
                candidates(
                    sets[corpus], whole[corpus], q.text, vector, [], f"none:{asked}>{corpus}"
                )
            )
    texts, off, note = offtopic(vectors["records"][0].shape[1])
    if off is not None or not hybrid:
        for corpus, es in sets.items():
            for i, text in enumerate(texts):
                vector = None if off is None or not hybrid else off[i]
                out.append(
                    candidates(es, whole[corpus], text, vector, [], f"none:offtopic>{corpus}")
                )
    return out, note


# --- scoring a grid of floors ----------------------------------------------------------


def grid(hybrid: bool) -> np.ndarray:
    """Every floor scored: rows of (dense, keyword, fused) or (keyword_only,)."""
    if hybrid:
        return np.array(list(itertools.product(DENSE_GRID, KEYWORD_GRID, FUSED_GRID)))
    return KEYWORD_ONLY_GRID.reshape(-1, 1)


def passing(c: Candidates, floors: np.ndarray) -> np.ndarray:
    """(floors, sections) bool: which sections each floor keeps."""
    if floors.shape[1] == 1:
        return np.nan_to_num(c.keyword, nan=-np.inf)[None, :] >= floors[:, :1]
    cos = np.nan_to_num(c.meaning, nan=-np.inf)[None, :]
    kw = np.nan_to_num(c.keyword, nan=-np.inf)[None, :]
    return (cos >= floors[:, :1]) | (kw >= floors[:, 1:2]) | (c.score[None, :] >= floors[:, 2:3])


@dataclass
class Figures:
    """Per query (rows) and floor (columns): recall@K, reciprocal rank, hits returned and
    irrelevant hits returned."""

    recall: np.ndarray
    rr: np.ndarray
    returned: np.ndarray
    irrelevant: np.ndarray


def figures(cands: Sequence[Candidates], floors: np.ndarray) -> Figures:
    n, f = len(cands), len(floors)
    recall, rr = np.zeros((n, f)), np.zeros((n, f))
    returned, irrelevant = np.zeros((n, f)), np.zeros((n, f))
    for i, c in enumerate(cands):
        if not len(c.score):
            continue
        keep = passing(c, floors)
        top = keep & (np.cumsum(keep, axis=1) <= K)
        returned[i] = top.sum(axis=1)
        relevant = c.answers.any(axis=1)
        irrelevant[i] = (top & ~relevant[None, :]).sum(axis=1)
        if c.answers.shape[1]:
            recall[i] = (top.astype(np.float32) @ c.answers.astype(np.float32) > 0).mean(axis=1)
            found = top & relevant[None, :]
            first = np.where(found.any(axis=1), found.argmax(axis=1), -1)
            ranks = np.take_along_axis(np.cumsum(top, axis=1), np.maximum(first, 0)[:, None], 1)[
                :, 0
            ]
            rr[i] = np.where(first >= 0, 1.0 / np.maximum(ranks, 1), 0.0)
    return Figures(recall, rr, returned, irrelevant)


def no_floor(cands: Sequence[Candidates]) -> Figures:
    """The figures without a floor (one that keeps everything)."""
    width = 1 if all(np.isnan(c.meaning).all() for c in cands if len(c.meaning)) else 3
    return figures(cands, np.full((1, width), -np.inf))


LABELLED = ("records", "docs", "chats")


def choose(
    cands: Sequence[Candidates],
    fig: Figures,
    base: Figures,
    rows: np.ndarray,
    floors: np.ndarray,
    budget: float,
) -> int:
    """The floor chosen on the queries ``rows`` (a bool mask)."""
    groups = np.array([c.group for c in cands])
    feasible = np.ones(len(floors), bool)
    for name in LABELLED:
        m = rows & (groups == name)
        if m.any():
            drop = base.recall[m, 0].mean() - fig.recall[m].mean(axis=0)
            feasible &= drop <= budget + 1e-12
    none = rows & np.char.startswith(groups.astype(str), "none:")
    labelled = rows & ~np.char.startswith(groups.astype(str), "none:")
    empty = (fig.returned[none] == 0).mean(axis=0) if none.any() else np.zeros(len(floors))
    hits = fig.returned[none].mean(axis=0) if none.any() else np.zeros(len(floors))
    junk = fig.irrelevant[labelled].mean(axis=0)
    order = np.lexsort((floors.sum(axis=1), junk, hits, -empty, ~feasible))
    return int(order[0])


def folds_of(cands: Sequence[Candidates], k: int, seed: int) -> np.ndarray:
    """Each query's fold, every group split alike."""
    rng = np.random.default_rng(seed)
    fold = np.zeros(len(cands), int)
    groups = np.array([c.group for c in cands])
    for g in dict.fromkeys(groups):
        ix = np.flatnonzero(groups == g)
        fold[ix] = rng.permutation(np.arange(len(ix)) % k)
    return fold


def report(
    name: str, cands: Sequence[Candidates], fig: Figures, base: Figures, col: np.ndarray
) -> None:
    """Print per set recall/MRR with and without the floor (``col``: each query's chosen
    floor), and the no-answer queries' emptiness."""
    groups = np.array([c.group for c in cands])
    pick = np.arange(len(cands))
    for s in LABELLED:
        m = groups == s
        r0, m0 = base.recall[m, 0].mean(), base.rr[m, 0].mean()
        r1, m1 = fig.recall[pick[m], col[m]].mean(), fig.rr[pick[m], col[m]].mean()
        j0, j1 = base.irrelevant[m, 0].mean(), fig.irrelevant[pick[m], col[m]].mean()
        print(
            f"  {name:22s} {s:8s} recall@{K} {r0:.3f} -> {r1:.3f} ({r1 - r0:+.3f})  "
            f"MRR {m0:.3f} -> {m1:.3f}  irrelevant hits/query {j0:.1f} -> {j1:.1f}"
        )
    none = np.char.startswith(groups.astype(str), "none:")
    e0 = (base.returned[none, 0] == 0).mean()
    e1 = (fig.returned[pick[none], col[none]] == 0).mean()
    h0, h1 = base.returned[none, 0].mean(), fig.returned[pick[none], col[none]].mean()
    print(
        f"  {name:22s} no-answer ({none.sum()} queries): empty {e0:.2f} -> {e1:.2f}, "
        f"hits/query {h0:.1f} -> {h1:.1f}"
    )
    for g in sorted(set(groups[none])):
        m = groups == g
        print(f"  {'':22s}   {g[5:]:18s} empty {(fig.returned[pick[m], col[m]] == 0).mean():.2f}")


@dataclass
class Calibration:
    floors: np.ndarray
    chosen: np.ndarray  # the floor chosen on every query
    cv: dict[str, float]  # held-out figures for floor.json


def calibrate(hybrid: bool, folds: int, budget: float, seed: int) -> Calibration:
    mode = "hybrid" if hybrid else "keyword-only"
    started = time.perf_counter()
    cands, note = build(hybrid)
    floors = grid(hybrid)
    fig, base = figures(cands, floors), no_floor(cands)
    print(
        f"\n{mode}: {len(cands)} queries, {len(floors)} floors scored ({note}; "
        f"{time.perf_counter() - started:.0f} s)"
    )
    groups = np.array([c.group for c in cands])
    everything = np.ones(len(cands), bool)
    best = choose(cands, fig, base, everything, floors, budget)
    report("chosen on all queries", cands, fig, base, np.full(len(cands), best))
    fold = folds_of(cands, folds, seed)
    col = np.zeros(len(cands), int)
    for f in range(folds):
        col[fold == f] = choose(cands, fig, base, fold != f, floors, budget)
    report(f"{folds}-fold CV (held out)", cands, fig, base, col)
    kfold = col.copy()
    names = groups.astype(str)
    for s in LABELLED:
        involved = (groups == s) | (np.char.find(names, s) >= 0) & np.char.startswith(
            names, "none:"
        )
        col[involved] = choose(cands, fig, base, ~involved, floors, budget)
    report("leave one set out", cands, fig, base, col)
    chosen = floors[best]
    labels = ("dense", "keyword", "fused") if hybrid else ("keyword_only",)
    print(f"  chosen: {dict(zip(labels, chosen.tolist(), strict=True))}")
    none = np.char.startswith(names, "none:")
    cv = {}
    for s in LABELLED:
        m = groups == s
        drop = base.recall[m, 0].mean() - fig.recall[m, kfold[m]].mean()
        cv[f"{mode} {s} recall@{K} drop"] = round(float(drop), 4)
    cv[f"{mode} no-answer empty"] = round(float((fig.returned[none, kfold[none]] == 0).mean()), 3)
    return Calibration(floors, chosen, cv)


def main() -> None:
    from keepstone.embed import MODEL_ID as DEFAULT_MODEL

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument(
        "--budget",
        type=float,
        default=0.005,
        help="the recall@10 a floor may cost on a set, when choosing (default 0.005)",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--model-id",
        default=DEFAULT_MODEL,
        help="the embedder model id the thresholds are filed under",
    )
    parser.add_argument("--write", action="store_true", help="rewrite floor.json")
    args = parser.parse_args()
    hybrid = calibrate(True, args.folds, args.budget, args.seed)
    keyword = calibrate(False, args.folds, args.budget, args.seed)
    dense, kw, fused = (float(x) for x in hybrid.chosen)
    entry = {
        "dense": dense,
        "keyword": kw,
        "fused": None if not np.isfinite(fused) else fused,
        "keyword_only": float(keyword.chosen[0]),
    }
    print(f"\nfloor for {args.model_id}: {json.dumps(entry)}")
    if args.write:
        path = floor_module.THRESHOLDS_FILE
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"models": {}}
        data["models"][args.model_id] = entry
        data["models"]["default"] = dict(entry)
        data.setdefault("cross_validated", {})[args.model_id] = {**hybrid.cv, **keyword.cv}
        data["written_by"] = "bench/bench_search_floor.py --write"
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
