"""Soak: a real ``keepstone serve`` under mixed document traffic for minutes, watched for what
a short test does not see — a request that never ends, a 5xx, memory that grows, a counter
that drifts from its documents.

Several client threads, each with a member's API key of one of three teams, pick among
writes, reads, edits, moves, deletes, restores, listings, searches, version listings, the
activity feed and usage, over a few spaces and thirty paths each, so that they meet on the
same documents while the server's indexer embeds behind them. Every minute it prints the
requests so far and each server process's resident memory; at the end, each operation's
answers by status, and whether every space's ``used_bytes`` equals the sum of its listed
documents. It exits non-zero on a 5xx, a request past ``--timeout`` or a counter that
differs: the figures are the report, those three the verdict.

On PostgreSQL (``--database`` a URL, or a fresh database on ``KEEPSTONE_BENCH_POSTGRES_URL`` /
``KEEPSTONE_TEST_POSTGRES_URL`` when set) it found the server stopping every write of a
space for good under moves while its indexer embedded (docs/search.md, "A claim is never
part of a cycle of waits").

    .venv/bin/python bench/bench_soak.py [--seconds 300] [--clients 8] [--workers 2]
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving import fresh_postgres, serve

ADMIN = "soak-admin-token-0123456789abcdef"
WORDS = (
    "deploy rollback database index cache queue latency billing auth token retry schema "
    "migration worker backup restore alert dashboard"
).split()
#: The operations, by how often a client picks each.
WEIGHTS = {
    "write": 30,
    "read": 20,
    "edit": 8,
    "move": 5,
    "delete": 5,
    "restore": 4,
    "list": 8,
    "search": 10,
    "versions": 5,
    "activity": 3,
    "usage": 3,
}
DOC = "/api/memory/doc"


def _text(rng: random.Random) -> str:
    return "# Note\n\n" + " ".join(rng.choice(WORDS) for _ in range(rng.randrange(5, 400))) + "\n"


def _path(rng: random.Random) -> str:
    return f"d{rng.randrange(4)}/n{rng.randrange(30)}.md"


def send(c: httpx.Client, op: str, space: dict[str, str], rng: random.Random) -> httpx.Response:
    """One request of ``op`` on a random path of ``space``."""
    doc = {**space, "path": _path(rng)}
    match op:
        case "write":
            return c.put(DOC, params=doc, json={"content": _text(rng)})
        case "read":
            return c.get(DOC, params=doc)
        case "edit":
            return c.post(f"{DOC}/edit", params=doc, json={"insert_line": 0, "text": "edited"})
        case "move":
            overwrite = str(rng.random() < 0.5).lower()
            return c.post(f"{DOC}/move", params={**doc, "to": _path(rng), "overwrite": overwrite})
        case "delete":
            return c.delete(DOC, params=doc)
        case "restore":
            return c.post(f"{DOC}/restore", params={**doc, "version": rng.randrange(1, 4)})
        case "list":
            return c.get("/api/memory/docs", params={**space, "limit": 50})
        case "search":
            return c.get(
                "/api/memory/search", params={**space, "q": " ".join(rng.sample(WORDS, 2))}
            )
        case "versions":
            return c.get(f"{DOC}/versions", params=doc)
        case "activity":
            return c.get("/api/memory/activity", params=space)
    return c.get("/api/memory/usage", params=space)


def spaces_of(client: int) -> list[dict[str, str]]:
    return [
        {"visibility": "project", "name": f"s{j}", "project": f"p{client % 3}"} for j in range(3)
    ]


def members(base: str, teams: int = 3, per_team: int = 2) -> list[str]:
    """API keys of ``per_team`` members of each of ``teams`` teams of one org."""
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN}"}) as admin:

        def made(path: str, body: dict[str, Any]) -> dict[str, Any]:
            answer = admin.post(path, json=body)
            answer.raise_for_status()
            return dict(answer.json())

        org = made("/api/admin/orgs", {"name": "soak", "plan": "pro"})["id"]
        keys = []
        for t in range(teams):
            team = made("/api/admin/teams", {"org_id": org, "name": f"t{t}"})["id"]
            for u in range(per_team):
                user = made("/api/admin/users", {"email": f"u{t}.{u}@soak.example"})["id"]
                made(f"/api/admin/teams/{team}/members", {"user_id": user, "role": "member"})
                key = made("/api/admin/api-keys", {"user_id": user, "team_id": team, "name": "s"})
                keys.append(str(key["key"]))
        return keys


class Tally:
    """Answers by (operation, status or exception name), shared by the client threads."""

    def __init__(self) -> None:
        self.seen: collections.Counter[tuple[str, str]] = collections.Counter()
        self.bad: list[str] = []
        self._lock = threading.Lock()

    def add(self, op: str, outcome: str, detail: str = "") -> None:
        with self._lock:
            self.seen[(op, outcome)] += 1
            if detail:
                self.bad.append(f"{op} {outcome}: {detail[:200]}")


def client(base: str, key: str, n: int, until: float, timeout: float, tally: Tally) -> None:
    """One client's requests until ``until``: an operation by weight, on a random path of
    one of its spaces."""
    rng = random.Random(n)
    names, weights = list(WEIGHTS), list(WEIGHTS.values())
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=timeout) as c:
        while time.monotonic() < until:
            name = rng.choices(names, weights)[0]
            try:
                answer = send(c, name, rng.choice(spaces_of(n)), rng)
            except httpx.HTTPError as exc:  # a timeout above all: the verdict's
                tally.add(name, type(exc).__name__, repr(exc))
                continue
            failed = answer.status_code >= 500
            tally.add(name, str(answer.status_code), answer.text if failed else "")


def rss_mb(pid: int) -> dict[str, int]:
    """Resident memory of the server and each process under it, by pid."""
    root = psutil.Process(pid)
    found = {}
    for proc in [root, *root.children(recursive=True)]:
        with_memory = proc.memory_info() if proc.is_running() else None
        if with_memory is not None:
            found[f"{proc.pid}"] = round(with_memory.rss / 2**20)
    return found


def drifted(base: str, keys: list[str]) -> list[str]:
    """The spaces whose ``used_bytes`` is not the sum of their listed documents."""
    out = []
    for n, key in enumerate(keys):
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as c:
            for space in spaces_of(n):
                docs = c.get("/api/memory/docs", params=space).json()["documents"]
                used = c.get("/api/memory/usage", params=space).json()["used_bytes"]
                listed = sum(d["size_bytes"] for d in docs)
                if used != listed:
                    out.append(f"{space}: used_bytes {used}, documents {listed}")
    return out


@contextmanager
def database(url: str | None, home: Path) -> Iterator[str]:
    """``url``; else a fresh PostgreSQL database where one is configured (dropped after);
    else SQLite under ``home``."""
    server = os.environ.get("KEEPSTONE_BENCH_POSTGRES_URL") or os.environ.get(
        "KEEPSTONE_TEST_POSTGRES_URL"
    )
    if url or not server:
        yield url or f"sqlite:///{home}/keepstone.db"
        return
    with fresh_postgres(server, "soak") as fresh:
        yield fresh


def run(args: argparse.Namespace, home: Path) -> int:
    tally = Tally()
    with (
        database(args.database, home) as url,
        serve(url, home, workers=args.workers, KEEPSTONE_ADMIN_TOKEN=ADMIN) as served,
    ):
        keys = members(served.base)
        print(f"soak: {url.split('://')[0]}, {args.workers} worker(s), {args.clients} clients")
        until = time.monotonic() + args.seconds
        threads = [
            threading.Thread(
                target=client,
                args=(served.base, keys[n % len(keys)], n, until, args.timeout, tally),
            )
            for n in range(args.clients)
        ]
        for thread in threads:
            thread.start()
        began = time.monotonic()
        while any(t.is_alive() for t in threads):
            time.sleep(min(60.0, max(0.1, until - time.monotonic() + 1)))
            took, done = time.monotonic() - began, sum(tally.seen.values())
            print(f"{took:5.0f} s  {done:7,} requests  rss MB {rss_mb(served.pid)}")
        for thread in threads:
            thread.join()
        drift = drifted(served.base, keys)
    return report(tally, drift)


def report(tally: Tally, drift: list[str]) -> int:
    for op in WEIGHTS:
        answers = {k[1]: v for k, v in tally.seen.items() if k[0] == op}
        print(f"{op:9} " + "  ".join(f"{status} {n:,}" for status, n in sorted(answers.items())))
    print(f"answers 5xx or none: {len(tally.bad)}; counters off their documents: {len(drift)}")
    for line in [*tally.bad[:20], *drift]:
        print("  " + line)
    return 1 if tally.bad or drift else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300, help="how long the clients run")
    parser.add_argument("--clients", type=int, default=8, help="client threads")
    parser.add_argument("--workers", type=int, default=2, help="keepstone serve --workers")
    parser.add_argument("--timeout", type=float, default=30, help="a request's time limit, s")
    parser.add_argument("--database", help="a database URL (default: see above)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        return run(args, Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
