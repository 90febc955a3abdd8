"""Soak: a real ``keepstone serve`` under mixed traffic for minutes, watched for what
a short test does not see — a request that never ends, a 5xx, memory that grows, a counter
that drifts from its documents.

Several client threads, each with a member's API key of one of three teams, pick among
writes, reads, edits, moves, deletes, restores, listings, searches, version listings, the
activity feed and usage, over a few spaces and thirty paths each, so that they meet on the
same documents while the server's indexer embeds behind them. Beside the documents, each
client saves its team's records (as the service token), searches and lists them (as the
member) and deletes some (as the org's owner, in a browser session), so that the indexer's
two sources, both claimed while it embeds, meet their writers too; and every ``--toggle``
seconds the owner turns one team's memory off, saves that must be refused on either worker
are sent, and memory is turned on again, then a save that must be kept. ``--weight OP=N``
reshapes the mix (``0`` leaves an operation out: ``--weight save=10 --weight forget=10`` and
the rest 0 churns records alone).

Every minute it prints the requests of that minute, their 95th percentile and each server
process's resident memory; at the end, each operation's answers by status with its p50 and
p95, whether every space's ``used_bytes`` equals the sum of its listed documents, and
whether every team's records listed are exactly those saved and not deleted. It exits
non-zero on a 5xx, a request past ``--timeout``, a save accepted while memory was off (or
refused once it was on again), a counter that differs or a record lost or come back: the
figures are the report, those the verdict.

On PostgreSQL (``--database`` a URL, or a fresh database on ``KEEPSTONE_BENCH_POSTGRES_URL`` /
``KEEPSTONE_TEST_POSTGRES_URL`` when set) it found the server stopping every write of a
space for good under moves while its indexer embedded (docs/search.md, "A claim is never
part of a cycle of waits"); and edits sent without an etag answered ``412`` when a write
landed between their read and their write-back (docs/api.md, "Moving and editing
documents").

    .venv/bin/python bench/bench_soak.py [--seconds 300] [--clients 8] [--workers 2]
        [--toggle 5] [--weight OP=N ...]
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving import fresh_postgres, serve

ADMIN = "soak-admin-token-0123456789abcdef"
SERVICE = "soak-service-token-0123456789abcdef"
PASSWORD = "soak owner passphrase 0123"
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
    "save": 10,
    "recall": 4,
    "records": 3,
    "forget": 3,
}
#: The operations on a team's records, served by :func:`send_records`.
RECORD_OPS = frozenset({"save", "recall", "records", "forget"})
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


@dataclass(frozen=True)
class Member:
    """A client's identity: a member's API key, its team, and its org owner's sign-in."""

    key: str
    team: str
    owner: str


def members(base: str, teams: int = 3, per_team: int = 2) -> list[Member]:
    """``per_team`` members of each of ``teams`` teams of one org whose plan keeps team
    records, each team's memory turned on by the org's owner."""
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN}"}) as admin:

        def made(path: str, body: dict[str, Any]) -> dict[str, Any]:
            answer = admin.post(path, json=body)
            answer.raise_for_status()
            return dict(answer.json())

        org = made("/api/admin/orgs", {"name": "soak", "plan": "pro_plus"})["id"]
        owner = "owner@soak.example"
        boss = made("/api/admin/users", {"email": owner, "password": PASSWORD})["id"]
        made(f"/api/admin/orgs/{org}/members", {"user_id": boss, "role": "owner"})
        found = []
        for t in range(teams):
            team = made("/api/admin/teams", {"org_id": org, "name": f"t{t}"})["id"]
            for u in range(per_team):
                user = made("/api/admin/users", {"email": f"u{t}.{u}@soak.example"})["id"]
                made(f"/api/admin/teams/{team}/members", {"user_id": user, "role": "member"})
                key = made("/api/admin/api-keys", {"user_id": user, "team_id": team, "name": "s"})
                found.append(Member(str(key["key"]), team, owner))
    for team in {m.team for m in found}:
        with owner_session(base, owner, team) as session:
            turned = session.put(f"/api/teams/{team}/memory-settings", json={"enabled": True})
            turned.raise_for_status()
    return found


@contextmanager
def owner_session(base: str, email: str, team: str, timeout: float = 30) -> Iterator[httpx.Client]:
    """A browser session of the org's owner, acting in ``team`` (its CSRF header set)."""
    with httpx.Client(base_url=base, timeout=timeout) as c:
        login = c.post("/api/auth/login", json={"email": email, "password": PASSWORD})
        login.raise_for_status()
        c.headers.update({"X-CSRF-Token": login.json()["csrf_token"], "X-Keepstone-Team": team})
        yield c


class Ledger:
    """Each team's records answered 201 and not since answered 204 to a delete, shared by
    the client threads: what the team's listing must hold at the end, no more, no less."""

    def __init__(self) -> None:
        self.live: dict[str, set[str]] = collections.defaultdict(set)
        self._lock = threading.Lock()

    def saved(self, team: str, record: str) -> None:
        with self._lock:
            self.live[team].add(record)

    def take(self, team: str, rng: random.Random) -> str | None:
        """A live record of ``team`` for one client to delete (no other client takes it
        meanwhile); :meth:`saved` puts it back when the delete does not answer 204."""
        with self._lock:
            live = self.live[team]
            record = rng.choice(sorted(live)) if live else None
            live.discard(record or "")
            return record


def send_records(
    c: httpx.Client, owner: httpx.Client, op: str, team: str, ledger: Ledger, rng: random.Random
) -> httpx.Response | None:
    """One request of ``op`` on ``team``'s records; ``None`` when there is none to delete."""
    memory = f"/api/teams/{team}/memory"
    match op:
        case "save":
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 60)))
            saved = c.post(
                f"/api/internal/teams/{team}/memory",
                json={"text": text},
                headers={"Authorization": f"Bearer {SERVICE}"},
            )
            if saved.status_code == 201:
                ledger.saved(team, saved.json()["id"])
            return saved
        case "recall":
            return c.post(f"{memory}/search", json={"query": " ".join(rng.sample(WORDS, 2))})
        case "records":
            return c.get(memory)
    record = ledger.take(team, rng)
    if record is None:
        return None
    gone = owner.delete(f"{memory}/{record}")
    if gone.status_code != 204:
        ledger.saved(team, record)
    return gone


class Tally:
    """Answers by (operation, status or exception name), and each operation's times (when
    each answer came, how long it took), shared by the client threads."""

    def __init__(self) -> None:
        self.seen: collections.Counter[tuple[str, str]] = collections.Counter()
        self.took: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
        self.bad: list[str] = []
        self._lock = threading.Lock()

    def add(self, op: str, outcome: str, seconds: float, detail: str = "") -> None:
        with self._lock:
            self.seen[(op, outcome)] += 1
            self.took[op].append((time.monotonic(), seconds))
            if detail:
                self.bad.append(f"{op} {outcome}: {detail[:200]}")

    def p95_ms(self, since: dict[str, int]) -> float:
        """The 95th percentile of every request's time since the counts ``since``."""
        with self._lock:
            recent = [t for op, ts in self.took.items() for _, t in ts[since.get(op, 0) :]]
        return 1000 * statistics.quantiles(recent, n=20)[-1] if len(recent) > 1 else 0.0

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {op: len(times) for op, times in self.took.items()}

    def line(self, op: str) -> str:
        """``op``'s p50 and p95 over the run, and its p50 in the first and the last minute
        (what slowed as the data grew)."""
        timed = self.took[op]
        began, ended = timed[0][0], timed[-1][0]

        def p50(ts: list[float]) -> float:
            return 1000 * statistics.median(ts) if ts else 0.0

        whole = sorted(t for _, t in timed)
        first = [t for at, t in timed if at < began + 60]
        last = [t for at, t in timed if at > ended - 60]
        return (
            f"p50 {p50(whole):6.1f} ms p95 {1000 * whole[int(len(whole) * 0.95)]:6.1f} ms "
            f"(p50 first minute {p50(first):5.1f}, last {p50(last):5.1f})"
        )


def client(
    base: str, who: Member, n: int, until: float, timeout: float, tally: Tally, ledger: Ledger
) -> None:
    """One client's requests until ``until``: an operation by weight, on a random path of
    one of its spaces or on its team's records."""
    rng = random.Random(n)
    names, weights = list(WEIGHTS), list(WEIGHTS.values())
    headers = {"Authorization": f"Bearer {who.key}"}
    with (
        httpx.Client(base_url=base, headers=headers, timeout=timeout) as c,
        owner_session(base, who.owner, who.team, timeout) as owner,
    ):
        while time.monotonic() < until:
            name = rng.choices(names, weights)[0]
            started = time.perf_counter()
            try:
                if name in RECORD_OPS:
                    answer = send_records(c, owner, name, who.team, ledger, rng)
                else:
                    answer = send(c, name, rng.choice(spaces_of(n)), rng)
            except httpx.HTTPError as exc:  # a timeout above all: the verdict's
                tally.add(name, type(exc).__name__, time.perf_counter() - started, repr(exc))
                continue
            if answer is not None:
                failed = answer.status_code >= 500
                outcome, took = str(answer.status_code), time.perf_counter() - started
                tally.add(name, outcome, took, answer.text if failed else "")


def toggler(
    base: str,
    who: Member,
    every: float,
    until: float,
    timeout: float,
    tally: Tally,
    ledger: Ledger,
) -> None:
    """Every ``every`` seconds the org's owner turns ``who``'s team memory off, saves a few
    records as the service token on fresh connections (so on either worker), each of which
    must be refused, turns memory on again and saves one that must be kept; memory is on
    when this returns."""
    save = f"/api/internal/teams/{who.team}/memory"
    settings = f"/api/teams/{who.team}/memory-settings"
    service = {"Authorization": f"Bearer {SERVICE}", "Connection": "close"}
    with (
        owner_session(base, who.owner, who.team, timeout) as owner,
        httpx.Client(base_url=base, headers=service, timeout=timeout) as c,
    ):

        def switch(enabled: bool) -> bool:
            started = time.perf_counter()
            answer = owner.put(settings, json={"enabled": enabled})
            ok = answer.status_code == 200
            tally.add(
                "toggle",
                str(answer.status_code),
                time.perf_counter() - started,
                "" if ok else answer.text or "(empty)",
            )
            return ok

        def saved(op: str, expected: int) -> None:
            started = time.perf_counter()
            answer = c.post(save, json={"text": f"saved by the toggler ({op})"})
            if answer.status_code == 201:
                ledger.saved(who.team, answer.json()["id"])
            wrong = "" if answer.status_code == expected else answer.text or "(empty)"
            tally.add(op, str(answer.status_code), time.perf_counter() - started, wrong)

        try:
            while time.monotonic() + every < until:
                time.sleep(every)
                if switch(False):
                    for _ in range(4):
                        saved("save-off", 409)
                if switch(True):
                    saved("save-on", 201)
        finally:
            switch(True)


def rss_mb(pid: int) -> dict[str, int]:
    """Resident memory of the server and each process under it, by pid."""
    root = psutil.Process(pid)
    found = {}
    for proc in [root, *root.children(recursive=True)]:
        with_memory = proc.memory_info() if proc.is_running() else None
        if with_memory is not None:
            found[f"{proc.pid}"] = round(with_memory.rss / 2**20)
    return found


def drifted(base: str, clients: list[Member]) -> list[str]:
    """The spaces whose ``used_bytes`` is not the sum of their listed documents."""
    out = []
    for n, who in enumerate(clients):
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {who.key}"}) as c:
            for space in spaces_of(n):
                docs = c.get("/api/memory/docs", params=space).json()["documents"]
                used = c.get("/api/memory/usage", params=space).json()["used_bytes"]
                listed = sum(d["size_bytes"] for d in docs)
                if used != listed:
                    out.append(f"{space}: used_bytes {used}, documents {listed}")
    return out


def records_off(base: str, clients: list[Member], ledger: Ledger) -> list[str]:
    """The teams whose listed records are not those the ledger holds: a record answered
    201 and missing, or one answered 204 to its delete and listed."""
    out = []
    for who in {m.team: m for m in clients}.values():
        listed: set[str] = set()
        token: str | None = None
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {who.key}"}) as c:
            while True:
                page = c.get(
                    f"/api/teams/{who.team}/memory", params={"next_token": token} if token else {}
                ).json()
                listed.update(r["id"] for r in page["records"])
                token = page.get("next_token")
                if not token:
                    break
        live = ledger.live[who.team]
        if listed != live:
            out.append(
                f"team {who.team}: {len(live - listed)} saved and not listed, "
                f"{len(listed - live)} listed and deleted (of {len(live)})"
            )
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
        serve(
            url,
            home,
            workers=args.workers,
            KEEPSTONE_ADMIN_TOKEN=ADMIN,
            KEEPSTONE_SERVICE_TOKEN=SERVICE,
        ) as served,
    ):
        clients = members(served.base)
        ledger = Ledger()
        print(f"soak: {url.split('://')[0]}, {args.workers} worker(s), {args.clients} clients")
        until = time.monotonic() + args.seconds
        threads = [
            threading.Thread(
                target=client,
                args=(
                    served.base,
                    clients[n % len(clients)],
                    n,
                    until,
                    args.timeout,
                    tally,
                    ledger,
                ),
            )
            for n in range(args.clients)
        ]
        if args.toggle:
            switch = (served.base, clients[0], args.toggle, until, args.timeout, tally, ledger)
            threads.append(threading.Thread(target=toggler, args=switch))
        for thread in threads:
            thread.start()
        began, before = time.monotonic(), tally.counts()
        while any(t.is_alive() for t in threads):
            time.sleep(min(60.0, max(0.1, until - time.monotonic() + 1)))
            took, now = time.monotonic() - began, tally.counts()
            print(
                f"{took:5.0f} s  {sum(now.values()):7,} requests ("
                f"{sum(now.values()) - sum(before.values()):,} since, p95 "
                f"{tally.p95_ms(before):.0f} ms)  rss MB {rss_mb(served.pid)}",
                flush=True,
            )
            before = now
        for thread in threads:
            thread.join()
        drift = drifted(served.base, clients) + records_off(served.base, clients, ledger)
    return report(tally, drift)


def report(tally: Tally, drift: list[str]) -> int:
    for op in [*WEIGHTS, "toggle", "save-off", "save-on"]:
        answers = {k[1]: v for k, v in tally.seen.items() if k[0] == op}
        if not answers:
            continue
        print(
            f"{op:9} {tally.line(op)}  "
            + "  ".join(f"{status} {n:,}" for status, n in sorted(answers.items()))
        )
    print(
        f"answers 5xx or none: {len(tally.bad)}; counters off their documents or records off "
        f"their ledger: {len(drift)}"
    )
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
    parser.add_argument(
        "--toggle",
        type=float,
        default=5,
        metavar="SECONDS",
        help="how often one team's memory is turned off and on, saves refused between (0: never)",
    )
    parser.add_argument(
        "--weight",
        action="append",
        default=[],
        metavar="OP=N",
        help=f"how often clients pick OP (repeatable; 0 leaves it out), of: {', '.join(WEIGHTS)}",
    )
    args = parser.parse_args()
    for given in args.weight:
        op, _, n = given.partition("=")
        if op not in WEIGHTS or not n.isdigit():
            parser.error(f"--weight takes OP=N with OP one of {', '.join(WEIGHTS)}; got {given!r}")
        WEIGHTS[op] = int(n)
    with tempfile.TemporaryDirectory() as tmp:
        return run(args, Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
