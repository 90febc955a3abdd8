"""The UI's pages in-process, on SQLite and PostgreSQL: security headers and no inline
script or style on every page, CSRF refusals, signing in and out (one session with the
API), the edit conflict page, refusals shown next to the field, HTML 404s."""

from __future__ import annotations

import io
import re
import tarfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.api.world import PASSWORD, SPACE, World, admin_headers, unique
from tests.web.pages import assert_safe_page, get_page, member_headers, post_form
from tests.web.policy import ROWS, UiRow

GET_ROWS = [row for row in ROWS if row.method == "GET"]


@pytest.mark.parametrize("row", GET_ROWS, ids=[row.id for row in GET_ROWS])
def test_every_page_has_the_security_headers_and_no_inline_code(
    row: UiRow, world: World, client: TestClient
) -> None:
    req = row.build(world)
    headers = {} if row.path in ("/admin", "/admin/audit") else member_headers(world)[0]
    if row.path.startswith("/admin"):
        cookie, csrf = world.sessions["super_admin"]
        headers = {"Cookie": f"keepstone_session={cookie}; keepstone_csrf={csrf}"}
    status, body, got = get_page(client, req.url, headers, **req.params)
    assert status in (200, 303), (status, body[-300:])
    assert_safe_page(got, body)


def test_errors_redirects_and_static_files_carry_the_headers_too(
    world: World, client: TestClient
) -> None:
    for url in ("/nope", "/signin", "/static/keepstone.css", "/t/nope/spaces", "/"):
        status, body, got = get_page(client, url, member_headers(world)[0])
        assert_safe_page(got, body)
    status, body, got = get_page(client, "/no/such/page", {})
    assert status == 404 and "text/html" in got["content-type"] and "no page" in body


def test_the_json_api_is_unchanged(client: TestClient) -> None:
    r = client.get("/api/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert "content-security-policy" not in r.headers
    r = client.get("/api/memory/spaces")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
    assert client.get("/healthz").json() == {"status": "ok"}
    assert "content-security-policy" not in client.get("/docs").headers


# --- CSRF ---------------------------------------------------------------------------------


def _save_data(path: str) -> dict[str, str]:
    return {**SPACE, "path": path, "content": "# csrf", "etag": ""}


@pytest.mark.parametrize(
    "case", ["no field", "field not the cookie", "no cookie", "both forged", "another session's"]
)
def test_a_post_without_the_sessions_csrf_token_is_refused(
    case: str, world: World, client: TestClient
) -> None:
    cookie, csrf = world.sessions["member"]
    other_csrf = world.sessions["admin"][1]
    field, jar = {
        "no field": (None, csrf),
        "field not the cookie": ("x" + csrf, csrf),
        "no cookie": (csrf, None),
        "both forged": ("forged-token", "forged-token"),
        "another session's": (other_csrf, other_csrf),
    }[case]
    path = f"{unique('csrf')}.md"
    data = _save_data(path)
    if field is not None:
        data["csrf"] = field
    cookies = f"keepstone_session={cookie}" + (f"; keepstone_csrf={jar}" if jar else "")
    r = client.post(
        f"/t/{world.team_id}/edit", data=data, headers={"Cookie": cookies}, follow_redirects=False
    )
    client.cookies.clear()
    assert r.status_code == 403, r.text[-300:]
    assert "csrf_required" in r.text
    if case == "field not the cookie":
        # The cookie is the session's token: the form (opened under an earlier sign-in)
        # opens again with what it sent and that token, to send again by hand.
        assert "opened before your latest sign-in" in r.text and f'value="{csrf}"' in r.text
    else:
        assert "reload the page" in r.text
    status, _body, _h = get_page(
        client, f"/t/{world.team_id}/doc", member_headers(world)[0], **SPACE, path=path
    )
    assert status == 404  # nothing was written


# --- signing in and out -------------------------------------------------------------------


def test_the_sign_in_page_says_how_the_first_account_is_made(client: TestClient) -> None:
    r = client.get("/signin")
    first = r.text.split('id="first-account">', 1)[1].split("</p>", 1)[0]
    assert "keepstone admin create-user --email you@example.com" in first
    assert "--super-admin" in first


def test_sign_in_sets_httponly_lax_cookies_and_shares_the_session_with_the_api(
    world: World, client: TestClient
) -> None:
    r = client.post(
        "/signin",
        data={"email": world.emails["member"], "password": PASSWORD, "next": "/teams"},
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"] == "/teams"
    set_cookies = r.headers.get_list("set-cookie")
    for name in ("keepstone_session=", "keepstone_csrf="):
        line = next(c for c in set_cookies if c.startswith(name))
        assert "HttpOnly" in line and "samesite=lax" in line.lower(), line
    session, csrf = r.cookies["keepstone_session"], r.cookies["keepstone_csrf"]
    client.cookies.clear()
    api = client.get(
        "/api/memory/spaces",
        headers={"Cookie": f"keepstone_session={session}", "X-Keepstone-Team": world.team_id},
    )
    assert api.status_code == 200, api.text
    out = client.post(
        "/signout",
        data={"csrf": csrf},
        headers={"Cookie": f"keepstone_session={session}; keepstone_csrf={csrf}"},
        follow_redirects=False,
    )
    client.cookies.clear()
    assert out.status_code == 303 and out.headers["location"] == "/signin"
    api = client.get(
        "/api/memory/spaces",
        headers={"Cookie": f"keepstone_session={session}", "X-Keepstone-Team": world.team_id},
    )
    client.cookies.clear()
    assert api.status_code == 401


def test_a_wrong_password_is_one_line_next_to_the_field_and_throttled(
    world: World, client: TestClient
) -> None:
    email = world.emails["viewer"]
    statuses = []
    for _ in range(12):
        r = client.post("/signin", data={"email": email, "password": "wrong"})
        statuses.append(r.status_code)
        if r.status_code == 429:
            assert "too many failed sign-ins" in r.text
            break
        assert r.status_code == 401 and "the email or password is wrong" in r.text
        assert 'id="signin-error"' in r.text
    client.cookies.clear()
    assert statuses[-1] == 429, statuses


def test_sign_in_refuses_another_sites_form_and_foreign_next(
    world: World, client: TestClient
) -> None:
    data = {"email": world.emails["member"], "password": PASSWORD}
    r = client.post("/signin", data=data, headers={"Origin": "https://evil.example"})
    assert (
        r.status_code == 403 and "another site" in r.text and "keepstone_session" not in r.cookies
    )
    r = client.post("/signin", data={**data, "next": "//evil.example/x"}, follow_redirects=False)
    client.cookies.clear()
    assert r.status_code == 303 and r.headers["location"] == "/"


def test_a_page_without_a_session_redirects_to_sign_in_and_back(client: TestClient) -> None:
    r = client.get("/t/x/spaces", params={"a": "1"}, follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/signin?next=%2Ft%2Fx%2Fspaces%3Fa%3D1"


# --- documents ----------------------------------------------------------------------------


def test_edit_conflict_shows_both_versions_and_saves_mine_over_theirs(
    world: World, client: TestClient
) -> None:
    path = f"{unique('conflict')}.md"
    etag = world.store.write(world.team_ref(), path, "first").etag
    world.store.write(world.team_ref(), path, "theirs </textarea><b>x</b>")
    r = post_form(
        client,
        f"/t/{world.team_id}/edit",
        world,
        {**SPACE, "path": path, "content": "mine\r\nline 2", "etag": etag},
    )
    assert r.status_code == 412
    assert "changed since you opened it" in r.text
    assert "theirs &lt;/textarea&gt;&lt;b&gt;x&lt;/b&gt;" in r.text  # shown as text
    new_etag = re.search(r'name="etag" value="([^"]+)"', r.text)
    assert (
        new_etag is not None and new_etag.group(1) == world.store.read(world.team_ref(), path).etag
    )
    r = post_form(
        client,
        f"/t/{world.team_id}/edit",
        world,
        {**SPACE, "path": path, "content": "mine\r\nline 2", "etag": new_etag.group(1)},
    )
    assert r.status_code == 303
    assert world.store.read(world.team_ref(), path).content == "mine\nline 2"  # LF kept


def test_refusals_show_the_service_message_next_to_the_field(
    world: World, client: TestClient
) -> None:
    secret = "token ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    r = post_form(
        client,
        f"/t/{world.team_id}/edit",
        world,
        {**SPACE, "path": f"{unique('s')}.md", "content": secret, "etag": ""},
    )
    assert r.status_code == 422 and 'id="content-error"' in r.text
    r = post_form(
        client,
        f"/t/{world.team_id}/edit",
        world,
        {**SPACE, "path": "../bad", "content": "x", "etag": ""},
    )
    assert r.status_code == 422 and 'id="content-error"' in r.text
    r = post_form(
        client,
        f"/t/{world.team_id}/edit",
        world,
        {**SPACE, "path": "seed.md", "content": "x", "etag": ""},
    )
    assert r.status_code == 409 and "already exists" in r.text
    r = post_form(
        client, f"/t/{world.team_id}/rename", world, {**SPACE, "path": "seed.md", "to": "no-suffix"}
    )
    assert r.status_code == 422 and 'id="to-error"' in r.text
    # An archive that is not one: refused next to its field. A form naming no space (no
    # name, or a project space without its project): the error page says which field is
    # missing, as a page asked for no space does.
    for fields, status, said in (
        (SPACE, 422, 'id="archive-error"'),
        ({"project": "p1"}, 400, "name must be"),
        ({"name": "n"}, 400, "requires project"),
    ):
        r = post_form(
            client,
            f"/t/{world.team_id}/import",
            world,
            {**fields, "strategy": "skip"},
            files={"archive": ("x.tar.gz", b"not gzip", "application/gzip")},
        )
        assert r.status_code == status and said in r.text, r.text[-800:]
    r = post_form(
        client,
        f"/t/{world.team_id}/edit",
        world,
        {**SPACE, "path": f"{unique('v')}.md", "content": "x", "etag": ""},
        role="viewer",
    )
    assert r.status_code == 403 and 'id="content-error"' in r.text


def test_export_then_import_with_each_strategy(world: World, client: TestClient) -> None:
    name = unique("roundtrip")
    space = {"name": name, "project": "p1"}
    for path in ("a.md", "dir/b.md"):
        world.store.write(world.team_ref(name=name), path, f"# {path}")
    headers, _csrf = member_headers(world)
    r = client.get(f"/t/{world.team_id}/export", params=space, headers=headers)
    client.cookies.clear()
    assert r.status_code == 200 and r.headers["content-type"] == "application/gzip"
    with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as tar:
        assert sorted(m.name for m in tar.getmembers() if m.isfile()) == ["a.md", "dir/b.md"]
    for strategy, word in (("skip", "skipped"), ("rename", "renamed"), ("overwrite", "written")):
        got = post_form(
            client,
            f"/t/{world.team_id}/import",
            world,
            {**space, "strategy": strategy},
            files={"archive": ("s.tar.gz", r.content, "application/gzip")},
        )
        assert got.status_code == 200 and "Import report" in got.text
        assert f"{word} <code>a.md</code>" in got.text, got.text[-1500:]


def test_an_unexpected_error_on_a_page_is_an_html_500(tmp_path: Path) -> None:
    from fastapi import APIRouter

    from keepstone.api.app import create_app
    from keepstone.web.core import UiRoute
    from tests.api.conftest import make_settings

    app = create_app(make_settings(f"sqlite:///{tmp_path}/boom.db"))
    router = APIRouter(route_class=UiRoute)

    @router.get("/boom-for-test")
    def boom() -> None:
        raise RuntimeError("boom")

    app.include_router(router)
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/boom-for-test")
    assert r.status_code == 500 and "text/html" in r.headers["content-type"]
    assert "internal error" in r.text and "boom" not in r.text


def test_teams_of_lists_the_teams_a_user_acts_in_now(world: World) -> None:
    """``Credentials.teams_of`` (added for the team picker) reads the teams anew: a
    membership added or removed a moment ago shows at once."""
    from keepstone.principal import CredentialKind, Principal

    credentials = world.app.state.credentials
    member = Principal(kind=CredentialKind.SESSION, user_id=world.users["member"])
    assert [(t.id, t.role) for t in credentials.teams_of(member)] == [(world.team_id, "member")]
    owner = Principal(kind=CredentialKind.SESSION, user_id=world.users["org_owner"])
    assert [(t.id, t.role) for t in credentials.teams_of(owner)] == [(world.team_id, "admin")]
    user = world.scratch_user()
    newcomer = Principal(kind=CredentialKind.SESSION, user_id=user)
    assert credentials.teams_of(newcomer) == ()
    world.identity.add_team_member(world.team_id, user, "viewer")
    assert [t.id for t in credentials.teams_of(newcomer)] == [world.team_id]
    world.identity.remove_team_member(world.team_id, user)
    assert credentials.teams_of(newcomer) == ()


def test_admin_lists_teams_a_page_at_a_time(world: World, client: TestClient) -> None:
    """``AdminService.list_teams`` (added for the administration page): every team, by id,
    paged by its cursor; for platform authority only."""
    from keepstone.errors import Forbidden
    from keepstone.principal import CredentialKind, Principal

    admin = world.app.state.admin
    authority = Principal(kind=CredentialKind.ADMIN_TOKEN)
    for i in range(3):
        world.identity.create_team(world.org_id, f"listed-{i}")
    seen: list[str] = []
    cursor = None
    while True:
        page = admin.list_teams(authority, limit=2, cursor=cursor)
        assert len(page.items) <= 2
        seen += [team.id for team in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == sorted(seen) and len(seen) == len(set(seen)) >= 4
    assert world.team_id in seen
    member = Principal(kind=CredentialKind.SESSION, user_id=world.users["member"])
    with pytest.raises(Forbidden):
        admin.list_teams(member)
    cookie, csrf = world.sessions["super_admin"]
    h = {"Cookie": f"keepstone_session={cookie}; keepstone_csrf={csrf}"}
    r = client.get("/admin", headers=h)
    assert r.status_code == 200 and f'href="/admin/orgs/{world.org_id}"' in r.text
    r = client.get(f"/admin/orgs/{world.org_id}", headers=h)  # the org's page lists its teams
    client.cookies.clear()
    assert r.status_code == 200 and f'href="/admin/teams/{world.team_id}"' in r.text


def test_a_local_mode_server_says_the_ui_needs_users(tmp_path: Path) -> None:
    from keepstone.api.app import create_app
    from tests.api.conftest import make_settings

    app = create_app(make_settings(f"sqlite:///{tmp_path}/local.db", local=True))
    with TestClient(app) as c:
        r = c.get("/")
        assert r.status_code == 200 and "local mode" in r.text and 'role="alert"' in r.text


# --- search filters -------------------------------------------------------------------------


def test_search_page_filters_by_tags_and_dates_and_names_a_bad_one(
    world: World, client: TestClient
) -> None:
    word = unique("zebrafinch")
    tagged, plain = f"{unique('tagged')}.md", f"{unique('plain')}.md"
    world.store.write(world.team_ref(), tagged, f"---\ntags: [ops, birds]\n---\n# {word} notes\n")
    world.store.write(world.team_ref(), plain, f"# {word} elsewhere\n")
    headers = member_headers(world)[0]
    url = f"/t/{world.team_id}/search"

    def found(**params: str) -> str:
        status, body, _ = get_page(client, url, headers, **SPACE, q=word, **params)
        assert status == 200, body[-300:]
        return body

    both = found()
    assert tagged in both and plain in both
    only = found(tags="birds,ops")
    assert tagged in only and plain not in only
    assert 'value="birds,ops"' in only  # the filter stays in its field
    today = datetime.now(UTC).date().isoformat()
    assert tagged in found(since=today, until=today)  # until takes the whole day
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    none = found(since=tomorrow)
    assert tagged not in none and plain not in none and "No document matches" in none
    bad = found(since="last tuesday")
    assert "since must be an ISO 8601 date" in bad and tagged not in bad


def test_memory_on_under_a_plan_without_it_says_it_is_not_in_effect(
    world: World, client: TestClient
) -> None:
    world.app.state.runtime.records.set_enabled_as_server(world.team_id, True)
    plan = f"/api/admin/orgs/{world.org_id}"
    assert client.patch(plan, json={"plan": "pro"}, headers=admin_headers()).status_code == 200
    try:
        status, body, _ = get_page(client, f"/t/{world.team_id}/memory", member_headers(world)[0])
        assert status == 200
        state = re.search(
            r'<p>Team memory is <strong id="memory-state">on</strong>([^<]*)</p>', body
        )
        assert state is not None and "not in effect" in state.group(1), body
    finally:
        client.patch(plan, json={"plan": "pro_plus"}, headers=admin_headers())
