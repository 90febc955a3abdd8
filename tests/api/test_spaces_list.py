"""``GET /api/memory/spaces`` and the HTTP client store over it: the spaces a credential may
read that exist, with their usage."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from keepstone.service.access import remote_principal
from keepstone.service.spaces import SpaceService
from keepstone.spaces import SpaceRef
from keepstone.store.base import PlatformGrant
from keepstone.store.http import HttpMemoryStore
from tests.api.world import World, admin_headers, unique
from tests.conformance.helpers import AppTransport


def _listed(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["space"]["id"]: item for item in body["spaces"]}


def test_a_member_lists_its_team_spaces_and_global_ones_with_usage(
    world: World, client: TestClient
) -> None:
    name = unique("listed")
    ref = world.team_ref(name=name)
    world.store.write(ref, "a.md", "12345")
    world.store.write(ref, "b.md", "678")
    r = client.get("/api/memory/spaces", headers=world.headers("api_key"))
    assert r.status_code == 200, r.text
    listed = _listed(r.json())
    assert r.json()["truncated"] is False
    mine = listed[ref.id]
    assert mine["used_bytes"] == 8
    assert mine["quota_bytes"] == world.store.usage(ref).quota_bytes
    assert mine["space"] == {
        "id": ref.id,
        "visibility": "project",
        "name": name,
        "project": ref.project,
        "bot": None,
        "user": None,
    }
    glob = SpaceRef.build("global", "policy-global")
    assert glob.id in listed  # the world seeds one global space
    assert all(i["space"]["visibility"] != "private" for i in listed.values())


def test_another_teams_spaces_are_not_listed(world: World, client: TestClient) -> None:
    other_org = world.post("/api/admin/orgs", {"name": "Other", "plan": "pro_plus"})["id"]
    other_team = str(world.post("/api/admin/teams", {"org_id": other_org, "name": "x"})["id"])
    theirs = SpaceRef.build("project", unique("theirs"), tenant=other_team, project="p9")
    world.store.write(theirs, "secret.md", "not yours")
    r = client.get("/api/memory/spaces", headers=world.headers("member"))
    assert r.status_code == 200, r.text
    assert theirs.id not in _listed(r.json())
    # The admin token has no team: it reads global spaces only.
    r = client.get("/api/memory/spaces", headers=admin_headers())
    assert r.status_code == 200, r.text
    assert {i["space"]["visibility"] for i in r.json()["spaces"]} == {"global"}


def test_a_parameter_is_refused(world: World, client: TestClient) -> None:
    r = client.get("/api/memory/spaces", params={"team": "x"}, headers=world.headers("member"))
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_parameter"


def test_the_http_store_lists_through_the_server(world: World, client: TestClient) -> None:
    ref = world.team_ref(name=unique("remote"))
    world.store.write(ref, "r.md", "remote")
    store = HttpMemoryStore(
        str(client.base_url), world.keys["member"], transport=AppTransport(client)
    )
    try:
        listed = SpaceService(store).list_spaces(remote_principal())
    finally:
        store.close()
    found = {s.space.id: s for s in listed.spaces}
    assert found[ref.id].used_bytes == len("remote")
    assert found[ref.id].space.name == ref.name
    assert not listed.truncated


def test_global_spaces_show_for_a_super_admin(world: World, client: TestClient) -> None:
    glob = SpaceRef.build("global", unique("g"))
    world.store.write(glob, "g.md", "global!", grant=PlatformGrant("test"))
    r = client.get("/api/memory/spaces", headers=world.headers("super_admin"))
    assert r.status_code == 200, r.text
    assert _listed(r.json())[glob.id]["used_bytes"] == len("global!")
