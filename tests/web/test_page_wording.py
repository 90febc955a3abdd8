"""What the UI's pages say, in-process on SQLite and PostgreSQL: an archive member's name
that would display as something else is shown escaped, a restore notice only for a
restore that happened, people by name on a version's page, a delete that says how to undo
it, hints that name controls the page has, and ids on hover only."""

from __future__ import annotations

from html.parser import HTMLParser

from fastapi.testclient import TestClient

from keepstone.principal import CredentialKind, Principal
from tests.api.world import SPACE, World, tarball, unique
from tests.web.pages import get_page, member_headers, post_form

ADMIN = Principal(kind=CredentialKind.ADMIN_TOKEN)


class _Text(HTMLParser):
    """A page's visible text, apart from the attributes of its tags."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.attributes: list[str] = []

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attributes.extend(value or "" for _name, value in attrs)


def _parsed(body: str) -> _Text:
    parser = _Text()
    parser.feed(body)
    return parser


def test_a_rejected_member_with_a_bidi_override_is_shown_escaped(
    world: World, client: TestClient
) -> None:
    archive = tarball({"evil\u202edm.exe.md": "# evil\n", "ok2.md": "# ok\n"})
    r = post_form(
        client,
        f"/t/{world.team_id}/import",
        world,
        {"name": unique("bidi"), "project": "p1", "strategy": "skip"},
        files={"archive": ("b.tar.gz", archive, "application/gzip")},
    )
    assert r.status_code == 200 and "Import report" in r.text, r.text[-600:]
    assert "\u202e" not in r.text
    assert "rejected <code>evil\\u202edm.exe.md</code>" in r.text
    assert "written <code>ok2.md</code>" in r.text


def _written_twice(world: World, client: TestClient) -> str:
    """A document the member saved twice through the edit form (versions 1 and 2)."""
    path = f"{unique('twice')}.md"
    url = f"/t/{world.team_id}/edit"
    first = post_form(client, url, world, {**SPACE, "path": path, "content": "# One\n", "etag": ""})
    assert first.status_code == 303, first.text[-300:]
    etag = world.store.read(world.team_ref(), path).etag
    data = {**SPACE, "path": path, "content": "# Two\n", "etag": etag}
    assert post_form(client, url, world, data).status_code == 303
    return path


def test_a_restore_notice_shows_only_for_a_restore_that_happened(
    world: World, client: TestClient
) -> None:
    path = _written_twice(world, client)
    headers, _csrf = member_headers(world)
    doc = f"/t/{world.team_id}/doc"
    for crafted in ("777", "1", "2", "0", "-1"):
        status, body, _h = get_page(client, doc, headers, **SPACE, path=path, restored=crafted)
        assert status == 200 and "Restored version" not in body, crafted
    live = world.store.read(world.team_ref(), path)
    data = {**SPACE, "path": path, "version": "1", "if_match": live.etag}
    r = post_form(client, f"/t/{world.team_id}/restore", world, data)
    assert r.status_code == 303 and "restored=1" in r.headers["location"]
    status, body, _h = get_page(client, doc, headers, **SPACE, path=path, restored="1")
    assert "Restored version 1" in body
    status, body, _h = get_page(client, doc, headers, **SPACE, path=path, restored="777")
    assert "Restored version" not in body


def test_a_versions_page_names_its_author_as_the_history_does(
    world: World, client: TestClient
) -> None:
    path = _written_twice(world, client)
    headers, _csrf = member_headers(world)
    url = f"/t/{world.team_id}/version"
    for raw in ("", "1"):
        status, body, _h = get_page(client, url, headers, **SPACE, path=path, version="1", raw=raw)
        assert status == 200 and f"by {world.emails['member']}" in body, body[-800:]
        assert "user:" not in body and world.users["member"] not in body


def test_the_delete_confirmation_says_the_history_can_bring_it_back(
    world: World, client: TestClient
) -> None:
    path = f"{unique('gone')}.md"
    world.seed(path)
    status, body, _h = get_page(
        client, f"/t/{world.team_id}/delete", member_headers(world)[0], **SPACE, path=path
    )
    assert status == 200 and "cannot be undone" not in body
    assert "restore one there to bring it" in body
    assert f'href="/t/{world.team_id}/history?' in body


def test_hints_name_controls_the_page_has(world: World, client: TestClient) -> None:
    headers, _csrf = member_headers(world)
    search = f"/t/{world.team_id}/search"
    status, body, _h = get_page(client, search, headers, q="qwertyzzz-nothing")
    assert status == 200 and "min_score" in body and 'name="min_score"' in body
    status, body, _h = get_page(client, search, headers, q="qwertyzzz-nothing", min_score="0.5")
    assert 'name="min_score" type="text" inputmode="decimal" value="0.5"' in body
    assert "within the filters" in body  # the field is applied: the search was narrowed
    status, body, _h = get_page(client, search, headers, q="x", min_score="lots")
    assert "min_score must be a number" in body

    first, second = f"{unique('a')}.md", f"{unique('b')}.md"
    world.seed(first)
    world.seed(second)
    url = f"/t/{world.team_id}/rename"
    r = post_form(client, url, world, {**SPACE, "path": first, "to": second})
    assert r.status_code == 409 and "overwrite" in r.text and 'name="overwrite"' in r.text
    r = post_form(client, url, world, {**SPACE, "path": first, "to": second, "overwrite": "1"})
    assert r.status_code == 303, r.text[-400:]
    assert world.store.read(world.team_ref(), second).content == "seed"


def test_org_and_team_ids_show_only_on_hover(world: World, client: TestClient) -> None:
    admin = world.app.state.admin
    org = admin.create_org(ADMIN, unique("hover"))
    team = admin.create_team(ADMIN, org, unique("hover"))
    cookie, csrf = world.sessions["super_admin"]
    headers = {"Cookie": f"keepstone_session={cookie}; keepstone_csrf={csrf}"}
    for url, shown_id in ((f"/admin/orgs/{org}", org), (f"/admin/teams/{team}", team)):
        status, body, _h = get_page(client, url, headers)
        assert status == 200, body[-300:]
        page = _parsed(body)
        assert shown_id not in "".join(page.text), url
        assert shown_id in page.attributes, url
