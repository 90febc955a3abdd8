"""Benchmark: one ``cairn serve`` worker against a bare FastAPI floor, in the same run.

Starts both on loopback (uvicorn, one worker each), seeds a team space with 100
documents, then drives each scenario with a few concurrent httpx clients and prints
requests/s, p50 and p99 latency, and each as a ratio to the floor (a FastAPI app
answering a constant JSON body). Not a test: it prints figures, asserts nothing.

    .venv/bin/python bench/bench_api.py [--seconds 5] [--clients 4] [--database URL]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx

ADMIN = "bench-admin-token-0123456789abcdef"
FLOOR_APP = (
    "import uvicorn\n"
    "from fastapi import FastAPI\n"
    "app = FastAPI()\n"
    "@app.get('/')\n"
    "def root() -> dict[str, bool]:\n"
    "    return {'ok': True}\n"
    "uvicorn.run(app, host='127.0.0.1', port={port}, log_level='warning', access_log=False)\n"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def process(argv: list[str], env: dict[str, str], ready_url: str) -> Iterator[None]:
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(ready_url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{argv[:4]} did not start")
            time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=20)


Request = Callable[[httpx.AsyncClient, int], "asyncio.Future[httpx.Response]"]


async def drive(
    base: str,
    headers: dict[str, str],
    make: Callable[[httpx.AsyncClient, int], object],
    seconds: float,
    clients: int,
) -> tuple[float, float, float]:
    latencies: list[float] = []
    stop = time.monotonic() + seconds
    counter = 0

    async def worker() -> None:
        nonlocal counter
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:
            while time.monotonic() < stop:
                counter += 1
                t0 = time.perf_counter()
                response = await make(client, counter)  # type: ignore[misc]
                latencies.append(time.perf_counter() - t0)
                if response.status_code >= 400:
                    raise SystemExit(
                        f"benchmark request failed: {response.status_code} {response.text}"
                    )

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(clients)))
    elapsed = time.monotonic() - started
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return len(latencies) / elapsed, statistics.median(latencies) * 1000, p99 * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--database", default=None, help="default: a temporary SQLite file")
    args = parser.parse_args()

    home = tempfile.mkdtemp(prefix="cairn-bench-")
    database = args.database or f"sqlite:///{home}/cairn.db"
    env = {**os.environ, "CAIRN_HOME": home, "CAIRN_ADMIN_TOKEN": ADMIN}
    cairn_port, floor_port = free_port(), free_port()
    cairn = f"http://127.0.0.1:{cairn_port}"
    floor = f"http://127.0.0.1:{floor_port}"
    serve = [
        sys.executable,
        "-m",
        "cairn.cli.main",
        "serve",
        "--port",
        str(cairn_port),
        "--database",
        database,
    ]
    floor_cmd = [sys.executable, "-c", FLOOR_APP.replace("{port}", str(floor_port))]

    with process(serve, env, f"{cairn}/readyz"), process(floor_cmd, env, f"{floor}/"):
        admin = httpx.Client(base_url=cairn, headers={"Authorization": f"Bearer {ADMIN}"})
        org = admin.post("/api/admin/orgs", json={"name": "bench"}).json()["id"]
        team = admin.post("/api/admin/teams", json={"org_id": org, "name": "t"}).json()["id"]
        user = admin.post("/api/admin/users", json={"email": "bench@example.com"}).json()["id"]
        admin.post(f"/api/admin/teams/{team}/members", json={"user_id": user, "role": "member"})
        key = admin.post("/api/admin/api-keys", json={"user_id": user, "team_id": team}).json()[
            "key"
        ]
        auth = {"Authorization": f"Bearer {key}"}
        space = {"name": "bench", "project": "p"}
        with httpx.Client(base_url=cairn, headers=auth) as c:
            for i in range(100):
                c.put(
                    "/api/memory/doc",
                    params={**space, "path": f"docs/{i:03}.md"},
                    json={"content": f"# doc {i}\n" + "x" * 200},
                )
        body_1k = "# bench\n" + "y" * (1024 - 8)

        scenarios: dict[
            str, tuple[str, dict[str, str], Callable[[httpx.AsyncClient, int], object]]
        ] = {
            "floor (constant JSON)": (floor, {}, lambda cl, i: cl.get("/")),
            "GET /api/memory/doc": (
                cairn,
                auth,
                lambda cl, i: cl.get("/api/memory/doc", params={**space, "path": "docs/042.md"}),
            ),
            "PUT /api/memory/doc (1 KB)": (
                cairn,
                auth,
                lambda cl, i: cl.put(
                    "/api/memory/doc",
                    params={**space, "path": f"w/{i % 500}.md"},
                    json={"content": body_1k},
                ),
            ),
            "GET /api/memory/docs (100)": (
                cairn,
                auth,
                lambda cl, i: cl.get("/api/memory/docs", params={**space, "dir": "docs"}),
            ),
        }
        results = {}
        for label, (base, headers, make) in scenarios.items():
            results[label] = asyncio.run(drive(base, headers, make, args.seconds, args.clients))
        admin.close()

    floor_rps, floor_p50, floor_p99 = results["floor (constant JSON)"]
    db_kind = database.split(":", 1)[0]
    print(
        f"cairn serve (1 worker, {db_kind}) vs bare FastAPI floor; "
        f"{args.clients} clients x {args.seconds:.0f}s each, loopback"
    )
    print(
        f"{'scenario':30} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'rps/floor':>10} {'p50/floor':>10} {'p99/floor':>10}"
    )
    for label, (rps, p50, p99) in results.items():
        print(
            f"{label:30} {rps:8.0f} {p50:8.2f} {p99:8.2f} "
            f"{rps / floor_rps:10.2f} {p50 / floor_p50:10.2f} {p99 / floor_p99:10.2f}"
        )


if __name__ == "__main__":
    main()
