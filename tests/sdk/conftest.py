"""The Memory API's conformance run: one suite, local and server, sync and async.

Every test that takes ``memory_factory`` runs four times:

- ``local``: :meth:`Memory.local` over a fresh ``KEEPSTONE_HOME`` (the filesystem store);
- ``server``: :meth:`Memory.connect` to a real ``keepstone serve`` subprocess over a socket
  (SQLite), with a fresh org, team, member and API key per test made through the admin API;
- ``async-local`` and ``async-server``: the same, through :class:`AsyncMemory`, driven by
  :class:`SyncOverAsync` so the very same test code awaits every call.

The history tests also run on ``sqlite`` and ``async-sqlite`` (:data:`HISTORY_KINDS`): a
``Memory`` over a SQL store on SQLite in ``tmp_path``, in process, with the local console
acting — the store that kept history first, so the history contract is checked through
the Python API whatever the other stores hold yet.

``memory_factory(**space)`` takes the constructors' space arguments (``bot``, ``project``,
``name``, ``visibility``) and ``team_quota`` (bytes): the team's total on the server (the
org's quota, set by the admin), the tree's total locally (``KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from keepstone.sdk import AsyncMemory, Memory
from tests.serving import keepstone_serve, serve_env

ADMIN_TOKEN = "sdk-admin-token-0123456789abcdefghij"
#: A real server is a subprocess over a socket: "slow" as the other end-to-end tests.
KINDS = [
    "local",
    pytest.param("server", marks=pytest.mark.slow),
    "async-local",
    pytest.param("async-server", marks=pytest.mark.slow),
]
HISTORY_KINDS = [*KINDS, "sqlite", "async-sqlite"]


@dataclass
class Server:
    """A running ``keepstone serve``: its URL and an admin client."""

    url: str
    admin: httpx.Client
    _ids: Iterator[int] = field(default_factory=itertools.count)

    def make(self, path: str, body: dict[str, object]) -> dict[str, Any]:
        r = self.admin.post(path, json=body)
        assert r.status_code == 201, r.text
        return dict(r.json())

    def member_key(self, team_quota: int | None = None) -> str:
        """An API key of a member of a fresh team in a fresh org (with ``team_quota``)."""
        n = next(self._ids)
        org = self.make("/api/admin/orgs", {"name": f"org-{n}", "plan": "pro"})["id"]
        team = self.make("/api/admin/teams", {"org_id": org, "name": f"team-{n}"})["id"]
        if team_quota is not None:  # the org's quota caps each of its teams
            r = self.admin.patch(f"/api/admin/orgs/{org}", json={"memory_quota_bytes": team_quota})
            assert r.status_code == 200 and r.json()["teams_updated"] == [team], r.text
        user = self.make("/api/admin/users", {"email": f"user-{n}@sdk.test"})["id"]
        self.make(f"/api/admin/teams/{team}/members", {"user_id": user, "role": "member"})
        return str(
            self.make("/api/admin/api-keys", {"user_id": user, "team_id": team, "name": "sdk"})[
                "key"
            ]
        )


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The real ``keepstone serve`` (SQLite, keyword search), started once for the session."""
    home = tmp_path_factory.mktemp("serve-home")
    env = serve_env(home, ADMIN_TOKEN, KEEPSTONE_EMBEDDER="none")
    database = f"sqlite:///{home / 'keepstone.db'}"
    with keepstone_serve("--database", database, env=env, log=home / "serve.log") as served:
        with httpx.Client(
            base_url=served.url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
        ) as admin:
            yield Server(served.url, admin)


class SyncOverAsync:
    """An :class:`AsyncMemory` driven as a :class:`Memory`: every method call runs its
    coroutine to the end on one event loop, so the suite's code tests the async twin."""

    def __init__(self, memory: AsyncMemory, runner: asyncio.Runner) -> None:
        self._memory = memory
        self._runner = runner

    @property
    def space(self) -> Any:
        return self._memory.space

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._memory, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._runner.run(method(*args, **kwargs))

        return call

    def __enter__(self) -> SyncOverAsync:
        self._runner.run(self._memory.__aenter__())
        return self

    def __exit__(self, *exc: object) -> None:
        self._runner.run(self._memory.__aexit__(None, None, None))


class MemoryFactory:
    """``memory_factory(**space, team_quota=None)`` → a fresh Memory of this kind (closed at
    teardown). Without a quota, the memories of one test share one team (or one home)."""

    def __init__(
        self, kind: str, request: pytest.FixtureRequest, home: Path, mp: pytest.MonkeyPatch
    ) -> None:
        self.kind = kind
        self.is_async = kind.startswith("async-")
        self.where = kind.removeprefix("async-")
        self._request = request
        self._home = home
        self._mp = mp
        self._key: str | None = None
        self._opened: list[Any] = []
        self._runner = asyncio.Runner() if self.is_async else None

    @property
    def server(self) -> Server:
        found: Server = self._request.getfixturevalue("server")
        return found

    def key(self, team_quota: int | None = None) -> str:
        """The test's member key (a fresh team's when ``team_quota`` is given)."""
        if team_quota is not None:
            return self.server.member_key(team_quota)
        if self._key is None:
            self._key = self.server.member_key()
        return self._key

    def __call__(self, *, team_quota: int | None = None, **space: Any) -> Any:
        cls = AsyncMemory if self.is_async else Memory
        if self.where == "sqlite":
            memory = self._sqlite(**space)
            if self.is_async:
                memory = AsyncMemory(memory)
        elif self.where == "local":
            if team_quota is not None:
                self._mp.setenv("KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL", str(team_quota))
            memory = cls.local(home=self._home, **space)
            self._mp.delenv("KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL", raising=False)
        else:
            memory = cls.connect(self.server.url, self.key(team_quota), **space)
        if isinstance(memory, AsyncMemory):
            assert self._runner is not None
            wrapped: Any = SyncOverAsync(memory, self._runner)
        else:
            wrapped = memory
        self._opened.append(wrapped)
        return wrapped

    def _sqlite(self, **space: Any) -> Memory:
        from keepstone.sdk.memory import space_for
        from keepstone.service.access import console_principal
        from keepstone.service.spaces import SpaceService
        from keepstone.store.sql import SqlStore

        who = console_principal("local")
        ref = space_for(
            who.team_id,
            bot=space.get("bot"),
            project=space.get("project"),
            name=space.get("name", "default"),
            visibility=space.get("visibility"),
            user=None,
        )
        store = SqlStore.open(f"sqlite:///{self._home.parent / 'sdk.db'}")
        return Memory(SpaceService(store), who, ref, "sqlite")

    def close_all(self) -> None:
        for memory in self._opened:
            memory.close()
        if self._runner is not None:
            self._runner.close()


@pytest.fixture(params=KINDS)
def memory_factory(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[MemoryFactory]:
    # Keyword search: the embedder is not what this suite is about (tests/search is).
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "none")
    for name in ("KEEPSTONE_SERVER", "KEEPSTONE_TOKEN", "KEEPSTONE_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    factory = MemoryFactory(request.param, request, tmp_path / "home", monkeypatch)
    try:
        yield factory
    finally:
        factory.close_all()


@pytest.fixture
def memory(memory_factory: MemoryFactory) -> Any:
    """A memory of this kind on a project space ``web`` (the default visibility)."""
    return memory_factory(project="web")
