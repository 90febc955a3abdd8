"""Record search through a real ``keepstone serve``: the latency goals, and the RSS
of a server holding many teams' vectors. Prints figures; asserts nothing.

    python bench/bench_search_api.py                       # SQLite, then PostgreSQL
    python bench/bench_search_api.py --backends sqlite --scales 2k,20k
    python bench/bench_search_api.py --scales 1m           # 1,000 teams x 1,000 records

For each scale a database is filled straight through the store (realistic work
summaries from bench/make_records_corpus.py, each with a 384-dimension unit vector
stored as the indexer stores it, tagged with the default model's id, so the server finds
every record embedded), then two servers are started on it in turn: one with
``KEEPSTONE_EMBEDDER=none`` (keyword-only) and one with the default MiniLM embedder (hybrid:
every query embedded for real, one BLAS thread). One client sends
``POST /api/teams/{team}/memory/search`` (limit 10) with the team's API key, a query of
2-4 words from the records' vocabulary; p50/p95 over ``--searches`` requests after 20
uncounted ones. Requests go round-robin over the teams of the scale, paced under the
per-team search limit (5/s), so the limiter never answers 429.

* 2k / 20k: ``--teams-small`` teams (default 5) of that many records each; every team is
  searched in turn, so each search hits a team of the stated size with warm caches.
* 1m: 1,000 teams of 1,000 records; after one pass over every team (warming what the
  cache bound admits), searches go to random teams; then the server's peak RSS
  (``VmHWM``) with ``KEEPSTONE_VECTOR_CACHE_MB`` (default 256) and with a bound that holds
  every team (``--big-cache-mb``, default 2048).
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
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent / "src"))
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import numpy as np  # noqa: E402

from keepstone.db import make_engine  # noqa: E402
from keepstone.db.vectors import encode_many  # noqa: E402
from keepstone.identity.keys import load_key_hasher  # noqa: E402
from keepstone.identity.service import IdentityService  # noqa: E402
from keepstone.records.store import RETENTION, PendingRecord, Record  # noqa: E402
from make_records_corpus import COMPONENTS, PROBLEMS, _filler  # noqa: E402
from records_world import bench_world  # noqa: E402
from serving import fresh_postgres, serve  # noqa: E402

MODEL = "all-MiniLM-L6-v2"
DIM = 384
WARM = 20
#: Requests per second per team, under the server's search limit of 5.
PER_TEAM_RATE = 4.5


def query_words() -> list[str]:
    words: set[str] = set()
    for phrase in COMPONENTS + PROBLEMS:
        words |= {w for w in phrase.replace("-", " ").split() if len(w) > 3 and w != "the"}
    return sorted(words)


def fill(
    database: str, teams: int, per_team: int, *, vectors: bool = True
) -> list[tuple[str, str]]:
    """``teams`` teams of ``per_team`` records, every record with a stored vector (none
    when not ``vectors``: keyword-only runs); returns (team id, API key) per team."""
    engine = make_engine(database)
    world = bench_world(engine, teams)
    identity = IdentityService(engine, load_key_hasher(engine, None))
    keys = [
        (team, identity.create_api_key(member.user_id or "", team, "bench")[1])
        for team, member in world.teams
    ]
    rng = random.Random(7)
    unit = np.random.default_rng(7)
    now = datetime.now(UTC)
    order = [team for team, _ in world.teams for _ in range(per_team)]
    rng.shuffle(order)
    started = time.perf_counter()
    batch = 20_000
    for i in range(0, len(order), batch):
        rows = [
            Record("rec_" + uuid.uuid4().hex, team, None, _filler(rng), now, now + RETENTION)
            for team in order[i : i + batch]
        ]
        with world.store.writing() as tx:
            tx.insert(rows)
        if vectors:
            matrix = unit.standard_normal((len(rows), DIM)).astype(np.float32)
            matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
            pending = [PendingRecord(r.team_id, r.id, r.text) for r in rows]
            world.store.store_record_embeddings(pending, encode_many(matrix), MODEL)
        done = i + len(rows)
        rate = done / (time.perf_counter() - started)
        print(f"    loaded {done:,} records ({rate:,.0f}/s)", end="\r", flush=True)
    print()
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE records")
            conn.commit()
    engine.dispose()
    return keys


def run_searches(
    base: str, keys: list[tuple[str, str]], n: int, rng: random.Random, *, randomly: bool
) -> tuple[float, float, float]:
    """(p50 ms, p95 ms, mean hits) of ``n`` searches after :data:`WARM` uncounted."""
    words = query_words()
    last: dict[str, float] = {}
    timings: list[float] = []
    hits = 0
    with httpx.Client(base_url=base, timeout=30) as client:
        for i in range(n + WARM):
            team, key = rng.choice(keys) if randomly else keys[i % len(keys)]
            wait = last.get(team, 0.0) + 1 / PER_TEAM_RATE - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            query = " ".join(rng.sample(words, rng.randint(2, 4)))
            t0 = time.perf_counter()
            r = client.post(
                f"/api/teams/{team}/memory/search",
                json={"query": query, "limit": 10},
                headers={"Authorization": f"Bearer {key}"},
            )
            elapsed = (time.perf_counter() - t0) * 1000
            last[team] = time.monotonic()
            if r.status_code != 200:
                raise SystemExit(f"search answered {r.status_code}: {r.text}")
            if i >= WARM:
                timings.append(elapsed)
                hits += len(r.json()["results"])
    timings.sort()
    return statistics.median(timings), timings[int(len(timings) * 0.95) - 1], hits / n


def warm_all(base: str, keys: list[tuple[str, str]]) -> None:
    """One search per team, paced under the limit (the same team is never asked twice)."""
    with httpx.Client(base_url=base, timeout=60) as client:
        for team, key in keys:
            client.post(
                f"/api/teams/{team}/memory/search",
                json={"query": "deploy pipeline timeout", "limit": 10},
                headers={"Authorization": f"Bearer {key}"},
            ).raise_for_status()


def one_scale(database: str, scale: str, args: argparse.Namespace, label: str) -> None:
    home = Path(tempfile.mkdtemp(prefix="keepstone-bench-home-"))
    if scale == "1m":
        teams, per_team = 1000, 1000
    else:
        teams, per_team = args.teams_small, int(scale.rstrip("k")) * 1000
    print(f"[{label}] {scale}: {teams} teams x {per_team:,} records", flush=True)
    keys = fill(database, teams, per_team)
    rng = random.Random(11)
    many = scale == "1m"
    for mode, env in (("keyword-only", {"KEEPSTONE_EMBEDDER": "none"}), ("hybrid", {})):
        with serve(database, home, KEEPSTONE_INDEXER="off", **env) as served:
            if many:
                warm_all(served.base, keys)
            p50, p95, hits = run_searches(served.base, keys, args.searches, rng, randomly=many)
            goal = 10.0 if mode == "keyword-only" else 25.0
            mark = "✓" if p95 <= goal else "✗"
            print(
                f"[{label}] {scale:>3} {mode:12s} p50 {p50:6.2f} ms  p95 {p95:6.2f} ms "
                f"(goal p95 ≤ {goal:.0f}: {mark}; {hits:.1f} hits/search; "
                f"server peak RSS {served.peak_rss_mb():.0f} MB)",
                flush=True,
            )
    if many:
        for cache_mb in (None, args.big_cache_mb):
            env = {} if cache_mb is None else {"KEEPSTONE_VECTOR_CACHE_MB": str(cache_mb)}
            with serve(database, home, KEEPSTONE_INDEXER="off", **env) as served:
                before = served.peak_rss_mb()
                warm_all(served.base, keys)
                shown = "default 256" if cache_mb is None else str(cache_mb)
                print(
                    f"[{label}] 1,000 teams' vectors searched once each, "
                    f"KEEPSTONE_VECTOR_CACHE_MB={shown}: server peak RSS "
                    f"{served.peak_rss_mb():.0f} MB (at start, model loaded on first "
                    f"search: {before:.0f} MB)",
                    flush=True,
                )


@contextmanager
def database_for(backend: str, postgres: str) -> Iterator[str]:
    if backend == "sqlite":
        directory = Path(tempfile.mkdtemp(prefix="keepstone-bench-db-"))
        yield f"sqlite:///{directory / 'keepstone.db'}"
        return
    with fresh_postgres(postgres) as url:
        yield url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--scales", default="2k,20k,1m")
    parser.add_argument("--searches", type=int, default=300)
    parser.add_argument("--teams-small", type=int, default=5)
    parser.add_argument("--big-cache-mb", type=int, default=2048)
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "KEEPSTONE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
        ),
    )
    args = parser.parse_args()
    for backend in args.backends.split(","):
        for scale in args.scales.split(","):
            with database_for(backend, args.postgres) as database:
                one_scale(database, scale, args, backend)


if __name__ == "__main__":
    main()
