"""Helpers shared by the conformance tests (importable from child processes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import unquote

import anyio
import httpx

from keepstone.quota import Limits
from keepstone.service.access import LOCAL_PRINCIPAL
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import MemoryStore, Usage
from keepstone.store.http import HttpMemoryStore
from tests.sqlite_template import migrated_sqlite

if TYPE_CHECKING:
    from fastapi.testclient import TestClient
    from starlette.types import ASGIApp

#: The team and user the refs of the suite carry: those of the local principal, so that a
#: client of a local-mode server (which stamps every ref with the caller's team and user)
#: addresses exactly the spaces the test names, and reports the same space ids.
TEAM = LOCAL_PRINCIPAL.team_id
USER = LOCAL_PRINCIPAL.user_id
#: A second team: only stores that declare ``tenant_addressing`` can name its spaces.
OTHER_TEAM = "team-b"


@dataclass(frozen=True)
class StoreSpec:
    """Where a store lives and with which limits: picklable, so a child process can
    open the very same store (``spec.open()``)."""

    kind: str
    target: str
    limits: Limits
    schema: str | None = None

    def open(self) -> MemoryStore:
        if self.kind == "fs":
            from keepstone.store.fs import FilesystemStore

            return FilesystemStore(self.target, self.limits)
        if self.kind == "http":
            return ServedHttpStore(Path(self.target), self.limits)
        from keepstone.store.sql import SqlStore

        return SqlStore.open(self.target, self.limits, schema=self.schema)


def declared_capabilities(kind: str) -> frozenset[str]:
    """What the adapter of ``kind`` declares (its class attribute; never a name test)."""
    if kind == "fs":
        from keepstone.store.fs import FilesystemStore

        return FilesystemStore.capabilities
    if kind == "http":
        return ServedHttpStore.capabilities
    from keepstone.store.sql import SqlStore

    return SqlStore.capabilities


def _scope(request: httpx.Request, app_state: dict[str, Any]) -> dict[str, Any]:
    """The ASGI scope of ``request``, as Starlette's TestClient builds it."""
    url = request.url
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": url.scheme,
        "path": unquote(url.path),
        "raw_path": url.raw_path.split(b"?", 1)[0],
        "query_string": url.query,
        "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.headers.raw],
        "client": ("testclient", 50000),
        "server": (url.host, url.port or 80),
        "extensions": {},
        "state": app_state.copy(),
    }


async def _exchange(
    app: ASGIApp, scope: dict[str, Any], body: bytes
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The app's whole answer to one request: status, headers, body. Once the body is
    delivered, ``receive`` says the client left only when the answer is complete (a
    streaming answer listens for that, and would stop early)."""
    status, headers, chunks = 500, [], []
    complete = anyio.Event()
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if delivered:
            await complete.wait()
            return {"type": "http.disconnect"}
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status, headers = message["status"], list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(bytes(message.get("body", b"")))
            if not message.get("more_body", False):
                complete.set()

    try:
        await app(scope, receive, send)
    finally:
        complete.set()
    return status, headers, b"".join(chunks)


class AppTransport(httpx.BaseTransport):
    """Serves an httpx client's requests from an in-process app, each one call into the
    event loop of its TestClient (entered: its lifespan runs, its portal is open).

    The TestClient's own transport runs the app as a task and hands every message of the
    exchange between the test's thread and the loop's (eight hops for a small read), and
    this adapter then copied its answer into one of httpx's: together several times what
    the app spent answering. Here a request is one call: the same scope and messages reach
    the app, and an exception it raises reaches the test."""

    def __init__(self, client: TestClient) -> None:
        self._client = client

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        client = self._client
        assert client.portal is not None, "enter the TestClient first"
        scope = _scope(request, client.app_state)
        status, headers, body = client.portal.call(_exchange, client.app, scope, request.read())
        return httpx.Response(status, headers=headers, content=body)


class ServedHttpStore(HttpMemoryStore):
    """The HTTP adapter, talking to a Keepstone app of its own served in this process.

    The app runs in local single-tenant mode (every request is the local principal, who
    has platform authority) over a fresh SQL store in ``home`` (SQLite) with ``limits``.
    Closing the client shuts the app down and closes that store.
    """

    def __init__(self, home: Path, limits: Limits) -> None:
        from fastapi.testclient import TestClient

        from keepstone.api.app import app_for
        from keepstone.config import Config
        from keepstone.runtime import open_runtime

        url = migrated_sqlite(home / "keepstone.db")
        config = Config(home=home, database_url=url, local=True)
        runtime = open_runtime(config, limits=limits)
        self._served = runtime.store
        self._app_client = TestClient(app_for(runtime))
        self._app_client.__enter__()  # one event loop and lifespan for the store's life
        super().__init__(str(self._app_client.base_url), transport=AppTransport(self._app_client))

    @property
    def served(self) -> MemoryStore:
        """The store the app serves: another writer of the same documents, beside this
        client."""
        return self._served

    @property
    def clock(self) -> Callable[[], datetime]:
        """The served store's clock: what "now" is for the versions the server records, so
        a test drives time through the client as it would on any other adapter."""
        return self._served.clock

    @clock.setter
    def clock(self, value: Callable[[], datetime]) -> None:
        self._served.clock = value

    def prune_history(self, tenant: str | None = None) -> int:
        """What the server's purge job does (no route runs it): prune the served store."""
        return self._served.prune_history(tenant)

    def history_usage(self, tenant: str) -> tuple[int, int]:
        """The served store's history counter (what GET /api/memory/usage reports)."""
        return self._served.history_usage(tenant)

    def close(self) -> None:
        try:
            super().close()
        finally:
            # Ends the app's lifespan, which closes its runtime (and the engine it made).
            self._app_client.__exit__(None, None, None)


def project_ref(tenant: str = TEAM, name: str = "notes", project: str = "proj-1") -> SpaceRef:
    return SpaceRef.build(Visibility.PROJECT, name, tenant=tenant, project=project)


def ref_for(visibility: Visibility, tenant: str = TEAM, name: str = "notes") -> SpaceRef:
    """A valid ref of any visibility, with every qualifier it takes filled in."""
    return SpaceRef.build(visibility, name, tenant=tenant, project="proj-1", bot="bot-1", user=USER)


Snapshot = tuple[list[tuple[str, int, str]], Usage]


def snapshot(store: MemoryStore, ref: SpaceRef) -> Snapshot:
    """What a space holds (path, size, etag) and its usage, to compare before/after."""
    return ([(d.path, d.size_bytes, d.etag) for d in store.list(ref)], store.usage(ref))


def contents(store: MemoryStore, ref: SpaceRef) -> dict[str, str]:
    return {doc.path: doc.content for doc in store.iter_documents(ref)}


class FakeClock:
    """A store clock the test drives: ``store.clock = clock``; ``tick`` steps it forward.

    Every adapter with ``history`` stamps new versions with its ``clock`` (the HTTP adapter
    drives the clock of the store it serves), so instants before, between and after
    versions are exact, with no sleeps."""

    def __init__(self, start: datetime = datetime(2026, 1, 1, tzinfo=UTC)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def tick(self, seconds: float = 1.0) -> datetime:
        """Step forward; return the new instant."""
        self.now += timedelta(seconds=seconds)
        return self.now


@runtime_checkable
class HistoryKeeper(Protocol):
    """The history's retention, as a store that keeps the history answers it."""

    def prune_history(self, tenant: str | None = None) -> int: ...

    def history_usage(self, tenant: str) -> tuple[int, int]: ...


def history_keeper(store: MemoryStore) -> HistoryKeeper:
    """The store that keeps ``store``'s history: the store itself, or for the served HTTP
    adapter the store of the app it talks to (retention is the server's job, not a
    client's)."""
    if isinstance(store, HistoryKeeper):
        return store
    if isinstance(store, ServedHttpStore):
        served = store._app_client.app.state.runtime.store
        assert isinstance(served, HistoryKeeper)
        return served
    raise AssertionError(f"{type(store).__name__} keeps no history retention")
