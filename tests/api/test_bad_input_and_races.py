"""Bad input and lost races get the API's own errors, never a 500 (each failed once):

* deeply nested JSON bodies answered 500 (RecursionError) instead of ``400 invalid_request``;
* ``false``/``true`` were taken as quotas of 0/1 bytes by the admin API;
* a duplicate create that lost a race to the unique index answered 500 (IntegrityError);
* a missing space query parameter answered ``invalid_request``, and a missing ``path``
  named the field ``body``, instead of the domain's codes.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.engine import Engine

from keepstone.db import utcnow
from keepstone.identity import schema as t
from keepstone.jsonbody import MAX_JSON_DEPTH
from tests.api.world import SERVICE_TOKEN, SPACE, World, admin_headers, unique

DEEP = "[" * 1000 + "]" * 1000
JSON = {"Content-Type": "application/json"}


def in_field(name: str, depth: int = 1000) -> str:
    """An object whose one field holds arrays nested ``depth`` deep."""
    return '{"' + name + '": ' + "[" * depth + "]" * depth + "}"


def bodies(field: str) -> pytest.MarkDecorator:
    """Parameters: a bare deep array, one in ``field``, and one just over the bound."""
    just_over = in_field(field, MAX_JSON_DEPTH)  # the object is one more level
    return pytest.mark.parametrize(
        "body", [DEEP, in_field(field), just_over], ids=["array", "in-field", "just-over"]
    )


def key(world: World, role: str = "member") -> dict[str, str]:
    return {"Authorization": f"Bearer {world.keys[role]}"}


def error(r: Any) -> tuple[int, str, str]:
    """(status, code, field) of an error answer."""
    body: dict[str, Any] = r.json().get("error", {}) if r.content else {}
    return r.status_code, body.get("code", ""), body.get("field", "")


# --- deeply nested JSON bodies ------------------------------------------------------------


@bodies("query")
def test_deep_json_search_body_is_400(client: TestClient, world: World, body: str) -> None:
    r = client.post(
        f"/api/teams/{world.team_id}/memory/search",
        content=body,
        headers={**key(world), **JSON},
    )
    assert error(r) == (400, "invalid_request", "body")
    assert str(MAX_JSON_DEPTH) in r.json()["error"]["message"]


@bodies("text")
def test_deep_json_internal_save_body_is_400(client: TestClient, world: World, body: str) -> None:
    r = client.post(
        f"/api/internal/teams/{world.team_id}/memory",
        content=body,
        headers={"Authorization": f"Bearer {SERVICE_TOKEN}", **JSON},
    )
    assert error(r) == (400, "invalid_request", "body")


@bodies("content")
def test_deep_json_put_doc_body_is_400(client: TestClient, world: World, body: str) -> None:
    r = client.put(
        "/api/memory/doc",
        params={**SPACE, "path": f"{unique('deep')}.md"},
        content=body,
        headers={**key(world), **JSON},
    )
    assert error(r) == (400, "invalid_request", "body")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/admin/orgs", DEEP),
        ("/api/admin/orgs", in_field("name")),
        ("/api/auth/login", in_field("email")),
    ],
)
def test_deep_json_on_fastapi_parsed_bodies_is_invalid_request(
    client: TestClient, world: World, path: str, body: str
) -> None:
    # FastAPI parses these bodies itself; its parser's RecursionError was a bare
    # 400 bad_request "There was an error parsing the body", not the product's error.
    r = client.post(path, content=body, headers={**admin_headers(), **JSON})
    assert error(r) == (400, "invalid_request", "body")


# --- booleans are not integers -------------------------------------------------------------


@pytest.mark.parametrize("value", [False, True, "5"])
def test_quota_refuses_booleans_and_non_integers(
    client: TestClient, world: World, value: object
) -> None:
    before = world.identity.get_org(world.org_id)["memory_quota_bytes"]
    r = client.patch(
        f"/api/admin/orgs/{world.org_id}",
        json={"memory_quota_bytes": value},
        headers=admin_headers(),
    )
    assert error(r) == (400, "invalid_request", "memory_quota_bytes")
    assert world.identity.get_org(world.org_id)["memory_quota_bytes"] == before
    r = client.patch(
        "/api/admin/instance", json={"memory_quota_bytes": value}, headers=admin_headers()
    )
    assert error(r) == (400, "invalid_request", "memory_quota_bytes")
    # Whole numbers (and null for the org) still work.
    org = f"/api/admin/orgs/{world.org_id}"
    r = client.patch(org, json={"memory_quota_bytes": 1 << 40}, headers=admin_headers())
    assert r.status_code == 200 and r.json()["memory_quota_bytes"] == 1 << 40
    r = client.patch(org, json={"memory_quota_bytes": None}, headers=admin_headers())
    assert r.status_code == 200 and r.json()["memory_quota_bytes"] is None
    r = client.patch(
        "/api/admin/instance", json={"memory_quota_bytes": 1 << 30}, headers=admin_headers()
    )
    assert r.status_code == 200 and r.json() == {"memory_quota_bytes": 1 << 30}


def test_super_admin_flag_refuses_integers(client: TestClient, world: World) -> None:
    body = {"email": f"{unique('int')}@example.com", "super_admin": 1}
    r = client.post("/api/admin/users", json=body, headers=admin_headers())
    assert error(r) == (400, "invalid_request", "super_admin")


# --- a create that loses a race to the unique index -------------------------------------------


@contextlib.contextmanager
def blinded(engine: Engine, matches: Callable[[str], bool]) -> Iterator[None]:
    """Make the statements ``matches`` picks find no row, as if a concurrent writer's row
    were not committed yet: the check (or the delete) misses it, the insert then hits the
    unique index — the race, made deterministic, on either dialect."""

    def rewrite(
        _conn: Any, _cursor: Any, statement: str, parameters: Any, _ctx: Any, _many: bool
    ) -> tuple[str, Any]:
        return (f"{statement} AND 1 = 0" if matches(statement) else statement), parameters

    event.listen(engine, "before_cursor_execute", rewrite, retval=True)
    try:
        yield
    finally:
        event.remove(engine, "before_cursor_execute", rewrite)


def _email_check(statement: str) -> bool:
    return statement.startswith("SELECT users.id") and "users.email =" in statement


def test_duplicate_user_that_passed_the_check_is_409(client: TestClient, world: World) -> None:
    email = f"{unique('dup')}@example.com"
    world.identity.create_user(email)
    with blinded(world.identity.engine, _email_check):
        r = client.post("/api/admin/users", json={"email": email}, headers=admin_headers())
    assert error(r) == (409, "conflict", "email")


@pytest.mark.parametrize("scope", ["team", "org"])
def test_membership_added_twice_at_once_is_409(
    client: TestClient, world: World, scope: str
) -> None:
    user = world.scratch_user()
    if scope == "team":
        path, table = f"/api/admin/teams/{world.team_id}/members", "team_members"
    else:
        path, table = f"/api/admin/orgs/{world.org_id}/members", "org_members"
    body = {"user_id": user, "role": "member"}
    assert client.post(path, json=body, headers=admin_headers()).status_code == 201
    # The other request's membership row is there, but this one's delete missed it.
    with blinded(world.identity.engine, lambda s: s.startswith(f"DELETE FROM {table} ")):
        r = client.post(path, json=body, headers=admin_headers())
    assert error(r) == (409, "conflict", "user_id")


def _wait_until_blocked_on_insert(engine: Engine, table: str, timeout: float = 20.0) -> None:
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND query LIKE :q"
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            if conn.execute(query, {"q": f"INSERT INTO {table}%"}).scalar():
                return
        time.sleep(0.02)
    pytest.fail(f"no INSERT INTO {table} waited on a lock within {timeout}s")


# Generated for PostgreSQL only: SQLite serialises writers (BEGIN IMMEDIATE), so there is
# no race to lose there.
@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_concurrent_duplicate_user_on_postgres_is_409(client: TestClient, world: World) -> None:
    engine = world.identity.engine
    assert engine.dialect.name == "postgresql"
    email = f"{unique('race')}@example.com"
    outcome: list[object] = []

    def racer() -> None:
        try:
            outcome.append(
                client.post("/api/admin/users", json={"email": email}, headers=admin_headers())
            )
        except Exception as exc:  # before the fix: the IntegrityError itself
            outcome.append(exc)

    thread = threading.Thread(target=racer)
    with engine.connect() as other, other.begin():
        # A concurrent create, not committed yet: the racer's check cannot see it, so its
        # insert waits on the unique index until this commits, then fails.
        row = {"id": unique("user"), "email": email, "name": "", "password_hash": None}
        other.execute(t.users.insert().values(**row, super_admin=False, created_at=utcnow()))
        thread.start()
        _wait_until_blocked_on_insert(engine, "users")
    thread.join(30)
    assert len(outcome) == 1, "the racing request did not finish"
    assert not isinstance(outcome[0], Exception), repr(outcome[0])
    assert error(outcome[0]) == (409, "conflict", "email")


# --- missing space query parameters ---------------------------------------------------------


@pytest.mark.parametrize("route", ["/api/memory/docs", "/api/memory/usage", "/api/memory/export"])
def test_missing_name_is_invalid_space_ref(client: TestClient, world: World, route: str) -> None:
    r = client.get(route, params={"project": "p1"}, headers=key(world))
    assert error(r) == (400, "invalid_space_ref", "name")
    assert "'name'" in r.json()["error"]["message"]


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_missing_path_is_invalid_path_naming_path(
    client: TestClient, world: World, method: str
) -> None:
    kwargs: dict[str, Any] = {"json": {"content": "x"}} if method == "PUT" else {}
    r = client.request(method, "/api/memory/doc", params=SPACE, headers=key(world), **kwargs)
    # The same status and code as a path that is present but invalid.
    bad = client.get("/api/memory/doc", params={**SPACE, "path": "../x.md"}, headers=key(world))
    assert error(r)[:2] == error(bad)[:2] == (422, "invalid_path")
    assert error(r)[2] == "path" and "'path'" in r.json()["error"]["message"]
