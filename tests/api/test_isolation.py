"""Tenant isolation: two orgs with two teams each, documents in every visibility.

Every space route is tried with every team's credentials against every other team's
spaces: nothing of another team is read, listed, exported, overwritten or deleted,
and a foreign space looks exactly like one that was never written.
"""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from keepstone.spaces import SpaceRef
from tests.api.world import PASSWORD, admin_headers, tarball

VISIBILITIES: dict[str, dict[str, str]] = {
    "private": {},
    "bot": {"project": "p", "bot": "b"},
    "project": {"project": "p"},
    "cross_project": {},
    "user": {},
    "org": {},
}


@dataclass
class Team:
    label: str
    org_id: str
    team_id: str
    user_id: str
    key: str
    session: tuple[str, str]


def _post(client: TestClient, path: str, body: dict[str, Any]) -> str:
    r = client.post(path, json=body, headers=admin_headers())
    assert r.status_code == 201, r.text
    return str(r.json().get("id", ""))


@pytest.fixture(scope="module")
def teams(app: FastAPI, client: TestClient) -> list[Team]:
    out: list[Team] = []
    for o in range(2):
        org_id = _post(client, "/api/admin/orgs", {"name": f"org{o}"})
        for t in range(2):
            label = f"o{o}t{t}"
            team_id = _post(client, "/api/admin/teams", {"org_id": org_id, "name": label})
            email = f"{label}-iso@example.com"
            user_id = _post(client, "/api/admin/users", {"email": email, "password": PASSWORD})
            _post(
                client,
                f"/api/admin/teams/{team_id}/members",
                {"user_id": user_id, "role": "member"},
            )
            r = client.post(
                "/api/admin/api-keys",
                json={"user_id": user_id, "team_id": team_id, "name": label},
                headers=admin_headers(),
            )
            key = str(r.json()["key"])
            login = client.post("/api/auth/login", json={"email": email, "password": PASSWORD})
            session = (login.cookies["keepstone_session"], str(login.json()["csrf_token"]))
            client.cookies.clear()
            out.append(Team(label, org_id, team_id, user_id, key, session))
    for team in out:
        for vis, qual in VISIBILITIES.items():
            for name in ("shared", f"only-{team.label}"):
                params = {"name": name, "visibility": vis, **qual, "path": "notes/doc.md"}
                r = client.put(
                    "/api/memory/doc",
                    params=params,
                    json={"content": f"secret of {team.label}"},
                    headers=key_headers(team),
                )
                assert r.status_code == 201, r.text
    return out


def key_headers(team: Team) -> dict[str, str]:
    return {"Authorization": f"Bearer {team.key}"}


def session_headers(team: Team, team_header: str | None = None) -> dict[str, str]:
    cookie, csrf = team.session
    return {
        "Cookie": f"keepstone_session={cookie}",
        "X-CSRF-Token": csrf,
        "X-Keepstone-Team": team_header or team.team_id,
    }


def _members(data: bytes) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for m in tar.getmembers():
            f = tar.extractfile(m)
            out[m.name] = f.read() if f else b""
    return out


def _view(client: TestClient, headers: dict[str, str], space: dict[str, str]) -> dict[str, Any]:
    """Everything the read routes say about one space, minus the space's own id."""
    usage = client.get("/api/memory/usage", params=space, headers=headers)
    docs = client.get("/api/memory/docs", params=space, headers=headers)
    doc = client.get("/api/memory/doc", params={**space, "path": "notes/doc.md"}, headers=headers)
    export = client.get("/api/memory/export", params=space, headers=headers)
    versions = client.get(
        "/api/memory/doc/versions", params={**space, "path": "notes/doc.md"}, headers=headers
    )
    activity = client.get("/api/memory/activity", params=space, headers=headers)
    usage_body = usage.json()
    usage_body.pop("team_used_bytes", None)  # the caller's own team total
    usage_body.pop("history_used_bytes", None)  # so is its history's
    view = {
        "usage": (usage.status_code, usage_body),
        "docs": (docs.status_code, docs.json()),
        "doc": (doc.status_code, doc.json()),
        "versions": (versions.status_code, versions.json()),
        "activity": (activity.status_code, activity.json()),
    }
    # The space's own name shows in its id and messages; everything else must be equal.
    normalized: dict[str, Any] = json.loads(json.dumps(view).replace(space["name"], "<name>"))
    normalized["export"] = (export.status_code, _members(export.content))
    return normalized


CREDS = ("key", "session")


def _headers(team: Team, cred: str) -> dict[str, str]:
    return key_headers(team) if cred == "key" else session_headers(team)


@pytest.mark.parametrize("cred", CREDS)
@pytest.mark.parametrize("vis", list(VISIBILITIES))
def test_shared_names_resolve_to_own_team(
    teams: list[Team], client: TestClient, vis: str, cred: str
) -> None:
    for team in teams:
        h = _headers(team, cred)
        space = {"name": "shared", "visibility": vis, **VISIBILITIES[vis]}
        view = _view(client, h, space)
        assert [d["path"] for d in view["docs"][1]["documents"]] == ["notes/doc.md"]
        assert view["doc"][1]["content"] == f"secret of {team.label}"
        assert view["export"][1] == {"notes/doc.md": f"secret of {team.label}".encode()}


@pytest.mark.parametrize("cred", CREDS)
def test_the_team_s_activity_holds_its_own_changes_alone(
    teams: list[Team], client: TestClient, cred: str
) -> None:
    for team in teams:
        r = client.get("/api/memory/activity", params={"limit": 100}, headers=_headers(team, cred))
        assert r.status_code == 200, r.text
        changes = r.json()["changes"]
        assert changes, "the team's own writes are in its feed"
        # Its own spaces (the team id in each space id), written by its own key.
        foreign = [t.team_id for t in teams if t is not team]
        assert all(f":{team.team_id}:" in c["space_id"] for c in changes)
        assert not any(f":{other}:" in c["space_id"] for c in changes for other in foreign)
        assert {c["actor"]["kind"] for c in changes} == {"api_key"}
        # Named for a person (the key's label, or "key of <email>"), never by an id.
        assert all(team.user_id not in json.dumps(c["actor"]) for c in changes)


@pytest.mark.parametrize("vis", list(VISIBILITIES))
def test_foreign_space_looks_empty_and_stays_untouched(
    app: FastAPI, teams: list[Team], client: TestClient, vis: str
) -> None:
    qual = VISIBILITIES[vis]
    for i, me in enumerate(teams):
        # Teams alternate between an API key and a browser session (both credential kinds).
        h = _headers(me, CREDS[i % 2])
        never = _view(client, h, {"name": "never-written", "visibility": vis, **qual})
        assert never["doc"][0] == 404 and never["docs"][1] == {"documents": [], "next_cursor": None}
        for other in teams:
            if other is me:
                continue
            foreign = {"name": f"only-{other.label}", "visibility": vis, **qual}
            assert _view(client, h, foreign) == never
            doc = {**foreign, "path": "notes/doc.md"}
            r = client.delete("/api/memory/doc", params=doc, headers=h)
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
            # Writing the same name creates the caller's own document, never theirs.
            r = client.put("/api/memory/doc", params=doc, json={"content": "mine"}, headers=h)
            assert r.status_code == 201 and r.json()["created"] is True
            assert client.delete("/api/memory/doc", params=doc, headers=h).status_code == 204
            ref = SpaceRef.build(
                vis,
                foreign["name"],
                tenant=other.team_id,
                project=qual.get("project"),
                bot=qual.get("bot"),
                user=other.user_id,
            )
            assert (
                app.state.runtime.store.read(ref, "notes/doc.md").content
                == f"secret of {other.label}"
            )


def test_import_never_lands_in_a_foreign_space(
    app: FastAPI, teams: list[Team], client: TestClient
) -> None:
    for me in teams:
        for other in teams:
            if other is me:
                continue
            foreign = {"name": f"only-{other.label}", "visibility": "org"}
            r = client.post(
                "/api/memory/import",
                params={**foreign, "strategy": "overwrite"},
                content=tarball({"notes/doc.md": "mine"}),
                headers={**key_headers(me), "Content-Type": "application/gzip"},
            )
            assert r.status_code == 200 and r.json()["written"] == ["notes/doc.md"]
            mine = client.get(
                "/api/memory/doc",
                params={**foreign, "path": "notes/doc.md"},
                headers=key_headers(me),
            )
            assert mine.json()["content"] == "mine"
            ref = SpaceRef.build("org", foreign["name"], tenant=other.team_id)
            assert (
                app.state.runtime.store.read(ref, "notes/doc.md").content
                == f"secret of {other.label}"
            )
            client.delete(
                "/api/memory/doc",
                params={**foreign, "path": "notes/doc.md"},
                headers=key_headers(me),
            )


def test_user_spaces_are_per_user(app: FastAPI, teams: list[Team], client: TestClient) -> None:
    """Two users of one team do not share a ``user`` space."""
    me = teams[0]
    email = "second-user@example.com"
    uid = _post(client, "/api/admin/users", {"email": email, "password": PASSWORD})
    _post(client, f"/api/admin/teams/{me.team_id}/members", {"user_id": uid, "role": "member"})
    r = client.post(
        "/api/admin/api-keys",
        json={"user_id": uid, "team_id": me.team_id, "name": "k"},
        headers=admin_headers(),
    )
    h = {"Authorization": f"Bearer {r.json()['key']}"}
    r = client.get("/api/memory/docs", params={"name": "shared", "visibility": "user"}, headers=h)
    assert r.json() == {"documents": [], "next_cursor": None}


def test_session_cannot_pick_a_foreign_team(teams: list[Team], client: TestClient) -> None:
    for me in teams:
        for other in teams:
            if other is me:
                continue
            h = session_headers(me, team_header=other.team_id)
            for method, url in (
                ("GET", "/api/memory/docs"),
                ("GET", "/api/memory/usage"),
                ("GET", "/api/memory/export"),
                ("PUT", "/api/memory/doc"),
                ("DELETE", "/api/memory/doc"),
            ):
                params = {"name": "shared", "visibility": "org", "path": "notes/doc.md"}
                if url != "/api/memory/doc":
                    params.pop("path")
                body = {"content": "x"} if method == "PUT" else None
                r = client.request(method, url, params=params, json=body, headers=h)
                assert r.status_code == 404, r.text
                assert r.json()["error"]["code"] == "team_not_found"


def test_api_key_ignores_team_header(teams: list[Team], client: TestClient) -> None:
    me, other = teams[0], teams[1]
    h = {**key_headers(me), "X-Keepstone-Team": other.team_id}
    params = {"name": "shared", "visibility": "org", "path": "notes/doc.md"}
    r = client.get("/api/memory/doc", params=params, headers=h)
    assert r.json()["content"] == f"secret of {me.label}"


@pytest.mark.parametrize("param", ["tenant", "team", "user"])
def test_identity_parameters_are_refused(teams: list[Team], client: TestClient, param: str) -> None:
    me, other = teams[0], teams[3]
    params = {"name": f"only-{other.label}", "visibility": "org", param: other.team_id}
    for url in ("/api/memory/docs", "/api/memory/usage", "/api/memory/export"):
        r = client.get(url, params=params, headers=key_headers(me))
        assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_parameter"


def test_org_usage_of_another_org_is_not_found(teams: list[Team], client: TestClient) -> None:
    me, other = teams[0], teams[2]
    assert me.org_id != other.org_id
    r = client.get(f"/api/orgs/{other.org_id}/usage", headers=key_headers(me))
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = client.get(f"/api/orgs/{me.org_id}/usage", headers=key_headers(me))
    assert r.status_code == 200
    assert {t["team_id"] for t in r.json()["teams"]} == {teams[0].team_id, teams[1].team_id}


def test_every_route_naming_another_team_or_org_is_refused(
    app: FastAPI, teams: list[Team], client: TestClient
) -> None:
    """Every route with an id in its path, filled with another team's ids: never a 2xx."""
    from tests.api.policy import app_routes
    from tests.web.policy import ui_routes  # the web UI's matrix: tests/web/test_isolation.py

    templated = sorted((m, p) for m, p in app_routes(app) - ui_routes() if "{" in p)
    assert templated
    for i, me in enumerate(teams):
        headers = _headers(me, CREDS[i % 2])  # both credential kinds, alternately
        for other in teams:
            if other is me:
                continue
            for method, template in templated:
                org_route = template.startswith(("/api/orgs/", "/api/admin/orgs/"))
                if org_route and other.org_id == me.org_id:
                    continue  # a team's members may read their own org's figures
                url = (
                    template.replace("{team}", other.team_id)
                    .replace("{id}", other.org_id if org_route else other.team_id)
                    .replace("{user_id}", other.user_id)
                    .replace("{record_id}", "rec_0")
                )
                body = {"query": "secret", "text": "x", "enabled": True, "name": "x"}
                r = client.request(method, url, json=body, headers=headers)
                assert r.status_code in (403, 404), (method, url, r.status_code, r.text)


def test_own_keys_and_admin_lists_of_another_team_show_nothing(
    teams: list[Team], client: TestClient
) -> None:
    """A member's own-key routes reach only their own keys and teams; a team's admin (here
    an org admin of the first org) gets nothing of another team from the admin routes."""
    key_ids = {}
    for team in teams:
        r = client.get(
            "/api/admin/api-keys", params={"user_id": team.user_id}, headers=admin_headers()
        )
        key_ids[team.label] = [k["id"] for k in r.json()["api_keys"]]
    admin_email = "iso-org-admin@example.com"
    admin_id = _post(client, "/api/admin/users", {"email": admin_email, "password": PASSWORD})
    _post(
        client, f"/api/admin/orgs/{teams[0].org_id}/members", {"user_id": admin_id, "role": "admin"}
    )
    login = client.post("/api/auth/login", json={"email": admin_email, "password": PASSWORD})
    org_admin = {
        "Cookie": f"keepstone_session={login.cookies['keepstone_session']}",
        "X-CSRF-Token": str(login.json()["csrf_token"]),
        "X-Keepstone-Team": teams[0].team_id,
    }
    client.cookies.clear()
    for me in teams:
        session = session_headers(me)
        listed = client.get("/api/me/api-keys", headers=session).json()["api_keys"]
        assert {k["user_id"] for k in listed} == {me.user_id}
        for other in teams:
            if other is me:
                continue
            for key_id in key_ids[other.label]:
                r = client.delete(f"/api/me/api-keys/{key_id}", headers=session)
                assert r.status_code == 404, r.text
            body = {"team_id": other.team_id, "name": "stolen"}
            r = client.post("/api/me/api-keys", json=body, headers=session)
            assert r.status_code == 404 and r.json()["error"]["code"] == "team_not_found"
            for h in (session, org_admin):
                for method, url in (
                    ("GET", f"/api/admin/teams?org_id={other.org_id}"),
                    ("GET", f"/api/admin/teams/{other.team_id}/members"),
                    ("PATCH", f"/api/admin/teams/{other.team_id}/members/{other.user_id}"),
                    ("DELETE", f"/api/admin/teams/{other.team_id}?confirm={other.label}"),
                    ("POST", f"/api/admin/users/{other.user_id}/disable"),
                    ("POST", f"/api/admin/users/{other.user_id}/password-reset"),
                    ("DELETE", f"/api/admin/orgs/{other.org_id}"),
                ):
                    r = client.request(method, url, json={"role": "admin"}, headers=h)
                    assert r.status_code == 403, (method, url, r.text)
    for team in teams:  # nothing was revoked or changed
        r = client.get(
            "/api/memory/docs",
            params={"name": "shared", "visibility": "org"},
            headers=key_headers(team),
        )
        assert r.status_code == 200, r.text
