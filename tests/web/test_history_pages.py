"""The UI's history pages in-process, on SQLite and PostgreSQL (docs/ui.md "History"): the
list of a document's versions, a version rendered and raw, a diff between two versions,
restoring one, the refusals of a restore shown next to its control, a deleted document's
history, and hostile content inert in a version and in a diff."""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qsl

from fastapi.testclient import TestClient

from keepstone.spaces import SpaceRef
from tests.api.world import PASSWORD, SPACE, World, admin_headers, unique
from tests.web.pages import assert_safe_page, get_page, member_headers, post_form

HOSTILE = '# Plan\n\n<script>alert(1)</script>\n\n<img src=x onerror="alert(2)">\n'


def _assert_inert(body: str) -> None:
    """No script, no tag with an event handler: hostile text shows only as text."""
    assert "<script" not in body.lower() and "<img" not in body.lower()
    assert not re.search(r"<[a-z][^>]*\son[a-z]+\s*=", body, re.IGNORECASE)


def _two_versions(world: World, first: str = "# One\n\nfirst\n", second: str = "# Two\n") -> str:
    """A new document written twice (versions 1 and 2); its path."""
    path = f"{unique('hist')}.md"
    world.store.write(world.team_ref(), path, first)
    world.store.write(world.team_ref(), path, second)
    return path


def _history(client: TestClient, world: World, path: str) -> tuple[int, str]:
    status, body, headers = get_page(
        client, f"/t/{world.team_id}/history", member_headers(world)[0], **SPACE, path=path
    )
    assert_safe_page(headers, body)
    return status, body


def _rows(body: str) -> list[str]:
    """The history table's rows, in page order."""
    return re.findall(r'<tr id="v(\d+)"', body)


def test_the_document_page_links_its_history_which_lists_versions_newest_first(
    world: World, client: TestClient
) -> None:
    path = _two_versions(world)
    status, body, _h = get_page(
        client, f"/t/{world.team_id}/doc", member_headers(world)[0], **SPACE, path=path
    )
    assert status == 200 and f"/t/{world.team_id}/history?" in body and ">History</a>" in body
    status, body = _history(client, world, path)
    assert status == 200, body[-400:]
    assert _rows(body) == ["2", "1"]
    live_row = body.split('<tr id="v2"')[1].split("</tr>")[0]
    assert 'class="live"' in live_row and "(live)" in live_row
    old_row = body.split('<tr id="v1"')[1].split("</tr>")[0]
    assert "(live)" not in old_row and "restore version 1" in old_row
    assert "diff with the live version" in old_row and "from=1&amp;to=2" in old_row
    assert "restore version 2" not in body  # the live one is not offered for restore
    assert "13 B" in old_row  # its size
    # The diff form names both versions, from the one before the newest to the newest.
    assert '<option value="1" selected>' in body and '<option value="2" selected>' in body


def test_a_path_that_never_held_a_document_has_no_history_page(
    world: World, client: TestClient
) -> None:
    path = f"{unique('never')}.md"
    status, body = _history(client, world, path)
    assert status == 404 and "has no history" in body
    params = {**SPACE, "path": path, "from": "1"}
    status, body, _h = get_page(
        client, f"/t/{world.team_id}/diff", member_headers(world)[0], **params
    )
    assert status == 404 and "has no history" in body


def test_a_version_is_rendered_through_the_sanitiser_or_shown_raw(
    world: World, client: TestClient
) -> None:
    path = _two_versions(world, first="# Old *plan*\n")
    headers = member_headers(world)[0]
    url = f"/t/{world.team_id}/version"
    status, body, got = get_page(client, url, headers, **SPACE, path=path, version="1")
    assert status == 200 and "<em>plan</em>" in body and "version 1" in body
    assert_safe_page(got, body)
    status, body, got = get_page(client, url, headers, **SPACE, path=path, version="1", raw="1")
    assert status == 200 and '<pre class="raw"># Old *plan*' in body
    status, body, _h = get_page(client, url, headers, **SPACE, path=path, version="9")
    assert status == 404
    status, body, _h = get_page(client, url, headers, **SPACE, path=path, version="first")
    assert status == 400 and "version must be a version number" in body


def test_a_diff_is_escaped_text_with_classed_lines(world: World, client: TestClient) -> None:
    path = _two_versions(world, first="keep\ngone\n", second="keep\nnew\n")
    params = {**SPACE, "path": path, "from": "1", "to": "2"}
    status, body, got = get_page(
        client, f"/t/{world.team_id}/diff", member_headers(world)[0], **params
    )
    assert status == 200, body[-400:]
    assert_safe_page(got, body)
    assert '<span class="diff-del">-gone</span>' in body
    assert '<span class="diff-add">+new</span>' in body
    assert "<span> keep</span>" in body
    assert '<span class="diff-hunk">@@' in body
    # to= defaults to the newest version.
    del params["to"]
    status, again, _h = get_page(
        client, f"/t/{world.team_id}/diff", member_headers(world)[0], **params
    )
    assert status == 200 and '<span class="diff-add">+new</span>' in again
    params["from"] = "x"
    status, body, _h = get_page(
        client, f"/t/{world.team_id}/diff", member_headers(world)[0], **params
    )
    assert status == 400 and "from must be a version number" in body


def test_hostile_content_is_inert_in_a_version_and_in_a_diff(
    world: World, client: TestClient
) -> None:
    path = _two_versions(world, first=HOSTILE, second="# Plan\n")
    headers = member_headers(world)[0]
    for raw in ("", "1"):
        status, body, got = get_page(
            client, f"/t/{world.team_id}/version", headers, **SPACE, path=path, version="1",
            raw=raw,
        )  # fmt: skip
        assert status == 200 and "alert(1)" in body
        _assert_inert(body)
    params = {**SPACE, "path": path, "from": "1", "to": "2"}
    status, body, got = get_page(client, f"/t/{world.team_id}/diff", headers, **params)
    assert status == 200
    _assert_inert(body)
    assert '<span class="diff-del">-&lt;script&gt;alert(1)&lt;/script&gt;</span>' in body
    assert "-&lt;img src=x onerror=&#34;alert(2)&#34;&gt;" in body


def test_restore_makes_a_version_live_again_and_says_so(world: World, client: TestClient) -> None:
    path = _two_versions(world, first="# One\n\nfirst\n", second="# Two\n")
    live = world.store.read(world.team_ref(), path)
    r = post_form(
        client,
        f"/t/{world.team_id}/restore",
        world,
        {**SPACE, "path": path, "version": "1", "if_match": live.etag},
    )
    assert r.status_code == 303, r.text[-400:]
    assert r.headers["location"].startswith(f"/t/{world.team_id}/doc?")
    assert "restored=1" in r.headers["location"]
    assert world.store.read(world.team_ref(), path).content == "# One\n\nfirst\n"
    where, _, query = r.headers["location"].partition("?")
    status, body, _h = get_page(client, where, member_headers(world)[0], **dict(parse_qsl(query)))
    assert status == 200 and "Restored version 1" in body and "<h1>One</h1>" in body, body[-600:]
    status, body = _history(client, world, path)
    assert _rows(body) == ["3", "2", "1"]
    newest = body.split('<tr id="v3"')[1].split("</tr>")[0]
    assert "(live)" in newest and world.emails["member"] in newest  # the member, by name


def test_a_restore_on_a_stale_etag_shows_the_services_message_next_to_it(
    world: World, client: TestClient
) -> None:
    path = _two_versions(world)
    stale = world.store.read(world.team_ref(), path).etag
    world.store.write(world.team_ref(), path, "# Three\n")  # someone else, meanwhile
    r = post_form(
        client,
        f"/t/{world.team_id}/restore",
        world,
        {**SPACE, "path": path, "version": "1", "if_match": stale},
    )
    assert r.status_code == 412, r.text[-400:]
    row = r.text.split('<tr id="v1"')[1].split("</tr>")[0]
    assert 'id="restore-error"' in row and 'role="alert"' in row
    assert world.store.read(world.team_ref(), path).content == "# Three\n"


def test_a_viewers_restore_is_refused_with_the_services_message(
    world: World, client: TestClient
) -> None:
    path = _two_versions(world)
    live = world.store.read(world.team_ref(), path)
    r = post_form(
        client,
        f"/t/{world.team_id}/restore",
        world,
        {**SPACE, "path": path, "version": "1", "if_match": live.etag},
        role="viewer",
    )
    assert r.status_code == 403, r.text[-400:]
    assert 'id="restore-error"' in r.text and "viewer" in html.unescape(r.text).lower()
    assert world.store.read(world.team_ref(), path).content == live.content


def test_a_restore_without_the_csrf_field_is_refused(world: World, client: TestClient) -> None:
    path = _two_versions(world)
    live = world.store.read(world.team_ref(), path)
    cookie, csrf = world.sessions["member"]
    r = client.post(
        f"/t/{world.team_id}/restore",
        data={**SPACE, "path": path, "version": "1", "if_match": live.etag},
        headers={"Cookie": f"keepstone_session={cookie}; keepstone_csrf={csrf}"},
        follow_redirects=False,
    )
    client.cookies.clear()
    assert r.status_code == 403 and "csrf_required" in r.text
    assert world.store.read(world.team_ref(), path).content == live.content


def test_a_deleted_documents_history_lists_it_and_restores_it(
    world: World, client: TestClient
) -> None:
    path = _two_versions(world, first="# Kept\n", second="# Later\n")
    world.store.delete(world.team_ref(), path)
    status, body, _h = get_page(
        client, f"/t/{world.team_id}/space", member_headers(world)[0], **SPACE
    )
    assert status == 200 and f'action="/t/{world.team_id}/history"' in body
    status, body = _history(client, world, path)
    assert status == 200 and _rows(body) == ["3", "2", "1"]
    assert "This document is deleted" in body and "(live)" not in body
    marker = body.split('<tr id="v3"')[1].split("</tr>")[0]
    assert "(deleted)" in marker and "restore version 3" not in marker
    assert "restore version 1" in body and "restore version 2" in body
    r = post_form(
        client,
        f"/t/{world.team_id}/restore",
        world,
        {**SPACE, "path": path, "version": "1", "if_match": ""},
    )
    assert r.status_code == 303, r.text[-400:]
    assert world.store.read(world.team_ref(), path).content == "# Kept\n"
    # The same form again, now that the path holds a document: refused, nothing overwritten.
    world.store.write(world.team_ref(), path, "# Recreated\n")
    r = post_form(
        client,
        f"/t/{world.team_id}/restore",
        world,
        {**SPACE, "path": path, "version": "2", "if_match": ""},
    )
    assert r.status_code == 412 and "written again since you opened its history" in r.text
    assert world.store.read(world.team_ref(), path).content == "# Recreated\n"


def test_a_restore_over_the_quota_shows_the_services_message_next_to_it(
    world: World, client: TestClient
) -> None:
    """In a team of its own (a small quota must not starve the module's other tests)."""
    org = str(world.post("/api/admin/orgs", {"name": unique("small"), "plan": "pro_plus"})["id"])
    team = str(world.post("/api/admin/teams", {"org_id": org, "name": "t"})["id"])
    email = f"{unique('quota')}@example.com"
    user = str(world.post("/api/admin/users", {"email": email, "password": PASSWORD})["id"])
    world.post(f"/api/admin/teams/{team}/members", {"user_id": user, "role": "member"})
    world.emails["quota-member"] = email
    cookie, csrf = world.login("quota-member")
    ref = SpaceRef.build("project", SPACE["name"], tenant=team, project=SPACE["project"])
    path = "big.md"
    world.store.write(ref, path, "x" * 3000)
    live = world.store.write(ref, path, "small")
    r = client.patch(
        f"/api/admin/orgs/{org}", json={"memory_quota_bytes": 1000}, headers=admin_headers()
    )
    assert r.status_code == 200, r.text
    r = client.post(
        f"/t/{team}/restore",
        data={**SPACE, "path": path, "version": "1", "if_match": live.etag, "csrf": csrf},
        headers={"Cookie": f"keepstone_session={cookie}; keepstone_csrf={csrf}"},
        follow_redirects=False,
    )
    client.cookies.clear()
    assert r.status_code == 413, r.text[-400:]
    row = r.text.split('<tr id="v1"')[1].split("</tr>")[0]
    assert 'id="restore-error"' in row and "quota" in row
    assert world.store.read(ref, path).content == "small"
