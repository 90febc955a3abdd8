"""Fixtures of the unit tests: SQL stores on a SQLite file or a fresh PostgreSQL schema."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from keepstone.quota import Limits
from keepstone.store.sql import SqlStore


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

    @classmethod
    def closing(cls, kind: str, url: str) -> Iterator[Backend]:
        """A backend of ``kind`` at ``url`` (PostgreSQL: in a fresh schema) whose stores
        are closed after the test."""
        b = cls(kind, url, None if kind == "sqlite" else f"t_{uuid.uuid4().hex[:16]}")
        try:
            yield b
        finally:
            for store in b.opened:
                store.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'keepstone.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    yield from Backend.closing(request.param, url)


@pytest.fixture
def store(backend: Backend) -> SqlStore:
    return backend.open()
