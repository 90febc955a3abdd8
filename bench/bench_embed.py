"""Speed of the default embedder, all-MiniLM-L6-v2 on numpy. Prints figures; asserts nothing.

    .venv/bin/python bench/bench_embed.py                 # KEEPSTONE_EMBED_THREADS, default 1
    .venv/bin/python bench/bench_embed.py --threads 2     # BLAS threads, set before numpy loads
    .venv/bin/python bench/bench_embed.py --texts 1024 --queries 200

Prints, with the thread count: texts/s embedding in batches of 32, overall and per core
(divided by the threads), for record-sized texts (``tests/data/records_corpus.jsonl``,
~33 tokens) and document-sized chunks (``tests/data/docs_corpus.jsonl``, cut at the
model's 256 tokens); and the milliseconds to embed one search query
(``records_queries.jsonl``), median and p95 of ``--queries`` calls. Each throughput is
the median of ``--rounds`` runs over the same texts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "RAYON_NUM_THREADS",
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="BLAS threads (default: env)")
    parser.add_argument("--texts", type=int, default=256, help="record-sized texts per round")
    parser.add_argument("--chunks", type=int, default=64, help="document-sized texts per round")
    parser.add_argument("--queries", type=int, default=100, help="single-query calls")
    parser.add_argument("--rounds", type=int, default=3, help="runs per throughput figure")
    return parser.parse_args()


def set_threads(wanted: int | None) -> int:
    """Give the native thread pools ``wanted`` threads (else keep the environment's, else
    KEEPSTONE_EMBED_THREADS, else 1); before numpy loads. Returns the BLAS thread count."""
    default = str(wanted or os.environ.get("KEEPSTONE_EMBED_THREADS") or 1)
    for name in THREAD_VARIABLES:
        if wanted is not None:
            os.environ[name] = default
        else:
            os.environ.setdefault(name, default)
    return int(os.environ["OPENBLAS_NUM_THREADS"])


def lines(name: str) -> list[dict[str, object]]:
    with (DATA / name).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def main() -> None:
    args = parse_args()
    threads = set_threads(args.threads)
    sys.path.insert(0, str(ROOT / "src"))

    import numpy as np

    from keepstone.embed import MiniLMEmbedder, locate_model

    started = time.perf_counter()
    embedder = MiniLMEmbedder(locate_model())  # batch size 32, the default
    load_ms = (time.perf_counter() - started) * 1000
    print(f"all-MiniLM-L6-v2 on numpy {np.__version__}: threads {threads}, batch 32")
    print(f"  load: {load_ms:.0f} ms ({embedder.directory})")

    records = [str(row["text"]) for row in lines("records_corpus.jsonl")][: args.texts]
    chunks = [str(row["content"]) for row in lines("docs_corpus.jsonl")][: args.chunks]
    queries = [str(row["query"]) for row in lines("records_queries.jsonl")]
    embedder.embed(records[:32])  # warm: first-call allocations, BLAS start-up

    for label, texts in (("records", records), ("doc chunks", chunks)):
        tokens = [min(len(e.ids), 256) for e in embedder._tokenizer.encode_batch(texts)]
        rates = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            embedder.embed(texts)
            rates.append(len(texts) / (time.perf_counter() - started))
        rate = statistics.median(rates)
        print(
            f"  {label:<10} {len(texts):>5} texts, {statistics.mean(tokens):5.1f} tokens avg: "
            f"{rate:7.1f} texts/s, {rate / threads:7.1f} texts/s per core"
        )

    times = []
    for i in range(args.queries):
        query = queries[i % len(queries)]
        started = time.perf_counter()
        embedder.embed([query])
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
    print(
        f"  one query  {args.queries:>5} calls: {statistics.median(times):5.1f} ms median, "
        f"{p95:5.1f} ms p95"
    )


if __name__ == "__main__":
    main()
