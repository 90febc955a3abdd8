"""Administration people can use, over the API on SQLite and PostgreSQL: teams listed by
org, a team's members, roles changed and members removed, users disabled and given a
one-time password-reset link, a team deleted with everything it holds, an empty org
deleted, a key's required name, members' own keys, and the audit rows of all of it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from keepstone.db import read_transaction, utcnow, write_transaction
from keepstone.errors import NotFound
from keepstone.identity import schema as ids
from tests.api.world import PASSWORD, SERVICE_TOKEN, World, admin_headers, unique

A = admin_headers()


def _ok(r: Any, status: int = 200) -> Any:
    assert r.status_code == status, r.text
    return r.json() if r.content else None


def _refused(r: Any, status: int, code: str, field: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body: dict[str, Any] = r.json()
    assert body["error"]["code"] == code, body
    if field is not None:
        assert field in body["error"]["message"], body
    return body


def _user(world: World, password: str | None = PASSWORD) -> tuple[str, str]:
    email = f"{unique('p')}@example.com"
    body: dict[str, Any] = {"email": email, "name": "P"}
    if password:
        body["password"] = password
    return str(world.post("/api/admin/users", body)["id"]), email


def _team(world: World, org_id: str, name: str | None = None) -> tuple[str, str]:
    name = name or unique("team")
    return str(world.post("/api/admin/teams", {"org_id": org_id, "name": name})["id"]), name


def _member(world: World, team_id: str, role: str = "member") -> tuple[str, str]:
    user_id, email = _user(world)
    world.post(f"/api/admin/teams/{team_id}/members", {"user_id": user_id, "role": role})
    return user_id, email


def _session(client: TestClient, email: str, team_id: str) -> dict[str, str]:
    r = _ok(client.post("/api/auth/login", json={"email": email, "password": PASSWORD}))
    cookie = client.cookies["keepstone_session"]
    client.cookies.clear()
    return {
        "Cookie": f"keepstone_session={cookie}",
        "X-CSRF-Token": r["csrf_token"],
        "X-Keepstone-Team": team_id,
    }


def _key(client: TestClient, user_id: str, team_id: str, name: str = "k") -> dict[str, str]:
    body = {"user_id": user_id, "team_id": team_id, "name": name}
    key = _ok(client.post("/api/admin/api-keys", json=body, headers=A), 201)["key"]
    return {"Authorization": f"Bearer {key}"}


SPACE = {"name": "notes", "visibility": "project", "project": "p"}
DOC = {**SPACE, "path": "a.md"}


def _put_doc(client: TestClient, h: dict[str, str], content: str) -> None:
    r = client.put("/api/memory/doc", params=DOC, json={"content": content}, headers=h)
    assert r.status_code in (200, 201), r.text


def test_teams_listed_by_org_paged(client: TestClient, world: World) -> None:
    org = str(world.post("/api/admin/orgs", {"name": "paged"})["id"])
    made = sorted(_team(world, org)[0] for _ in range(3))
    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {
            "org_id": org,
            "limit": 2,
            **({"cursor": cursor} if cursor else {}),
        }
        body = _ok(client.get("/api/admin/teams", params=params, headers=A))
        seen += body["teams"]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert [t["id"] for t in seen] == made
    assert {t["org_id"] for t in seen} == {org} and all(t["name"] for t in seen)
    everyone = _ok(client.get("/api/admin/teams", params={"limit": 200}, headers=A))["teams"]
    assert set(made) | {world.team_id} <= {t["id"] for t in everyone}
    _refused(
        client.get("/api/admin/teams", params={"org_id": "org_nope"}, headers=A), 404, "not_found"
    )
    other_cursor = _ok(client.get("/api/admin/orgs", params={"limit": 1}, headers=A))["next_cursor"]
    r = client.get("/api/admin/teams", params={"cursor": other_cursor}, headers=A)
    _refused(r, 400, "invalid_request", "cursor")


def test_members_listed_role_changed_member_removed(client: TestClient, world: World) -> None:
    members = _ok(client.get(f"/api/admin/teams/{world.team_id}/members", headers=A))["members"]
    by_user = {m["user_id"]: m for m in members}
    assert by_user[world.users["viewer"]] == {
        "user_id": world.users["viewer"],
        "email": world.emails["viewer"],
        "role": "viewer",
        "projects": None,
    }
    assert [m["email"] for m in members] == sorted(m["email"] for m in members)
    user_id, _ = _user(world)
    body = {"user_id": user_id, "role": "member", "projects": [world.project_id]}
    world.post(f"/api/admin/teams/{world.team_id}/members", body)
    url = f"/api/admin/teams/{world.team_id}/members/{user_id}"
    _ok(client.patch(url, json={"role": "admin"}, headers=A))
    members = _ok(client.get(f"/api/admin/teams/{world.team_id}/members", headers=A))["members"]
    mine = next(m for m in members if m["user_id"] == user_id)
    assert mine["role"] == "admin" and mine["projects"] == [world.project_id]  # the limit stays
    _refused(client.patch(url, json={"role": "boss"}, headers=A), 400, "invalid_request", "role")
    _refused(client.patch(url, json={}, headers=A), 400, "invalid_request", "role")
    _ok(client.delete(url, headers=A), 204)
    _refused(client.delete(url, headers=A), 404, "not_found")
    _refused(client.patch(url, json={"role": "member"}, headers=A), 404, "not_found")
    _refused(client.get("/api/admin/teams/team_nope/members", headers=A), 404, "not_found")


def test_disabled_user_loses_sessions_and_keys(client: TestClient, world: World) -> None:
    user_id, email = _member(world, world.team_id)
    session = _session(client, email, world.team_id)
    key = _key(client, user_id, world.team_id)
    for h in (session, key):
        _ok(client.get("/api/memory/docs", params=SPACE, headers=h))
    _ok(client.post(f"/api/admin/users/{user_id}/disable", headers=A), 204)
    users = _ok(client.get("/api/admin/users", params={"limit": 200}, headers=A))["users"]
    assert {u["id"]: u["disabled"] for u in users}[user_id] is True
    assert {u["id"]: u["disabled"] for u in users}[world.users["member"]] is False
    for h in (session, key):
        _refused(client.get("/api/memory/docs", params=SPACE, headers=h), 401, "unauthenticated")
    login = {"email": email, "password": PASSWORD}
    _refused(client.post("/api/auth/login", json=login), 401, "unauthenticated")
    body = {"user_id": user_id, "team_id": world.team_id, "name": "again"}
    _refused(client.post("/api/admin/api-keys", json=body, headers=A), 409, "conflict")
    _ok(client.post(f"/api/admin/users/{user_id}/enable", headers=A), 204)
    _ok(client.post("/api/auth/login", json=login))
    client.cookies.clear()
    _refused(client.get("/api/memory/docs", params=SPACE, headers=key), 401, "unauthenticated")
    _refused(client.post("/api/admin/users/user_nope/disable", headers=A), 404, "not_found")
    me = world.headers("super_admin")
    url = f"/api/admin/users/{world.users['super_admin']}/disable"
    _refused(client.post(url, headers=me), 409, "conflict", "yourself")


def test_password_reset_link_single_use_and_expiring(client: TestClient, world: World) -> None:
    admin = world.app.state.admin
    user_id, email = _member(world, world.team_id)
    old_session = _session(client, email, world.team_id)
    first = _ok(client.post(f"/api/admin/users/{user_id}/password-reset", headers=A), 201)
    link = _ok(client.post(f"/api/admin/users/{user_id}/password-reset", headers=A), 201)
    assert link["path"] == f"/reset/{link['token']}" and link["user_id"] == user_id
    with pytest.raises(NotFound):  # a newer link replaces the older
        admin.use_reset_link(first["token"], "a new password 1")
    assert admin.reset_link_email(link["token"]) == email
    admin.use_reset_link(link["token"], "a new password 1")
    with pytest.raises(NotFound):  # single use
        admin.use_reset_link(link["token"], "another password 2")
    _refused(
        client.get("/api/memory/docs", params=SPACE, headers=old_session), 401, "unauthenticated"
    )
    _ok(client.post("/api/auth/login", json={"email": email, "password": "a new password 1"}))
    client.cookies.clear()
    late = _ok(client.post(f"/api/admin/users/{user_id}/password-reset", headers=A), 201)
    with write_transaction(world.identity.engine) as conn:
        conn.execute(
            ids.password_resets.update()
            .where(ids.password_resets.c.user_id == user_id)
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    with pytest.raises(NotFound):
        admin.use_reset_link(late["token"], "a new password 3")
    _refused(client.post("/api/admin/users/user_nope/password-reset", headers=A), 404, "not_found")


def _rows(world: World, team_id: str) -> dict[str, int]:
    counts = {}
    with read_transaction(world.identity.engine) as conn:
        for table, column in (
            ("memory_documents", "tenant_id"),
            ("memory_document_versions", "tenant_id"),
            ("memory_chunks", "tenant_id"),
            ("memory_tenant_usage", "tenant_id"),
            ("records", "team_id"),
            ("record_settings", "team_id"),
            ("record_search_versions", "team_id"),
            ("record_removals", "team_id"),
            ("api_keys", "team_id"),
            ("team_members", "team_id"),
            ("projects", "team_id"),
            ("teams", "id"),
        ):
            sql = sa.text(f"SELECT count(*) FROM {table} WHERE {column} = :t")
            counts[table] = int(conn.execute(sql, {"t": team_id}).scalar_one())
    return counts


def test_team_deleted_with_everything_it_holds(client: TestClient, world: World) -> None:
    org = str(world.post("/api/admin/orgs", {"name": "doomed", "plan": "pro_plus"})["id"])
    team, name = _team(world, org, "Doomed <b>team</b>")
    keep, _ = _team(world, org)
    world.post(f"/api/admin/teams/{team}/projects", {"name": "web"})
    user_id, email = _member(world, team, "admin")
    key = _key(client, user_id, team)
    keep_user, _ = _member(world, keep)
    keep_key = _key(client, keep_user, keep)
    for h in (key, keep_key):
        _put_doc(client, h, "one")
        _put_doc(client, h, "two")  # a replaced version: history
    world.post(f"/api/admin/orgs/{org}/members", {"user_id": user_id, "role": "owner"})
    session = _session(client, email, team)
    _ok(client.put(f"/api/teams/{team}/memory-settings", json={"enabled": True}, headers=session))
    service = {"Authorization": f"Bearer {SERVICE_TOKEN}"}
    r = client.post(
        f"/api/internal/teams/{team}/memory", json={"text": "a record"}, headers=service
    )
    assert r.status_code in (200, 201), r.text
    r = client.post(f"/api/internal/teams/{team}/memory", json={"text": "gone"}, headers=service)
    gone = r.json()["id"]
    _ok(client.delete(f"/api/teams/{team}/memory/{gone}", headers=session), 204)
    before = _rows(world, team)
    held = ("memory_documents", "memory_document_versions", "records", "record_removals")
    assert all(before[t] for t in held), before
    url = f"/api/admin/teams/{team}"
    _refused(client.delete(url, headers=A), 400, "invalid_request", "confirm")
    _refused(client.delete(url, params={"confirm": "doomed"}, headers=A), 400, "invalid_request")
    _ok(client.delete(url, params={"confirm": name}, headers=A), 204)
    assert set(_rows(world, team).values()) == {0}
    assert _rows(world, keep)["memory_documents"] == 1  # another team keeps its own
    _refused(client.get("/api/memory/docs", params=SPACE, headers=key), 401, "unauthenticated")
    _ok(client.get("/api/memory/docs", params=SPACE, headers=keep_key))
    _refused(client.delete(url, params={"confirm": name}, headers=A), 404, "not_found")
    _refused(client.get(f"{url}/members", headers=A), 404, "not_found")


def test_org_deleted_only_when_empty(client: TestClient, world: World) -> None:
    org = str(world.post("/api/admin/orgs", {"name": "Emptying"})["id"])
    team, name = _team(world, org)
    body = _refused(client.delete(f"/api/admin/orgs/{org}", headers=A), 409, "conflict")
    assert (
        "1 team" in body["error"]["message"]
        and "delete its teams first" in body["error"]["message"]
    )
    _ok(client.delete(f"/api/admin/teams/{team}", params={"confirm": name}, headers=A), 204)
    _ok(client.delete(f"/api/admin/orgs/{org}", headers=A), 204)
    orgs = _ok(client.get("/api/admin/orgs", params={"limit": 200}, headers=A))["orgs"]
    assert org not in {o["id"] for o in orgs}
    _refused(client.delete(f"/api/admin/orgs/{org}", headers=A), 404, "not_found")


@pytest.mark.parametrize("body", [{}, {"name": ""}, {"name": "   "}])
def test_key_name_required(client: TestClient, world: World, body: dict[str, str]) -> None:
    minted = {"user_id": world.users["member"], "team_id": world.team_id, **body}
    _refused(
        client.post("/api/admin/api-keys", json=minted, headers=A), 400, "invalid_request", "name"
    )
    own = {"team_id": world.team_id, **body}
    r = client.post("/api/me/api-keys", json=own, headers=world.headers("member"))
    _refused(r, 400, "invalid_request", "name")


def test_key_made_before_names_reads_key_of_email(client: TestClient, world: World) -> None:
    user_id, email = _member(world, world.team_id)
    key_id, _ = world.identity.create_api_key(user_id, world.team_id)  # as keys once were
    listed = _ok(client.get("/api/admin/api-keys", params={"user_id": user_id}, headers=A))
    assert [k["name"] for k in listed["api_keys"] if k["id"] == key_id] == [f"key of {email}"]


def test_own_keys_minted_listed_revoked(client: TestClient, world: World) -> None:
    user_id, email = _member(world, world.team_id, "viewer")
    me = _session(client, email, world.team_id)
    made = _ok(
        client.post(
            "/api/me/api-keys", json={"team_id": world.team_id, "name": " laptop "}, headers=me
        ),
        201,
    )
    assert set(made) == {"id", "key", "name"} and made["name"] == "laptop"
    h = {"Authorization": f"Bearer {made['key']}"}
    _ok(client.get("/api/memory/docs", params=SPACE, headers=h))
    r = client.put("/api/memory/doc", params=DOC, json={"content": "x"}, headers=h)
    _refused(r, 403, r.json()["error"]["code"])  # a viewer's key writes no more than the viewer
    listed = _ok(client.get("/api/me/api-keys", headers=me))
    assert [(k["id"], k["name"], k["revoked"]) for k in listed["api_keys"]] == [
        (made["id"], "laptop", False)
    ]
    assert made["key"] not in str(listed) and "hash" not in str(listed)
    # Another user's key is not found; an API key cannot mint or list keys; CSRF is needed.
    other = world.key_ids["member"]
    _refused(client.delete(f"/api/me/api-keys/{other}", headers=me), 404, "not_found")
    _refused(
        client.post("/api/me/api-keys", json={"team_id": world.team_id, "name": "k"}, headers=h),
        403,
        "forbidden",
    )
    _refused(client.get("/api/me/api-keys", headers=h), 403, "forbidden")
    no_csrf = {k: v for k, v in me.items() if k != "X-CSRF-Token"}
    _refused(client.delete(f"/api/me/api-keys/{made['id']}", headers=no_csrf), 403, "csrf_required")
    _ok(client.delete(f"/api/me/api-keys/{made['id']}", headers=me), 204)
    _refused(client.get("/api/memory/docs", params=SPACE, headers=h), 401, "unauthenticated")
    _refused(client.delete(f"/api/me/api-keys/{made['id']}", headers=me), 404, "not_found")
    assert _ok(client.get("/api/me/api-keys", headers=me))["api_keys"][0]["revoked"] is True
    _ok(
        client.post(
            "/api/me/api-keys",
            json={"team_id": world.team_id, "name": "k"},
            headers=world.headers("member"),
        ),
        201,
    )


def test_own_key_for_another_team_is_team_not_found(client: TestClient, world: World) -> None:
    org = str(world.post("/api/admin/orgs", {"name": "elsewhere"})["id"])
    other, _ = _team(world, org)
    for team in (other, "team_nope"):
        r = client.post(
            "/api/me/api-keys", json={"team_id": team, "name": "k"}, headers=world.headers("member")
        )
        _refused(r, 404, "team_not_found")
    _refused(
        client.post("/api/me/api-keys", json={"team_id": other, "name": "k"}),
        401,
        "unauthenticated",
    )


def test_members_may_not_use_admin_routes(client: TestClient, world: World) -> None:
    user = world.users["member"]
    routes = [
        ("GET", "/api/admin/teams", None),
        ("GET", f"/api/admin/teams/{world.team_id}/members", None),
        ("PATCH", f"/api/admin/teams/{world.team_id}/members/{user}", {"role": "admin"}),
        ("DELETE", f"/api/admin/teams/{world.team_id}?confirm=core", None),
        ("DELETE", f"/api/admin/orgs/{world.org_id}", None),
        ("POST", f"/api/admin/users/{user}/disable", None),
        ("POST", f"/api/admin/users/{user}/enable", None),
        ("POST", f"/api/admin/users/{user}/password-reset", None),
    ]
    for cred in ("member", "admin", "org_owner", "api_key"):
        for method, url, body in routes:
            r = client.request(method, url, json=body, headers=world.headers(cred))
            assert r.status_code == 403, (cred, method, url, r.text)
    for method, url, body in routes:
        assert client.request(method, url, json=body).status_code == 401, url
    members = _ok(client.get(f"/api/admin/teams/{world.team_id}/members", headers=A))["members"]
    assert {m["user_id"]: m["role"] for m in members}[user] == "member"


def test_every_admin_action_is_audited(client: TestClient, world: World) -> None:
    org = str(world.post("/api/admin/orgs", {"name": "audited"})["id"])
    team, name = _team(world, org)
    user_id, _ = _member(world, team)
    _ok(
        client.patch(
            f"/api/admin/teams/{team}/members/{user_id}", json={"role": "viewer"}, headers=A
        )
    )
    _ok(client.post(f"/api/admin/users/{user_id}/disable", headers=A), 204)
    _ok(client.post(f"/api/admin/users/{user_id}/enable", headers=A), 204)
    _ok(client.delete(f"/api/admin/teams/{team}", params={"confirm": name}, headers=A), 204)
    _ok(client.delete(f"/api/admin/orgs/{org}", headers=A), 204)
    events = _ok(client.get("/api/admin/audit", params={"limit": 50}, headers=A))["events"]
    mine = [
        (e["action"], e["actor"])
        for e in events
        if org in e["path"] or team in e["path"] or user_id in e["path"]
    ]
    actions = {a for a, _ in mine}
    assert {
        "admin.org_create",
        "admin.team_create",
        "admin.user_create",
        "admin.team_member",
        "admin.team_role",
        "admin.user_disable",
        "admin.user_enable",
        "admin.team_delete",
        "admin.org_delete",
    } <= actions
    assert {actor for _, actor in mine} == {"admin-token"}
