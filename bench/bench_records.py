"""Records benchmark: search latency at 10k / 100k / 1M records over 1,000 teams,
and save throughput. Prints figures; asserts nothing.

    python bench/bench_records.py                      # SQLite, all sizes
    python bench/bench_records.py --sizes 10000,100000 --backends sqlite  # fewer
    CAIRN_TEST_POSTGRES_URL=postgresql://... python bench/bench_records.py  # + PostgreSQL

Records are realistic work summaries (bench/make_records_corpus.py's templates),
spread evenly over the teams (interleaved) and bulk-inserted; each size adds to the
previous one. A search is the whole use-case, ``RecordService.search`` (access,
settings check, rate limiter, ranked query of one team, rendering) as a member of a
random team, with ``limit`` 10, for a query of 2-4 words drawn from the same
vocabulary.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent / "src"))
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from sqlalchemy.engine import Engine  # noqa: E402

from cairn.db import make_engine  # noqa: E402
from cairn.records.store import RETENTION, Record  # noqa: E402
from make_records_corpus import COMPONENTS, PROBLEMS, _filler  # noqa: E402
from records_world import BenchWorld, bench_world  # noqa: E402

TEAMS = 1000
SEARCHES = 400


def _query_words() -> list[str]:
    words: list[str] = []
    for phrase in COMPONENTS + PROBLEMS:
        words += [w for w in phrase.replace("-", " ").split() if len(w) > 3 and w != "the"]
    return sorted(set(words))


def _fill(engine: Engine, world: BenchWorld, per_team: int, rng: random.Random) -> float:
    """Add ``per_team`` records to every team, interleaved (as real saves arrive);
    return rows per second.

    Bulk loading goes straight to the store (``RecordWriter.insert``, which indexes
    each row), without masking: the generated texts hold no secrets, and masking every
    record would dominate the build of 1M rows. The save use-cases, masking included,
    are measured by :func:`_save_paths`.
    """
    start = time.perf_counter()
    now = datetime.now(UTC)
    batch: list[Record] = []
    order = [team for team, _ in world.teams for _ in range(per_team)]
    rng.shuffle(order)
    for team in order:
        batch.append(
            Record(
                id="rec_" + uuid.uuid4().hex,
                team_id=team,
                repo_id=None,
                text=_filler(rng),
                created_at=now,
                expires_at=now + RETENTION,
            )
        )
        if len(batch) >= 20_000:
            _insert(world, batch)
            batch = []
    if batch:
        _insert(world, batch)
    rate = len(order) / (time.perf_counter() - start)
    # Fresh planner statistics, as autovacuum would have gathered by then.
    with engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE records")
        conn.commit()
    return rate


def _insert(world: BenchWorld, rows: list[Record]) -> None:
    with world.store.writing() as tx:
        tx.insert(rows)


def _search_latency(world: BenchWorld, rng: random.Random) -> tuple[float, float, float]:
    words = _query_words()
    timings: list[float] = []
    hits = 0
    for i in range(SEARCHES + 20):
        team, member = rng.choice(world.teams)
        query = " ".join(rng.sample(words, rng.randint(2, 4)))
        t0 = time.perf_counter()
        answer = world.records.search(member, team, query, limit=10)
        elapsed = (time.perf_counter() - t0) * 1000
        if i >= 20:  # the first few warm the connection pool and caches
            timings.append(elapsed)
            hits += len(answer.hits)
    timings.sort()
    p50 = statistics.median(timings)
    p95 = timings[int(len(timings) * 0.95) - 1]
    return p50, p95, hits / SEARCHES


def _save_paths(world: BenchWorld, team: str, rng: random.Random) -> tuple[float, float]:
    """(single ``save_as_server()`` calls per second, ``save_many`` records per second)."""
    n = 500
    start = time.perf_counter()
    for _ in range(n):
        world.records.save_as_server(team, _filler(rng))
    single = n / (time.perf_counter() - start)
    items: list[tuple[str, str | None]] = [(_filler(rng), None) for _ in range(10_000)]
    start = time.perf_counter()
    world.records.save_many(team, items)
    return single, len(items) / (time.perf_counter() - start)


def run(url: str, label: str, sizes: list[int]) -> None:
    engine = make_engine(url)
    rng = random.Random(7)
    world = bench_world(engine, TEAMS)
    total = 0
    print(f"[{label}] {TEAMS} teams")
    for size in sizes:
        per_team = (size - total) // TEAMS
        rate = _fill(engine, world, per_team, rng)
        total += per_team * TEAMS
        p50, p95, avg_hits = _search_latency(world, rng)
        print(
            f"[{label}] records={total:>9,} (bulk load {rate:>7,.0f} rows/s) | "
            f"search limit 10: p50 {p50:6.2f} ms  p95 {p95:6.2f} ms  "
            f"(avg {avg_hits:.1f} results)",
            flush=True,
        )
    single, many = _save_paths(world, world.teams[0][0], rng)
    print(
        f"[{label}] save throughput: save_as_server() {single:,.0f}/s (one transaction each), "
        f"save_many() {many:,.0f} records/s (masked, indexed)",
        flush=True,
    )
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--backends", default="sqlite,postgres")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    backends = args.backends.split(",")
    if "sqlite" in backends:
        with tempfile.TemporaryDirectory() as tmp:
            run(f"sqlite:///{tmp}/bench.db", "sqlite", sizes)
    pg = os.environ.get("CAIRN_TEST_POSTGRES_URL")
    if pg and "postgres" in backends:
        base = pg.rpartition("/")[0]
        name = f"bench_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        try:
            run(f"{base}/{name}", "postgres", sizes)
        finally:
            with psycopg.connect(pg, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
