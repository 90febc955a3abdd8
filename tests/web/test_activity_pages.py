"""The UI's recent-changes pages in-process, on SQLite and PostgreSQL (docs/ui.md
"Activity"): a team's changes and one space's, newest first, who by name, what, when and
the size delta, each linked to its diff; filtered by space, actor kind and time; paged;
a bad filter refused next to its field; and the history page's who column by name."""

from __future__ import annotations

import html
import re

from fastapi.testclient import TestClient

from keepstone.activity import changing
from keepstone.documents import acting_as
from tests.api.world import SPACE, World, unique
from tests.web.pages import assert_safe_page, get_page, member_headers


def _page(client: TestClient, world: World, **params: str) -> tuple[int, str]:
    status, body, headers = get_page(
        client, f"/t/{world.team_id}/activity", member_headers(world)[0], **params
    )
    assert_safe_page(headers, body)
    return status, html.unescape(body)


def _rows(body: str) -> list[str]:
    """The table's rows as their text (tags out) and their links."""
    table = body.split("<tbody>")[1].split("</tbody>")[0] if "<tbody>" in body else ""
    rows = []
    for row in table.split("<tr>")[1:]:
        links = " ".join(re.findall(r'href="([^"]+)"', row))
        rows.append(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row)) + " " + links)
    return rows


def test_the_space_s_changes_name_who_what_and_link_the_diff(
    client: TestClient, world: World
) -> None:
    space = {**SPACE, "name": unique("ui-act")}
    q = {**space, "path": "plan.md"}
    person = {"Cookie": member_headers(world)[0]["Cookie"], "X-Keepstone-Team": world.team_id}
    person["X-CSRF-Token"] = world.sessions["member"][1]
    r = client.put("/api/memory/doc", params=q, json={"content": "one"}, headers=person)
    client.cookies.clear()
    assert r.status_code == 201, r.text
    key = {"Authorization": f"Bearer {world.keys['member']}"}
    r = client.put("/api/memory/doc", params=q, json={"content": "one two"}, headers=key)
    assert r.status_code == 200, r.text
    with acting_as("local-cli"), changing(kind="agent_run"):
        world.store.write(world.team_ref(name=space["name"]), "plan.md", "one two three")
    status, body = _page(client, world, **space)
    assert status == 200
    rows = _rows(body)
    assert len(rows) == 3
    assert "(agent run)" in rows[0] and "+6 B" in rows[0]
    assert "member (api key)" in rows[1] and "+4 B" in rows[1]
    assert f"{world.emails['member']} (user)" in rows[2] and "+3 B" in rows[2]
    assert "user:" not in body and world.users["member"] not in body
    # Each change links to its diff with the version before (the first: the version).
    assert f"/t/{world.team_id}/diff?" in rows[0] and "from=2&to=3" in rows[0]
    assert f"/t/{world.team_id}/version?" in rows[2] and "version=1" in rows[2]
    # The history page names them too.
    status, hist, _h = get_page(
        client, f"/t/{world.team_id}/history", member_headers(world)[0], **space, path="plan.md"
    )
    assert status == 200 and world.emails["member"] in html.unescape(hist)
    assert "user:" not in hist and "key:" not in hist
    # Filtered by kind.
    status, body = _page(client, world, **space, actor_kind="api_key")
    assert len(_rows(body)) == 1 and "member (api key)" in _rows(body)[0]


def test_the_team_page_pages_and_filters_by_space_and_time(
    client: TestClient, world: World
) -> None:
    name = unique("ui-many")
    ref = world.team_ref(name=name)
    for i in range(52):
        world.store.write(ref, f"n{i:02d}.md", "x")
    status, body = _page(client, world)
    assert status == 200 and len(_rows(body)) == 50
    older = re.search(r'href="([^"]+)" rel="next"', body)
    assert older, "a page of 50 links the older ones"
    r = client.get(older.group(1), headers=member_headers(world)[0])
    client.cookies.clear()
    assert r.status_code == 200 and len(_rows(html.unescape(r.text))) >= 2
    # The space filter (the select's value) keeps that space's.
    status, body = _page(client, world, space=f"project/p1//{name}")
    assert status == 200 and len(_rows(body)) == 50 and f"{name}" in body
    # A time to come: nothing yet.
    status, body = _page(client, world, since="2999-01-01")
    assert status == 200 and "No changes match these filters" in body


def test_a_bad_filter_is_refused_next_to_its_field(client: TestClient, world: World) -> None:
    status, body = _page(client, world, since="last tuesday")
    assert status == 400
    assert 'id="activity-error"' in body and "since" in body
    assert 'aria-invalid="true"' in body


def test_a_query_naming_no_space_is_refused_with_why(client: TestClient, world: World) -> None:
    """Space fields that name no space (a project space without its project, a project
    without a name) are a 400 saying which field is missing, with no link to that space."""
    for fields, said in (
        ({"name": SPACE["name"]}, "requires project"),
        ({"project": SPACE["project"]}, "name must be"),
    ):
        status, body = _page(client, world, **fields)
        assert status == 400, body[-500:]
        assert 'id="activity-error"' in body and said in body
        assert f"/t/{world.team_id}/space?" not in body
