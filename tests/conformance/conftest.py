"""One conformance suite for every :class:`~cairn.store.base.MemoryStore` adapter.

Every test takes ``store_factory`` and runs once per registered adapter. A factory
takes a :class:`~cairn.quota.Limits`, so tests build stores with small quotas the same
way on every adapter. A test that needs optional behaviour skips on the store's
declared ``capabilities`` — never on the adapter's name.

Adding an adapter = one more entry in :data:`OPENERS` (and a branch in
:meth:`StoreSpec.open`, which child processes of the concurrency test call).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cairn.quota import Limits
from cairn.store.base import MemoryStore
from tests.conformance.helpers import StoreSpec

#: kind → builder of a fresh, empty location: (pytest request, a fresh directory) → spec.
Opener = Callable[[pytest.FixtureRequest, Path, Limits], StoreSpec]


def _fs(request: pytest.FixtureRequest, where: Path, limits: Limits) -> StoreSpec:
    return StoreSpec("fs", str(where / "spaces"), limits)


def _sqlite(request: pytest.FixtureRequest, where: Path, limits: Limits) -> StoreSpec:
    return StoreSpec("sqlite", f"sqlite:///{where / 'cairn.db'}", limits)


def _postgres(request: pytest.FixtureRequest, where: Path, limits: Limits) -> StoreSpec:
    # A fresh database per test module (conftest's postgres_url), a fresh schema per store.
    url: str = request.getfixturevalue("postgres_url")
    return StoreSpec("postgres", url, limits, schema=f"s_{uuid.uuid4().hex[:12]}")


OPENERS: dict[str, Opener] = {"fs": _fs, "sqlite": _sqlite, "postgres": _postgres}


class StoreFactory:
    """``store_factory(limits)`` → a fresh, empty store of this adapter (closed at teardown)."""

    def __init__(self, kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        self.kind = kind
        self._request = request
        self._tmp = tmp_path
        self._counter = itertools.count()
        self._opened: list[MemoryStore] = []

    def spec(self, limits: Limits | None = None) -> StoreSpec:
        where = self._tmp / f"store-{next(self._counter)}"
        where.mkdir()
        return OPENERS[self.kind](self._request, where, limits or Limits())

    def open(self, spec: StoreSpec) -> MemoryStore:
        store = spec.open()
        self._opened.append(store)
        return store

    def __call__(self, limits: Limits | None = None) -> MemoryStore:
        return self.open(self.spec(limits))

    def close_all(self) -> None:
        for store in self._opened:
            store.close()


@pytest.fixture(params=sorted(OPENERS))
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    factory = StoreFactory(request.param, request, tmp_path)
    try:
        yield factory
    finally:
        factory.close_all()


@pytest.fixture
def store(store_factory: StoreFactory) -> MemoryStore:
    """A store of this adapter with the default limits."""
    return store_factory(Limits())


def require(store: MemoryStore, capability: str) -> None:
    """Skip unless the store declares ``capability`` (never skip on the adapter name)."""
    if capability not in store.capabilities:
        pytest.skip(f"store does not declare the {capability!r} capability")
