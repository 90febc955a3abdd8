"""What one 1 KB document write costs the SQL stores in CPU, in process (no HTTP, no
threads), and the share of it that the time-ordered indexes take: the activity feed's
(a space's documents and versions newest first) and the indexer's backlog (documents not
yet chunked). Each of those indexes is one more B-tree entry that every write replaces.

Per round, two fresh stores of each engine: one as the product makes it, one with those
indexes dropped (the same schema and statements otherwise); each writes ``--docs``
documents (creates) and then writes them all again (overwrites, which keep a version
each), the two variants taking turns so both meet the same moments of a noisy machine.
CPU time (``time.process_time``) leaves the disk's fsync waits out; wall time keeps them.

    .venv/bin/python bench/bench_write_cost.py                  # about a minute
    .venv/bin/python bench/bench_write_cost.py --docs 2000 --rounds 5 --adapters sqlite

PostgreSQL runs in a throw-away schema when ``KEEPSTONE_TEST_POSTGRES_URL`` is set (its CPU
figure is the client's: the server's work shows in wall time only), and the share of the
document rows' updates it made in place is printed for each variant ("HOT upd.": a HOT
update writes no index entry); "HOT chunked" is the same share in a small store whose
documents were chunked between their creation and their overwrite (as a space that was
searched), as made, without the feed's index of documents alone, and without all three.
"empty tx": the CPU of an empty write transaction, what every write pays before its
statements. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sqlalchemy import text

from bench_store import BENCH_LIMITS, body, drop_schema
from keepstone.db import write_transaction
from keepstone.spaces import SpaceRef
from keepstone.store.sql import SqlStore

#: The indexes every write keeps ordered by time, beside the primary keys.
TIME_INDEXES = (
    "ix_memory_documents_space_recent",
    "ix_memory_document_versions_space_recent",
    "ix_memory_documents_unchunked",
)
VARIANTS = ("as made", "without them")
#: What each probe of HOT updates after chunking drops (the feed's index of documents
#: alone, then all three).
CHUNKED_VARIANTS = {"as made": (), "no feed idx": TIME_INDEXES[:1], "without them": TIME_INDEXES}


def drop_indexes(store: Any, names: tuple[str, ...]) -> None:
    """Drop ``names``; refuse to measure a schema that no longer has them."""
    with store.engine.begin() as conn:
        for name in names:
            conn.execute(text(f"DROP INDEX {name}"))


def updates(url: str, schema: str, past: int = 0) -> tuple[int, int]:
    """How many document-row updates ``schema`` has seen, and how many of them PostgreSQL
    made in place (HOT: no index entry written), once more than ``past``: read after the
    store's connections have closed (a backend reports its counts as it exits; the wait is
    for that)."""
    import psycopg

    for _ in range(50):
        time.sleep(0.1)
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                " WHERE schemaname = %s AND relname = 'memory_documents'",
                (schema,),
            ).fetchone()
        if row is not None and row[0] > past:
            return int(row[0]), int(row[1])
    return past, 0


def hot_share(url: str, schema: str) -> float:
    """The share of :func:`updates` made in place (NaN: none reported)."""
    upd, hot = updates(url, schema)
    return hot / upd if upd else float("nan")


@contextlib.contextmanager
def opened(engine: str, tmp: str, dropped: tuple[str, ...], hot: list[float]) -> Iterator[Any]:
    """A fresh store of ``engine`` without the indexes ``dropped``; on PostgreSQL its
    :func:`hot_share` appended to ``hot`` once closed."""
    schema = ""
    if engine == "sqlite":
        store = SqlStore.open(f"sqlite:///{tmp}/{uuid.uuid4().hex}.db", BENCH_LIMITS)
    else:
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        store = SqlStore.open(
            os.environ["KEEPSTONE_TEST_POSTGRES_URL"], BENCH_LIMITS, schema=schema
        )
    try:
        drop_indexes(store, dropped)
        yield store
    finally:
        store.close()
        if schema:
            hot.append(hot_share(os.environ["KEEPSTONE_TEST_POSTGRES_URL"], schema))
            drop_schema(os.environ["KEEPSTONE_TEST_POSTGRES_URL"], schema)


def per_write(store: Any, texts: list[str], first: int, count: int) -> tuple[float, float]:
    """CPU and wall microseconds per write of ``d/<i>.md`` (i below ``count``) with
    ``texts[first + i]``, in one space."""
    ref = SpaceRef.build("project", "cost", tenant="bench", project="bench")
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(count):
        store.write(ref, f"d/{i}.md", texts[first + i])
    return (
        (time.process_time() - cpu) / count * 1e6,
        (time.perf_counter() - wall) / count * 1e6,
    )


def empty_transaction(store: Any, count: int = 5000) -> float:
    """CPU microseconds of an empty write transaction (not synced): what every write pays
    before its statements (on SQLite the writers' turn and their shared connection)."""
    with write_transaction(store.engine, durable=False):
        pass
    cpu = time.process_time()
    for _ in range(count):
        with write_transaction(store.engine, durable=False):
            pass
    return (time.process_time() - cpu) / count * 1e6


def one_round(engine: str, tmp: str, docs: int, first: int) -> dict[str, list[float]]:
    """Both variants once, ``first`` of them first; figures keyed by variant and phase."""
    out: dict[str, list[float]] = {}
    order = VARIANTS[first:] + VARIANTS[:first]
    for variant in order:
        hot: list[float] = []
        dropped = () if variant == VARIANTS[0] else TIME_INDEXES
        with opened(engine, tmp, dropped, hot) as store:
            texts = [body(1024, i) for i in range(2 * docs)]
            per_write(store, texts, 0, 20)  # warm the connection and the statements
            create = per_write(store, texts, 20, docs - 20)
            again = per_write(store, texts, docs, docs)
            if variant == VARIANTS[0]:  # the indexes play no part in an empty one
                out[f"{variant} empty"] = [empty_transaction(store)]
        out[f"{variant} create"] = list(create)
        out[f"{variant} overwrite"] = list(again)
        out[f"{variant} hot"] = hot
    return out


def hot_once_chunked(dropped: tuple[str, ...], docs: int = 300) -> float:
    """The share of overwrites made in place in a PostgreSQL store without the indexes
    ``dropped`` whose documents were chunked (as the first search of a space does) between
    their creation and their overwrite, the store's usual state: each overwrite changes the
    indexer's ``chunked`` flag back, and its backlog's index is partial on that flag, so
    that index alone keeps the update from being HOT."""
    url = os.environ["KEEPSTONE_TEST_POSTGRES_URL"]
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    ref = SpaceRef.build("project", "cost", tenant="bench", project="bench")
    try:
        before = (0, 0)
        for seed in (0, docs):  # creates and chunking, then overwrites: a store each
            store = SqlStore.open(url, BENCH_LIMITS, schema=schema)
            try:
                if not seed:
                    drop_indexes(store, dropped)
                for i in range(docs):
                    store.write(ref, f"d/{i}.md", body(1024, seed + i))
                if not seed:
                    store.reconcile(ref)
            finally:
                store.close()
            if not seed:
                before = updates(url, schema)
        after = updates(url, schema, before[0])
        made = after[0] - before[0]
        return (after[1] - before[1]) / made if made else float("nan")
    finally:
        drop_schema(url, schema)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=1000, help="documents per round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--adapters", default="sqlite,postgres")
    args = parser.parse_args(argv)
    engines = [a for a in args.adapters.split(",") if a == "sqlite"]
    if "postgres" in args.adapters and os.environ.get("KEEPSTONE_TEST_POSTGRES_URL"):
        engines.append("postgres")
    print(f"{args.docs} x 1 KB creates, then as many overwrites; {args.rounds} rounds; medians")
    print(f"time indexes: {', '.join(TIME_INDEXES)}\n")
    header = (
        f"{'engine':<9} {'phase':<12} {'variant':<13} {'CPU µs/write':>13} {'wall µs/write':>14}"
    )
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="keepstone-bench-") as tmp:
        for engine in engines:
            rounds = [one_round(engine, tmp, args.docs, n % 2) for n in range(args.rounds)]
            for phase in ("create", "overwrite"):
                cpu: dict[str, float] = {}
                for variant in VARIANTS:
                    key = f"{variant} {phase}"
                    cpu[variant] = statistics.median(r[key][0] for r in rounds)
                    wall = statistics.median(r[key][1] for r in rounds)
                    row = f"{engine:<9} {phase:<12} {variant:<13}"
                    print(f"{row} {cpu[variant]:>13.0f} {wall:>14.0f}")
                share = 1 - cpu[VARIANTS[1]] / cpu[VARIANTS[0]]
                print(f"{engine:<9} {phase:<12} {'their share':<13} {share:>12.0%}")
            empty = statistics.median(r[f"{VARIANTS[0]} empty"][0] for r in rounds)
            print(f"{engine:<9} {'empty tx':<12} {VARIANTS[0]:<13} {empty:>13.1f}")
            if engine == "postgres":
                # Indexing updated_at makes every overwrite of a document row write an
                # entry in each of its indexes, where an update in place wrote none.
                for variant in VARIANTS:
                    hot = statistics.median(r[f"{variant} hot"][0] for r in rounds)
                    print(f"{engine:<9} {'HOT upd.':<12} {variant:<13} {hot:>13.0%}")
                for variant, dropped in CHUNKED_VARIANTS.items():
                    hot = hot_once_chunked(dropped)
                    print(f"{engine:<9} {'HOT chunked':<12} {variant:<13} {hot:>13.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
