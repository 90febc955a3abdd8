"""The admin API's lists of orgs, users and API keys: ``GET /api/admin/orgs|users|api-keys``,
paged by an opaque cursor, for platform authority only, never showing a key, a key's hash or a
password hash. And the ``plan_required`` message, which sent people to a Billing page that does
not exist."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from fastapi.testclient import TestClient

from keepstone.db import read_transaction
from keepstone.identity import schema as ids
from tests.api.world import PASSWORD, World, admin_headers, unique


def _all_pages(
    client: TestClient, url: str, key: str, limit: int, **params: str
) -> list[list[dict[str, Any]]]:
    pages: list[list[dict[str, Any]]] = []
    cursor: str | None = None
    while True:
        query: dict[str, Any] = {"limit": limit, **params}
        if cursor is not None:
            query["cursor"] = cursor
        r = client.get(url, params=query, headers=admin_headers())
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) == {key, "next_cursor"}
        pages.append(body[key])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages
        assert len(pages) < 100, "the cursor never ends"


def _member_with_keys(world: World, count: int, team_id: str | None = None) -> tuple[str, list]:
    team = team_id or world.team_id
    user = world.scratch_user()
    world.identity.add_team_member(team, user, "member")
    keys = [world.identity.create_api_key(user, team, f"k{i}") for i in range(count)]
    return user, keys


def test_api_keys_page_by_three_and_filter_by_user(world: World, client: TestClient) -> None:
    user, keys = _member_with_keys(world, 5)
    pages = _all_pages(client, "/api/admin/api-keys", "api_keys", 2, user_id=user)
    assert [len(p) for p in pages] == [2, 2, 1]
    listed = [k for page in pages for k in page]
    assert [k["id"] for k in listed] == sorted(key_id for key_id, _ in keys)
    first = listed[0]
    assert set(first) == {
        "id",
        "name",
        "user_id",
        "team_id",
        "created_at",
        "revoked_at",
        "revoked",
    }
    assert {k["user_id"] for k in listed} == {user}
    assert {k["team_id"] for k in listed} == {world.team_id}
    assert first["revoked"] is False and first["revoked_at"] is None


def test_api_keys_filter_by_team_and_show_revocation(world: World, client: TestClient) -> None:
    other = str(world.post("/api/admin/teams", {"org_id": world.org_id, "name": "side"})["id"])
    user, (kept, gone) = _member_with_keys(world, 2, other)
    r = client.delete(f"/api/admin/api-keys/{gone[0]}", headers=admin_headers())
    assert r.status_code == 204
    r = client.get("/api/admin/api-keys", params={"team_id": other}, headers=admin_headers())
    assert r.status_code == 200, r.text
    by_id = {k["id"]: k for k in r.json()["api_keys"]}
    assert set(by_id) == {kept[0], gone[0]}
    assert by_id[gone[0]]["revoked"] is True and by_id[gone[0]]["revoked_at"]
    assert by_id[kept[0]]["revoked"] is False
    both = {"team_id": world.team_id, "user_id": user}
    r = client.get("/api/admin/api-keys", params=both, headers=admin_headers())
    assert r.json() == {"api_keys": [], "next_cursor": None}


def test_users_and_orgs_page_to_the_end_in_id_order(world: World, client: TestClient) -> None:
    for _ in range(5):
        world.post("/api/admin/orgs", {"name": unique("org")})
    with read_transaction(world.identity.engine) as conn:
        user_ids = sorted(str(r[0]) for r in conn.execute(sa.select(ids.users.c.id)))
        org_ids = sorted(str(r[0]) for r in conn.execute(sa.select(ids.orgs.c.id)))
    users = _all_pages(client, "/api/admin/users", "users", 3)
    assert len(users) >= 3
    assert [u["id"] for page in users for u in page] == user_ids
    orgs = _all_pages(client, "/api/admin/orgs", "orgs", 2)
    assert len(orgs) >= 3
    assert [o["id"] for page in orgs for o in page] == org_ids
    acme = next(o for page in orgs for o in page if o["id"] == world.org_id)
    assert acme["plan"] == "pro_plus" and acme["name"] == "Acme"
    me = next(u for page in users for u in page if u["id"] == world.users["super_admin"])
    assert me["super_admin"] is True and me["has_password"] is True


def test_no_secret_leaves_in_a_list(world: World, client: TestClient) -> None:
    _, keys = _member_with_keys(world, 1)
    with read_transaction(world.identity.engine) as conn:
        secrets = [str(r[0]) for r in conn.execute(sa.select(ids.api_keys.c.key_hash))]
        secrets += [
            str(r[0])
            for r in conn.execute(
                sa.select(ids.users.c.password_hash).where(ids.users.c.password_hash.is_not(None))
            )
        ]
    secrets += [key for _, key in keys] + list(world.keys.values()) + [PASSWORD]
    for url in ("/api/admin/api-keys", "/api/admin/users", "/api/admin/orgs"):
        text = client.get(url, params={"limit": 200}, headers=admin_headers()).text
        assert "hash" not in text
        for secret in secrets:
            assert secret not in text


def test_only_platform_authority_lists(world: World, client: TestClient) -> None:
    for url in ("/api/admin/api-keys", "/api/admin/users", "/api/admin/orgs"):
        for cred in ("member", "api_key", "admin", "org_owner"):
            r = client.get(url, headers=world.headers(cred))
            assert r.status_code == 403, (url, cred, r.text)
            assert r.json()["error"]["code"] == "forbidden"
        assert client.get(url).status_code == 401
        assert client.get(url, headers=world.headers("super_admin")).status_code == 200


def test_a_bad_limit_or_cursor_is_one_clear_refusal(world: World, client: TestClient) -> None:
    for limit in ("0", "201", "x"):
        r = client.get("/api/admin/orgs", params={"limit": limit}, headers=admin_headers())
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", r.text
    r = client.get("/api/admin/orgs", params={"limit": 1}, headers=admin_headers())
    orgs_cursor = r.json()["next_cursor"]
    assert orgs_cursor
    for cursor in ("not-a-cursor", orgs_cursor[:-3], "e30"):
        r = client.get("/api/admin/orgs", params={"cursor": cursor}, headers=admin_headers())
        assert r.status_code == 400, (cursor, r.text)
        assert r.json()["error"]["field"] == "cursor"
    # A cursor of one list is not read as a place in another.
    r = client.get("/api/admin/users", params={"cursor": orgs_cursor}, headers=admin_headers())
    assert r.status_code == 400 and r.json()["error"]["field"] == "cursor"


def test_plan_required_says_who_changes_the_plan_and_how(world: World, client: TestClient) -> None:
    org = str(world.post("/api/admin/orgs", {"name": unique("small"), "plan": "pro"})["id"])
    team = str(world.post("/api/admin/teams", {"org_id": org, "name": "t"})["id"])

    def refusal(super_admin: bool) -> str:
        """The plan refusal a member of the team meets (a super-admin when told)."""
        user = world.identity.create_user(f"{unique('u')}@example.com", super_admin=super_admin)
        world.identity.add_team_member(team, user, "member")
        _, key = world.identity.create_api_key(user, team)
        r = client.post(
            f"/api/teams/{team}/memory/search",
            json={"query": "deploy"},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert r.status_code == 402, r.text
        return str(r.json()["error"]["message"])

    message = refusal(super_admin=False)
    assert "Billing" not in message
    # A member cannot change the plan: the plain reason and whom to ask, no operator's route.
    assert "instance admin" in message and "pro_plus" in message
    assert "PATCH /api/admin/orgs/" not in message and "set-plan" not in message
    # A super-admin can: the refusal names how.
    message = refusal(super_admin=True)
    assert "PATCH /api/admin/orgs/" in message and "keepstone admin set-plan" in message
