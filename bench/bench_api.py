"""Benchmark: ``keepstone serve`` against a bare FastAPI floor, and ``--workers 2`` against one.

In one run, on loopback: a bare FastAPI app answering a constant JSON body (the floor),
``keepstone serve`` with one worker and ``keepstone serve --workers 2``, all three served by
uvicorn with the same settings (``keepstone.cli.serve.server_config``: uvloop and httptools).
A team space is seeded with 100 documents; then ``wrk`` drives each scenario with
``--clients`` connections for ``--seconds``, the servers' figures interleaved with the
floor's over ``--rounds`` rounds (the median of each is kept, so a noisy moment of a
shared machine moves both sides). Prints requests/s, p50 and p99, the ratios and the
goals beside them, and for ``--workers 2`` each round's rate beside how wrk's
connections fell between the two workers (``2+2``, ``3+1``; the workers accept from one
socket, and a worker serves the keep-alive connections it accepted: 30 trials of 4
connections opened at once split 2+2 18 times and 3+1 12 times, and a 3+1 round measures
the busier worker). Not a test: it prints figures, asserts nothing.

The load generator is ``wrk`` (Debian: ``apt-get install wrk``): one C thread costs a few
microseconds a request, where a Python client costs more CPU than the server it
measures — on a 2-core machine it would take the second worker's core.

    .venv/bin/python bench/bench_api.py [--seconds 5] [--clients 4] [--rounds 3] [--database URL]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import httpx

from serving import free_port

ADMIN = "bench-admin-token-0123456789abcdef"
FLOOR_APP = """
import socket, uvicorn
from fastapi import FastAPI
from keepstone.cli.serve import server_config
app = FastAPI()
@app.get('/')
def root() -> dict[str, bool]:
    return {'ok': True}
uvicorn.Server(server_config(app)).run(sockets=[socket.create_server(('127.0.0.1', {port}))])
"""
SPACE = {"name": "bench", "project": "p"}

#: The goals: GET and PUT as ratios of the floor, two workers of one, and the whole listing
#: of a space of 100 documents.
GOALS = {"GET doc": 0.6, "PUT doc": 0.5, "workers 2": 1.6, "GET docs": 0.5}


@contextmanager
def process(
    argv: list[str], env: dict[str, str], ready_url: str, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(ready_url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{argv[:6]} did not start:\n{log.read_text(errors='replace')}")
            time.sleep(0.1)
        time.sleep(1.0)  # every worker up, not only the first to answer
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@dataclass(frozen=True)
class Figure:
    rps: float
    p50_ms: float
    p99_ms: float


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS[unit]


def split(server: subprocess.Popen[bytes], port: int) -> str:
    """How the connections open on ``port`` fall between ``server``'s worker processes,
    most first (``3+1``): a worker serves the keep-alive connections it accepted, and the
    workers accept from one socket, so wrk's few connections may not split evenly."""
    import psutil

    counts = []
    for child in psutil.Process(server.pid).children(recursive=True):
        conns = [c for c in child.net_connections(kind="tcp") if c.laddr.port == port]
        if any(c.status == psutil.CONN_LISTEN for c in conns):  # a worker, not a helper
            counts.append(sum(1 for c in conns if c.raddr))
    return "+".join(str(n) for n in sorted(counts, reverse=True))


def wrk(
    url: str,
    script: str,
    seconds: int,
    clients: int,
    watch: subprocess.Popen[bytes] | None = None,
    splits: list[str] | None = None,
) -> Figure:
    """One wrk run of ``script`` against ``url``; any non-2xx answer ends the benchmark.
    ``watch``: a server of several workers, whose connections' split is appended to
    ``splits`` a second into the run."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    try:
        run = subprocess.Popen(
            ["wrk", "-t1", f"-c{clients}", f"-d{seconds}s", "--latency", "-s", f.name, url],
            stdout=subprocess.PIPE,
            text=True,
        )
        if watch is not None and splits is not None:
            time.sleep(min(1.0, seconds / 3))
            splits.append(split(watch, int(url.rsplit(":", 1)[1])))
        out, _ = run.communicate()
        if run.returncode != 0:
            raise SystemExit(f"wrk failed ({run.returncode}):\n{out}")
    finally:
        os.unlink(f.name)
    if "Non-2xx" in out or "Socket errors" in out:
        raise SystemExit(f"benchmark requests failed:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"\s50%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"\s99%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    return Figure(rps, p50, p99)


def lua(method: str, path: str, key: str = "", body: str = "", vary: bool = False) -> str:
    """A wrk script: ``method path`` with the key and JSON body; ``vary``: the document
    path cycles through 500 names (``w/N.md``) so a PUT replaces, not always the same row."""
    lines = [f"wrk.method = {json.dumps(method)}"]
    if key:
        lines.append(f'wrk.headers["Authorization"] = {json.dumps("Bearer " + key)}')
    if body:
        lines.append('wrk.headers["Content-Type"] = "application/json"')
        lines.append(f"wrk.body = {json.dumps(body)}")
    if vary:
        lines += [
            "local i = 0",
            "request = function()",
            "  i = i + 1",
            f'  return wrk.format(nil, {json.dumps(path)} .. (i % 500) .. ".md")',
            "end",
        ]
    else:
        lines.append(f"wrk.path = {json.dumps(path)}")
    return "\n".join(lines) + "\n"


def seed(base: str) -> str:
    """A team, a member's key and 100 documents; the key."""
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN}"}) as admin:
        org = admin.post("/api/admin/orgs", json={"name": "bench"}).json()["id"]
        team = admin.post("/api/admin/teams", json={"org_id": org, "name": "t"}).json()["id"]
        user = admin.post("/api/admin/users", json={"email": "bench@example.com"}).json()["id"]
        admin.post(f"/api/admin/teams/{team}/members", json={"user_id": user, "role": "member"})
        made = admin.post(
            "/api/admin/api-keys", json={"user_id": user, "team_id": team, "name": "bench"}
        )
        key = str(made.json()["key"])
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as c:
        for i in range(100):
            c.put(
                "/api/memory/doc",
                params={**SPACE, "path": f"docs/{i:03}.md"},
                json={"content": f"# doc {i}\n" + "x" * 1000},
            ).raise_for_status()
    return key


def verdict(figure: float, goal: float) -> str:
    return f"goal ≥ {goal}: {figure:.2f} {'✓' if figure >= goal else '✗'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database", default=None, help="default: a temporary SQLite file")
    parser.add_argument(
        "--one-worker",
        action="store_true",
        help="leave out --workers 2 (to measure a checkout that predates it)",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("bench_api.py drives the servers with wrk: apt-get install wrk")

    home = Path(tempfile.mkdtemp(prefix="keepstone-bench-"))
    database = args.database or f"sqlite:///{home}/keepstone.db"
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEPSTONE_")}
    env.update(
        KEEPSTONE_HOME=str(home),
        KEEPSTONE_ADMIN_TOKEN=ADMIN,
        KEEPSTONE_EMBEDDER="none",  # no indexer: the figures are the request path's
        PYTHONPATH=os.pathsep.join(filter(None, [src, env.get("PYTHONPATH", "")])),
    )
    one, two, floor_port = free_port(), free_port(), free_port()

    def serve(port: int, workers: int) -> list[str]:
        argv = [sys.executable, "-m", "keepstone.cli.main", "serve", "--port", str(port)]
        return argv + ["--database", database] + (["--workers", "2"] if workers > 1 else [])

    floor = f"http://127.0.0.1:{floor_port}"
    floor_cmd = [sys.executable, "-c", FLOOR_APP.replace("{port}", str(floor_port))]
    servers = {1: f"http://127.0.0.1:{one}", 2: f"http://127.0.0.1:{two}"}
    with process(serve(one, 1), env, f"{servers[1]}/readyz", home / "one.log"):
        key = seed(servers[1])
        with contextlib.ExitStack() as stack:
            two_workers = None
            if not args.one_worker:
                two_workers = stack.enter_context(
                    process(serve(two, 2), env, f"{servers[2]}/readyz", home / "two.log")
                )
            stack.enter_context(process(floor_cmd, env, f"{floor}/", home / "floor.log"))
            get_doc = lua(
                "GET", "/api/memory/doc?" + urlencode({**SPACE, "path": "docs/042.md"}), key
            )
            put_doc = lua(
                "PUT",
                "/api/memory/doc?" + urlencode(SPACE) + "&path=w/",
                key,
                json.dumps({"content": "# bench\n" + "y" * (1024 - 8)}),
                vary=True,
            )
            get_docs = lua("GET", "/api/memory/docs?" + urlencode({**SPACE, "dir": "docs"}), key)
            scenarios = {
                "floor (constant JSON)": (floor, lua("GET", "/")),
                "GET doc": (servers[1], get_doc),
                "PUT doc (1 KB)": (servers[1], put_doc),
                "GET docs (100)": (servers[1], get_docs),
            }
            if not args.one_worker:
                scenarios["GET doc, 2 workers"] = (servers[2], get_doc)
                scenarios["PUT doc, 2 workers"] = (servers[2], put_doc)
            runs: dict[str, list[Figure]] = {label: [] for label in scenarios}
            splits: dict[str, list[str]] = {label: [] for label in scenarios}
            for _ in range(args.rounds):
                for label, (base, script) in scenarios.items():
                    watch = two_workers if base == servers[2] else None
                    runs[label].append(
                        wrk(base, script, args.seconds, args.clients, watch, splits[label])
                    )

    results = {
        label: Figure(
            *(statistics.median(getattr(f, a) for f in figs) for a in Figure.__annotations__)
        )
        for label, figs in runs.items()
    }
    floor_rps = results["floor (constant JSON)"].rps
    print(
        f"keepstone serve ({database.split(':', 1)[0]}) vs bare FastAPI floor, "
        "same uvicorn settings; "
        f"wrk, {args.clients} connections, median of {args.rounds} rounds x {args.seconds}s"
    )
    print(f"{'scenario':24} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'req/s ÷ floor':>14}")
    for label, fig in results.items():
        print(
            f"{label:24} {fig.rps:8.0f} {fig.p50_ms:8.2f} {fig.p99_ms:8.2f} "
            f"{fig.rps / floor_rps:14.2f}"
        )
    get_ratio = results["GET doc"].rps / floor_rps
    put_ratio = results["PUT doc (1 KB)"].rps / floor_rps
    print(f"GET doc ÷ floor (1 worker)          {verdict(get_ratio, GOALS['GET doc'])}")
    print(f"PUT doc ÷ floor (1 worker)          {verdict(put_ratio, GOALS['PUT doc'])}")
    docs_ratio = results["GET docs (100)"].rps / floor_rps
    print(f"GET docs (100) ÷ floor (1 worker)   {verdict(docs_ratio, GOALS['GET docs'])}")
    if args.one_worker:
        return
    workers_ratio = results["GET doc, 2 workers"].rps / results["GET doc"].rps
    put_workers = results["PUT doc, 2 workers"].rps / results["PUT doc (1 KB)"].rps
    print(f"GET doc, 2 workers ÷ 1 worker       {verdict(workers_ratio, GOALS['workers 2'])}")
    print(f"PUT doc, 2 workers ÷ 1 worker       {put_workers:.2f} (no goal: SQLite has one writer)")
    for label in ("GET doc, 2 workers", "PUT doc, 2 workers"):
        rounds = ", ".join(
            f"{f.rps:.0f} req/s at {s}" for f, s in zip(runs[label], splits[label], strict=True)
        )
        print(f"{label}, each round and its connections per worker: {rounds}")


if __name__ == "__main__":
    main()
