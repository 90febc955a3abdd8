"""The administration pages and "Your API keys" in-process, on SQLite and PostgreSQL: names
with markup are escaped everywhere they show, quotas are entered in MiB or GiB, refusals
show next to their form, and a reset link's page refuses two different passwords."""

from __future__ import annotations

from fastapi.testclient import TestClient

from keepstone.principal import CredentialKind, Principal
from tests.api.world import World, unique
from tests.web.pages import get_page, post_form

ADMIN = Principal(kind=CredentialKind.ADMIN_TOKEN)
XSS = '<script>alert(1)</script><img src=x onerror="alert(2)">'


def _super(world: World) -> dict[str, str]:
    cookie, csrf = world.sessions["super_admin"]
    return {"Cookie": f"keepstone_session={cookie}; keepstone_csrf={csrf}"}


def _inert(body: str) -> None:
    assert "<script>alert" not in body and "<img src=x" not in body, body[-600:]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_names_with_markup_are_text_on_every_page(world: World, client: TestClient) -> None:
    admin = world.app.state.admin
    org = admin.create_org(ADMIN, f"org {XSS}")
    team = admin.create_team(ADMIN, org, f"team {XSS}")
    user = admin.create_user(ADMIN, f"{unique('x')}@example.com", name=XSS)
    admin.add_team_member(ADMIN, team, user, "member")
    admin.add_team_member(ADMIN, world.team_id, user, "member")
    admin.create_api_key(ADMIN, user, team, f"key {XSS}")
    world.identity.create_api_key(world.users["member"], world.team_id, f"mine {XSS}")
    for url in ("/admin", f"/admin/orgs/{org}", f"/admin/teams/{team}", "/admin/audit"):
        status, body, _ = get_page(client, url, _super(world))
        assert status == 200, (url, body[-300:])
        _inert(body)
    cookie, csrf = world.sessions["member"]
    status, body, _ = get_page(client, "/keys", {"Cookie": f"keepstone_session={cookie}"})
    assert status == 200
    _inert(body)


def test_quota_in_mib_or_gib_and_refusals_next_to_the_form(
    world: World, client: TestClient
) -> None:
    admin = world.app.state.admin
    org = admin.create_org(ADMIN, unique("quota"))
    data = {"org_id": org, "plan": "pro", "quota": "512", "quota_unit": "MiB"}
    r = post_form(client, "/admin/orgs/plan", world, data, role="super_admin")
    assert r.status_code == 303 and r.headers["location"] == f"/admin/orgs/{org}"
    assert admin.org(ADMIN, org).memory_quota_bytes == 512 << 20
    data = {**data, "quota": "1.5", "quota_unit": "GiB"}
    post_form(client, "/admin/orgs/plan", world, data, role="super_admin")
    assert admin.org(ADMIN, org).memory_quota_bytes == 3 << 29
    for quota, unit, said in (
        ("lots", "GiB", "number"),
        ("-1", "GiB", "from 0"),
        ("1", "TiB", "unit"),
    ):
        bad = {**data, "quota": quota, "quota_unit": unit}
        r = post_form(client, "/admin/orgs/plan", world, bad, role="super_admin")
        assert r.status_code == 400 and said in r.text, (quota, unit, r.text[-400:])
    assert admin.org(ADMIN, org).memory_quota_bytes == 3 << 29  # nothing changed
    team = admin.create_team(ADMIN, org, "keeper")
    r = post_form(
        client,
        "/admin/teams/delete",
        world,
        {"team_id": team, "confirm": "keep"},
        role="super_admin",
    )
    assert r.status_code == 400 and "typed exactly" in r.text and "Team keeper" in r.text
    r = post_form(client, "/admin/orgs/delete", world, {"org_id": org}, role="super_admin")
    assert r.status_code == 409 and "delete its teams first" in r.text
    r = post_form(
        client,
        "/admin/api-keys",
        world,
        {"team_id": team, "user_id": world.users["member"], "name": " "},
        role="super_admin",
    )
    assert r.status_code == 400 and "name must not be blank" in r.text
    r = post_form(client, "/keys", world, {"team_id": world.team_id, "name": ""})
    assert r.status_code == 400 and "name must not be blank" in r.text


def test_reset_page_refuses_two_different_passwords(world: World, client: TestClient) -> None:
    admin = world.app.state.admin
    user = admin.create_user(ADMIN, f"{unique('r')}@example.com")
    link = admin.reset_password(ADMIN, user)
    url = f"/reset/{link.token}"
    status, body, headers = get_page(client, url, {})
    assert status == 200 and headers["cache-control"] == "no-store"
    r = client.post(
        url, data={"password": "one password", "again": "another one"}, follow_redirects=False
    )
    assert r.status_code == 400 and "differ" in r.text
    r = client.post(url, data={"password": "short", "again": "short"}, follow_redirects=False)
    assert r.status_code == 400 and "at least 8" in r.text
    r = client.post(
        url, data={"password": "long enough", "again": "long enough"}, follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"].startswith("/signin")
    assert get_page(client, url, {})[0] == 404
