"""Document write/read latency and throughput, and export/import MB/s, per store adapter.

Runs every adapter available in this checkout side by side, in one process:

* ``fs``       — the filesystem store in a temporary directory;
* ``sqlite``   — ``keepstone.store.sql.SqlStore`` on a temporary SQLite file (when present);
* ``postgres`` — the same on ``KEEPSTONE_TEST_POSTGRES_URL`` in a throw-away schema (when set).

    .venv/bin/python bench/bench_store.py                # defaults: about a minute
    .venv/bin/python bench/bench_store.py --small-count 2000 --large-count 300

Beside the per-adapter figures: 1 KB writes of 4 concurrent writers (``--writers``), and
for PostgreSQL the round trips per write (counted in libpq's trace) and a bare durable
commit. Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from keepstone.quota import GiB, Limits
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import ImportStrategy, MemoryStore
from keepstone.store.fs import FilesystemStore

#: Roomy limits: the benchmark measures speed, not refusals.
BENCH_LIMITS = Limits(max_document=2 * 1024 * 1024, team_quota=64 * GiB).with_subcap(
    Visibility.PROJECT, 0
)
WORDS = "keepstone memory agent note deploy quota space tree markdown export import team".split()


@dataclass
class Result:
    adapter: str
    figures: dict[str, str] = field(default_factory=dict)


def body(size: int, seed: int) -> str:
    """Prose-like Markdown of ``size`` bytes (ASCII), different for every seed."""
    out: list[str] = [f"# note {seed}\n"]
    n = len(out[0])
    i = seed
    while n < size:
        word = WORDS[i % len(WORDS)] + (" " if i % 11 else ".\n")
        out.append(word)
        n += len(word)
        i += 7
    return "".join(out)[:size]


@contextlib.contextmanager
def adapters(tmp: str, only: list[str]) -> Iterator[list[tuple[str, MemoryStore]]]:
    opened: list[tuple[str, MemoryStore]] = []
    schema = ""
    pg_url = os.environ.get("KEEPSTONE_TEST_POSTGRES_URL", "")
    try:
        if "fs" in only:
            opened.append(("fs", FilesystemStore(os.path.join(tmp, "fs"), BENCH_LIMITS)))
        sql = _sql_module()
        if sql is not None and "sqlite" in only:
            url = f"sqlite:///{os.path.join(tmp, 'bench.db')}"
            opened.append(("sqlite", sql.SqlStore.open(url, BENCH_LIMITS)))
        if sql is not None and pg_url and "postgres" in only:
            schema = f"bench_{uuid.uuid4().hex[:12]}"
            opened.append(("postgres", sql.SqlStore.open(pg_url, BENCH_LIMITS, schema=schema)))
        yield opened
    finally:
        for _, store in opened:
            store.close()
        if schema:
            drop_schema(pg_url, schema)


def drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def commit_floor_ms(url: str, count: int = 300) -> float:
    """p50 of one durable one-row upsert and its commit on ``url``: the fsync-bound floor
    under any PostgreSQL write (a busy disk moves it from 0.2 to several ms)."""
    import psycopg

    samples: list[float] = []
    table = f"keepstone_bench_floor_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url) as conn:
        conn.execute(f"CREATE TABLE {table} (k int PRIMARY KEY, v int)")
        conn.commit()
        try:
            for i in range(count):
                start = time.perf_counter()
                conn.execute(
                    f"INSERT INTO {table} VALUES (1, %s) "
                    "ON CONFLICT (k) DO UPDATE SET v = excluded.v",
                    (i,),
                )
                conn.commit()
                samples.append(time.perf_counter() - start)
        finally:
            conn.execute(f"DROP TABLE {table}")
            conn.commit()
    return pct(samples, 50) * 1e3


def round_trips_per_write(store: Any, count: int = 20) -> float:
    """PostgreSQL: how many times a 1 KB write waits for the server (half creates, half
    replaces), counted as tests/transactions.py counts them: libpq's trace of every
    connection the writes check out of the pool (its ReadyForQuery messages), pool checkout
    and return included."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.transactions import round_trips

    ref = SpaceRef.build("project", "round-trips", tenant="bench", project="bench")
    for i in range(count // 2):
        store.write(ref, f"r{i}.md", body(1024, i))

    def writes() -> None:
        for i in range(count):
            store.write(ref, f"r{i}.md", body(1024, count + i))

    return round_trips(store.engine, writes) / count


def concurrent_writes(store: MemoryStore, label: str, writers: int, count: int) -> float:
    """1 KB writes/s of ``writers`` threads at once, each creating ``count`` documents of
    its own, in a team of its own (one team's writes queue on its counter row until each
    commits, on either engine)."""
    refs = [
        SpaceRef.build("project", f"concurrent-{label}", tenant=f"bench-{n}", project="bench")
        for n in range(writers)
    ]

    def run(n: int) -> None:
        for i in range(count):
            store.write(refs[n], f"c/{i}.md", body(1024, n * count + i))

    threads = [threading.Thread(target=run, args=(n,)) for n in range(writers)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return writers * count / (time.perf_counter() - start)


def _sql_module() -> Any:
    try:
        return importlib.import_module("keepstone.store.sql")
    except ModuleNotFoundError:
        return None


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def bench_adapter(name: str, store: MemoryStore, args: argparse.Namespace) -> Result:
    result = Result(name)
    tenant = "bench"
    for label, size, count in (
        ("1 KB", 1024, args.small_count),
        ("100 KB", 100 * 1024, args.large_count),
    ):
        ref = SpaceRef.build("project", f"docs-{size}", tenant=tenant, project="bench")
        docs = [(f"d{i // 100}/doc-{i}.md", body(size, i)) for i in range(count)]
        writes = [timed(partial(store.write, ref, p, c)) for p, c in docs]
        reads = [timed(partial(store.read, ref, p)) for p, _ in docs]
        for kind, samples in (("write", writes), ("read", reads)):
            total = sum(samples)
            result.figures[f"{kind} {label} p50 ms"] = f"{pct(samples, 50) * 1e3:.2f}"
            result.figures[f"{kind} {label} p95 ms"] = f"{pct(samples, 95) * 1e3:.2f}"
            result.figures[f"{kind} {label} docs/s"] = f"{count / total:,.0f}"
            result.figures[f"{kind} {label} MB/s"] = f"{count * size / total / 1e6:.1f}"

    # Export and import of the 100 KB space (plus the 1 KB one when it is the larger).
    ref = SpaceRef.build("project", f"docs-{100 * 1024}", tenant=tenant, project="bench")
    used = store.usage(ref).used_bytes
    sink = io.BytesIO()
    export_s = timed(lambda: store.export(ref, sink))
    target = SpaceRef.build("project", "imported", tenant=tenant, project="bench")
    sink.seek(0)
    import_s = timed(lambda: store.import_archive(target, sink, ImportStrategy.OVERWRITE))
    assert store.usage(target).used_bytes == used, "import did not reproduce the space"
    result.figures["export MB/s"] = f"{used / export_s / 1e6:.1f}"
    result.figures["import MB/s"] = f"{used / import_s / 1e6:.1f}"
    result.figures["archive MB"] = f"{len(sink.getvalue()) / 1e6:.2f}"
    return result


def print_table(results: list[Result]) -> None:
    rows = list(dict.fromkeys(row for r in results for row in r.figures))
    width = max([len(r) for r in rows] + [6])
    cols = [max(len(r.adapter), *(len(v) for v in r.figures.values())) for r in results]
    header = "metric".ljust(width) + "".join(
        f"  {r.adapter:>{c}}" for r, c in zip(results, cols, strict=True)
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        cells = "".join(
            f"  {r.figures.get(row, '-'):>{c}}" for r, c in zip(results, cols, strict=True)
        )
        print(row.ljust(width) + cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small-count", type=int, default=1000, help="1 KB documents")
    parser.add_argument("--large-count", type=int, default=200, help="100 KB documents")
    parser.add_argument(
        "--adapters", default="fs,sqlite,postgres", help="comma-separated subset to run"
    )
    parser.add_argument(
        "--writers", type=int, default=4, help="threads of the concurrent 1 KB writes (0: none)"
    )
    args = parser.parse_args(argv)
    only = [a.strip() for a in args.adapters.split(",") if a.strip()]
    with (
        tempfile.TemporaryDirectory(prefix="keepstone-bench-") as tmp,
        adapters(tmp, only) as stores,
    ):
        results = []
        for name, store in stores:
            start = time.perf_counter()
            results.append(bench_adapter(name, store, args))
            print(f"# {name}: {time.perf_counter() - start:.1f} s", flush=True)
        per_writer = args.small_count // max(args.writers, 1)
        for (name, store), result in zip(stores, results, strict=True):
            if args.writers > 0:
                rate = concurrent_writes(store, "1kb", args.writers, per_writer)
                result.figures[f"write 1 KB docs/s, {args.writers} writers"] = f"{rate:,.0f}"
            if name == "postgres":
                result.figures["round trips per 1 KB write"] = f"{round_trips_per_write(store):.2f}"
    print(
        f"\n{args.small_count} x 1 KB and {args.large_count} x 100 KB documents per adapter; "
        "export/import over the 100 KB space\n"
    )
    print_table(results)
    by_name = {r.adapter: r.figures for r in results}
    if "sqlite" in by_name and "postgres" in by_name:
        # A goal: PostgreSQL's 1 KB writes against SQLite's, the same run.
        def rate(name: str) -> float:
            return float(by_name[name]["write 1 KB docs/s"].replace(",", ""))

        ratio = rate("postgres") / rate("sqlite")
        floor = commit_floor_ms(os.environ.get("KEEPSTONE_TEST_POSTGRES_URL", ""))
        print(f"\npostgres: a bare durable commit (one-row upsert) p50 ms  {floor:.2f}")
        mark = "✓" if ratio >= 0.5 else "✗"
        print(f"\npostgres ÷ sqlite, 1 KB writes/s  goal ≥ 0.5: {ratio:.2f} {mark}")
        if args.writers > 0:
            # Beside the goal, not instead of it: both engines sync every acknowledged
            # commit (docs/storage.md "Durability"); concurrent writers share the syncs.
            key = f"write 1 KB docs/s, {args.writers} writers"
            both = [float(by_name[n][key].replace(",", "")) for n in ("postgres", "sqlite")]
            print(
                f"postgres ÷ sqlite, 1 KB writes/s, {args.writers} writers: {both[0] / both[1]:.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
