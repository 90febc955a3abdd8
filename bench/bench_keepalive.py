"""Closed connections with no response from ``keepstone serve --workers N``: which, and why.

Starts ``keepstone serve --local --workers N`` (default 4) on SQLite on 127.0.0.1, then
runs ``--clients`` threads, each with one keep-alive connection pool, sending in turn an
import (``POST /api/memory/import``, a gzipped tarball of ``--members`` notes), a
document write and a read, with an idle gap before every request drawn from
``--gaps`` (seconds, around the server's keep-alive timeout). Counts every outcome: an
answer, or the exception the client raised (``RemoteProtocolError: Server disconnected
without sending a response`` is the "closed with no response"). Meanwhile it watches the
workers' process ids, so a worker killed and replaced (uvicorn's health check) shows as
a replacement, and counts the lines the server logged.

``--client httpx`` is a bare ``httpx.Client`` (httpx's own pool, as any httpx caller
has); ``--client store`` is Keepstone's :class:`~keepstone.store.http.HttpMemoryStore`
(what ``keepstone memory --server`` and the SDK use). ``--keep-alive S`` sets
``KEEPSTONE_KEEP_ALIVE_SECONDS`` for the server (unset: the server's default).

    .venv/bin/python bench/bench_keepalive.py
    .venv/bin/python bench/bench_keepalive.py --client store --gaps 4.8,5.2 --rounds 12
    .venv/bin/python bench/bench_keepalive.py --keep-alive 5 --gaps 4.95,5.05

Nothing is asserted; the test of the fix is ``tests/e2e/test_serve_keepalive.py``.
"""

from __future__ import annotations

import argparse
import collections
import io
import random
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

from keepstone.errors import KeepstoneError
from keepstone.spaces import SpaceRef
from keepstone.store.http import HttpMemoryStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving import Served, serve


def archive(members: int) -> bytes:
    """A gzipped tarball of ``members`` small notes."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for i in range(members):
            body = f"# note {i}\n\n" + "words of the note " * 40 + "\n"
            data = body.encode()
            info = tarfile.TarInfo(f"d{i % 20}/n{i}.md")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class Outcomes:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()

    def add(self, what: str) -> None:
        with self.lock:
            self.counts[what] += 1


def _name(exc: BaseException) -> str:
    cause = exc.__cause__ if isinstance(exc, KeepstoneError) and exc.__cause__ else exc
    return f"{type(cause).__name__}: {str(cause)[:60]}"


def run_httpx(base: str, body: bytes, args: argparse.Namespace, out: Outcomes, n: int) -> None:
    rng = random.Random(n)
    params = {"name": f"bench{n}", "visibility": "private"}
    with httpx.Client(base_url=base, timeout=120) as client:
        client.get("/readyz")
        for i in range(args.rounds):
            time.sleep(rng.uniform(*args.gaps))
            kind = ("import", "put", "get")[i % 3]
            try:
                if kind == "import":
                    r = client.post(
                        "/api/memory/import",
                        params=params,
                        content=body,
                        headers={"Content-Type": "application/gzip"},
                    )
                elif kind == "put":
                    r = client.put(
                        "/api/memory/doc",
                        params={**params, "path": f"p{i}.md"},
                        content=b"x\n",
                        headers={"Content-Type": "text/markdown"},
                    )
                else:
                    r = client.get("/api/memory/docs", params=params)
                out.add(f"{kind} {r.status_code}")
            except httpx.HTTPError as exc:
                out.add(f"{kind} {_name(exc)}")


def run_store(base: str, body: bytes, args: argparse.Namespace, out: Outcomes, n: int) -> None:
    rng = random.Random(n)
    ref = SpaceRef("private", f"bench{n}")
    store = HttpMemoryStore(base, timeout=120)
    try:
        store.list(ref)
        for i in range(args.rounds):
            time.sleep(rng.uniform(*args.gaps))
            kind = ("import", "put", "get")[i % 3]
            try:
                if kind == "import":
                    store.import_archive(ref, io.BytesIO(body))
                elif kind == "put":
                    store.write(ref, f"p{i}.md", b"x\n")
                else:
                    store.list(ref)
                out.add(f"{kind} ok")
            except KeepstoneError as exc:
                out.add(f"{kind} {_name(exc)}")
    finally:
        store.close()


def workers(pid: int) -> set[int]:
    """The server's worker processes now (a worker dead and not yet reaped included)."""
    try:
        kids = psutil.Process(pid).children()
    except psutil.Error:
        return set()
    found = set()
    for kid in kids:
        try:
            if "spawn_main" in " ".join(kid.cmdline()):
                found.add(kid.pid)
        except psutil.ZombieProcess:
            found.add(kid.pid)
        except psutil.Error:
            pass
    return found


def settled_workers(pid: int, count: int) -> set[int]:
    """The workers, once ``count`` of them have stayed the same for longer than a health
    check (uvicorn's supervisor replaces a worker that misses one while it starts)."""
    last, since = workers(pid), time.monotonic()
    while len(last) < count or time.monotonic() - since < 6:
        time.sleep(0.2)
        now = workers(pid)
        if now != last:
            last, since = now, time.monotonic()
    return last


def drive(served: Served, body: bytes, args: argparse.Namespace) -> tuple[Outcomes, int, float]:
    """The clients' outcomes against ``served``, the workers replaced meanwhile, and the
    seconds the clients took."""
    first = settled_workers(served.pid, args.workers)
    seen = set(first)
    out = Outcomes()
    target = run_httpx if args.client == "httpx" else run_store
    threads = [
        threading.Thread(target=target, args=(served.base, body, args, out, n))
        for n in range(args.clients)
    ]
    start = time.monotonic()
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        seen |= workers(served.pid)
        time.sleep(0.2)
    return out, len(seen - first), time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=9, help="requests per client")
    parser.add_argument("--members", type=int, default=400, help="notes per import")
    parser.add_argument("--gaps", default="4.85,5.15", help="idle gap range, seconds")
    parser.add_argument("--client", choices=("httpx", "store"), default="httpx")
    parser.add_argument("--keep-alive", default=None, help="KEEPSTONE_KEEP_ALIVE_SECONDS")
    args = parser.parse_args()
    args.gaps = tuple(float(g) for g in args.gaps.split(","))
    body = archive(args.members)
    env = {"KEEPSTONE_EMBEDDER": "none"}
    if args.keep_alive is not None:
        env["KEEPSTONE_KEEP_ALIVE_SECONDS"] = args.keep_alive
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        database = f"sqlite:///{home}/keepstone.db"
        with serve(database, home, workers=args.workers, flags=("--local",), **env) as served:
            out, replaced, elapsed = drive(served, body, args)
        port = served.base.rsplit(":", 1)[1]
        lines = (home / f"serve-{port}.log").read_text(errors="replace").splitlines()
    total = sum(out.counts.values())
    print(
        f"workers {args.workers}, clients {args.clients} ({args.client}), "
        f"{total} requests in {elapsed:.0f} s, gaps {args.gaps[0]}-{args.gaps[1]} s, "
        f"keep-alive {args.keep_alive or 'default'}"
    )
    for what, count in sorted(out.counts.items()):
        print(f"  {count:5d}  {what}")
    print(f"  workers replaced while the clients ran: {replaced}")
    print(f"  server log lines: {len(lines)}")
    for line in [line for line in lines if not line.startswith("{")][-40:]:
        print(f"    | {line[:160]}")


if __name__ == "__main__":
    main()
