"""One parametrized test over the declared policy table (tests/api/policy.py)."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.api.policy import OK, Row, all_rows, app_routes
from tests.api.world import CREDENTIALS, World

#: Long: handed out first under pytest-xdist (tests/conftest.py).
pytestmark = pytest.mark.slow

ROWS = all_rows()
CASES = [(row, cred) for row in ROWS for cred in CREDENTIALS]


def test_every_route_is_declared(app: FastAPI) -> None:
    from tests.web.policy import ui_routes  # the web UI's routes: its own table

    declared = {(row.method, row.path) for row in ROWS}
    missing = app_routes(app) - declared - ui_routes()
    assert not missing, f"routes with no row in the policy table: {sorted(missing)}"
    stale = declared - app_routes(app)
    assert not stale, f"policy rows naming no route of the app: {sorted(stale)}"


def test_every_row_names_every_credential() -> None:
    for row in ROWS:
        assert set(row.expect) == set(CREDENTIALS), row.id


@pytest.mark.parametrize(("row", "cred"), CASES, ids=[f"{r.id}-{c}" for r, c in CASES])
def test_policy(row: Row, cred: str, world: World, client: TestClient) -> None:
    req = row.build(world)
    headers = {**world.headers(cred, fresh=row.fresh_session), **req.headers}
    response = client.request(
        req.method, req.url, params=req.params, json=req.json, content=req.content, headers=headers
    )
    client.cookies.clear()
    expected = row.expect[cred]
    if isinstance(expected, str):
        assert expected == OK
        assert 200 <= response.status_code < 300, (response.status_code, response.text)
        return
    status, code = expected
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code, response.text
