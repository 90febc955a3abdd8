"""Writers contending for the same two paths through a real ``keepstone serve --workers 2``:
moves A→B and B→A, creates and replacements of A and B, and deletes of them, all at once
(docs/storage.md, "Locks"). A path with no document yet has no row to lock first, so on
PostgreSQL such writers can wait on each other in a cycle, which PostgreSQL ends by rolling
one back; the store sends that write again. Prints every answer's status, counted, the 5xx
among them, each operation's median and 99th-percentile time, and on PostgreSQL how many
deadlocks the server detected.

For each database (SQLite, and PostgreSQL when ``KEEPSTONE_TEST_POSTGRES_URL`` names a
server: a fresh database, dropped after), ``--seconds`` of 3 movers each way, 3 writers
and 1 deleter. ``--baseline SRC`` runs another checkout's server too, in turns.

    KEEPSTONE_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/bench_contention.py --seconds 20 --baseline /tmp/old/src

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_freshness import ADMIN_TOKEN, member_key
from serving import fresh_postgres, serve

SPACE = {"name": "contended", "visibility": "project", "project": "bench"}
A, B = "d/a.md", "d/b.md"


def contend(base: str, key: str, seconds: float) -> tuple[Counter[str], dict[str, list[float]]]:
    """Every answer's ``operation status``, counted, over ``seconds`` of contention, and each
    operation's answer times (ms)."""
    seen: Counter[str] = Counter()
    times: dict[str, list[float]] = {}
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    headers = {"Authorization": f"Bearer {key}"}

    def worker(op: str, send: Callable[[httpx.Client], httpx.Response]) -> None:
        with httpx.Client(base_url=base, headers=headers, timeout=120) as client:
            while time.monotonic() < stop:
                started = time.perf_counter()
                status = send(client).status_code
                took = (time.perf_counter() - started) * 1000
                with lock:
                    seen[f"{op} {status}"] += 1
                    times.setdefault(op, []).append(took)

    def move(frm: str, to: str) -> Callable[[httpx.Client], httpx.Response]:
        return lambda c: c.post("/api/memory/doc/move", params={**SPACE, "path": frm, "to": to})

    def put(c: httpx.Client) -> httpx.Response:
        body = {"content": f"# {random.random()}\n"}
        return c.put("/api/memory/doc", params={**SPACE, "path": random.choice((A, B))}, json=body)

    def delete(c: httpx.Client) -> httpx.Response:
        return c.delete("/api/memory/doc", params={**SPACE, "path": random.choice((A, B))})

    jobs = [("move", move(A, B))] * 3 + [("move", move(B, A))] * 3 + [("put", put)] * 3
    threads = [threading.Thread(target=worker, args=job) for job in [*jobs, ("delete", delete)]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return seen, times


def deadlocks(url: str) -> int:
    """How many deadlocks PostgreSQL detected in the database of ``url`` (its statistics
    reach ``pg_stat_database`` within a second of each transaction's end)."""
    import psycopg

    time.sleep(1.5)
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def timing(times: dict[str, list[float]]) -> str:
    """Each operation's median and 99th percentile (ms)."""
    parts = []
    for op, took in sorted(times.items()):
        took.sort()
        p99 = took[min(len(took) - 1, int(len(took) * 0.99))]
        parts.append(f"{op} p50 {statistics.median(took):.1f} p99 {p99:.1f} ms")
    return "; ".join(parts)


def run(
    database: str, src: Path | None, seconds: float
) -> tuple[Counter[str], dict[str, list[float]]]:
    """One server of the tree ``src`` (None: this checkout) on ``database``, contended."""
    extra = {"PYTHONPATH": str(src)} if src is not None else {}
    with tempfile.TemporaryDirectory() as home:
        with serve(
            database,
            Path(home),
            workers=2,
            KEEPSTONE_ADMIN_TOKEN=ADMIN_TOKEN,
            KEEPSTONE_EMBEDDER="none",
            **extra,
        ) as served:
            return contend(served.base, member_key(served.base), seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--baseline", type=Path, help="another checkout's src, run in turns")
    args = parser.parse_args()
    trees: list[tuple[str, Path | None]] = [("this", None)]
    if args.baseline:
        trees.append(("base", args.baseline.resolve()))
    pg = os.environ.get("KEEPSTONE_TEST_POSTGRES_URL")
    kinds = ["sqlite"] + (["postgres"] if pg else [])
    for kind in kinds:
        for name, src in trees:
            found = "-"
            with tempfile.TemporaryDirectory() as tmp:
                if kind == "sqlite":
                    seen, times = run(f"sqlite:///{tmp}/keepstone.db", src, args.seconds)
                else:
                    assert pg is not None
                    with fresh_postgres(pg, "contention") as url:
                        seen, times = run(url, src, args.seconds)
                        found = str(deadlocks(url))
            failed = sum(n for k, n in seen.items() if k.split()[1].startswith("5"))
            answers = ", ".join(f"{k}: {n}" for k, n in sorted(seen.items()))
            print(
                f"{kind:<8} {name:<4} {args.seconds:g} s  answers: {sum(seen.values())}  "
                f"5xx: {failed}  deadlocks: {found}\n    {timing(times)}\n    ({answers})",
                flush=True,
            )


if __name__ == "__main__":
    main()
