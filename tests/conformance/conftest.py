"""One conformance suite for every :class:`~keepstone.store.base.MemoryStore` adapter.

Every test takes ``store_factory`` and runs once per registered adapter. A factory
takes a :class:`~keepstone.quota.Limits`, so tests build stores with small quotas the same
way on every adapter. A test that needs optional behaviour says so with
``@pytest.mark.requires("capability", ...)``; it is generated only for the adapters whose
store declares those ``capabilities`` (never chosen by the adapter's name), so nothing in
the suite skips.

Adding an adapter = one more entry in :data:`OPENERS` (and a branch in
:meth:`StoreSpec.open`, which child processes of the concurrency test call).

The adapters: ``fs``, ``sqlite``, ``postgres``, and ``http`` — the
:class:`~keepstone.store.http.HttpMemoryStore` as a client of an in-process Keepstone app in
local mode, whose own store is a fresh SQLite store with the test's limits
(:class:`~tests.conformance.helpers.ServedHttpStore`).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from keepstone.quota import Limits
from keepstone.store.base import MemoryStore
from tests.conformance.helpers import StoreSpec, declared_capabilities
from tests.sqlite_template import migrated_sqlite

#: kind → builder of a fresh, empty location: (pytest request, a fresh directory) → spec.
Opener = Callable[[pytest.FixtureRequest, Path, Limits], StoreSpec]


def _fs(request: pytest.FixtureRequest, where: Path, limits: Limits) -> StoreSpec:
    return StoreSpec("fs", str(where / "spaces"), limits)


def _sqlite(request: pytest.FixtureRequest, where: Path, limits: Limits) -> StoreSpec:
    return StoreSpec("sqlite", migrated_sqlite(where / "keepstone.db"), limits)


def _postgres(request: pytest.FixtureRequest, where: Path, limits: Limits) -> StoreSpec:
    # A fresh database per test module (conftest's postgres_url), a fresh schema per store.
    url: str = request.getfixturevalue("postgres_url")
    return StoreSpec("postgres", url, limits, schema=f"s_{uuid.uuid4().hex[:12]}")


def _http(request: pytest.FixtureRequest, where: Path, limits: Limits) -> StoreSpec:
    # A client of an in-process Keepstone app (local mode) over a fresh SQLite store in `where`.
    return StoreSpec("http", str(where), limits)


OPENERS: dict[str, Opener] = {
    "fs": _fs,
    "sqlite": _sqlite,
    "postgres": _postgres,
    "http": _http,
}


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


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each test over every adapter that declares what its ``requires`` marks name."""
    if "store_factory" not in metafunc.fixturenames:
        return
    needed: set[str] = set()
    for mark in metafunc.definition.iter_markers("requires"):
        needed.update(mark.args)
    kinds = [k for k in sorted(OPENERS) if needed <= declared_capabilities(k)]
    assert kinds, f"no adapter declares {sorted(needed)}: the test would never run"
    metafunc.parametrize("store_factory", kinds, indirect=True)


@pytest.fixture
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
