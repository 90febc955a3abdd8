"""Quality levers beyond fusion, each alone and combined, on the three labelled sets of
tests/data/, every tuned parameter scored by split-half cross-validation. Prints
figures; asserts nothing.

    python bench/bench_levers.py                    # stored vectors + cached context vectors
    python bench/bench_levers.py --splits 10 --json bench/out/levers.json

The base is what the product ranks (tests/search/labelled.py's hybrid: keepstone.search.hybrid
over the stored MiniLM vectors of tests/data/search_vectors.npz). Levers:

* **temporal**: a "when" question (:func:`temporal_question`) lifts the
  candidates whose text states a time ("last Sunday", "the 14th", "in June") by
  ``beta`` on the fused scale (:func:`states_time`).
* **MMR**: maximal marginal relevance over the fused top 30, ``lambda`` the weight of
  relevance against the largest similarity to a hit already taken; similarity is the
  cosine of the two vectors, or the overlap (Jaccard) of their keyword terms; or, at
  ``lambda`` 0.5, only near-duplicates (cosine at least a floor) pushed down.
* **context** (changes what is embedded, so new vectors, cached under /tmp): a chat turn
  embedded after the turn before it, or after its speaker's name; a document chunk after
  the last paragraph of the chunk before it. The keyword side indexes the same text.
* **neighbour mix** (no new embedding): a turn's or chunk's vector plus ``w`` times the
  vector of the turn or chunk before it (same session, same document), normalised; the
  keyword side unchanged.
* **names** (chats): query words that name one of the conversation's two speakers
  dropped from the keyword side's terms (a turn rarely names its own speaker).
* ``--weak``: the stored vectors with noise added until dense-only recall@10 is 0.7 x
  keyword-only's, as bench_search_study.py models the unseen chats where keywords win.
* **cross-encoder reranker**: none measured; see docs/search.md ("Levers beyond fusion")
  for the packages searched and why none qualifies (weights fetched from a model hub at
  run time, or a PyTorch dependency).

Cross-validation: each split cuts every set's queries in two halves stratified by kind;
a parameter is chosen on one half of *all three sets together* (objective: the mean over
sets of (recall@10 + MRR) / 2) and scored on the other half of each, both ways ("fold 1",
"fold 2" of the first split; the mean over --splits splits, and in how many of the
2 x --splits folds the held-out objective beat the base's or fell below it). A lever
without a parameter (a context variant, names) is scored on each half as it is.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_search_study import WEAK_RATIO, calibrate, half, weakened  # noqa: E402
from keepstone.search.bm25 import BM25Index  # noqa: E402
from keepstone.search.chunking import chunk_markdown  # noqa: E402
from keepstone.search.hybrid import ExactDense, rank  # noqa: E402
from keepstone.search.text import ANALYZER  # noqa: E402
from tests.search.labelled import (  # noqa: E402
    DEPTH,
    KINDS,
    MODEL_ID,
    EvalSet,
    Scores,
    Unit,
    bm25_rankings,
    evaluate,
    jsonl,
    keys_of,
    load_sets,
    load_vectors,
)

CACHE = Path("/tmp/keepstone-levers-embeddings.npz")
SETS = ("records", "docs", "chats")
BETAS = [0.0, 0.02, 0.05, 0.08, 0.12, 0.2]
LAMBDAS = [1.0, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6]
MMR_DEPTH = 30
MIX = [0.15, 0.3, 0.5]
DUPLICATE_FLOORS = [0.8, 0.85, 0.9, 0.95]

Fused = list[tuple[int, float]]  # (unit index, fused score), best first


# --- the query-side and reordering levers ------------------------------------------------

_QUESTION = re.compile(
    r"^\W*(?:when\b|since when\b|how long ago\b|(?:on |in )?(?:what|which)\s+"
    r"(?:date|day|days|time|year|month|week|weekend|season)\b)",
    re.IGNORECASE,
)
_WEEKDAY = r"(?:mon|tues|wednes|thurs|fri|satur|sun)days?"
_RELATIVE = (
    r"yesterday|today|tonight|tomorrow|fortnight|weekends?|ago"
    r"|(?:last|next|this|coming|past|previous)\s+(?:week|month|year|spring|summer|autumn"
    rf"|fall|winter|night|morning|evening|time|{_WEEKDAY})"
    r"|\d+\s+(?:days?|weeks?|months?|years?|hours?)\s+(?:ago|later|earlier|before|after)"
    r"|\d{1,2}(?:st|nd|rd|th)|(?:19|20)\d\d|\d{1,2}[/.]\d{1,2}(?:[/.]\d{2,4})?"
    r"|\d{1,2}(?::\d\d)?\s?[ap]\.?m\b\.?|o'clock"
)
_TIME_ANY_CASE = re.compile(rf"\b(?:{_WEEKDAY}|{_RELATIVE})\b", re.IGNORECASE)
# Month names only capitalised: "may", "march" and "august" are also common words.
_MONTH = re.compile(
    r"\b(?:January|February|March|April|May|June|July|August|September|October|November"
    r"|December|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept?|Oct|Nov|Dec)\b"
)


def temporal_question(query: str) -> bool:
    """Whether ``query`` asks when something happens or happened."""
    return _QUESTION.match(query) is not None


def states_time(text: str) -> bool:
    """Whether ``text`` states a time: a weekday, a month, a year, a date, an ordinal
    day, a clock time or a relative one ("last week", "three days ago", "tomorrow")."""
    return _TIME_ANY_CASE.search(text) is not None or _MONTH.search(text) is not None


def diversify(
    relevance: Sequence[float], similarity: Callable[[int, int], float], weight: float
) -> list[int]:
    """The positions of ``relevance`` in maximal-marginal-relevance order: each next one
    maximises ``weight · relevance − (1 − weight) · (its largest similarity to one
    already taken)``; ``weight`` 1 keeps the order of relevance. Ties keep the earlier
    position."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError("weight must be within [0, 1]")
    left = list(range(len(relevance)))
    if weight == 1.0 or len(left) < 3:
        return sorted(left, key=lambda i: -relevance[i])
    closest = [float("-inf")] * len(relevance)
    order: list[int] = []
    while left:
        if not order:
            best = max(left, key=lambda i: (relevance[i], -i))
        else:
            best = max(
                left,
                key=lambda i: (weight * relevance[i] - (1.0 - weight) * closest[i], -i),
            )
        order.append(best)
        left.remove(best)
        for i in left:
            closest[i] = max(closest[i], similarity(i, best))
    return order


# --- the base and the levers -----------------------------------------------------------


@dataclass
class Variant:
    """One set as indexed one way: its units' texts for both sides, and their vectors."""

    es: EvalSet
    units: np.ndarray
    queries: np.ndarray
    weights: list[Mapping[str, float] | None] = field(default_factory=list)


def fused(v: Variant) -> list[Fused]:
    """The product's hybrid ranking of every query (keepstone.search.hybrid.rank), with
    its fused scores."""
    es = v.es
    indexes = {
        g: BM25Index([ANALYZER.terms(es.units[i].text) for i in ix]) for g, ix in es.groups.items()
    }
    matrices = {
        g: np.ascontiguousarray(v.units[ix], dtype=np.float32) for g, ix in es.groups.items()
    }
    out = []
    for n, (q, qv) in enumerate(zip(es.queries, v.queries, strict=True)):
        ix = es.groups[q.group]
        dense = ExactDense(matrices[q.group], np.arange(len(ix), dtype=np.int64), qv)
        terms = ANALYZER.query_terms(q.text)
        weights = v.weights[n] if v.weights else None
        if weights:
            terms = [t for t in terms if weights.get(t, 1.0) > 0.0]
        hits = rank(indexes[q.group], terms, dense=dense)
        out.append([(int(ix[h.key]), h.score) for h in hits])
    return out


def temporal(es: EvalSet, runs: list[Fused], beta: float) -> list[Fused]:
    if beta == 0.0:
        return runs
    out = []
    for q, run in zip(es.queries, runs, strict=True):
        if not temporal_question(q.text):
            out.append(run)
            continue
        lifted = [(i, s + beta * states_time(es.units[i].text)) for i, s in run]
        out.append(sorted(lifted, key=lambda p: -p[1]))
    return out


def mmr(
    es: EvalSet, runs: list[Fused], lam: float, similarity: Callable[[int, int], float]
) -> list[Fused]:
    if lam >= 1.0:
        return runs
    out = []
    for run in runs:
        head, tail = run[:MMR_DEPTH], run[MMR_DEPTH:]
        keys = [i for i, _ in head]
        order = diversify([s for _, s in head], lambda a, b, k=keys: similarity(k[a], k[b]), lam)
        out.append([head[o] for o in order] + tail)
    return out


def cosine_of(units: np.ndarray) -> Callable[[int, int], float]:
    return lambda a, b: float(units[a] @ units[b])


def near_duplicates(
    cosine: Callable[[int, int], float], floor: float
) -> Callable[[int, int], float]:
    """The cosine where it is at least ``floor`` (a near-duplicate), else 0."""
    return lambda a, b: c if (c := cosine(a, b)) >= floor else 0.0


def jaccard_of(es: EvalSet) -> Callable[[int, int], float]:
    terms = [frozenset(ANALYZER.terms(u.text)) for u in es.units]

    def sim(a: int, b: int) -> float:
        union = len(terms[a] | terms[b])
        return len(terms[a] & terms[b]) / union if union else 0.0

    return sim


def scores(es: EvalSet, runs: list[Fused]) -> Scores:
    return evaluate(es, [[i for i, _ in r] for r in runs])


# --- context variants (new vectors) -----------------------------------------------------


class Encoder:
    """MiniLM vectors by sha256(model, text), cached in one .npz under /tmp."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.vectors: dict[str, np.ndarray] = {}
        self.embed: Callable[[list[str]], np.ndarray] | None = None
        if path.is_file():
            with np.load(path) as z:
                self.vectors = {str(k): v for k, v in zip(z["keys"], z["vectors"], strict=True)}

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(f"{MODEL_ID}\n{text}".encode()).hexdigest()

    def get(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if self.key(t) not in self.vectors))
        if missing:
            if self.embed is None:
                from keepstone.embed.minilm import MiniLMEmbedder, locate_model

                self.embed = MiniLMEmbedder(locate_model(None)).embed
            t0 = time.perf_counter()
            for s in range(0, len(missing), 128):
                part = missing[s : s + 128]
                for t, vec in zip(part, np.asarray(self.embed(part), np.float32), strict=True):
                    self.vectors[self.key(t)] = vec
            print(f"  embedded {len(missing)} texts in {time.perf_counter() - t0:.0f} s")
            keys = np.array(list(self.vectors))
            np.savez(self.path, keys=keys, vectors=np.stack(list(self.vectors.values())))
        return np.stack([self.vectors[self.key(t)] for t in texts]).astype(np.float32)


def chats_context(es: EvalSet, how: str) -> EvalSet:
    """The chat set with each turn's text preceded by the turn before it in its session
    (``previous``) or by its speaker's name (``speaker``)."""
    rows = jsonl("chats_corpus.jsonl")
    units = []
    for n, (t, u) in enumerate(zip(rows, es.units, strict=True)):
        if how == "speaker":
            text = f"{t['speaker']}: {t['text']}"
        else:
            prev = rows[n - 1] if n and rows[n - 1]["session"] == t["session"] else None
            same = prev is not None and prev["conversation"] == t["conversation"]
            text = f"{prev['text']}\n{t['text']}" if prev is not None and same else t["text"]
        units.append(Unit(u.section, u.doc, text, u.group))
    return EvalSet(es.name, units, es.queries)


def docs_context(es: EvalSet) -> EvalSet:
    """The document set with each chunk preceded by the last paragraph (at most 200
    characters) of the chunk before it in its document."""
    units = []
    for d in jsonl("docs_corpus.jsonl"):
        doc = f"{d['space']}/{d['path']}"
        before = ""
        for c in chunk_markdown(d["content"]):
            tail = before.strip().split("\n\n")[-1][-200:] if before else ""
            text = f"{tail}\n{c.search_text}" if tail else c.search_text
            units.append(Unit(f"{doc}#{c.heading}", doc, text))
            before = c.text
    assert [u.section for u in units] == [u.section for u in es.units]
    return EvalSet(es.name, units, es.queries)


def previous_of(es: EvalSet) -> np.ndarray:
    """Each unit's predecessor (-1: none): the turn before in its session, the chunk
    before in its document; records have none."""
    prev = np.full(len(es.units), -1, dtype=np.int64)
    if es.name == "records":
        return prev
    rows = jsonl("chats_corpus.jsonl") if es.name == "chats" else None
    for n in range(1, len(es.units)):
        if rows is not None:
            same = (rows[n]["conversation"], rows[n]["session"]) == (
                rows[n - 1]["conversation"],
                rows[n - 1]["session"],
            )
        else:
            same = es.units[n].doc == es.units[n - 1].doc
        prev[n] = n - 1 if same else -1
    return prev


def mixed(v: Variant, w: float) -> Variant:
    prev = previous_of(v.es)
    units = v.units.copy()
    has = prev >= 0
    units[has] += w * v.units[prev[has]]
    units /= np.linalg.norm(units, axis=1, keepdims=True)
    return Variant(v.es, units, v.queries)


def speaker_weights(es: EvalSet) -> list[Mapping[str, float] | None]:
    """Per chat query: its terms that name one of its conversation's speakers, weight 0."""
    speakers: dict[str, set[str]] = {}
    for t in jsonl("chats_corpus.jsonl"):
        speakers.setdefault(t["conversation"], set()).update(ANALYZER.terms(t["speaker"]))
    return [
        {t: 0.0 for t in ANALYZER.query_terms(q.text) if t in speakers[q.group]} for q in es.queries
    ]


# --- cross-validation -------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    variant: str  # "base" or a context/names variant (base where a set has none)
    beta: float = 0.0
    lam: float = 1.0
    sim: str = "cosine"

    def label(self) -> str:
        parts = [] if self.variant == "base" else [self.variant]
        if self.beta:
            parts.append(f"temporal beta {self.beta:g}")
        if self.lam < 1.0:
            parts.append(f"MMR ({self.sim}) lambda {self.lam:g}")
        return ", ".join(parts) or "base"


class Study:
    def __init__(self, variants: dict[str, dict[str, Variant]]) -> None:
        self.variants = variants
        self.runs = {n: {k: fused(v) for k, v in vs.items()} for n, vs in variants.items()}
        self.sims = {
            n: {"cosine": cosine_of(vs["base"].units), "terms": jaccard_of(vs["base"].es)}
            for n, vs in variants.items()
        }
        self.memo: dict[tuple[str, Config], Scores] = {}

    def scores(self, name: str, c: Config) -> Scores:
        key = (name, c)
        if key not in self.memo:
            variant = c.variant if c.variant in self.runs[name] else "base"
            es = self.variants[name][variant].es
            sim = self.sims[name].get(c.sim) or near_duplicates(
                self.sims[name]["cosine"], float(c.sim.split()[-1])
            )
            runs = mmr(es, temporal(es, self.runs[name][variant], c.beta), c.lam, sim)
            self.memo[key] = scores(es, runs)
        return self.memo[key]


def fold_figures(study: Study, grid: Sequence[Config], splits: int, seed: int) -> dict[str, Any]:
    """Choose on one half of every set (mean objective), score the other half; both folds
    of the first split reported apart, and the mean over all splits."""
    rng = random.Random(seed)
    base = Config("base")
    folds: list[dict[str, Any]] = []
    for _ in range(splits):
        halves = {n: half(study.variants[n]["base"].es, rng) for n in SETS}
        for flip in (False, True):
            train = {n: ~h if flip else h for n, h in halves.items()}
            # A lever without a parameter is scored as it is, whatever the training half says.
            best = (
                grid[-1]
                if len(grid) == 2
                else max(
                    grid,
                    key=lambda c: np.mean([study.scores(n, c).objective(train[n]) for n in SETS]),
                )
            )
            fold: dict[str, Any] = {"chosen": best.label()}
            for n in SETS:
                test = ~train[n]
                b, lv = study.scores(n, base), study.scores(n, best)
                fold[n] = {
                    "base": [float(b.recall[test].mean()), float(b.rr[test].mean())],
                    "lever": [float(lv.recall[test].mean()), float(lv.rr[test].mean())],
                }
            folds.append(fold)
    mean = {
        n: {side: list(np.mean([f[n][side] for f in folds], axis=0)) for side in ("base", "lever")}
        for n in SETS
    }
    gains = {n: [(sum(f[n]["lever"]) - sum(f[n]["base"])) / 2 for f in folds] for n in SETS}
    record = {n: [sum(g > 1e-9 for g in gains[n]), sum(g < -1e-9 for g in gains[n])] for n in SETS}
    chosen = sorted({f["chosen"] for f in folds})
    return {"folds": folds[:2], "mean": mean, "chosen": chosen, "better_worse": record}


def print_family(title: str, grid: Sequence[Config], study: Study, figures: dict[str, Any]) -> None:
    print(f"\n## {title}")
    print("full sets, recall@10 / MRR (no cross-validation; for reading the grid only):")
    for c in grid:
        cells = "  ".join(
            f"{n} {fmt(study.scores(n, c).summary(study.variants[n]['base'].es)['all'])}"
            for n in SETS
        )
        print(f"  {c.label():48s} {cells}")
    for k, fold in enumerate(figures["folds"], 1):
        print(f"fold {k}: chosen on the other half: {fold['chosen']}")
        for n in SETS:
            b, lv = fold[n]["base"], fold[n]["lever"]
            gain = (lv[0] + lv[1] - b[0] - b[1]) / 2
            print(f"    {n:8s} base {fmt(b)}  lever {fmt(lv)}  objective {gain:+.3f}")
    print(f"mean over all splits' held-out halves (chosen: {'; '.join(figures['chosen'])}):")
    for n in SETS:
        b, lv = figures["mean"][n]["base"], figures["mean"][n]["lever"]
        better, worse = figures["better_worse"][n]
        print(
            f"    {n:8s} base {fmt(b)}  lever {fmt(lv)}  held-out objective better in"
            f" {better}, worse in {worse} of the folds"
        )


def fmt(pair: Sequence[float]) -> str:
    return f"{pair[0]:.3f} / {pair[1]:.3f}"


def per_kind(study: Study, configs: Sequence[Config]) -> None:
    print("\n## Per kind, full sets (recall@10 / MRR)")
    for n in SETS:
        es = study.variants[n]["base"].es
        print(f"  {n}: " + ", ".join(KINDS[n]))
        for c in configs:
            s = study.scores(n, c).summary(es)
            print(f"    {c.label():48s} " + "  ".join(fmt(s[k]) for k in ["all", *KINDS[n]]))


def latency(study: Study) -> dict[str, float]:
    """Median milliseconds per query of the temporal lift and MMR over the top 30."""
    out = {}
    for sim in ("cosine", "terms"):
        times = []
        for n in SETS:
            es, runs = study.variants[n]["base"].es, study.runs[n]["base"]
            for run in runs:
                t0 = time.perf_counter()
                mmr(es, [run], 0.8, study.sims[n][sim])
                times.append(time.perf_counter() - t0)
        out[f"MMR top {MMR_DEPTH}, {sim}"] = 1000 * float(np.median(times))
    times = []
    for n in SETS:
        es, runs = study.variants[n]["base"].es, study.runs[n]["base"]
        for q, run in zip(es.queries, runs, strict=True):
            t0 = time.perf_counter()
            temporal(EvalSet(es.name, es.units, [q]), [run], 0.1)
            times.append(time.perf_counter() - t0)
    out["temporal lift"] = 1000 * float(np.median(times))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--splits", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--weak",
        action="store_true",
        help="the dense side weakened as in bench_search_study (implies --skip-context)",
    )
    ap.add_argument(
        "--skip-context", action="store_true", help="no context variants (they embed anew)"
    )
    args = ap.parse_args()

    sets = load_sets()
    stored = load_vectors(sets)
    if args.weak:
        args.skip_context = True
        for n in SETS:
            target = WEAK_RATIO * evaluate(sets[n], keys_of(bm25_rankings(sets[n]))).recall.mean()
            sigma = calibrate(sets[n], *stored[n], float(target), DEPTH)
            stored[n] = (weakened(stored[n][0], sigma, 0), stored[n][1])
            print(f"  {n}: dense side weakened (noise {sigma:g})")
    enc = Encoder(CACHE)
    variants: dict[str, dict[str, Variant]] = {
        n: {"base": Variant(sets[n], *stored[n])} for n in SETS
    }
    for how in () if args.skip_context else ("previous", "speaker"):
        es = chats_context(sets["chats"], how)
        variants["chats"][f"context {how}"] = Variant(
            es, enc.get([u.text for u in es.units]), stored["chats"][1]
        )
    if not args.skip_context:
        es = docs_context(sets["docs"])
        variants["docs"]["context previous"] = Variant(
            es, enc.get([u.text for u in es.units]), stored["docs"][1]
        )
    for n in SETS:
        for w in MIX:
            variants[n][f"mix {w:g}"] = mixed(variants[n]["base"], w)
    chats = variants["chats"]["base"]
    variants["chats"]["names dropped"] = Variant(
        chats.es, chats.units, chats.queries, speaker_weights(chats.es)
    )

    t0 = time.perf_counter()
    study = Study(variants)
    print(
        f"Levers beyond fusion: recall@10 / MRR@10; runs fused in {time.perf_counter() - t0:.0f} s"
    )
    base = Config("base")
    families = {
        "temporal lift (beta)": [Config("base", beta=b) for b in BETAS],
        "MMR, cosine (lambda)": [Config("base", lam=lam) for lam in LAMBDAS],
        "MMR, keyword terms (lambda)": [Config("base", lam=lam, sim="terms") for lam in LAMBDAS],
        "MMR, near-duplicates only (cosine floor, lambda 0.5)": [
            base,
            *[Config("base", lam=0.5, sim=f"cosine >= {f:g}") for f in DUPLICATE_FLOORS],
        ],
        "context: previous turn / paragraph": [base, Config("context previous")],
        "neighbour mix (w)": [base, *[Config(f"mix {w:g}") for w in MIX]],
        "context: speaker name (chats)": [base, Config("context speaker")],
        "names: speakers' names dropped from the query (chats)": [base, Config("names dropped")],
        "combined: temporal x MMR cosine": [
            Config("base", beta=b, lam=lam) for b in BETAS for lam in LAMBDAS
        ],
        "combined: previous-turn context x temporal x MMR cosine": [
            Config(v, beta=b, lam=lam)
            for v in ("base", "context previous")
            for b in BETAS
            for lam in LAMBDAS
        ],
    }
    report: dict[str, Any] = {"splits": args.splits}
    for title, grid in families.items():
        figures = fold_figures(study, grid, args.splits, args.seed)
        shown = (
            grid
            if len(grid) <= len(LAMBDAS)
            else [base, *[c for c in grid if c.label() in figures["chosen"]]]
        )
        print_family(title, shown, study, figures)
        report[title] = figures
    per_kind(
        study,
        [
            base,
            Config("base", beta=0.08),
            Config("base", lam=0.8),
            Config("context previous"),
            Config("context speaker"),
            Config("mix 0.3"),
            Config("names dropped"),
        ],
    )
    report["latency_ms"] = latency(study)
    print("\n## Latency per query (median ms, this machine, one thread)")
    for k, v in report["latency_ms"].items():
        print(f"  {k}: {v:.3f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
