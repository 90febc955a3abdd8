"""Hostile text and numbers on both stores: a NUL or other control character in an
identity or admin field, a query parameter, a body; numbers written other than in ASCII
digits. Each is refused with the contract's code naming the field; nothing is stored.
Also: ``Cache-Control: no-store`` on every answer of memory content, and a 405's ``Allow``.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from keepstone.errors import InvalidRequest
from tests.api.log_scan import DOC_TEXT, everything_logged, leaks
from tests.api.world import SEED_PATH, SPACE, World, admin_headers, unique

Q = f"name={SPACE['name']}&project={SPACE['project']}"


def _refused(r: Any, status: int, code: str, field: str | None = None) -> None:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code, error
    if field is not None:
        assert error.get("field") == field, error


@pytest.mark.parametrize("bad", ["\x00", "\x01", "\x1b", "\x7f", "\x85"])
def test_sign_in_refuses_a_control_character_in_the_email(client: TestClient, bad: str) -> None:
    r = client.post("/api/auth/login", json={"email": f"a{bad}@t.test", "password": "x" * 9})
    _refused(r, 400, "invalid_request", "email")


def test_the_sign_in_form_refuses_nul_with_a_page(client: TestClient) -> None:
    r = client.post("/signin", data={"email": "a\x00@t.test", "password": "x" * 9})
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert "control characters" in r.text


def test_admin_fields_refuse_nul_naming_the_field(world: World) -> None:
    c, h = world.client, admin_headers()
    user = world.users["member"]
    cases: list[tuple[str, str, dict[str, object], str]] = [
        ("POST", "/api/admin/users", {"email": "a\x00@x.test", "password": "p" * 12}, "email"),
        ("POST", "/api/admin/users", {"email": f"{unique('u')}@x.test", "name": "a\x00"}, "name"),
        ("POST", "/api/admin/orgs", {"name": "o\x00"}, "name"),
        ("POST", "/api/admin/teams", {"org_id": world.org_id, "name": "t\x00"}, "name"),
        ("POST", "/api/admin/teams", {"org_id": "org\x00", "name": "t"}, "org_id"),
        ("POST", f"/api/admin/teams/{world.team_id}/projects", {"name": "p\x00"}, "name"),
        ("POST", f"/api/admin/projects/{world.project_id}/repos", {"name": "r\x00"}, "name"),
        (
            "POST",
            "/api/admin/api-keys",
            {"user_id": user, "team_id": world.team_id, "name": "k\x00"},
            "name",
        ),
        (
            "POST",
            "/api/admin/api-keys",
            {"user_id": "u\x00", "team_id": world.team_id, "name": "k"},
            "user_id",
        ),
        (
            "POST",
            f"/api/admin/teams/{world.team_id}/members",
            {"user_id": "u\x00", "role": "member"},
            "user_id",
        ),
        (
            "POST",
            f"/api/admin/orgs/{world.org_id}/members",
            {"user_id": "u\x00", "role": "admin"},
            "user_id",
        ),
    ]
    for method, url, body, field in cases:
        _refused(c.request(method, url, json=body, headers=h), 400, "invalid_request", field)
    users = c.get("/api/admin/users?limit=100", headers=h).json()["users"]
    assert users and not any("\x00" in str(u) for u in users)  # nothing was stored


def test_query_parameters_refuse_control_characters(world: World) -> None:
    c, h = world.client, world.headers("member")
    _refused(
        c.get("/api/admin/api-keys?user_id=u%00", headers=admin_headers()),
        400,
        "invalid_request",
        "user_id",
    )
    _refused(c.get(f"/api/memory/search?{Q}&q=a%00b", headers=h), 400, "invalid_request", "q")
    _refused(c.get(f"/api/memory/search?{Q}&q=a%C2%85", headers=h), 400, "invalid_request", "q")
    _refused(
        c.get(f"/api/memory/doc?{Q}&path={SEED_PATH}&x%00=1", headers=h), 400, "invalid_request"
    )
    r = c.get(f"/api/memory/doc?{Q}&path={SEED_PATH}&=%00", headers=h)
    _refused(r, 400, "invalid_request", "the query parameter with no name")
    # A path and a space name keep the domain's own codes.
    _refused(c.get(f"/api/memory/doc?{Q}&path=a%00.md", headers=h), 422, "invalid_path")
    r = c.get(f"/api/memory/doc?name=n%00&project={SPACE['project']}&path=a.md", headers=h)
    _refused(r, 400, "invalid_space_ref")
    # A UI page answers the refusal as a page.
    r = c.get(f"/t/{world.team_id}/search?q=a%00", headers=h)
    assert r.status_code == 400 and r.headers["content-type"].startswith("text/html")


def test_bodies_keep_tabs_and_newlines_but_refuse_nul(world: World) -> None:
    c, h = world.client, world.headers("member")
    url = f"/api/memory/doc?{Q}&path=body.md"
    _refused(c.put(url, json={"content": "a\x00b"}, headers=h), 422, "invalid_document")
    assert c.put(url, json={"content": "a\tb\r\nc\n"}, headers=h).status_code in (200, 201)
    assert c.get(url, headers=h).json()["content"] == "a\tb\r\nc\n"
    records = f"/api/teams/{world.team_id}/memory"
    saved = c.post(
        f"/api/internal/teams/{world.team_id}/memory",
        json={"text": "a\x00b"},
        headers=world.headers("service_token"),
    )
    _refused(saved, 400, "invalid_request", "text")
    _refused(
        c.post(f"{records}/search", json={"query": "a\x00"}, headers=h),
        400,
        "invalid_request",
        "query",
    )


@pytest.mark.parametrize("raw", ["1_0", "%D9%A3", "%EF%BC%8B%EF%BC%95", "+5", "%205", "5.0", "1e1"])
def test_numbers_are_ascii_digits_only(world: World, raw: str) -> None:
    c, h = world.client, world.headers("member")
    r = c.get(f"/api/memory/doc?{Q}&path={SEED_PATH}&version={raw}", headers=h)
    _refused(r, 400, "invalid_request", "version")
    r = c.get(f"/api/memory/search?{Q}&q=seed&limit={raw}", headers=h)
    _refused(r, 400, "invalid_request", "limit")
    _refused(
        c.get(f"/api/admin/users?limit={raw}", headers=admin_headers()),
        400,
        "invalid_request",
        "limit",
    )
    r = c.get(
        f"/t/{world.team_id}/version?{Q}&path={SEED_PATH}&version={raw}",
        headers=world.headers("member"),
    )
    assert r.status_code == 400, r.text
    for listing in (f"/api/memory/docs?{Q}&limit={raw}", f"/api/memory/activity?{Q}&limit={raw}"):
        _refused(c.get(listing, headers=h), 400, "invalid_request", "limit")


@pytest.mark.parametrize(
    ("field", "raw"),
    [
        ("recency_days", "1_0"),
        ("recency_days", "%D9%A3"),
        ("recency_days", "%205"),
        ("recency_days", "nan"),
        ("min_score", "%D9%A0.%D9%A5"),
        ("min_score", "0_5"),
        ("min_score", "%200.5"),
    ],
)
def test_decimal_numbers_are_ascii_too(world: World, field: str, raw: str) -> None:
    r = world.client.get(
        f"/api/memory/search?{Q}&q=seed&{field}={raw}", headers=world.headers("member")
    )
    _refused(r, 400, "invalid_request", field)


def test_plain_digits_still_read(world: World) -> None:
    c, h = world.client, world.headers("member")
    assert c.get(f"/api/memory/doc?{Q}&path={SEED_PATH}&version=1", headers=h).status_code == 200
    assert c.get("/api/admin/users?limit=05", headers=admin_headers()).status_code == 200
    assert c.get(f"/api/memory/docs?{Q}&limit=5", headers=h).status_code == 200
    assert c.get(f"/api/memory/activity?{Q}&limit=5", headers=h).status_code == 200
    for decimals in ("min_score=-0.5&recency_days=1e2", "min_score=.25&recency_days=%2B7.5"):
        r = c.get(f"/api/memory/search?{Q}&q=seed&{decimals}", headers=h)
        assert r.status_code == 200, r.text


def test_content_answers_are_not_stored_by_caches(world: World) -> None:
    c, h = world.client, world.headers("member")
    for url in (
        f"/api/memory/doc?{Q}&path={SEED_PATH}",
        f"/api/memory/search?{Q}&q=seed",
        f"/api/memory/docs?{Q}",
        "/api/memory/spaces",
        f"/api/teams/{world.team_id}/memory",
        f"/t/{world.team_id}/doc?{Q}&path={SEED_PATH}",
        f"/t/{world.team_id}/spaces",
        "/api/memory/doc?path=x.md",  # an error too: it may name a document
    ):
        r = c.get(url, headers=h)
        assert r.headers.get("cache-control") == "no-store", (url, r.status_code)
    assert "no-store" not in c.get("/static/keepstone.css").headers.get("cache-control", "")


def test_a_405_lists_every_method_of_the_path(world: World) -> None:
    r = world.client.post(f"/api/memory/doc?{Q}&path=x.md", headers=world.headers("member"))
    assert r.status_code == 405
    assert set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "PUT", "DELETE"}
    r = world.client.patch(f"/api/teams/{world.team_id}/memory-settings", headers=admin_headers())
    assert set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "PUT"}


def test_nothing_secret_is_logged_under_hostile_input(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    c, h, admin = world.client, world.headers("member"), admin_headers()
    service = world.headers("service_token")
    body = f"{DOC_TEXT} lives here"
    with everything_logged(caplog):
        assert c.put(f"/api/memory/doc?{Q}&path=logged.md", json={"content": body}, headers=h)
        c.get(f"/api/memory/doc?{Q}&path=logged.md", headers=h)
        c.get(f"/api/memory/search?{Q}&q={DOC_TEXT}", headers=h)
        c.put(f"/api/memory/doc?{Q}&path=nul.md", json={"content": f"{body}\x00"}, headers=h)
        c.put(
            f"/api/memory/doc?{Q}&path=secret.md",
            json={"content": f"{body} AKIAIOSFODNN7EXAMPLE"},
            headers=h,
        )
        c.post(f"/api/internal/teams/{world.team_id}/memory", json={"text": body}, headers=service)
        c.post(f"/api/teams/{world.team_id}/memory/search", json={"query": DOC_TEXT}, headers=h)
        for email in (world.emails["member"], "nobody@example.com", "a\x00@x.test"):
            c.post("/api/auth/login", json={"email": email, "password": "wrong password"})
            c.post("/signin", data={"email": email, "password": "wrong password"})
        c.post("/api/admin/users", json={"email": world.emails["member"]}, headers=admin)
        c.post("/api/admin/users", json={"email": "n@x.test", "name": "\x00"}, headers=admin)
        c.get("/api/memory/spaces", headers={"Authorization": world.keys["member"] + "x"})
        c.get("/api/memory/spaces", headers={"Authorization": f"Bearer {world.keys['member']}x"})
        c.get(f"/api/memory/doc?{Q}&path=logged.md&version=1_0", headers=h)
        c.get("/api/admin/users?user_id=%00", headers=admin)
    assert not leaks(caplog, world, DOC_TEXT)


def test_ids_in_paths_and_headers_with_nul_are_not_found_or_refused(world: World) -> None:
    c, h, admin = world.client, world.headers("member"), admin_headers()
    team = world.team_id
    _refused(c.patch("/api/admin/orgs/o%00", json={}, headers=admin), 400, "invalid_request")
    _refused(c.delete("/api/admin/api-keys/k%00", headers=admin), 400, "invalid_request", "id")
    r = c.delete(f"/api/admin/teams/{team}/members/u%00", headers=admin)
    _refused(r, 400, "invalid_request", "user_id")
    _refused(
        c.get("/api/admin/teams/t%00/members", headers=admin), 400, "invalid_request", "team_id"
    )
    r = c.delete("/api/admin/teams/t%00?confirm=core", headers=admin)
    _refused(r, 400, "invalid_request", "team_id")
    _refused(c.delete("/api/admin/orgs/o%00", headers=admin), 400, "invalid_request", "org_id")
    for action in ("disable", "enable", "password-reset"):
        r = c.post(f"/api/admin/users/u%00/{action}", headers=admin)
        _refused(r, 400, "invalid_request", "user_id")
    _refused(c.get("/api/orgs/o%00/usage", headers=h), 404, "not_found")
    r = c.get("/api/memory/spaces", headers={**h, "X-Keepstone-Team": "t\x00"})
    _refused(r, 404, "team_not_found")
    r = c.get("/t/x%00y/spaces", headers=h)
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")


def test_a_nul_no_check_caught_is_still_a_400_on_postgresql(world: World) -> None:
    """The last net: a NUL that reaches PostgreSQL is refused as bad input, not a 500."""
    try:
        teams = world.identity.user_teams("user\x00")
    except InvalidRequest as exc:
        assert "NUL" in exc.message
    else:
        assert teams == []  # SQLite compares it, and no user has such an id
