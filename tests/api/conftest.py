"""API test fixtures: one app per test module and database kind (SQLite, PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from keepstone.api.app import create_app
from keepstone.config import Config
from tests.api.world import ADMIN_TOKEN, SERVICE_TOKEN, World, build_world
from tests.conftest import fresh_database

#: The database kinds every API and end-to-end test module runs on.
DATABASE_KINDS = ["sqlite", "postgres"]


def database_fixture(name: str) -> Any:
    """A module-scoped fixture called ``name``, run once per kind of :data:`DATABASE_KINDS`,
    that yields the URL of a :func:`fresh_database` (the end-to-end tests make theirs here).
    """

    def fixture(
        request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[str]:
        """A fresh, empty database of each kind for the test module."""
        with fresh_database(request.param, tmp_path_factory) as url:
            yield url

    return pytest.fixture(fixture, scope="module", params=DATABASE_KINDS, name=name)


database_url = database_fixture("database_url")


def make_settings(database_url: str, **overrides: object) -> Config:
    base: dict[str, object] = {
        "database_url": database_url,
        "admin_token": ADMIN_TOKEN,
        "service_token": SERVICE_TOKEN,
        "key_hash_secret": "test-key-hash-secret-0123456789",
        # Cheap password hashes keep the suite fast; production keeps argon2's defaults.
        "argon2_time_cost": 1,
        "argon2_memory_kib": 1024,
    }
    base.update(overrides)
    return Config(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def app(database_url: str) -> Iterator[FastAPI]:
    application = create_app(make_settings(database_url))
    try:
        yield application
    finally:
        application.state.runtime.engine.dispose()


@pytest.fixture(scope="module")
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def world(app: FastAPI, client: TestClient) -> World:
    return build_world(app, client)
