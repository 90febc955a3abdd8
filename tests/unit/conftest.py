"""Fixtures of the unit tests: SQL stores on a SQLite file or a fresh PostgreSQL schema."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cairn.quota import Limits
from cairn.store.sql import SqlStore


@dataclass
class Backend:
    """Where a test's stores live: a SQLite file, or a fresh PostgreSQL schema."""

    kind: str
    url: str
    schema: str | None
    opened: list[SqlStore] = field(default_factory=list)

    def open(self, limits: Limits = Limits()) -> SqlStore:  # noqa: B008
        store = SqlStore.open(self.url, limits, schema=self.schema)
        self.opened.append(store)
        return store


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        b = Backend("sqlite", f"sqlite:///{tmp_path / 'cairn.db'}", None)
    else:
        url: str = request.getfixturevalue("postgres_url")
        b = Backend("postgres", url, f"t_{uuid.uuid4().hex[:16]}")
    try:
        yield b
    finally:
        for store in b.opened:
            store.close()


@pytest.fixture
def store(backend: Backend) -> SqlStore:
    return backend.open()
