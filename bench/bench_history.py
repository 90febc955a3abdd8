"""The cost of document history: write latency and throughput with and without it, the
storage one version takes, and an ``as_of`` listing of a 2,000-document space.

Per adapter that declares ``history``: SQLite on a temporary file; PostgreSQL in a
throw-away schema when ``KEEPSTONE_BENCH_POSTGRES_URL`` (or ``KEEPSTONE_TEST_POSTGRES_URL``) is
set; the filesystem store when it declares ``history``.

"Without history" is the same store class with its history step removed in a subclass:
on the SQL stores ``keeps_history = False``, so the change statement of every write
(keepstone.store.sql_write) leaves out the version insert and the history counter's growth (the
same schema, the same statement otherwise); on the filesystem store too, so the sidecar's
insert inside every write is skipped (the newest version is still read). Each round writes
into a fresh store of each variant, the two taking turns every ten writes (the first of
each turn alternating), so both meet the same moments of a noisy machine and neither always
gets a warm cache.

    .venv/bin/python bench/bench_history.py                 # a few minutes
    .venv/bin/python bench/bench_history.py --docs 2000 --rounds 5

Prints figures and each goal as ``goal ≤ x: value ✓/✗``, a write goal with its rounds'
spread (each round's own with ÷ without, lowest to highest and the middle half: a figure
near the line within that spread is the machine's noise as much as the store's cost);
asserts nothing about time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent / "src"))

from keepstone.quota import GiB, Limits, MiB  # noqa: E402
from keepstone.spaces import SpaceRef, Visibility  # noqa: E402
from keepstone.store.base import MemoryStore  # noqa: E402

#: Roomy limits: the benchmark measures cost, not refusals or retention.
LIMITS = Limits(
    max_document=2 * MiB, team_quota=64 * GiB, history_versions=100_000, history_days=3650
).with_subcap(Visibility.PROJECT, 0)
REF = SpaceRef.build("project", "bench", tenant="bench", project="bench")

#: A store class → a fresh store of it in a directory (or schema) of its own.
Opener = Callable[[type[Any], str], MemoryStore]


def prose(size: int, rng: random.Random) -> str:
    """Markdown of ``size`` bytes of made-up words: compresses about as much as notes do
    (2-3x with zlib), unlike a repeated phrase."""
    out: list[str] = ["# notes\n"]
    n = len(out[0])
    while n < size:
        word = "".join(rng.choice("etaoinshrdlucmfwypvbgkqjxz") for _ in range(rng.randint(1, 9)))
        word += ".\n" if rng.random() < 0.08 else " "
        out.append(word)
        n += len(word)
    return "".join(out)[:size]


def without_history(cls: type[Any]) -> type[Any]:
    """``cls`` with its history step removed: every write path as it is, minus history."""
    if not hasattr(cls, "keeps_history"):
        raise SystemExit(f"{cls.__name__} has no keeps_history to turn off: fix the benchmark")
    return type(f"{cls.__name__}WithoutHistory", (cls,), {"keeps_history": False})


@dataclass
class Adapter:
    name: str
    cls: type[Any]
    open: Opener
    size: Callable[[MemoryStore], int]  # bytes the store occupies on disk


def sqlite_size(store: MemoryStore) -> int:
    import sqlalchemy as sa

    with store.engine.connect() as conn:  # type: ignore[attr-defined]
        pages = conn.execute(sa.text("PRAGMA page_count")).scalar_one()
        free = conn.execute(sa.text("PRAGMA freelist_count")).scalar_one()
        page = conn.execute(sa.text("PRAGMA page_size")).scalar_one()
    return int((pages - free) * page)


def postgres_size(store: MemoryStore) -> int:
    import sqlalchemy as sa

    query = sa.text(
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind = 'r'"
    )
    with store.engine.connect() as conn:  # type: ignore[attr-defined]
        return int(conn.execute(query).scalar_one())


def tree_size(root: str) -> Callable[[MemoryStore], int]:
    def size(_: MemoryStore) -> int:
        return sum(f.stat().st_size for f in Path(root).rglob("*") if f.is_file())

    return size


@contextlib.contextmanager
def adapters(tmp: str, only: list[str]) -> Iterator[list[Adapter]]:
    from keepstone.store.fs import FilesystemStore
    from keepstone.store.sql import SqlStore

    schemas: list[str] = []
    pg_url = os.environ.get("KEEPSTONE_BENCH_POSTGRES_URL") or os.environ.get(
        "KEEPSTONE_TEST_POSTGRES_URL", ""
    )
    found: list[Adapter] = []
    counter = iter(range(1_000_000))

    def fresh_dir() -> str:
        where = os.path.join(tmp, f"s{next(counter)}")
        os.mkdir(where)
        return where

    if "sqlite" in only:

        def open_sqlite(cls: type[Any], _: str) -> MemoryStore:
            store: MemoryStore = cls.open(f"sqlite:///{fresh_dir()}/keepstone.db", LIMITS)
            return store

        found.append(Adapter("sqlite", SqlStore, open_sqlite, sqlite_size))
    if "postgres" in only and pg_url:

        def open_pg(cls: type[Any], _: str) -> MemoryStore:
            schema = f"bench_{uuid.uuid4().hex[:12]}"
            schemas.append(schema)
            store: MemoryStore = cls.open(pg_url, LIMITS, schema=schema)
            return store

        found.append(Adapter("postgres", SqlStore, open_pg, postgres_size))
    if "fs" in only and "history" in FilesystemStore.capabilities:
        roots: dict[int, str] = {}

        def open_fs(cls: type[Any], _: str) -> MemoryStore:
            root = fresh_dir()
            store: MemoryStore = cls(root, LIMITS)
            roots[id(store)] = root
            return store

        def fs_size(store: MemoryStore) -> int:
            return tree_size(roots[id(store)])(store)

        found.append(Adapter("fs", FilesystemStore, open_fs, fs_size))
    try:
        yield found
    finally:
        if schemas:
            import psycopg

            with psycopg.connect(pg_url, autocommit=True) as conn:
                for schema in schemas:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


#: Writes each variant makes in a row before the other takes its turn (see write_round).
CHUNK = 10


def write_round(
    stores: dict[str, MemoryStore], docs: int, size: int, seed: int
) -> dict[str, tuple[list[float], float]]:
    """``docs`` creates then as many overwrites of ``size`` bytes into each store of
    ``stores`` (the same bodies, the same paths), the stores taking turns every
    :data:`CHUNK` writes, the first of each turn alternating: both variants meet the same
    moments of a noisy machine, where a round of one then a round of the other met
    different ones. Per variant: each write's seconds, and its writes per second (over
    the time of its own turns)."""
    rng = random.Random(seed)
    bodies = [prose(size, rng) for _ in range(2 * docs)]
    paths = [f"d{i // 100}/doc-{i}.md" for i in range(docs)]
    samples: dict[str, list[float]] = {name: [] for name in stores}
    busy: dict[str, float] = dict.fromkeys(stores, 0.0)
    names = list(stores)
    for turn, start in enumerate(range(0, len(bodies), CHUNK)):
        for name in names if turn % 2 == 0 else names[::-1]:
            store = stores[name]
            began = time.perf_counter()
            for i in range(start, min(start + CHUNK, len(bodies))):
                t0 = time.perf_counter()
                store.write(REF, paths[i % docs], bodies[i])
                samples[name].append(time.perf_counter() - t0)
            busy[name] += time.perf_counter() - began
    return {name: (samples[name], len(bodies) / busy[name]) for name in stores}


def bench_writes(a: Adapter, args: argparse.Namespace) -> dict[str, str]:
    """Median latency and throughput, with and without history, for 1 KB and 100 KB."""
    out: dict[str, str] = {}
    plain = without_history(a.cls)
    for label, size, docs in (("1 KB", 1024, args.docs), ("100 KB", 100 * 1024, args.large)):
        lat: dict[str, list[float]] = {"with": [], "without": []}
        over: dict[str, list[float]] = {"with": [], "without": []}
        rate: dict[str, list[float]] = {"with": [], "without": []}
        # Each round's own p50 and rate ratios: the spread printed beside each goal, so a
        # figure near the line can be told from the machine's noise.
        paired: dict[str, list[float]] = {"slower": [], "lower": []}
        for round_ in range(args.rounds):
            order = [("with", a.cls), ("without", plain)]
            stores = {
                variant: a.open(cls, variant)
                for variant, cls in (order if round_ % 2 == 0 else order[::-1])
            }
            try:
                got = write_round(stores, docs, size, seed=round_)
            finally:
                for store in stores.values():
                    store.close()
            p50: dict[str, float] = {}
            for variant, (samples, per_s) in got.items():
                lat[variant].extend(samples)
                over[variant].extend(samples[docs:])
                rate[variant].append(per_s)
                p50[variant] = statistics.median(samples)
            paired["slower"].append((p50["with"] / p50["without"] - 1) * 100)
            paired["lower"].append((1 - rate["with"][-1] / rate["without"][-1]) * 100)
        with_ms, without_ms = median_ms(lat["with"]), median_ms(lat["without"])
        with_rate, without_rate = (
            statistics.median(rate["with"]),
            statistics.median(rate["without"]),
        )
        slower = (with_ms / without_ms - 1) * 100
        out[f"write {label} p50 ms, without history"] = f"{without_ms:.3f}"
        out[f"write {label} p50 ms, with history"] = f"{with_ms:.3f}"
        out[f"write {label} p50 slower %"] = mark(slower, 15, "%", spread(paired["slower"]))
        # History costs an overwrite only (a create keeps no version): its share alone.
        alone = (median_ms(over["with"]) / median_ms(over["without"]) - 1) * 100
        out[f"overwrite {label} p50 slower % (overwrites alone, for scale)"] = f"{alone:.1f}%"
        out[f"write {label} writes/s, without history"] = f"{without_rate:,.0f}"
        out[f"write {label} writes/s, with history"] = f"{with_rate:,.0f}"
        out[f"write {label} throughput lower %"] = mark(
            (1 - with_rate / without_rate) * 100, 15, "%", spread(paired["lower"])
        )
    return out


def bench_frames(a: Adapter, args: argparse.Namespace) -> dict[str, str]:
    """SQLite: the WAL frames (pages) one 1 KB overwrite commits, with and without history,
    checkpoints off: what the history's cost is made of, the same on any machine."""
    from sqlalchemy import event

    out: dict[str, str] = {}
    for variant, cls in (("without", without_history(a.cls)), ("with", a.cls)):
        store = a.open(cls, variant)
        try:
            engine = store.engine  # type: ignore[attr-defined]

            @event.listens_for(engine, "connect")
            def _no_checkpoints(dbapi_conn: Any, _record: Any) -> None:
                dbapi_conn.execute("PRAGMA wal_autocheckpoint=0")

            engine.dispose()
            wal = f"{engine.url.database}-wal"
            rng = random.Random(3)
            paths = [f"d{i // 100}/doc-{i}.md" for i in range(args.docs)]
            for path in paths:
                store.write(REF, path, prose(1024, rng))
            with engine.connect() as conn:
                page = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
            # The bench's bodies are all 1,024 bytes, so an overwrite leaves the live
            # counters as they were; an edit that changes the length rewrites them too.
            for case, jitter in (("", 0), (" that changes its length", 64)):
                before = os.path.getsize(wal)
                for path in paths:
                    store.write(REF, path, prose(1024 + rng.randint(-jitter, jitter), rng))
                frames = (os.path.getsize(wal) - before) / (page + 24) / len(paths)
                out[f"WAL frames per 1 KB overwrite{case}, {variant} history"] = f"{frames:.2f}"
        finally:
            store.close()
    return out


def stored_bytes(store: MemoryStore, path: str) -> int:
    """The ``stored_bytes`` of the newest version of ``path`` (SQL stores)."""
    import sqlalchemy as sa

    from keepstone.store.sql_schema import memory_document_versions as V

    with store.engine.connect() as conn:  # type: ignore[attr-defined]
        return int(
            conn.execute(
                sa.select(V.c.stored_bytes)
                .where(V.c.path == path)
                .order_by(V.c.version.desc())
                .limit(1)
            ).scalar_one()
        )


def bench_storage(a: Adapter, args: argparse.Namespace) -> dict[str, str]:
    """A 100 KB document edited by 1 KB ``args.edits`` times: the bytes one version takes."""
    rng = random.Random(5)
    store = a.open(a.cls, "with")
    try:
        text = prose(100 * 1024, rng)
        store.write(REF, "big.md", text)
        before = a.size(store)
        version_bytes: list[int] = []
        for _ in range(args.edits):
            at = rng.randrange(0, len(text) - 1024)
            text = text[:at] + prose(1024, rng) + text[at + 1024 :]
            store.write(REF, "big.md", text)
            if a.name != "fs":
                version_bytes.append(stored_bytes(store, "big.md"))
        growth = (a.size(store) - before) / args.edits
    finally:
        store.close()
    out: dict[str, str] = {}
    if version_bytes:
        out["1 KB edit of 100 KB: stored_bytes/version"] = (
            f"{statistics.median(version_bytes):,.0f} B"
        )
    out["1 KB edit of 100 KB: storage growth/edit"] = f"{growth:,.0f} B"
    return out


def bench_as_of(a: Adapter, args: argparse.Namespace) -> dict[str, str]:
    """``list_as_of`` of a 2,000-document space with some history: median of ``args.lists``."""
    rng = random.Random(9)
    store = a.open(a.cls, "with")
    try:
        paths = [f"d{i // 100}/doc-{i}.md" for i in range(args.space)]
        for path in paths:
            store.write(REF, path, prose(1024, rng))
        middle = datetime.now(UTC)
        time.sleep(0.01)
        for path in paths[::2]:  # half the documents get a second version
            store.write(REF, path, prose(1024, rng))
        for path in paths[::20]:  # a few are deleted
            store.delete(REF, path)
        results: dict[str, str] = {}
        for label, at in (("before edits", middle), ("now", datetime.now(UTC))):
            samples: list[float] = []
            count = 0
            for _ in range(args.lists):
                t0 = time.perf_counter()
                count = len(store.list_as_of(REF, at))
                samples.append(time.perf_counter() - t0)
            results[f"list_as_of {args.space:,} docs ({label}) p50 ms"] = mark(
                median_ms(samples), 50, " ms", f" ({count:,} listed)"
            )
        live: list[float] = []
        for _ in range(args.lists):
            t0 = time.perf_counter()
            store.list(REF)
            live.append(time.perf_counter() - t0)
        results[f"list {args.space:,} docs (live, for scale) p50 ms"] = f"{median_ms(live):.1f}"
    finally:
        store.close()
    return results


def spread(per_round: list[float]) -> str:
    """The rounds' own figures, lowest to highest, with their middle half."""
    if len(per_round) < 4:
        return ""
    q1, _, q3 = statistics.quantiles(per_round, n=4)
    low, high = min(per_round), max(per_round)
    return f" (rounds {low:.1f} to {high:.1f}, middle half {q1:.1f} to {q3:.1f})"


def mark(value: float, goal: float, unit: str, note: str = "") -> str:
    return f"goal ≤ {goal:g}{unit}: {value:.1f}{unit} {'✓' if value <= goal else '✗'}{note}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=500, help="1 KB documents per round")
    parser.add_argument(
        "--large",
        type=int,
        default=150,
        help="100 KB documents per round (40 gave figures ±10 points apart)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=8,
        help="rounds per variant (the throughput is their rates' median: 4 moved it 3 points)",
    )
    parser.add_argument("--edits", type=int, default=20, help="1 KB edits of the 100 KB doc")
    parser.add_argument("--space", type=int, default=2000, help="documents of the as_of space")
    parser.add_argument("--lists", type=int, default=20, help="as_of listings timed")
    parser.add_argument("--adapters", default="sqlite,postgres,fs", help="comma-separated")
    args = parser.parse_args(argv)
    only = [a.strip() for a in args.adapters.split(",") if a.strip()]
    with tempfile.TemporaryDirectory(prefix="keepstone-bench-history-") as tmp:
        with adapters(tmp, only) as found:
            for a in found:
                start = time.perf_counter()
                figures = {**bench_writes(a, args), **bench_storage(a, args)}
                if a.name == "sqlite":
                    figures.update(bench_frames(a, args))
                figures.update(bench_as_of(a, args))
                print(f"\n## {a.name} ({time.perf_counter() - start:.0f} s)")
                width = max(len(k) for k in figures)
                for key, value in figures.items():
                    print(f"{key.ljust(width)}  {value}")
    print(
        f"\nwrites: {args.docs} creates + {args.docs} overwrites of 1 KB and {args.large} + "
        f"{args.large} of 100 KB per variant and round, {args.rounds} rounds; without "
        "history = the same store class with its history step removed"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
