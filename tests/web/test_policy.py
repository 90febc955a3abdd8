"""One parametrized test over the UI's access table (tests/web/policy.py), on SQLite and
PostgreSQL; and the table covers every UI route."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from keepstone import web
from tests.api.policy import app_routes
from tests.api.world import World
from tests.web.conftest import add_outsider
from tests.web.policy import OK, ROWS, SIGN_IN, UI_CREDENTIALS, UiRow, send, ui_routes

#: Long: handed out first under pytest-xdist (tests/conftest.py).
pytestmark = pytest.mark.slow

CASES = [(row, cred) for row in ROWS for cred in UI_CREDENTIALS]


def web_routes(app: FastAPI) -> set[tuple[str, str]]:
    """The routes the UI's router modules add to the app."""
    paths = {
        (method, route.path)
        for module in web.ROUTER_MODULES
        for route in module.router.routes
        for method in getattr(route, "methods", ())
        if method != "HEAD"
    }
    assert paths <= app_routes(app), "a UI route is not registered by create_app"
    return paths


def test_every_ui_route_is_declared(app: FastAPI) -> None:
    declared = ui_routes()
    missing = web_routes(app) - declared
    assert not missing, f"UI routes with no row in tests/web/policy.py: {sorted(missing)}"
    stale = declared - web_routes(app)
    assert not stale, f"UI rows naming no route of the app: {sorted(stale)}"


@pytest.mark.parametrize(("row", "cred"), CASES, ids=[f"{r.id}-{c}" for r, c in CASES])
def test_ui_policy(row: UiRow, cred: str, world: World, client: TestClient) -> None:
    add_outsider(world)
    status, location, body = send(client, world, row, cred)
    expected = row.expect[cred]
    if expected == OK:
        assert status in (200, 303), (status, body[-500:])
        assert not location.startswith("/signin") or row.path in ("/signout", "/reset/{token}")
        return
    if expected == SIGN_IN:
        assert status == 303 and location.startswith("/signin"), (status, location, body[-300:])
        return
    assert status == expected, (status, body[-500:])
