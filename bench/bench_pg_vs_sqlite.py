"""SQLite and PostgreSQL side by side: the figures an operator weighs before moving a
deployment from one machine to many replicas (docs/deploy.md).

One table, one column per database:

* store  — document write/read p50/p95 for 1 KB and 100 KB, export/import MB/s
  (``bench_store.bench_adapter`` on ``SqlStore``);
* records — search p50/p95 at 10k records over 1,000 teams
  (``bench_records``' fill and search loops);
* API    — ``PUT`` and ``GET /api/memory/doc`` of a 1 KB document through one real
  ``keepstone serve`` process per database, one keep-alive client, p50/p95 and req/s.

    .venv/bin/python bench/bench_pg_vs_sqlite.py                  # SQLite only
    KEEPSTONE_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/test \\
        .venv/bin/python bench/bench_pg_vs_sqlite.py              # + PostgreSQL

PostgreSQL runs in a throw-away database created on that server and dropped after.
Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent / "src"))
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

import bench_records  # noqa: E402
import bench_store  # noqa: E402
from keepstone.db import make_engine  # noqa: E402
from records_world import bench_world  # noqa: E402
from serving import fresh_postgres  # noqa: E402

ADMIN_TOKEN = "bench-admin-token-0123456789abcdefghijklmnop"
KEEPSTONE = str(Path(sys.executable).with_name("keepstone"))


@contextlib.contextmanager
def databases(tmp: str, only: list[str]) -> Iterator[list[tuple[str, str, str]]]:
    """(label, records URL, API URL) of each database kind, all freshly created, so
    the API figures are not taken over the records benchmark's 10k rows."""
    pg = os.environ.get("KEEPSTONE_TEST_POSTGRES_URL", "")
    with contextlib.ExitStack() as stack:
        found: list[tuple[str, str, str]] = []
        if "sqlite" in only:
            found.append(("sqlite", f"sqlite:///{tmp}/records.db", f"sqlite:///{tmp}/api.db"))
        if "postgres" in only and pg:
            records_db = stack.enter_context(fresh_postgres(pg))
            found.append(("postgres", records_db, stack.enter_context(fresh_postgres(pg))))
        yield found


def store_figures(args: argparse.Namespace, only: list[str]) -> dict[str, dict[str, str]]:
    """bench_store's write/read/export/import figures for the SQL adapters."""
    store_args = argparse.Namespace(small_count=args.small_count, large_count=args.large_count)
    out: dict[str, dict[str, str]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="keepstone-bench-") as tmp,
        bench_store.adapters(tmp, only) as stores,
    ):
        for name, store in stores:
            figures = bench_store.bench_adapter(name, store, store_args).figures
            out[name] = {
                f"store {k}": v
                for k, v in figures.items()
                if k.endswith(("p50 ms", "p95 ms")) or k in ("export MB/s", "import MB/s")
            }
    return out


def records_figures(url: str, records: int) -> dict[str, str]:
    """Search p50/p95 over ``records`` records spread over bench_records' 1,000 teams."""
    engine = make_engine(url)
    try:
        rng = random.Random(7)
        world = bench_world(engine, bench_records.TEAMS)
        bench_records._fill(engine, world, max(1, records // bench_records.TEAMS), rng)
        p50, p95, _hits = bench_records._search_latency(world, rng)
    finally:
        engine.dispose()
    label = f"{records // 1000}k"
    return {
        f"records search @{label} p50 ms": f"{p50:.2f}",
        f"records search @{label} p95 ms": f"{p95:.2f}",
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(url: str, home: str) -> Iterator[str]:
    """One ``keepstone serve`` on ``url``; yields its base URL once /readyz answers."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEPSTONE_")}
    env.update({"KEEPSTONE_HOME": home, "KEEPSTONE_ADMIN_TOKEN": ADMIN_TOKEN})
    log_path = Path(home) / f"serve-{port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [KEEPSTONE, "serve", "--host", "127.0.0.1", "--port", str(port), "--database", url],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"keepstone serve did not start:\n{log_path.read_text()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _api_key(http: httpx.Client) -> str:
    """A member's API key in a fresh team, made through the admin API."""
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

    def post(path: str, body: dict[str, str]) -> dict[str, str]:
        r = http.post(path, json=body, headers=admin)
        r.raise_for_status()
        result: dict[str, str] = r.json()
        return result

    user = post("/api/admin/users", {"email": f"bench-{uuid.uuid4().hex[:8]}@example.com"})["id"]
    org = post("/api/admin/orgs", {"name": "bench", "plan": "pro_plus"})["id"]
    team = post("/api/admin/teams", {"org_id": org, "name": "bench"})["id"]
    post(f"/api/admin/teams/{team}/members", {"user_id": user, "role": "member"})
    return post("/api/admin/api-keys", {"user_id": user, "team_id": team, "name": "bench"})["key"]


def api_figures(url: str, home: str, count: int) -> dict[str, str]:
    """PUT then GET ``count`` 1 KB documents through one ``keepstone serve``."""
    with serve(url, home) as base, httpx.Client(base_url=base, timeout=60) as http:
        http.headers["Authorization"] = f"Bearer {_api_key(http)}"
        space = {"name": "bench", "project": "api"}
        docs = [(f"d{i // 100}/doc-{i}.md", bench_store.body(1024, i)) for i in range(count)]
        for _ in range(20):  # warm the connection and the server's pool
            http.get("/api/memory/usage", params=space)
            http.put("/api/memory/doc", params={**space, "path": "warm.md"}, json={"content": "x"})
        puts: list[float] = []
        gets: list[float] = []
        for path, content in docs:
            t0 = time.perf_counter()
            r = http.put(
                "/api/memory/doc", params={**space, "path": path}, json={"content": content}
            )
            puts.append(time.perf_counter() - t0)
            r.raise_for_status()
        for path, _ in docs:
            t0 = time.perf_counter()
            r = http.get("/api/memory/doc", params={**space, "path": path})
            gets.append(time.perf_counter() - t0)
            r.raise_for_status()
    figures: dict[str, str] = {}
    for verb, samples in (("PUT", puts), ("GET", gets)):
        figures[f"API {verb} doc 1 KB p50 ms"] = f"{bench_store.pct(samples, 50) * 1e3:.2f}"
        figures[f"API {verb} doc 1 KB p95 ms"] = f"{bench_store.pct(samples, 95) * 1e3:.2f}"
        figures[f"API {verb} doc 1 KB req/s"] = f"{len(samples) / sum(samples):,.0f}"
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small-count", type=int, default=1000, help="1 KB documents (store)")
    parser.add_argument("--large-count", type=int, default=200, help="100 KB documents (store)")
    parser.add_argument("--records", type=int, default=10_000, help="records for search")
    parser.add_argument("--api-count", type=int, default=500, help="documents PUT/GET via API")
    parser.add_argument("--databases", default="sqlite,postgres", help="comma-separated subset")
    args = parser.parse_args(argv)
    only = [d.strip() for d in args.databases.split(",") if d.strip()]
    if "postgres" in only and not os.environ.get("KEEPSTONE_TEST_POSTGRES_URL"):
        print("# KEEPSTONE_TEST_POSTGRES_URL is not set: SQLite only", flush=True)

    results = {name: bench_store.Result(name) for name in only}
    for name, figures in store_figures(args, only).items():
        results[name].figures.update(figures)
        print(f"# store {name}: done", flush=True)
    with tempfile.TemporaryDirectory(prefix="keepstone-bench-") as tmp, databases(tmp, only) as dbs:
        for name, records_url, _ in dbs:
            results[name].figures.update(records_figures(records_url, args.records))
            print(f"# records {name}: done", flush=True)
        for name, _, api_url in dbs:
            home = os.path.join(tmp, f"home-{name}")
            results[name].figures.update(api_figures(api_url, home, args.api_count))
            print(f"# API {name}: done", flush=True)

    measured = [r for r in results.values() if r.figures]
    print(
        f"\nstore: {args.small_count} x 1 KB, {args.large_count} x 100 KB; records: "
        f"{args.records:,} over {bench_records.TEAMS} teams; API: {args.api_count} x 1 KB "
        "through one keepstone serve, one client\n"
    )
    bench_store.print_table(measured)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
