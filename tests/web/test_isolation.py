"""The BOLA matrix for the UI: a member of another team sees nothing of the team's spaces,
documents or records on any UI page, and changes nothing — on SQLite and PostgreSQL.

Team A (the world's team) holds documents in several visibilities and a team memory
record, each carrying a marker; the outsider is a member of team B in another org.
Every team route of the UI table, built against team A, is asked with the outsider's
session: the answer is the API's 404 and no marker of team A is in it. The outsider's
own team's pages (spaces, search for the marker, the space names of team A, memory)
show none of team A's either.
"""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from keepstone.principal import CredentialKind, Principal
from keepstone.spaces import SpaceRef
from tests.api.world import World
from tests.web.conftest import add_outsider
from tests.web.policy import ROWS, UiRow

ADMIN = Principal(kind=CredentialKind.ADMIN_TOKEN)
MARK = f"teamA-secret-{uuid.uuid4().hex[:8]}"
SPACES = [
    {"name": "policy", "visibility": "project", "project": "p1"},
    {"name": "shared", "visibility": "cross_project"},
    {"name": "shared", "visibility": "org"},
]
TEAM_ROWS = [row for row in ROWS if row.path.startswith("/t/{team_id}")]


@pytest.fixture(scope="module")
def marked(world: World) -> str:
    """Team A's marked documents and record; the outsider's team id."""
    for space in SPACES:
        ref = SpaceRef.build(
            space["visibility"], space["name"], tenant=world.team_id, project=space.get("project")
        )
        world.store.write(ref, f"notes/{MARK}.md", f"# {MARK}\n\nthe {MARK} plan")
    records = world.app.state.records
    records.set_enabled_as_server(world.team_id, True)
    records.save_as_server(world.team_id, f"remember {MARK} always")
    outsider_team = add_outsider(world)
    records.set_enabled_as_server(outsider_team, True)
    return outsider_team


def _ask(
    client: TestClient, world: World, req_method: str, url: str, **kw: object
) -> tuple[int, str]:
    cookie, csrf = world.sessions["outsider"]
    data = dict(kw.pop("data", {}) or {})  # type: ignore[call-overload]
    if req_method == "POST":
        data["csrf"] = csrf
    r = client.request(
        req_method,
        url,
        data=data or None,
        headers={"Cookie": f"keepstone_session={cookie}; keepstone_csrf={csrf}"},
        follow_redirects=False,
        **kw,  # type: ignore[arg-type]
    )
    client.cookies.clear()
    return r.status_code, r.text


@pytest.mark.parametrize("row", TEAM_ROWS, ids=[row.id for row in TEAM_ROWS])
def test_outsider_gets_404_and_nothing_of_the_team(
    row: UiRow, world: World, client: TestClient, marked: str
) -> None:
    req = row.build(world)
    params = dict(req.params)
    if "q" in params:
        params["q"] = MARK
    status, body = _ask(
        client, world, req.method, req.url, params=params, data=req.data, files=req.files
    )
    assert status == 404, body[-400:]
    assert "team_not_found" in body
    assert MARK not in body
    # The team's id shows only where the refusal names the URL's own team, as the API does.
    assert world.team_id not in body.replace(f"no team &#39;{world.team_id}&#39;", "")
    # Nothing of team A changed: its marked documents are all still there.
    for space in SPACES:
        ref = SpaceRef.build(
            space["visibility"], space["name"], tenant=world.team_id, project=space.get("project")
        )
        assert world.store.read(ref, f"notes/{MARK}.md").content.startswith(f"# {MARK}")


def test_outsider_pages_in_its_own_team_show_nothing_of_team_a(
    world: World, client: TestClient, marked: str
) -> None:
    own = marked
    pages = [
        f"/t/{own}/spaces",
        f"/t/{own}/search?q={MARK}",
        f"/t/{own}/memory",
        f"/t/{own}/activity",
        "/teams",
        "/",
    ]
    for space in SPACES:
        query = "&".join(f"{k}={v}" for k, v in space.items())
        pages += [
            f"/t/{own}/space?{query}",
            f"/t/{own}/search?{query}&q={MARK}",
            f"/t/{own}/export?{query}",
            f"/t/{own}/activity?{query}",
        ]
    for url in pages:
        status, body = _ask(client, world, "GET", url)
        assert status in (200, 303), (url, status, body[-300:])
        # (The search box shows back the query it was asked.)
        assert MARK not in body.replace(f'value="{MARK}"', ""), url
        assert world.team_id not in body, url
    for space in SPACES:
        query = "&".join(f"{k}={v}" for k, v in space.items())
        for page in ("doc", "history", "version", "diff"):
            extra = {"doc": "", "history": "", "version": "&version=1", "diff": "&from=1"}[page]
            url = f"/t/{own}/{page}?{query}&path=notes/{MARK}.md{extra}"
            status, body = _ask(client, world, "GET", url)
            assert status == 404 and MARK not in body.replace(f"notes/{MARK}.md", ""), (
                url,
                body[-300:],
            )


def test_the_team_itself_sees_its_marked_pages(
    world: World, client: TestClient, marked: str
) -> None:
    """The control: the same pages show the marker to a member of team A (so the
    outsider's empty answers above mean isolation, not a broken page)."""
    cookie, csrf = world.sessions["member"]
    headers = {"Cookie": f"keepstone_session={cookie}; keepstone_csrf={csrf}"}
    t = world.team_id
    for url in (f"/t/{t}/spaces", f"/t/{t}/search?q={MARK}", f"/t/{t}/memory"):
        r = client.get(url, headers=headers)
        client.cookies.clear()
        assert r.status_code == 200 and MARK in r.text or "shared" in r.text, url
    r = client.get(f"/t/{t}/search", params={"q": MARK}, headers=headers)
    client.cookies.clear()
    assert r.text.count(MARK) >= 2, r.text[-800:]


def test_keys_and_admin_pages_show_the_outsider_nothing_of_team_a(
    world: World, client: TestClient, marked: str
) -> None:
    """ "Your API keys" lists the outsider's own keys only, refuses minting one for team A
    or revoking one of team A's; the administration pages of team A are 403 to the outsider
    and to team A's own admins, and show none of its members or keys."""
    key_name = f"key-{MARK}"
    key_id, _ = world.identity.create_api_key(world.users["member"], world.team_id, key_name)
    status, body = _ask(client, world, "GET", "/keys")
    assert status == 200 and key_name not in body and world.team_id not in body
    status, body = _ask(
        client, world, "POST", "/keys", data={"team_id": world.team_id, "name": "stolen"}
    )
    assert status == 404 and "stolen" not in body
    status, body = _ask(client, world, "POST", "/keys/revoke", data={"key_id": key_id})
    assert status == 404
    live = world.app.state.admin.list_api_keys(ADMIN, user_id=world.users["member"], limit=200)
    assert [k.revoked for k in live.items if k.id == key_id] == [False]
    team_a = [f"/admin/teams/{world.team_id}", f"/admin/orgs/{world.org_id}", "/admin"]
    for url in team_a:
        status, body = _ask(client, world, "GET", url)
        assert status == 403 and key_name not in body and world.emails["member"] not in body
    cookie, csrf = world.sessions["admin"]  # team A's own admin is no platform admin
    for url in team_a:
        r = client.get(
            url, headers={"Cookie": f"keepstone_session={cookie}; keepstone_csrf={csrf}"}
        )
        client.cookies.clear()
        assert r.status_code == 403 and key_name not in r.text, url
    for action, data in (
        ("/admin/teams/delete", {"team_id": world.team_id, "confirm": "core"}),
        ("/admin/members/remove", {"team_id": world.team_id, "user_id": world.users["member"]}),
        ("/admin/users/disable", {"user_id": world.users["member"]}),
    ):
        status, _ = _ask(client, world, "POST", action, data=data)
        assert status == 403, action
    assert world.emails["member"] in {
        m.email for m in world.app.state.admin.team_members(ADMIN, world.team_id)
    }
