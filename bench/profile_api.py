"""Where a document request's time goes, in-process: the real ASGI app, no socket.

Builds the app of ``keepstone serve`` over a temporary SQLite file (or ``--database``),
seeds a team, an API key and a document, then calls the app directly with raw ASGI
messages ``--requests`` times for a GET and for a 1 KB PUT of ``/api/memory/doc``.
Prints, per request: mean time, database transactions, statements (through SQLAlchemy's
``Connection``; a write's statements, and SQLite's ``BEGIN``, go to the driver's cursor
itself and are not among them), statements on a pooled driver connection in autocommit (``pooled``:
:func:`keepstone.db.on_pooled`, each its own transaction), and thread-pool hops; with
``--profile``, the top of a cProfile by cumulative time (or pyinstrument's tree with
``--pyinstrument``). Not a test: it prints figures, asserts nothing.

    .venv/bin/python bench/profile_api.py [--requests 2000] [--profile] [--database URL]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import tempfile
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import anyio.to_thread
from fastapi.testclient import TestClient
from sqlalchemy import event

from keepstone.api.app import create_app
from keepstone.config import Config

ADMIN = "bench-admin-token-0123456789abcdef"
SPACE = {"name": "bench", "project": "p"}
PASSWORD = "bench-password-0123456789"


class Counts:
    def __init__(self) -> None:
        self.transactions = 0
        self.statements = 0
        self.pooled = 0
        self.hops = 0


def instrument(engine: Any, counts: Counts) -> None:
    """Count transactions and statements on ``engine``, and thread-pool hops anywhere."""

    @event.listens_for(engine, "begin")
    def _begin(_conn: Any) -> None:
        counts.transactions += 1

    @event.listens_for(engine, "before_cursor_execute")
    def _statement(*_args: Any) -> None:
        counts.statements += 1

    import keepstone.db.engine

    pooled = keepstone.db.engine.on_pooled

    def counted_pooled(*args: Any, **kwargs: Any) -> Any:
        counts.pooled += 1
        return pooled(*args, **kwargs)

    keepstone.db.engine.on_pooled = counted_pooled  # type: ignore[assignment]

    real = anyio.to_thread.run_sync

    async def counted(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        counts.hops += 1
        return await real(func, *args, **kwargs)

    anyio.to_thread.run_sync = counted  # type: ignore[assignment]


def scope(
    method: str, query: dict[str, str], key: str, body: bytes, path: str = "/api/memory/doc"
) -> dict[str, Any]:
    """An ASGI scope; ``key`` is an API key, or ``cookie:VALUE`` for a browser session."""
    credential = (
        (b"cookie", f"keepstone_session={key[7:]}".encode())
        if key.startswith("cookie:")
        else (b"authorization", f"Bearer {key}".encode())
    )
    headers = [(b"host", b"bench"), credential, (b"user-agent", b"bench")]
    if body:
        headers += [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": urlencode(query).encode(),
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1234),
        "server": ("127.0.0.1", 8420),
    }


async def call(app: Any, s: dict[str, Any], body: bytes) -> int:
    status = 0
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(s, receive, send)
    return status


async def run(
    app: Any, make: Callable[[int], tuple[dict[str, Any], bytes]], n: int
) -> tuple[float, float]:
    """Mean wall time and CPU time (every thread of the process) of ``n`` requests.

    The CPU time is the figure to compare on a shared machine: others' load stretches
    the wall time, barely the CPU time."""
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        s, body = make(i)
        status = await call(app, s, body)
        if status >= 400:
            raise SystemExit(f"request failed: {status}")
    return (time.perf_counter() - started) / n, (time.process_time() - cpu) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--database", default=None, help="default: a temporary SQLite file")
    parser.add_argument("--profile", action="store_true", help="print a cProfile")
    parser.add_argument("--pyinstrument", action="store_true", help="print pyinstrument's tree")
    args = parser.parse_args()

    home = tempfile.mkdtemp(prefix="keepstone-profile-")
    config = Config(
        database_url=args.database or f"sqlite:///{home}/keepstone.db",
        admin_token=ADMIN,
        key_hash_secret="bench-key-hash-secret-0123456789",
    )
    app = create_app(config)
    # The client's lifespan stays open while the app is driven: closing it closes the runtime.
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN}"}) as admin:
        key, session = seed(admin)
        counts = Counts()
        instrument(app.state.runtime.engine, counts)
        asyncio.run(measure(app, key, session, counts, args))


def seed(admin: TestClient) -> tuple[str, str]:
    """A team, a member's API key and browser session, and 100 documents;
    the key and ``cookie:SESSION``."""
    org = admin.post("/api/admin/orgs", json={"name": "bench"}).json()["id"]
    team = admin.post("/api/admin/teams", json={"org_id": org, "name": "t"}).json()["id"]
    user = admin.post(
        "/api/admin/users", json={"email": "b@example.com", "password": PASSWORD}
    ).json()["id"]
    admin.post(f"/api/admin/teams/{team}/members", json={"user_id": user, "role": "member"})
    key = str(
        admin.post(
            "/api/admin/api-keys", json={"user_id": user, "team_id": team, "name": "bench"}
        ).json()["key"]
    )
    for i in range(100):  # the listing reads all of them; the GET reads docs/042.md
        admin.put(
            "/api/memory/doc",
            params={**SPACE, "path": f"docs/{i:03}.md"},
            json={"content": f"# doc {i}\n" + "x" * 1000},
            headers={"Authorization": f"Bearer {key}"},
        ).raise_for_status()
    login = admin.post("/api/auth/login", json={"email": "b@example.com", "password": PASSWORD})
    login.raise_for_status()
    session = str(login.cookies["keepstone_session"])
    admin.cookies.clear()
    return key, f"cookie:{session}"


async def measure(
    app: Any, key: str, session: str, counts: Counts, args: argparse.Namespace
) -> None:
    body_1k = json.dumps({"content": "# bench\n" + "y" * (1024 - 8)}).encode()

    def get(_i: int) -> tuple[dict[str, Any], bytes]:
        return scope("GET", {**SPACE, "path": "docs/042.md"}, key, b""), b""

    def put(i: int) -> tuple[dict[str, Any], bytes]:
        return scope("PUT", {**SPACE, "path": f"w/{i % 500}.md"}, key, body_1k), body_1k

    def get_session(_i: int) -> tuple[dict[str, Any], bytes]:
        return scope("GET", {**SPACE, "path": "docs/042.md"}, session, b""), b""

    def get_docs(_i: int) -> tuple[dict[str, Any], bytes]:
        return scope("GET", {**SPACE, "dir": "docs"}, key, b"", "/api/memory/docs"), b""

    n = args.requests
    kinds = (
        ("GET doc", get),
        ("PUT doc 1 KB", put),
        ("GET, session", get_session),
        ("GET docs (100)", get_docs),
    )
    for label, make in kinds:
        await run(app, make, 50)  # warm up: pools, caches, statement compilation
        before = (counts.transactions, counts.statements, counts.hops, counts.pooled)
        if args.pyinstrument:
            from pyinstrument import Profiler

            profiler = Profiler(async_mode="enabled")
            profiler.start()
            mean, cpu = await run(app, make, n)
            profiler.stop()
            print(profiler.output_text(unicode=True, color=False))
        elif args.profile:
            cprofile = cProfile.Profile()
            cprofile.enable()
            mean, cpu = await run(app, make, n)
            cprofile.disable()
            out = io.StringIO()
            pstats.Stats(cprofile, stream=out).sort_stats("tottime").print_stats(35)
            print(out.getvalue())
        else:
            mean, cpu = await run(app, make, n)
        tx = (counts.transactions - before[0]) / n
        st = (counts.statements - before[1]) / n
        hops = (counts.hops - before[2]) / n
        pooled = (counts.pooled - before[3]) / n
        print(
            f"{label:15} wall {mean * 1e3:6.3f} ms  CPU {cpu * 1e3:6.3f} ms/request  "
            f"transactions {tx:.2f}  statements {st:.2f}  pooled {pooled:.2f}  "
            f"thread hops {hops:.2f}"
        )


if __name__ == "__main__":
    main()
