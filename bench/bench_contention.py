"""Writers contending for the same two paths through a real ``keepstone serve --workers 2``:
moves A→B and B→A, creates and replacements of A and B, and deletes of them, all at once
(docs/storage.md, "Locks"). A path with no document yet has no row to lock first, so on
PostgreSQL such writers can wait on each other in a cycle, which PostgreSQL ends by rolling
one back; the store sends that write again. Prints every answer's status, counted, and the
5xx among them.

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


def contend(base: str, key: str, seconds: float) -> Counter[str]:
    """Every answer's ``operation status``, counted, over ``seconds`` of contention."""
    seen: Counter[str] = Counter()
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    headers = {"Authorization": f"Bearer {key}"}

    def worker(op: str, send: Callable[[httpx.Client], httpx.Response]) -> None:
        with httpx.Client(base_url=base, headers=headers, timeout=120) as client:
            while time.monotonic() < stop:
                status = send(client).status_code
                with lock:
                    seen[f"{op} {status}"] += 1

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
    return seen


def run(database: str, src: Path | None, seconds: float) -> Counter[str]:
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
            with tempfile.TemporaryDirectory() as tmp:
                if kind == "sqlite":
                    seen = run(f"sqlite:///{tmp}/keepstone.db", src, args.seconds)
                else:
                    assert pg is not None
                    with fresh_postgres(pg, "contention") as url:
                        seen = run(url, src, args.seconds)
            failed = sum(n for k, n in seen.items() if k.split()[1].startswith("5"))
            answers = ", ".join(f"{k}: {n}" for k, n in sorted(seen.items()))
            print(f"{kind:<8} {name:<4} {args.seconds:g} s  5xx: {failed}  ({answers})", flush=True)


if __name__ == "__main__":
    main()
