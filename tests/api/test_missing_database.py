"""A PostgreSQL database dropped under a running server: every caller hears the outage's
message, whatever the route and credential, and none hears the database's name, host or
user; the operator's log has the command that creates it again."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from keepstone.api.app import create_app
from keepstone.errors import DATABASE_AWAY
from tests.api.conftest import make_settings
from tests.api.world import PASSWORD, SEED_PATH, SPACE, World, admin_headers, build_world
from tests.conftest import drop_postgres_database


def test_a_dropped_database_is_an_outage_to_callers_and_a_command_to_the_operator(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    database_url = postgres_url
    app: FastAPI = create_app(make_settings(database_url))
    try:
        with TestClient(app) as client:
            world: World = build_world(app, client)
            q = f"name={SPACE['name']}&project={SPACE['project']}"
            drop_postgres_database(database_url)
            with caplog.at_level(logging.ERROR):
                answers = [
                    client.post(
                        "/api/auth/login",
                        json={"email": world.emails["member"], "password": PASSWORD},
                    ),
                    client.get(
                        f"/api/memory/doc?{q}&path={SEED_PATH}", headers=world.headers("api_key")
                    ),
                    client.post("/api/admin/orgs", json={"name": "x"}, headers=admin_headers()),
                    client.post(
                        f"/api/internal/teams/{world.team_id}/memory",
                        json={"text": "a note"},
                        headers=world.headers("service_token"),
                    ),
                ]
    finally:
        app.state.runtime.engine.dispose()
    parts = urlsplit(database_url)
    secret = (parts.path.lstrip("/"), f"-h {parts.hostname}", f"-U {parts.username}", "createdb")
    for r in answers:
        assert r.status_code == 503, r.text
        assert r.json()["error"] == {"code": "store_unavailable", "message": DATABASE_AWAY}
        assert not any(s in r.text for s in secret), r.text
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert f"createdb -h {parts.hostname}" in logged and parts.path.lstrip("/") in logged
