"""Memories for the integrations' tests: local (a fresh ``KEEPSTONE_HOME``) or on a real
``keepstone serve`` (the session's server of tests/sdk, a fresh team per test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from keepstone.sdk import Memory
from tests.sdk.conftest import Server, server

__all__ = ["server"]

#: Where a memory lives: the local tree, or a real server over a socket ("slow").
WHERE = ["local", pytest.param("server", marks=pytest.mark.slow)]


class Memories:
    """``memories(**space, team_quota=None)`` → a fresh :class:`Memory` (closed at teardown)
    of this test's kind, on a project space ``web`` unless told otherwise."""

    def __init__(self, where: str, request: pytest.FixtureRequest, home: Path) -> None:
        self.where = where
        self._request = request
        self._home = home
        self._opened: list[Memory] = []

    def __call__(self, *, team_quota: int | None = None, **space: str) -> Memory:
        space.setdefault("project", "web")
        if self.where == "local":
            mp = self._request.getfixturevalue("monkeypatch")
            if team_quota is not None:
                mp.setenv("KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL", str(team_quota))
            memory = Memory.local(home=self._home, **space)
            mp.delenv("KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL", raising=False)
        else:
            served: Server = self._request.getfixturevalue("server")
            memory = Memory.connect(served.url, served.member_key(team_quota), **space)
        self._opened.append(memory)
        return memory

    def close_all(self) -> None:
        for memory in self._opened:
            memory.close()


@pytest.fixture(params=WHERE)
def memories(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Memories]:
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "none")
    for name in ("KEEPSTONE_SERVER", "KEEPSTONE_TOKEN", "KEEPSTONE_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    factory = Memories(request.param, request, tmp_path / "home")
    try:
        yield factory
    finally:
        factory.close_all()
