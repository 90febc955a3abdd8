"""Records benchmark. By default, the records figures through a real ``keepstone serve``;
``--in-process`` runs the library-call figures. Prints figures; asserts nothing.

    python bench/bench_records.py                          # SQLite, then PostgreSQL
    KEEPSTONE_TEST_POSTGRES_URL=postgresql://... python bench/bench_records.py
    python bench/bench_records.py --backends sqlite --parts saves
    python bench/bench_records.py --records-many 100000    # a smaller many-teams scale

Through the API (each part in a fresh database, each goal printed beside its figure):

* ``saves``: ``--clients`` (8) concurrent clients, each on one keep-alive connection,
  saving work summaries as the service token through ``POST
  /api/internal/teams/{team}/memory``; saves per second over ``--saves`` per client, for
  each ``--workers`` count in turn (``1,2``: ``keepstone serve`` with one process, then
  ``--workers 2``; a group commit is per process, and on SQLite the processes share the
  file's write lock), with the server's CPU per save (all its processes). A 201 is
  durable: the save's group has committed (fsynced on SQLite) before it answers
  (tests/records/test_kill9.py proves it with SIGKILL, with one worker and two).
* ``search``: keyword-only (``KEEPSTONE_EMBEDDER=none``) ``POST
  /api/teams/{team}/memory/search`` with each team's API key, one client, p50/p95 over
  ``--searches`` after 20 uncounted: at 20k records in one team (``--teams-small`` teams
  of 20,000, searched in turn, caches warm), and at ``--records-many`` (1,000,000) records
  over 1,000 teams (random teams). Each team is searched once before (its index built),
  so the server's CPU time per search, printed beside the latency (``/proc``; the load
  of a shared machine moves it much less than the latency), is a warm search's. Records
  are bulk-inserted straight through the store (``RecordWriter.insert``), not through
  the API; the load rate is printed. See bench/bench_search_api.py for hybrid search
  and the server's RSS.

In-process (``--in-process``): keyword-only and hybrid search latency through
``RecordService.search`` at 2k and 20k records in one team (and keyword-only searches
each right after a save, which extends the team's cached rows), and save throughput.

A search is the whole use-case (access, settings check, rate limiter, the team's search
versions, ranking, the hits' texts, rendering) as a member who sees the whole team, with
``limit`` 10, for a query of 2-4 words drawn from the records' vocabulary; caches warm
(the first searches of each round are not counted). Hybrid embeds each query with the
real all-MiniLM-L6-v2 (one BLAS thread) and ranks against 384-dimension vectors stored
for every record through the indexer's API; the record vectors are random unit vectors
(the cost of a search does not depend on what they say, and embedding 20k records would
take minutes). Records are realistic work summaries (bench/make_records_corpus.py's
templates), bulk-inserted through the store (``RecordWriter.insert``: analysed terms,
the team's version bumped).

In-process save rates: ``save_as_server()`` (one caller at a time, then 8 threads: their
saves share group commits) and ``save_many()`` into a team of its own; ``--src`` runs
them against another checkout's ``src`` (a before/after).

``--in-process --deletes`` (10k, 50k records in one team unless ``--sizes``): p50/p95 of
the first search after a delete of one record, and after a purge of 100 expired ones
(untimed), keyword-only and hybrid (ranking only: random vectors for records and queries).
"""

from __future__ import annotations

import argparse
import importlib
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def _src() -> str:
    for i, arg in enumerate(sys.argv):
        if arg == "--src" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if arg.startswith("--src="):
            return arg.split("=", 1)[1]
    return str(ROOT.parent / "src")


sys.path.insert(0, _src())
sys.path.insert(0, str(ROOT))

# ``--src``'s bound first: bench_search_api puts this checkout's src first on the path.
KEEPSTONE = importlib.import_module("keepstone")

import numpy as np  # noqa: E402
from sqlalchemy.engine import Engine  # noqa: E402

from bench_search_api import database_for, fill, run_searches, warm_all  # noqa: E402
from keepstone.db import make_engine, write_transaction  # noqa: E402
from keepstone.records.schema import records  # noqa: E402
from keepstone.records.store import RETENTION, PendingRecord, Record  # noqa: E402
from make_records_corpus import COMPONENTS, PROBLEMS, _filler  # noqa: E402
from records_world import BenchWorld, bench_world, save_through  # noqa: E402
from serving import fresh_postgres, serve  # noqa: E402

TEAMS = 1000
SERVICE_TOKEN = "bench-service-token"
#: The goals for saves through the API, saves per second.
SAVE_GOALS = {"sqlite": 1000, "postgres": 600}
SEARCHES = 300
WARM = 20
#: Searches timed each right after a save (the in-process one-team figures).
SEARCHES_AFTER_SAVES = 100
#: Searches timed each right after a delete (``--deletes``; ten more after a purge each).
SEARCHES_AFTER_DELETES = 50


def _query_words() -> list[str]:
    words: list[str] = []
    for phrase in COMPONENTS + PROBLEMS:
        words += [w for w in phrase.replace("-", " ").split() if len(w) > 3 and w != "the"]
    return sorted(set(words))


def _records(teams: list[str], per_team: int, rng: random.Random) -> list[Record]:
    now = datetime.now(UTC)
    order = [team for team in teams for _ in range(per_team)]
    rng.shuffle(order)
    return [
        Record(
            id="rec_" + uuid.uuid4().hex,
            team_id=team,
            repo_id=None,
            text=_filler(rng),
            created_at=now,
            expires_at=now + RETENTION,
        )
        for team in order
    ]


def _insert(world: BenchWorld, rows: list[Record], batch: int = 20_000) -> float:
    """Bulk insert through the store, without masking (the generated texts hold no
    secrets); return rows per second."""
    start = time.perf_counter()
    for i in range(0, len(rows), batch):
        with world.store.writing() as tx:
            tx.insert(rows[i : i + batch])
    return len(rows) / (time.perf_counter() - start)


def _analyze(engine: Engine) -> None:
    # Fresh planner statistics, as autovacuum would have gathered by then.
    with engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE records")
        conn.commit()


def _pct(timings: list[float]) -> tuple[float, float]:
    timings = sorted(timings)
    return statistics.median(timings), timings[max(0, int(len(timings) * 0.95) - 1)]


def _queries(rng: random.Random, n: int = SEARCHES + WARM) -> list[str]:
    words = _query_words()
    return [" ".join(rng.sample(words, rng.randint(2, 4))) for _ in range(n)]


def _latency(
    search: Callable[[str], int], rng: random.Random, n: int = SEARCHES
) -> tuple[float, float, float]:
    """(p50 ms, p95 ms, average results) of ``n`` searches after :data:`WARM` uncounted."""
    return _timed(search, _queries(rng, n + WARM))


def _timed(search: Callable[[str], int], queries: list[str]) -> tuple[float, float, float]:
    timings: list[float] = []
    results = 0
    n = len(queries) - WARM
    for i, query in enumerate(queries):
        t0 = time.perf_counter()
        found = search(query)
        elapsed = (time.perf_counter() - t0) * 1000
        if i >= WARM:
            timings.append(elapsed)
            results += found
    p50, p95 = _pct(timings)
    return p50, p95, results / n


def _after_saves(
    world: BenchWorld, search: Callable[[str], int], queries: list[str], rng: random.Random
) -> tuple[float, float]:
    """(p50 ms, p95 ms) of searches each right after a save into the team (untimed): what
    a team searched while its records are saved pays for the rows it has to add."""
    team = world.teams[0][0]
    timings = []
    for query in queries:
        world.records.save_as_server(team, _filler(rng))
        t0 = time.perf_counter()
        search(query)
        timings.append((time.perf_counter() - t0) * 1000)
    return _pct(timings)


# --- one team: keyword-only and hybrid ------------------------------------------------------


class _Remembered:
    """An embedder answering the vectors it was given for known texts: a hybrid search
    timed without the query's embedding (what the ranking itself costs)."""

    def __init__(self, model_id: str, dim: int, vectors: dict[str, np.ndarray]) -> None:
        self.model_id, self.dim, self.vectors = model_id, dim, vectors

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.vstack([self.vectors[t] for t in texts])


def one_team(url: str, label: str, sizes: list[int]) -> None:
    from keepstone.db.vectors import encode_many
    from keepstone.embed.minilm import MiniLMEmbedder, locate_model
    from keepstone.identity.keys import load_key_hasher
    from keepstone.identity.service import IdentityService
    from keepstone.records.ratelimit import LocalRateLimiter
    from keepstone.search.cache import VectorCache
    from keepstone.service.record_search import RecordSearch
    from keepstone.service.records import RecordService, build_record_service

    engine = make_engine(url)
    rng = random.Random(7)
    world = bench_world(engine, 1)
    team, member = world.teams[0]
    embedder = MiniLMEmbedder(locate_model())
    identity = IdentityService(engine, load_key_hasher(engine, None))
    unlimited = LocalRateLimiter(rate=10**9, max_in_flight=10**9)
    hybrid = build_record_service(
        engine, identity, unlimited, RecordSearch(embedder, VectorCache())
    )
    vectors_rng = np.random.default_rng(7)
    total = 0
    print(f"[{label}] one team; hybrid queries embedded by {embedder.model_id}", flush=True)
    for size in sizes:
        rows = _records([team], size - total, rng)
        rate = _insert(world, rows)
        matrix = vectors_rng.standard_normal((len(rows), embedder.dim)).astype(np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        pending = [PendingRecord(team, r.id, r.text) for r in rows]
        for i in range(0, len(rows), 2000):
            world.store.store_record_embeddings(
                pending[i : i + 2000], encode_many(matrix[i : i + 2000]), embedder.model_id
            )
        total = size
        _analyze(engine)

        def keyword(query: str) -> int:
            return len(world.records.search(member, team, query, limit=10).hits)

        def both(query: str) -> int:
            return len(hybrid.search(member, team, query, limit=10).hits)

        queries = _queries(rng)
        known = dict(zip(queries, embedder.embed(queries), strict=True))
        remembered = _Remembered(embedder.model_id, embedder.dim, known)
        ranking_only = build_record_service(
            engine, identity, unlimited, RecordSearch(remembered, VectorCache())
        )

        def ranked(query: str, service: RecordService = ranking_only) -> int:
            return len(service.search(member, team, query, limit=10).hits)

        k50, k95, kn = _timed(keyword, queries)
        h50, h95, hn = _timed(both, queries)
        r50, r95, _ = _timed(ranked, queries)
        saved = _after_saves(world, keyword, queries[:SEARCHES_AFTER_SAVES], rng)
        total += SEARCHES_AFTER_SAVES
        print(
            f"[{label}] records={total:>6,} (bulk load {rate:>6,.0f} rows/s) | "
            f"keyword-only p50 {k50:6.2f} ms p95 {k95:6.2f} ms ({kn:.1f} results) | "
            f"hybrid p50 {h50:6.2f} ms p95 {h95:6.2f} ms ({hn:.1f} results) | "
            f"hybrid without the query's embedding p50 {r50:6.2f} ms p95 {r95:6.2f} ms | "
            f"keyword-only right after a save p50 {saved[0]:6.2f} ms p95 {saved[1]:6.2f} ms",
            flush=True,
        )
    embed_ms = [0.0] * 50
    for i in range(50):
        t0 = time.perf_counter()
        embedder.embed([f"query number {i} about deploys"])
        embed_ms[i] = (time.perf_counter() - t0) * 1000
    print(f"[{label}] one query embedded: p50 {statistics.median(embed_ms):.2f} ms", flush=True)
    engine.dispose()


# --- a search right after a delete or a purge --------------------------------------------


def _delete_one(world: BenchWorld, ids: list[str], rng: random.Random) -> None:
    team = world.teams[0][0]
    with world.store.writing() as tx:
        tx.delete(team, ids.pop(rng.randrange(len(ids))), datetime.now(UTC))


def _purge(world: BenchWorld, ids: list[str], rng: random.Random, n: int = 100) -> None:
    """Expire ``n`` of the team's records (as time would), then purge them."""
    gone = [ids.pop(rng.randrange(len(ids))) for _ in range(n)]
    with write_transaction(world.store.engine) as conn:
        conn.execute(
            records.update()
            .where(records.c.team_id == world.teams[0][0], records.c.id.in_(gone))
            .values(expires_at=datetime.now(UTC) - RETENTION)
        )
    world.records.purge_expired()


def _each_after(
    search: Callable[[str], int], queries: list[str], change: Callable[[], None]
) -> tuple[float, float]:
    """(p50 ms, p95 ms) of searches each right after ``change()`` (untimed)."""
    timings = []
    for query in queries:
        change()
        t0 = time.perf_counter()
        search(query)
        timings.append((time.perf_counter() - t0) * 1000)
    return _pct(timings)


def after_deletes(url: str, label: str, sizes: list[int]) -> None:
    from keepstone.db.vectors import encode_many
    from keepstone.identity.keys import load_key_hasher
    from keepstone.identity.service import IdentityService
    from keepstone.records.ratelimit import LocalRateLimiter
    from keepstone.search.cache import VectorCache
    from keepstone.service.record_search import RecordSearch
    from keepstone.service.records import RecordService, build_record_service

    engine = make_engine(url)
    rng, vectors_rng = random.Random(7), np.random.default_rng(7)
    world = bench_world(engine, 1)
    team, member = world.teams[0]
    identity = IdentityService(engine, load_key_hasher(engine, None))
    unlimited = LocalRateLimiter(rate=10**9, max_in_flight=10**9)
    model, dim, ids = "bench-random", 384, list[str]()

    def unit(n: int) -> np.ndarray:
        matrix = vectors_rng.standard_normal((n, dim)).astype(np.float32)
        return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)

    where = Path(str(KEEPSTONE.__file__)).parent
    print(f"[{label}] ({where}) the first search after a delete, a purge:", flush=True)
    for size in sizes:
        rows = _records([team], size - len(ids), rng)
        _insert(world, rows)
        ids.extend(r.id for r in rows)
        pending = [PendingRecord(team, r.id, r.text) for r in rows]
        for i in range(0, len(rows), 2000):
            batch = pending[i : i + 2000]
            world.store.store_record_embeddings(batch, encode_many(unit(len(batch))), model)
        _analyze(engine)
        queries = _queries(rng, SEARCHES_AFTER_DELETES + WARM)
        known = dict(zip(queries, unit(len(queries)), strict=True))
        search = RecordSearch(_Remembered(model, dim, known), VectorCache())
        hybrid = build_record_service(engine, identity, unlimited, search)
        figures = []
        for name, service in (("keyword-only", world.records), ("hybrid", hybrid)):

            def one(query: str, service: RecordService = service) -> int:
                return len(service.search(member, team, query, limit=10).hits)

            for query in queries[:WARM]:
                one(query)
            timed = queries[WARM:]
            deleted = _each_after(one, timed, lambda: _delete_one(world, ids, rng))
            purged = _each_after(one, timed[:10], lambda: _purge(world, ids, rng))
            figures.append(
                f"{name}: after a delete p50 {deleted[0]:7.2f} ms p95 {deleted[1]:7.2f} ms, "
                f"after a purge of 100 p50 {purged[0]:7.2f} ms p95 {purged[1]:7.2f} ms"
            )
        print(f"[{label}] records={size:>6,} | " + " | ".join(figures), flush=True)
    engine.dispose()


# --- saves ----------------------------------------------------------------------------------


def saves(url: str, label: str) -> None:
    """Save rates into a fresh team (nothing else in the database)."""
    engine = make_engine(url)
    rng = random.Random(11)
    world = bench_world(engine, 1)
    team = world.teams[0][0]
    world.records.save_many(team, [(_filler(rng), None) for _ in range(2000)])  # warm
    n = 500
    start = time.perf_counter()
    for _ in range(n):
        world.records.save_as_server(team, _filler(rng))
    single = n / (time.perf_counter() - start)
    texts = [[_filler(rng) for _ in range(n // 8)] for _ in range(8)]

    def one_thread(batch: list[str]) -> None:
        for text in batch:
            world.records.save_as_server(team, text)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one_thread, texts))
    grouped = sum(map(len, texts)) / (time.perf_counter() - start)
    items: list[tuple[str, str | None]] = [(_filler(rng), None) for _ in range(10_000)]
    start = time.perf_counter()
    world.records.save_many(team, items)
    many = len(items) / (time.perf_counter() - start)
    print(
        f"[{label}] saves ({_src()}): save_as_server() {single:,.0f}/s (one caller), "
        f"{grouped:,.0f}/s (8 threads, group commits), save_many() {many:,.0f} records/s "
        "(masked, analysed)",
        flush=True,
    )
    engine.dispose()


# --- many teams: keyword, as before -----------------------------------------------------------


def many_teams(url: str, label: str, sizes: list[int]) -> None:
    engine = make_engine(url)
    rng = random.Random(7)
    world = bench_world(engine, TEAMS)
    total = 0
    print(f"[{label}] {TEAMS} teams, keyword-only", flush=True)
    for size in sizes:
        per_team = (size - total) // TEAMS
        rate = _insert(world, _records([t for t, _ in world.teams], per_team, rng))
        total += per_team * TEAMS
        _analyze(engine)

        def search(query: str) -> int:
            team, member = rng.choice(world.teams)
            return len(world.records.search(member, team, query, limit=10).hits)

        p50, p95, hits = _latency(search, rng)
        print(
            f"[{label}] records={total:>9,} (bulk load {rate:>7,.0f} rows/s) | "
            f"search p50 {p50:6.2f} ms  p95 {p95:6.2f} ms (avg {hits:.1f} results; "
            "each team's index built on its first search, most of them cold)",
            flush=True,
        )
    engine.dispose()


# --- through a real server: the records figures --------------------------------------------


def _mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` and its live descendants so far (Linux
    ``/proc``): with ``--workers N`` the requests are served by the children."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:  # a process that ended meanwhile
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(_cpu_seconds(int(child)) for child in children)


def api_saves(database: str, label: str, args: argparse.Namespace, workers: int) -> None:
    """Saves through ``keepstone serve --workers workers`` from ``args.clients`` concurrent
    clients."""
    engine = make_engine(database)
    team = bench_world(engine, 1).teams[0][0]
    engine.dispose()
    rng = random.Random(11)
    home = Path(tempfile.mkdtemp(prefix="keepstone-bench-home-"))
    env = {
        "KEEPSTONE_SERVICE_TOKEN": SERVICE_TOKEN,
        "KEEPSTONE_INDEXER": "off",
        "KEEPSTONE_EMBEDDER": "none",
    }
    goal = SAVE_GOALS[label]
    with serve(database, home, workers=workers, **env) as served:
        warm = [[_filler(rng) for _ in range(25)] for _ in range(args.clients)]
        save_through(served.base, team, SERVICE_TOKEN, warm)
        texts = [[_filler(rng) for _ in range(args.saves)] for _ in range(args.clients)]
        cpu = _cpu_seconds(served.pid)
        rate, latencies = save_through(served.base, team, SERVICE_TOKEN, texts)
        cpu_ms = (_cpu_seconds(served.pid) - cpu) * 1000 / (args.saves * args.clients)
    p50, p95 = _pct([t * 1000 for t in latencies])
    print(
        f"[{label}] saves through keepstone serve, {_workers(workers)}, {args.clients} clients, "
        "durable at 201: "
        f"{rate:,.0f}/s (goal ≥ {goal:,}: {rate:,.0f} {_mark(rate >= goal)}); "
        f"latency p50 {p50:.1f} ms p95 {p95:.1f} ms; server CPU {cpu_ms:.2f} ms per save",
        flush=True,
    )


def _workers(n: int) -> str:
    return "1 worker" if n == 1 else f"{n} workers"


def api_search(database: str, label: str, scale: str, args: argparse.Namespace) -> None:
    """Keyword search through ``keepstone serve`` at ``scale`` (``20k`` or ``many``)."""
    many = scale == "many"
    teams, per_team = (TEAMS, args.records_many // TEAMS) if many else (args.teams_small, 20_000)
    print(f"[{label}] {teams:,} teams x {per_team:,} records, bulk-loaded:", flush=True)
    started = time.perf_counter()
    keys = fill(database, teams, per_team, vectors=False)
    loaded = teams * per_team / (time.perf_counter() - started)
    home = Path(tempfile.mkdtemp(prefix="keepstone-bench-home-"))
    rng = random.Random(11)
    with serve(database, home, KEEPSTONE_INDEXER="off", KEEPSTONE_EMBEDDER="none") as served:
        # One search of each team first: its index is built then, not in a timed search
        # (nor in the server's CPU per search).
        warm_all(served.base, keys)
        time.sleep(1.0)  # the limiter's window: the paced searches start with none taken
        cpu = _cpu_seconds(served.pid)
        p50, p95, hits = run_searches(served.base, keys, args.searches, rng, randomly=many)
        cpu_ms = (_cpu_seconds(served.pid) - cpu) * 1000 / (args.searches + WARM)
    where = (
        f"{teams * per_team:,} records over {teams:,} teams"
        if many
        else f"{per_team:,} records in one team"
    )
    print(
        f"[{label}] keyword search through keepstone serve, {where}: p50 {p50:.2f} ms, "
        f"p95 {p95:.2f} ms (goal p95 ≤ 10: {p95:.2f} {_mark(p95 <= 10)}); {hits:.1f} "
        f"hits/search; server CPU {cpu_ms:.2f} ms per search; loaded {loaded:,.0f} records/s",
        flush=True,
    )


def _with_postgres(base_url: str, run: Callable[[str], None]) -> None:
    with fresh_postgres(base_url) as url:
        run(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--postgres", default=os.environ.get("KEEPSTONE_TEST_POSTGRES_URL", ""))
    parser.add_argument("--parts", default="saves,search", help="API parts: saves,search")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument(
        "--workers",
        default="1,2",
        help="saves: the keepstone serve --workers counts to measure, in turn (default 1,2)",
    )
    parser.add_argument("--saves", type=int, default=500, help="saves per client")
    parser.add_argument("--searches", type=int, default=300)
    parser.add_argument("--teams-small", type=int, default=5)
    parser.add_argument("--records-many", type=int, default=1_000_000)
    parser.add_argument("--scales", default="20k,many", help="search scales: 20k,many")
    parser.add_argument("--in-process", action="store_true", help="the library-call figures")
    parser.add_argument("--sizes", default="", help="in-process search sizes")
    parser.add_argument("--saves-only", action="store_true", help="in-process save rates")
    parser.add_argument("--many-teams", action="store_true", help="in-process, 1,000 teams")
    parser.add_argument(
        "--deletes", action="store_true", help="in-process, a search after a delete or a purge"
    )
    parser.add_argument("--src", default="", help="run against another checkout's src")
    args = parser.parse_args()
    if not args.in_process:
        for backend in args.backends.split(","):
            if backend == "postgres" and not args.postgres:
                continue
            label = "sqlite" if backend == "sqlite" else "postgres"
            if "saves" in args.parts:
                for workers in (int(n) for n in args.workers.split(",")):
                    with database_for(backend, args.postgres) as database:
                        api_saves(database, label, args, workers)
            if "search" in args.parts:
                for scale in args.scales.split(","):
                    with database_for(backend, args.postgres) as database:
                        api_search(database, label, scale, args)
        return
    default = "10000,100000,1000000" if args.many_teams else "2000,20000"
    default = "10000,50000" if args.deletes else default
    sizes = [int(s) for s in (args.sizes or default).split(",")]

    def run(fresh: Callable[[Callable[[str], None]], None], label: str) -> None:
        """Each part in a database of its own (``fresh(part)`` makes one)."""
        if args.many_teams:
            fresh(lambda url: many_teams(url, label, sizes))
            return
        if args.deletes:
            fresh(lambda url: after_deletes(url, label, sizes))
            return
        if not args.saves_only:
            fresh(lambda url: one_team(url, label, sizes))
        fresh(lambda url: saves(url, label))

    def sqlite(part: Callable[[str], None]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            part(f"sqlite:///{tmp}/bench.db")

    backends = args.backends.split(",")
    if "sqlite" in backends:
        run(sqlite, "sqlite")
    if args.postgres and "postgres" in backends:
        run(lambda part: _with_postgres(args.postgres, part), "postgres")


if __name__ == "__main__":
    main()
