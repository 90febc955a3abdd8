"""Vector storage (keepstone.db.vectors), scoring (keepstone.search.vectors) and the bounded
cache: prints figures, asserts nothing.

    python bench/bench_vectors.py                          # everything, full sizes
    python bench/bench_vectors.py --sizes 2000,20000 --teams 200 --blas-threads 1

1. Bytes per 1,000 vectors (dim 384): blobs in the database, matrices in the cache.
2. int8 top-10 recall against float32 top-10, on random and on clustered unit vectors,
   with the stored norm-preserving scale and with the plain ``max|v| / 127`` scale.
3. Exact top-10 latency p50/p95 at each size, float32 and int8, also with a mask of 5 %
   of the rows; each BLAS thread setting runs in its own process (the setting must be
   made before numpy loads).
4. Cache reload at 20k vectors: decoding the blobs, reading them from SQLite first, an
   incremental extension by one row, and a cache hit.
5. Peak RSS of a process holding 1,000 teams x 1,000 vectors in the cache (a child per
   run, polled with psutil, cross-checked with the child's own high-water mark, VmHWM),
   with no bound and with the default 256 MB bound ("fill": generating, encoding and
   decoding every team's vectors; "reloads": evicted teams loaded again by the
   searches). ``ru_maxrss`` would not do: a child started by fork + exec inherits its
   parent's.

The machine may be shared: the header prints the load average; rerun when it is high.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent / "src"))

import numpy as np  # noqa: E402
import psutil  # noqa: E402

from keepstone.db.vectors import (  # noqa: E402
    QuantizedMatrix,
    VectorFormat,
    decode_many,
    decode_quantized,
    encode_many,
    quantize,
)
from keepstone.search.cache import DEFAULT_CACHE_MB, Entry, VectorCache  # noqa: E402
from keepstone.search.vectors import normalize_rows, top_k  # noqa: E402

DIM = 384
MiB = 2**20


def unit_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    return normalize_rows(rng.standard_normal((n, DIM), dtype=np.float32))


def clustered(rng: np.random.Generator, centres: np.ndarray, n: int, spread: float) -> np.ndarray:
    """Unit vectors around the rows of ``centres``, each plus a random vector of length
    ``spread`` (1.0: top-10 cosines ~0.6, like related notes; 0.2: ~0.96, near-copies)."""
    picked = centres[rng.integers(0, len(centres), n)]
    return normalize_rows(picked + spread * unit_rows(rng, n))


def timings_ms(run: Callable[[], object], repeat: int) -> tuple[float, float]:
    run()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1e3)
    p50, p95 = np.percentile(samples, [50, 95])
    return float(p50), float(p95)


# -- 1. sizes ------------------------------------------------------------------------


def sizes() -> None:
    rows = unit_rows(np.random.default_rng(0), 1000)
    print("\n## bytes per 1,000 vectors (dim 384)")
    for fmt in VectorFormat:
        blobs = encode_many(rows, fmt)
        in_cache = quantize(rows).nbytes if fmt is VectorFormat.INT8 else rows.nbytes
        print(
            f"  {fmt.value:8} blobs {sum(map(len, blobs)) / 1e3:8.1f} kB"
            f"   cache matrix {in_cache / 1e3:8.1f} kB   (+ ids: 8 kB as int64)"
        )


# -- 2. recall -----------------------------------------------------------------------


def max_abs_quantize(rows: np.ndarray) -> QuantizedMatrix:
    """The textbook scale, max|v| / 127, for comparison with the stored one."""
    peak = np.abs(rows).max(axis=1)
    codes = np.rint(rows * (127 / peak)[:, None]).astype(np.int8)
    return QuantizedMatrix(codes, (peak / 127).astype(np.float32))


def recall(
    rows: np.ndarray, queries: np.ndarray, quantized: QuantizedMatrix
) -> tuple[float, float]:
    found = []
    for query in queries:
        exact = set(top_k(rows, query, 10)[0].tolist())
        found.append(len(exact & set(top_k(quantized, query, 10)[0].tolist())) / 10)
    return float(np.mean(found)), float(np.min(found))


def recalls(n: int) -> None:
    rng = np.random.default_rng(1)
    print(f"\n## int8 top-10 recall against float32 top-10 ({n:,} vectors, 200 queries)")
    print(f"  {'vectors':34} {'top-10 cosines':>15} {'stored scale':>18} {'max|v|/127':>18}")
    centres = unit_rows(rng, 200)
    cases = [("random", unit_rows(rng, n), unit_rows(rng, 200))] + [
        (
            f"clustered (200 centres), noise {spread}",
            clustered(rng, centres, n, spread),
            clustered(rng, centres, 200, spread),
        )
        for spread in (1.0, 0.5, 0.2)
    ]
    for label, rows, queries in cases:
        cosines = np.sort(rows @ queries[0])[-10:]
        ours = recall(rows, queries, quantize(rows))
        plain = recall(rows, queries, max_abs_quantize(rows))
        print(
            f"  {label:34} {cosines[0]:6.3f}-{cosines[-1]:5.3f}"
            f"   mean {ours[0]:.3f} min {ours[1]:.1f}   mean {plain[0]:.3f} min {plain[1]:.1f}"
        )


# -- 3. latency ----------------------------------------------------------------------


def latency_child(sizes: list[int]) -> None:
    """Runs in a child with the BLAS thread setting in its environment; prints JSON."""
    rng = np.random.default_rng(2)
    for n in sizes:
        rows = unit_rows(rng, n)
        quantized = quantize(rows)
        query = unit_rows(rng, 1)[0]
        mask = rng.random(n) < 0.05
        repeat = 400 if n <= 20_000 else 100
        for label, matrix in (("float32", rows), ("int8", quantized)):
            plain = timings_ms(functools.partial(top_k, matrix, query, 10), repeat)
            masked = timings_ms(functools.partial(top_k, matrix, query, 10, mask=mask), repeat)
            print(
                json.dumps({"n": n, "format": label, "plain": plain, "masked": masked}), flush=True
            )


def latencies(sizes: list[int], thread_settings: list[str]) -> None:
    print(f"\n## exact top-10 latency, dim 384, ms (p50 / p95), {psutil.cpu_count()} cores")
    print(f"  {'BLAS threads':12} {'vectors':>8} {'format':8} {'all rows':>16} {'5 % mask':>16}")
    for threads in thread_settings:
        env = dict(os.environ)
        if threads != "default":
            for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                env[name] = threads
        argv = [sys.executable, __file__, "--child", "latency"]
        child = subprocess.run(
            [*argv, "--sizes", ",".join(map(str, sizes))],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        for line in child.stdout.splitlines():
            row = json.loads(line)
            plain, masked = row["plain"], row["masked"]
            print(
                f"  {threads:12} {row['n']:>8,} {row['format']:8}"
                f" {plain[0]:7.3f} / {plain[1]:6.3f} {masked[0]:7.3f} / {masked[1]:6.3f}"
            )


# -- 4. reload -----------------------------------------------------------------------


def reloads(n: int) -> None:
    rng = np.random.default_rng(3)
    rows = unit_rows(rng, n)
    ids = np.arange(n, dtype=np.int64)
    print(f"\n## cache reload at {n:,} vectors, ms (p50 / p95)")
    with tempfile.TemporaryDirectory() as tmp:
        db = sqlite3.connect(Path(tmp) / "vectors.db")
        db.execute("CREATE TABLE vectors (id INTEGER PRIMARY KEY, team TEXT, fmt TEXT, vec BLOB)")
        db.execute("CREATE INDEX vectors_team ON vectors (team, fmt)")
        for fmt in VectorFormat:
            blobs = encode_many(rows, fmt)
            db.executemany(
                "INSERT INTO vectors (team, fmt, vec) VALUES ('t', ?, ?)",
                [(fmt.value, blob) for blob in blobs],
            )
        db.commit()

        def fetch(fmt: VectorFormat) -> list[bytes]:
            cursor = db.execute(
                "SELECT id, vec FROM vectors WHERE team = 't' AND fmt = ?", (fmt.value,)
            )
            return [blob for _, blob in cursor]

        def read_and_decode(fmt: VectorFormat) -> QuantizedMatrix:
            return decode_quantized(fetch(fmt))

        cases: list[tuple[str, Callable[[], object]]] = []
        for fmt in VectorFormat:
            blobs = fetch(fmt)
            cases += [
                (f"{fmt.value} blobs -> float32, decode", functools.partial(decode_many, blobs)),
                (f"{fmt.value} blobs -> int8, decode", functools.partial(decode_quantized, blobs)),
                (
                    f"{fmt.value} blobs -> int8, SQLite read + decode",
                    functools.partial(read_and_decode, fmt),
                ),
            ]
        cases.append(("float32 blobs, SQLite read only", lambda: fetch(VectorFormat.FLOAT32)))
        for label, run in cases:
            p50, p95 = timings_ms(run, 15)
            print(f"  {label:46} {p50:8.2f} / {p95:7.2f}")
        db.close()

    one = Entry(np.array([n], dtype=np.int64), unit_rows(rng, 1))
    for label, matrix in (("float32", rows), ("int8", quantize(rows))):
        entry = Entry(ids, matrix)
        p50, p95 = timings_ms(functools.partial(entry.extended, one), 30)
        print(f"  {'extend a ' + label + ' entry by one row':46} {p50:8.2f} / {p95:7.2f}")
    cache = VectorCache()
    cache.get("team", 1, lambda: Entry(ids, quantize(rows)))
    hit = timings_ms(lambda: cache.get("team", 1, lambda: Entry(ids, rows)), 2000)
    print(f"  {'a cache hit':46} {hit[0] * 1e3:7.1f} us / {hit[1] * 1e3:5.1f} us")


# -- 5. RSS --------------------------------------------------------------------------


def high_water_mark() -> int:
    """The process's peak RSS from /proc (Linux; 0 elsewhere)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def rss_child(teams: int, per_team: int, fmt: str, bound_mb: int) -> None:
    """Fills a cache with every team's vectors, then searches every team once in a
    random order (an evicted team reloads); prints JSON."""
    process = psutil.Process()
    baseline = process.memory_info().rss
    cache = VectorCache(max_bytes=bound_mb * MiB)

    def load(team: int) -> Entry:
        # What the database would hand back: this team's blobs, the same on every load.
        blobs = encode_many(unit_rows(np.random.default_rng(team), per_team), fmt)
        ids = np.arange(team * per_team, (team + 1) * per_team, dtype=np.int64)
        return Entry(ids, decode_quantized(blobs) if fmt == "int8" else decode_many(blobs))

    started = time.perf_counter()
    for team in range(teams):
        cache.get(("records", team), 1, functools.partial(load, team))
    filled = time.perf_counter() - started
    rng = np.random.default_rng(5)
    query = unit_rows(rng, 1)[0]
    loads_before = cache.stats().loads
    search_ms = []
    for team in rng.permutation(teams).tolist():
        start = time.perf_counter()
        entry = cache.get(("records", team), 1, functools.partial(load, team))
        top_k(entry.matrix, query, 10)
        search_ms.append((time.perf_counter() - start) * 1e3)
    stats = cache.stats()
    print(
        json.dumps(
            {
                "baseline": baseline,
                "rss": process.memory_info().rss,
                "hwm": high_water_mark(),
                "cache_bytes": stats.bytes,
                "entries": stats.entries,
                "fill_s": filled,
                "reloads": stats.loads - loads_before,
                "search_p50_ms": float(np.percentile(search_ms, 50)),
            }
        )
    )


def rss(teams: int, per_team: int) -> None:
    print(f"\n## peak RSS, {teams:,} teams x {per_team:,} vectors (int64 ids) in one process")
    print(
        f"  {'format':8} {'bound':>9} {'teams kept':>10} {'cache MB':>9} {'peak RSS MB':>12}"
        f" {'(VmHWM)':>11} {'numpy+import MB':>16} {'fill s':>7} {'search p50':>11}"
        f" {'reloads':>8}"
    )
    for fmt in ("int8", "float32"):
        for bound in (1 << 20, DEFAULT_CACHE_MB):
            argv = [sys.executable, __file__, "--child", "rss", "--teams", str(teams)]
            argv += ["--per-team", str(per_team), "--format", fmt, "--bound-mb", str(bound)]
            child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
            watched = psutil.Process(child.pid)
            peak = 0
            while child.poll() is None:
                try:
                    peak = max(peak, watched.memory_info().rss)
                except psutil.NoSuchProcess:
                    break
                time.sleep(0.02)
            out, _ = child.communicate()
            row = json.loads(out)
            peak = max(peak, row["rss"])
            label = "none" if bound == 1 << 20 else f"{bound} MB"
            print(
                f"  {fmt:8} {label:>9} {row['entries']:>10,} {row['cache_bytes'] / MiB:9.1f}"
                f" {peak / MiB:12.1f} {row['hwm'] / MiB:11.1f} {row['baseline'] / MiB:16.1f}"
                f" {row['fill_s']:7.1f} {row['search_p50_ms']:8.3f} ms {row['reloads']:8,}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="2000,20000,100000", help="vector counts for top-k")
    parser.add_argument("--blas-threads", default="default,1", help="settings, comma-separated")
    parser.add_argument("--recall-size", type=int, default=20_000)
    parser.add_argument("--reload-size", type=int, default=20_000)
    parser.add_argument("--teams", type=int, default=1000)
    parser.add_argument("--per-team", type=int, default=1000)
    parser.add_argument("--child", choices=["latency", "rss"], help=argparse.SUPPRESS)
    parser.add_argument("--format", default="int8", help=argparse.SUPPRESS)
    parser.add_argument("--bound-mb", type=int, default=DEFAULT_CACHE_MB, help=argparse.SUPPRESS)
    args = parser.parse_args()
    size_list = [int(size) for size in args.sizes.split(",")]
    if args.child == "latency":
        latency_child(size_list)
        return
    if args.child == "rss":
        rss_child(args.teams, args.per_team, args.format, args.bound_mb)
        return
    print(
        f"# bench_vectors: numpy {np.__version__}, Python {platform.python_version()},"
        f" {psutil.cpu_count()} cores, OPENBLAS_NUM_THREADS="
        f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, load average"
        f" {' '.join(f'{load:.1f}' for load in os.getloadavg())}"
    )
    sizes()
    recalls(args.recall_size)
    latencies(size_list, args.blas_threads.split(","))
    reloads(args.reload_size)
    rss(args.teams, args.per_team)


if __name__ == "__main__":
    main()
