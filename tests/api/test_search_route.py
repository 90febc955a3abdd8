"""``GET /api/memory/search``: answers, refusals, isolation between teams, and the HTTP
client store's ``search`` (what ``keepstone memory search --server`` calls)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from keepstone.service.access import remote_principal
from keepstone.service.search import DocumentSearch
from keepstone.service.spaces import SpaceService
from keepstone.spaces import SpaceRef
from keepstone.store.base import PlatformGrant
from keepstone.store.http import HttpMemoryStore
from tests.api.world import World, admin_headers, unique

SPACE = {"name": "searchable", "project": "p1"}
RUNBOOK = """# Deploy runbook

How we ship.

## Rollback

Run `keepstone rollback` and watch the quokka dashboards.
"""


def search(w: World, cred: str = "api_key", **params: Any) -> Any:
    return w.client.get("/api/memory/search", params=params, headers=w.headers(cred))


@pytest.fixture(scope="module")
def seeded(world: World) -> World:
    ref = world.team_ref(**SPACE)
    world.store.write(ref, "ops/runbook.md", RUNBOOK)
    world.store.write(ref, "notes/other.md", "# Other\nquokka sightings in the park\n")
    return world


def test_a_search_answers_hits_best_first(seeded: World) -> None:
    r = search(seeded, **SPACE, q="rollback quokka")
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert results[0] == {
        "path": "ops/runbook.md",
        "heading": "Deploy runbook > Rollback",
        "snippet": "Rollback Run keepstone rollback and watch the quokka dashboards.",
        "score": results[0]["score"],
        "matched": ["keyword"],
        "also_in": [],
    }
    assert [h["path"] for h in results] == ["ops/runbook.md", "notes/other.md"]
    assert results[0]["score"] > results[1]["score"]


def test_limit_and_path_prefix(seeded: World) -> None:
    one = search(seeded, **SPACE, q="quokka", limit=1).json()["results"]
    assert len(one) == 1
    only = search(seeded, **SPACE, q="quokka", path_prefix="notes/").json()["results"]
    assert [h["path"] for h in only] == ["notes/other.md"]


def test_a_session_searches_too(seeded: World) -> None:
    r = search(seeded, "viewer", **SPACE, q="quokka")
    assert r.status_code == 200, r.text
    assert len(r.json()["results"]) == 2


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "q"),
        ({"q": "   "}, "q"),
        ({"q": "x", "limit": "0"}, "limit"),
        ({"q": "x", "limit": "51"}, "limit"),
        ({"q": "x", "limit": "ten"}, "limit"),
        ({"q": "x", "scope": "readable"}, "scope"),
    ],
)
def test_bad_parameters_are_refused(seeded: World, params: dict[str, str], field: str) -> None:
    r = search(seeded, **SPACE, **params)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["field"] == field and error["message"].startswith(field)


@pytest.mark.parametrize("prefix", ["\x01", "\x00", "a\\b", "\u202eevil"])
@pytest.mark.parametrize("scope", [{}, {"scope": "readable"}], ids=["space", "readable"])
def test_a_path_prefix_no_path_begins_with_is_invalid_path(
    seeded: World, prefix: str, scope: dict[str, str]
) -> None:
    params = {"q": "x", "path_prefix": prefix, **scope}
    r = search(seeded, **({} if scope else SPACE), **params)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_path"


def test_an_unknown_parameter_is_refused(seeded: World) -> None:
    r = search(seeded, **SPACE, q="x", tenant="someone-else")
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "unknown_parameter"


def test_no_credential_is_401(seeded: World) -> None:
    r = search(seeded, "none", **SPACE, q="quokka")
    assert r.status_code == 401


def test_another_teams_space_is_unreachable(seeded: World, client: TestClient) -> None:
    # A second team with the same space name and the same words: never in the answers.
    other = seeded.post("/api/admin/teams", {"org_id": seeded.org_id, "name": unique("other")})
    other_ref = SpaceRef.build("project", SPACE["name"], tenant=str(other["id"]), project="p1")
    seeded.store.write(other_ref, "ops/secret.md", "# Secret\nquokka rollback of team two\n")
    for _ in range(2):  # cold, then with the caches warm
        results = search(seeded, **SPACE, q="quokka rollback").json()["results"]
        assert {h["path"] for h in results} == {"ops/runbook.md", "notes/other.md"}
        assert all("team two" not in h["snippet"] for h in results)
    # The other team's own member finds its document, and only its document.
    user = seeded.post("/api/admin/users", {"email": f"{unique('o')}@example.com"})
    seeded.post(
        f"/api/admin/teams/{other['id']}/members", {"user_id": user["id"], "role": "member"}
    )
    key = seeded.post(
        "/api/admin/api-keys", {"user_id": user["id"], "team_id": other["id"], "name": "k"}
    )["key"]
    r = client.get(
        "/api/memory/search",
        params={**SPACE, "q": "quokka"},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert [h["path"] for h in r.json()["results"]] == ["ops/secret.md"]
    assert admin_headers()  # the admin token is not a member: it reads no team's space


def test_the_http_store_searches_through_the_route(seeded: World, client: TestClient) -> None:
    from tests.conformance.helpers import AppTransport

    store = HttpMemoryStore(
        str(client.base_url), seeded.keys["member"], transport=AppTransport(client)
    )
    ref = SpaceRef.build("project", SPACE["name"], project="p1")
    hits = DocumentSearch(store).search([ref], "rollback quokka", limit=5)
    assert [h.path for h in hits] == ["ops/runbook.md", "notes/other.md"]
    assert hits[0].heading == "Deploy runbook > Rollback"
    assert hits[0].matched == ("keyword",)
    store.close()


# --- scope=readable: every space the caller may read ------------------------------------------

READABLE_WORD = "zeppelin"


@pytest.fixture(scope="module")
def readable(seeded: World) -> dict[str, SpaceRef]:
    """One document with the same word in each kind of space, readable or not by the member."""
    team = seeded.team_id
    other_team = str(
        seeded.post("/api/admin/teams", {"org_id": seeded.org_id, "name": unique("far")})["id"]
    )
    spaces = {
        "project": SpaceRef.build("project", "wide", tenant=team, project="p2"),
        "bot": SpaceRef.build("bot", "wide", tenant=team, project="p2", bot="b1"),
        "org": SpaceRef.build("org", "wide", tenant=team),
        "cross_project": SpaceRef.build("cross_project", "wide", tenant=team),
        "private": SpaceRef.build("private", "wide", tenant=team),
        "mine": SpaceRef.build("user", "wide", tenant=team, user=seeded.users["member"]),
        "viewers": SpaceRef.build("user", "wide", tenant=team, user=seeded.users["viewer"]),
        "global": SpaceRef.build("global", "wide"),
        "other_team": SpaceRef.build("org", "wide", tenant=other_team),
        "other_team_user": SpaceRef.build(
            "user", "wide", tenant=other_team, user=seeded.users["member"]
        ),
    }
    for label, ref in spaces.items():
        grant = PlatformGrant("test") if ref.is_global else None
        seeded.store.write(
            ref, f"{label}.md", f"# {label}\n{READABLE_WORD} notes of {label}\n", grant=grant
        )
    return spaces


def test_readable_searches_every_space_the_caller_may_read(
    seeded: World, readable: dict[str, SpaceRef]
) -> None:
    for _ in range(2):  # cold, then with the caches warm
        r = search(seeded, q=READABLE_WORD, scope="readable", limit=50)
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        by_path = {h["path"]: h for h in results}
        expected = {"project", "bot", "org", "cross_project", "private", "mine", "global"}
        assert set(by_path) == {f"{label}.md" for label in expected}
        for label in expected:
            ref = readable[label]
            assert by_path[f"{label}.md"]["space"] == {
                "id": ref.id,
                "visibility": ref.visibility.value,
                "name": ref.name,
                "project": ref.project or None,
                "bot": ref.bot or None,
                "user": ref.user or None,
            }
        assert [h["score"] for h in results] == sorted((h["score"] for h in results), reverse=True)
    # The viewer reads its own user space, not the member's.
    viewer = search(seeded, "viewer", q=READABLE_WORD, scope="readable", limit=50).json()
    paths = {h["path"] for h in viewer["results"]}
    assert "viewers.md" in paths and "mine.md" not in paths
    assert not paths & {"other_team.md", "other_team_user.md"}


def test_readable_takes_limit_and_path_prefix(seeded: World, readable: dict[str, SpaceRef]) -> None:
    one = search(seeded, q=READABLE_WORD, scope="readable", limit=1).json()["results"]
    assert len(one) == 1
    only = search(seeded, q=READABLE_WORD, scope="readable", path_prefix="glo").json()["results"]
    assert [h["path"] for h in only] == ["global.md"]


def test_readable_for_the_admin_token_is_global_only(
    seeded: World, readable: dict[str, SpaceRef]
) -> None:
    r = search(seeded, "admin_token", q=READABLE_WORD, scope="readable")
    assert r.status_code == 200, r.text
    assert [h["space"]["visibility"] for h in r.json()["results"]] == ["global"]


@pytest.mark.parametrize(
    ("params", "code", "field", "needle"),
    [
        ({"q": "x", "scope": "all"}, "invalid_request", "scope", "readable"),
        ({"q": "x", "scope": "readable", "name": "n"}, "invalid_request", "scope", "name"),
        ({"q": "x", "scope": "readable", "visibility": "org"}, "invalid_request", "scope", "vis"),
        ({"q": "x"}, "invalid_space_ref", "name", "scope=readable"),
        ({"scope": "readable"}, "invalid_request", "q", "q"),
        ({"q": "x", "scope": "readable", "user": "u"}, "unknown_parameter", "user", "user"),
    ],
)
def test_readable_refusals_name_the_field(
    seeded: World, params: dict[str, str], code: str, field: str, needle: str
) -> None:
    r = search(seeded, **params)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["code"], error["field"]) == (code, field)
    assert needle in error["message"]


def test_readable_refuses_the_service_token(seeded: World) -> None:
    r = search(seeded, "service_token", q="x", scope="readable")
    assert r.status_code == 403, r.text


def test_the_http_store_searches_every_readable_space(
    seeded: World, readable: dict[str, SpaceRef], client: TestClient
) -> None:
    from tests.conformance.helpers import AppTransport

    store = HttpMemoryStore(
        str(client.base_url), seeded.keys["member"], transport=AppTransport(client)
    )
    hits = SpaceService(store).search_readable(remote_principal(), READABLE_WORD, limit=50)
    assert {h.space.id for h in hits} == {
        readable[k].id
        for k in ("project", "bot", "org", "cross_project", "private", "mine", "global")
    }
    assert all(h.hit.space_id == h.space.id for h in hits)
    store.close()
