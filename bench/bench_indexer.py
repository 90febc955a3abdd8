"""The background indexer against request handling, through a real ``keepstone serve``.
Prints figures; asserts nothing.

    python bench/bench_indexer.py                          # SQLite file
    python bench/bench_indexer.py --postgres postgresql://postgres@127.0.0.1:5432/test

(a) Records saved per second through the API (``POST /api/internal/teams/{team}/memory``
    with the service token, ``--clients`` threads, ``--seconds`` per round), a server with
    ``KEEPSTONE_INDEXER=off`` and one with it on, alternating, ``--rounds`` rounds each, medians
    and their ratio. In the "on" rounds the indexer is kept *busy* for the whole round: a
    backlog of documents is written straight into the database just before, and the round
    starts once the indexer stores vectors (the worst case for the saves: the embedder
    runs flat out beside them); the rows it still had pending at the end are printed, so
    a round where it went idle shows.
(b) Records: the time from a save's 201 to its vector being committed, at 100 saves/s
    (``--saves`` saves), read from the database every 10 ms — only when the record store
    can be embedded (``claim_pending_records``); otherwise said and skipped.
(c) Documents: the same for document writes (``PUT`` through the API, one chunk each),
    then a check that a sample of them is found by meaning through
    ``GET /api/memory/search``.
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
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent / "src"))
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402
import sqlalchemy as sa  # noqa: E402

import serving  # noqa: E402
from keepstone.db import make_engine  # noqa: E402
from keepstone.identity.keys import load_key_hasher  # noqa: E402
from keepstone.identity.service import IdentityService  # noqa: E402
from keepstone.records.sql import SqlRecordStore  # noqa: E402
from keepstone.schema import upgrade_all  # noqa: E402
from keepstone.spaces import SpaceRef  # noqa: E402
from keepstone.store.http import HttpMemoryStore  # noqa: E402
from keepstone.store.sql import SqlStore  # noqa: E402
from keepstone.store.sql_schema import memory_chunks  # noqa: E402
from make_records_corpus import COMPONENTS, PROBLEMS  # noqa: E402
from records_world import bench_world  # noqa: E402

SERVICE = "bench-service-token"
MODEL = "all-MiniLM-L6-v2"
SPACE = SpaceRef.build("project", "notes", project="bench")


@contextmanager
def serve(database: str, home: Path, *, indexer: bool, pin: bool = False) -> Iterator[str]:
    with serving.serve(
        database,
        home,
        pin=pin,
        KEEPSTONE_SERVICE_TOKEN=SERVICE,
        KEEPSTONE_INDEXER="on" if indexer else "off",
    ) as served:
        yield served.base


def record_text(rng: random.Random) -> str:
    return (
        f"Fixed the {rng.choice(PROBLEMS)} in the {rng.choice(COMPONENTS)} "
        f"after the {rng.choice(COMPONENTS)} change; build {rng.randrange(10**6)}"
    )


def note(i: int, rng: random.Random) -> str:
    return (
        f"# Note {i}\n\nInvestigated the {rng.choice(PROBLEMS)} in the "
        f"{rng.choice(COMPONENTS)}; ticket {rng.randrange(10**6)}.\n"
    )


def saves_per_second(base: str, team: str, clients: int, seconds: float) -> float:
    """Records saved per second by ``clients`` threads over ``seconds``."""
    counts = [0] * clients
    stop = time.monotonic() + seconds

    def client(n: int) -> None:
        rng = random.Random(n)
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {SERVICE}"}) as c:
            while time.monotonic() < stop:
                r = c.post(f"/api/internal/teams/{team}/memory", json={"text": record_text(rng)})
                if r.status_code != 201:
                    raise SystemExit(f"save answered {r.status_code}: {r.text}")
                counts[n] += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - started)


def pending_chunks(database: str) -> int:
    store = SqlStore.open(database)
    try:
        return len(store.pending_chunks(100_000, MODEL))
    finally:
        store.close()


def write_backlog(
    database: str, team: str, n: int, rng: random.Random, *, prechunk: bool = False
) -> None:
    """``n`` one-chunk documents straight into the database: work for the indexer
    (``prechunk``: chunked here too, so the indexer only embeds)."""
    store = SqlStore.open(database)
    backlog = SpaceRef.build("project", "backlog", tenant=team, project="bench")
    try:
        tag = uuid.uuid4().hex[:8]
        for i in range(n):
            store.write(backlog, f"{tag}/{i}.md", note(i, rng))
        if prechunk:
            store.backfill_chunks()
    finally:
        store.close()


def embedding_started(database: str, timeout: float = 120) -> None:
    """Wait until the indexer stores vectors (its process has loaded the model and
    chunked the backlog): the rounds measure saves beside the embedding itself."""
    engine = make_engine(database)
    done = sa.select(sa.func.count()).where(memory_chunks.c.model == MODEL)
    try:
        with engine.connect() as conn:
            before = conn.execute(done).scalar_one()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                if conn.execute(done).scalar_one() > before:
                    return
            time.sleep(0.05)
    finally:
        engine.dispose()
    raise SystemExit("the indexer did not start embedding")


def part_a(database: str, home: Path, team: str, args: argparse.Namespace) -> None:
    rng = random.Random(1)
    off: list[float] = []
    on: list[float] = []
    left: list[int] = []
    for _ in range(args.rounds):
        with serve(database, home, indexer=False, pin=args.pin) as base:
            off.append(saves_per_second(base, team, args.clients, args.seconds))
        write_backlog(database, team, args.backlog, rng, prechunk=args.prechunk)
        with serve(database, home, indexer=True, pin=args.pin) as base:
            embedding_started(database)  # past the child's start and the backlog's chunking
            on.append(saves_per_second(base, team, args.clients, args.seconds))
            left.append(pending_chunks(database))
    m_off, m_on = statistics.median(off), statistics.median(on)
    print(f"(a) records saved/s, {args.clients} client threads, {args.seconds:.0f} s rounds")
    print(f"    indexer off: {' '.join(f'{x:.0f}' for x in off)}  median {m_off:.0f}")
    print(f"    indexer on (busy): {' '.join(f'{x:.0f}' for x in on)}  median {m_on:.0f}")
    print(f"    ratio on/off {m_on / m_off:.3f}; chunks still pending at each round's end: {left}")


def paced(n: int, rate: float, action: Any) -> list[float]:
    """Call ``action(i)`` ``n`` times at ``rate`` per second; the time each returned."""
    done: list[float] = []
    start = time.monotonic()
    for i in range(n):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        action(i)
        done.append(time.monotonic())
    return done


class Watcher:
    """Polls the database every 10 ms, while the saves go on, for which of the keys
    saved so far have their vector (``query(conn, keys)`` lists those), and notes when
    each first shows."""

    def __init__(self, database: str, query: Any) -> None:
        self.engine = make_engine(database)
        self.query = query
        self.keys: list[Any] = []  # appended by the saving thread
        self.seen: dict[Any, float] = {}
        self.saving = True
        self.thread = threading.Thread(target=self._poll)
        self.thread.start()

    def _poll(self) -> None:
        deadline = None
        while True:
            keys = [k for k in list(self.keys) if k not in self.seen]
            if keys:
                with self.engine.connect() as conn:
                    found = set(self.query(conn, keys))
                now = time.monotonic()
                for key in found:
                    self.seen.setdefault(key, now)
            elif not self.saving:
                return
            if not self.saving:
                deadline = deadline or time.monotonic() + 60
                if time.monotonic() > deadline:
                    return
            time.sleep(0.01)

    def finish(self) -> dict[Any, float]:
        self.saving = False
        self.thread.join()
        self.engine.dispose()
        return self.seen


def latency_report(label: str, saved: list[float], seen: list[float | None]) -> None:
    lat = sorted(s - d for d, s in zip(saved, seen, strict=True) if s is not None)
    missing = sum(s is None for s in seen)
    if not lat:
        print(f"    {label}: nothing embedded")
        return
    p50 = lat[len(lat) // 2]
    p95 = lat[min(len(lat) - 1, int(len(lat) * 0.95))]
    print(
        f"    {label}: p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, max "
        f"{lat[-1] * 1000:.0f} ms over {len(lat)} saves" + (f", {missing} never" if missing else "")
    )


def wait_idle(database: str, timeout: float = 600) -> None:
    """Until the indexer has embedded everything pending (the earlier parts' backlog)."""
    from keepstone.records.schema import records

    engine = make_engine(database)
    left = sa.or_(records.c.model.is_(None), records.c.model != MODEL)
    pending_records = sa.select(sa.func.count()).select_from(records).where(left)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                n = conn.execute(pending_records).scalar_one()
            if not n and not pending_chunks(database):
                return
            time.sleep(0.5)
    finally:
        engine.dispose()
    raise SystemExit("the indexer did not catch up with the backlog")


def part_b(database: str, home: Path, team: str, args: argparse.Namespace) -> None:
    print(f"(b) records: save -> vector committed, {args.saves} saves at {args.rate:.0f}/s")
    if not hasattr(SqlRecordStore, "claim_pending_records"):
        print("    skipped: team records have no vectors yet (claim_pending_records is missing)")
        return
    from keepstone.records import schema as rschema

    records = rschema.records
    rng = random.Random(2)
    with serve(database, home, indexer=True) as base:
        wait_idle(database)
        watcher = Watcher(
            database,
            lambda conn, keys: conn.execute(
                sa.select(records.c.id).where(records.c.model == MODEL, records.c.id.in_(keys))
            ).scalars(),
        )
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {SERVICE}"}) as c:

            def save(_i: int) -> None:
                r = c.post(f"/api/internal/teams/{team}/memory", json={"text": record_text(rng)})
                watcher.keys.append(r.json()["id"])

            saved = paced(args.saves, args.rate, save)
        seen = watcher.finish()
    latency_report("records", saved, [seen.get(i) for i in watcher.keys])


def part_c(database: str, home: Path, key: str, args: argparse.Namespace) -> None:
    print(f"(c) documents: save -> vector committed, {args.saves} writes at {args.rate:.0f}/s")
    rng = random.Random(3)
    tag = uuid.uuid4().hex[:8]
    paths = [f"{tag}/{i}.md" for i in range(args.saves)]
    contents = [note(i, rng) for i in range(args.saves)]
    with serve(database, home, indexer=True) as base:
        wait_idle(database)
        client = HttpMemoryStore(base, key)
        chunks = memory_chunks.c
        watcher = Watcher(
            database,
            lambda conn, keys: conn.execute(
                sa.select(chunks.path).where(chunks.model == MODEL, chunks.path.in_(keys))
            ).scalars(),
        )

        def write(i: int) -> None:
            client.write(SPACE, paths[i], contents[i])
            watcher.keys.append(paths[i])

        saved = paced(args.saves, args.rate, write)
        seen = watcher.finish()
        latency_report("documents", saved, [seen.get(p) for p in paths])
        sample = random.Random(4).sample(range(args.saves), 20)
        by_meaning = 0
        for i in sample:
            text = contents[i].split("\n\n", 1)[1].strip()
            hits = client.search(SPACE, text, 10)
            by_meaning += any(h.path == paths[i] and "meaning" in h.matched for h in hits)
        print(f"    then by meaning through the API: {by_meaning}/{len(sample)} sampled documents")
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", metavar="URL", help="a PostgreSQL server to use")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--backlog", type=int, default=1500, help="documents per 'on' round")
    parser.add_argument("--saves", type=int, default=300)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--only", choices=["a", "b", "c"], action="append")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="(a): clients on CPU 0, the server (and its indexer) on CPU 1 (Linux taskset)",
    )
    parser.add_argument(
        "--prechunk",
        action="store_true",
        help="(a): chunk the backlog before the round, so the indexer only embeds",
    )
    args = parser.parse_args()
    if args.pin:
        os.sched_setaffinity(0, {0})
    parts = set(args.only or ["a", "b", "c"])

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        admin_url = args.postgres
        if admin_url:
            name = f"bench_{uuid.uuid4().hex[:12]}"
            with psycopg.connect(admin_url, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            database = f"{admin_url.rpartition('/')[0]}/{name}"
        else:
            database = f"sqlite:///{home / 'bench.db'}"
        try:
            engine = make_engine(database)
            upgrade_all(engine)
            world = bench_world(engine, 1)
            team, member = world.teams[0]
            assert member.user_id is not None
            key = IdentityService(engine, load_key_hasher(engine, None)).create_api_key(
                member.user_id, team
            )[1]
            engine.dispose()
            print(f"database: {'PostgreSQL' if admin_url else 'SQLite'}; cores: {os.cpu_count()}")
            if "a" in parts:
                part_a(database, home, team, args)
            if "b" in parts:
                part_b(database, home, team, args)
            if "c" in parts:
                part_c(database, home, key, args)
        finally:
            if admin_url:
                with psycopg.connect(admin_url, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
