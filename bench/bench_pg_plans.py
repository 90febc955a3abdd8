"""Document search on PostgreSQL right after a bulk import: with no planner statistics, and
with them, side by side (docs/performance.md, "Query plans").

Two fresh databases on the server of ``KEEPSTONE_TEST_POSTGRES_URL`` (or ``--url``), each
filled the same way: one space, ``--documents`` Markdown documents imported in one import
(the store's import batch), then the first search, which chunks them all (reconcile). In
the first database nothing analyzes anything (the store's own ``ANALYZE`` after bulk changes
is switched off, as no autovacuum daemon ran yet); the second runs as the store does
(``ANALYZE`` after the import and after the reconcile that chunked it). Then the same
keyword searches run in both, interleaved, and the script prints their median and p95,
and the plan of each search's reconcile check.

    KEEPSTONE_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/bench_pg_plans.py [--documents 10000] [--searches 60]

Prints figures; asserts nothing about time. The databases are dropped afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent / "src"))
sys.path.insert(0, str(ROOT))

from sqlalchemy import event  # noqa: E402

from keepstone.db import statistics as db_statistics  # noqa: E402
from keepstone.service.search import DocumentSearch  # noqa: E402
from keepstone.spaces import SpaceRef, Visibility  # noqa: E402
from keepstone.store.sql import SqlStore  # noqa: E402
from serving import fresh_postgres  # noqa: E402

REF = SpaceRef.build(Visibility.PROJECT, "handbook", tenant="team-bench", project="p1")
WORDS = (
    "deploy rollback incident billing refund invoice customer outage database replica "
    "backup restore migration schema index query latency budget quota token secret "
    "release branch review approval runbook alert pager oncall dashboard metric trace "
    "cache queue worker cluster region failover vendor contract renewal policy audit"
).split()
QUERIES = [
    "rollback after a failed deploy",
    "who approves a refund",
    "database replica failover",
    "quota for tokens",
    "restore a backup",
    "pager alert for latency",
]


def document(rng: random.Random, i: int) -> str:
    """A Markdown document of a title and four sections (about five chunks)."""
    parts = [f"# Note {i}: {' '.join(rng.sample(WORDS, 3))}\n"]
    for s in range(4):
        words = " ".join(rng.choice(WORDS) for _ in range(60))
        parts.append(f"## Section {s} {rng.choice(WORDS)}\n\n{words}.\n")
    return "\n".join(parts)


@contextlib.contextmanager
def statistics_refresh(on: bool) -> Iterator[None]:
    """The store's ANALYZE after bulk changes, on or off (off: a change never counts as
    bulk)."""
    saved = db_statistics.BULK_ROWS
    if not on:
        db_statistics.BULK_ROWS = sys.maxsize
    try:
        yield
    finally:
        db_statistics.BULK_ROWS = saved


def fill(store: SqlStore, documents: int, analyze: bool) -> tuple[float, float]:
    """Import ``documents`` documents, then search once (chunking them all); return the
    seconds of each."""
    rng = random.Random(7)
    with statistics_refresh(analyze):
        t0 = time.perf_counter()
        with store.import_writer(REF, None) as write:
            for i in range(documents):
                path = f"notes/{i:06d}.md"
                write(store.check_write(REF, path, document(rng, i), None, True, None))
        imported = time.perf_counter() - t0
        t0 = time.perf_counter()
        DocumentSearch(store).search([REF], QUERIES[0])
        first = time.perf_counter() - t0
    return imported, first


def reconcile_plan(store: SqlStore) -> str:
    """The node types of the plan of a search's reconcile check (its first SELECT)."""
    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        if not seen and statement.lstrip().upper().startswith("SELECT"):
            seen.append((statement, params))

    event.listen(store.engine, "before_cursor_execute", capture)
    try:
        store.reconciled_versions([REF])
    finally:
        event.remove(store.engine, "before_cursor_execute", capture)
    with store.engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + seen[0][0], seen[0][1]).scalar()
    nodes: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        index = node.get("Index Name") or node.get("Relation Name")
        nodes.append(node["Node Type"] + (f" ({index})" if index else ""))
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return " > ".join(nodes)


def has_statistics(store: SqlStore) -> bool:
    with store.engine.connect() as conn:
        found = conn.exec_driver_sql(
            "SELECT count(*) FROM pg_stats WHERE tablename IN ('memory_documents', 'memory_chunks')"
        ).scalar()
    return bool(found)


def timed(search: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    search()
    return (time.perf_counter() - t0) * 1000


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("KEEPSTONE_TEST_POSTGRES_URL", ""))
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--searches", type=int, default=60)
    args = parser.parse_args()
    if not args.url:
        print("bench_pg_plans: no PostgreSQL (set KEEPSTONE_TEST_POSTGRES_URL or --url): skipped")
        return
    kinds = ("no statistics", "analyzed")
    with fresh_postgres(args.url) as stale_url, fresh_postgres(args.url) as fresh_url:
        stores = {
            kind: SqlStore.open(url, pgvector_mode="off")
            for kind, url in zip(kinds, (stale_url, fresh_url), strict=True)
        }
        try:
            filled = {
                kind: fill(stores[kind], args.documents, kind == "analyzed") for kind in kinds
            }
            searches = {kind: DocumentSearch(stores[kind]) for kind in kinds}
            for kind in kinds:  # each search's BM25 index built once, then cached
                searches[kind].search([REF], QUERIES[0])
            times: dict[str, list[float]] = {kind: [] for kind in kinds}
            for i in range(args.searches):
                query = QUERIES[i % len(QUERIES)]
                for kind in kinds if i % 2 == 0 else reversed(kinds):
                    times[kind].append(timed(lambda k=kind, q=query: searches[k].search([REF], q)))
            report(args, stores, filled, times)
        finally:
            for store in stores.values():
                store.close()


def report(
    args: argparse.Namespace,
    stores: dict[str, SqlStore],
    filled: dict[str, tuple[float, float]],
    times: dict[str, list[float]],
) -> None:
    chunks = len(stores["analyzed"].chunk_rows(REF))
    print(
        f"PostgreSQL: one space of {args.documents:,} documents ({chunks:,} chunks), "
        f"keyword search, {args.searches} searches per database, interleaved"
    )
    print(f"{'':34}{'no statistics':>18}{'analyzed':>18}")
    rows = [
        ("import (s)", [f"{filled[k][0]:.1f}" for k in stores]),
        ("first search, chunks all (s)", [f"{filled[k][1]:.1f}" for k in stores]),
        ("search median (ms)", [f"{statistics.median(times[k]):.1f}" for k in stores]),
        ("search p95 (ms)", [f"{p95(times[k]):.1f}" for k in stores]),
        ("planner statistics", ["yes" if has_statistics(stores[k]) else "none" for k in stores]),
    ]
    for label, values in rows:
        print(f"{label:34}" + "".join(f"{v:>18}" for v in values))
    for kind, store in stores.items():
        print(f"reconcile check plan, {kind}: {reconcile_plan(store)}")
    ratio = statistics.median(times["no statistics"]) / statistics.median(times["analyzed"])
    print(f"median ratio no statistics / analyzed: {ratio:.2f}")


if __name__ == "__main__":
    main()
