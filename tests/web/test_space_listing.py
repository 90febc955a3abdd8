"""A big space's page, in process on SQLite and PostgreSQL: a page of documents at a time
by cursor, by name (folders that collapse, without a script) or by last change, narrowed
by a filter form; each document's size and last change; an empty listing said in a
sentence."""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qsl

from fastapi.testclient import TestClient

from keepstone.web.spaces import LISTING_PAGE
from tests.api.world import SPACE, World, unique
from tests.web.pages import assert_safe_page, get_page, member_headers, post_form


def _links(body: str) -> list[str]:
    """The paths of the documents the page links to, in page order."""
    return [m.replace("%2F", "/") for m in re.findall(r"/doc\?[^\"]*path=([^\"&]+)\"", body)]


def _follow(client: TestClient, location: str, headers: dict[str, str]) -> str:
    """The page a redirect's ``location`` names."""
    base, _, query = location.partition("?")
    return get_page(client, base, headers, **dict(parse_qsl(query)))[1]


def _next(body: str) -> dict[str, str] | None:
    """The query of the page's "Next page" link."""
    found = re.search(r'rel="next" href="[^"?]+\?([^"#]+)', body)
    if found is None:
        return None
    return dict(parse_qsl(html.unescape(found.group(1)), keep_blank_values=True))


def test_a_big_space_pages_by_name_and_the_pages_cover_it(client: TestClient, world: World) -> None:
    space = {**SPACE, "name": unique("big")}
    ref = world.team_ref(**space)
    count = LISTING_PAGE * 2 + 30
    for i in range(count):
        world.store.write(ref, f"f{i % 3}/doc-{i:04}.md", f"# {i}\n")
    headers = member_headers(world)[0]
    url = f"/t/{world.team_id}/space"
    seen: list[str] = []
    status, body, got = get_page(client, url, headers, **space)
    assert status == 200
    assert_safe_page(got, body)
    assert "<details open><summary>f0/</summary>" in body and '<meter class="doc"' not in body
    assert re.search(r'<time datetime="[^"]+">\d{4}-\d\d-\d\d \d\d:\d\d UTC</time>', body)
    while True:
        links = _links(body)
        assert 0 < len(links) <= LISTING_PAGE
        seen += links
        following = _next(body)
        if following is None:
            break
        status, body, _ = get_page(client, url, headers, **following)
        assert status == 200 and "First page" in body, body[-600:]
    assert seen == sorted(f"f{i % 3}/doc-{i:04}.md" for i in range(count))


def test_by_last_change_and_the_filter(client: TestClient, world: World) -> None:
    space = {**SPACE, "name": unique("order")}
    ref = world.team_ref(**space)
    for i in range(5):
        world.store.write(ref, f"notes/n{i}.md", f"# {i}\n")
    world.store.write(ref, "notes/n1.md", "# changed last\n")
    headers = member_headers(world)[0]
    url = f"/t/{world.team_id}/space"
    _, body, _ = get_page(client, url, headers, **space, sort="updated")
    assert _links(body)[0] == "notes/n1.md" and "<details" not in body
    _, body, _ = get_page(client, url, headers, **space, q="N3")
    assert _links(body) == ["notes/n3.md"] and "Clear the filter" in body
    _, body, _ = get_page(client, url, headers, **space, q="nothing-like-it")
    assert "No document&#39;s path contains" in body or "No document's path contains" in body
    assert "<li" not in body.split('id="documents"')[1].split("</form>")[1]


def test_an_empty_space_says_so_in_a_sentence_and_a_bad_cursor_is_400(
    client: TestClient, world: World
) -> None:
    headers = member_headers(world)[0]
    url = f"/t/{world.team_id}/space"
    space = {**SPACE, "name": unique("empty")}
    status, body, _ = get_page(client, url, headers, **space)
    assert status == 200 and "This space holds no documents yet." in body
    status, body, _ = get_page(client, url, headers, **space, cursor="bogus")
    assert status == 400 and "cursor" in body


def test_a_save_a_rename_and_a_delete_say_they_were_done(client: TestClient, world: World) -> None:
    space = {**SPACE, "name": unique("flash")}
    headers = member_headers(world)[0]
    t = world.team_id
    r = post_form(
        client, f"/t/{t}/edit", world, {**space, "path": "a.md", "content": "# a", "etag": ""}
    )
    assert r.status_code == 303 and "saved=saved" in r.headers["location"]
    body = _follow(client, r.headers["location"], headers)
    assert '<p class="saved" role="status">Saved.</p>' in body
    r = post_form(client, f"/t/{t}/rename", world, {**space, "path": "a.md", "to": "b.md"})
    assert r.status_code == 303, r.text
    body = _follow(client, r.headers["location"], headers)
    assert "Renamed: this is the document at its new path." in body
    r = post_form(client, f"/t/{t}/delete", world, {**space, "path": "b.md"})
    assert r.status_code == 303, r.text
    body = _follow(client, r.headers["location"], headers)
    assert "The document was deleted." in body
    # A crafted value says nothing: the notices are fixed text.
    _, body, _ = get_page(client, f"/t/{t}/space", headers, **space, saved="<b>owned</b>")
    assert 'class="saved"' not in body and "owned" not in body


def test_search_hits_are_grouped_by_space_with_a_score_bar_and_their_signals(
    client: TestClient, world: World
) -> None:
    word = unique("heron").replace("-", "")
    one, two = {**SPACE, "name": unique("sa")}, {**SPACE, "name": unique("sb")}
    world.store.write(world.team_ref(**one), "a.md", f"# {word}\n\n{word} {word} by the lake.\n")
    world.store.write(world.team_ref(**one), "b.md", f"# Birds\n\nA {word} once.\n")
    world.store.write(world.team_ref(**two), "c.md", f"# {word} notes\n")
    headers = member_headers(world)[0]
    status, body, got = get_page(client, f"/t/{world.team_id}/search", headers, q=word)
    assert status == 200, body[-300:]
    assert_safe_page(got, body)
    # Each group by the space's name (its badges beside it), the internal id only on hover.
    groups = re.findall(r'<h3 class="space-hits" title="([^"]+)">([^<]+) <span', body)
    assert sorted(name for _, name in groups) == sorted([one["name"], two["name"]])
    assert all(space_id.startswith("v1:project:") for space_id, _ in groups)
    shares = [
        float(v) for v in re.findall(r'<meter class="score" min="0" max="1" value="([^"]+)"', body)
    ]
    assert len(shares) == 3 and max(shares) == 1.0 and all(0 < s <= 1 for s in shares)
    assert '<span class="signal">keyword</span>' in body


def test_the_page_says_what_the_search_index_holds(client: TestClient, world: World) -> None:
    space = {**SPACE, "name": unique("indexed")}
    ref = world.team_ref(**space)
    world.store.write(ref, "notes/a.md", "# A\n\nThe quokka rollback.\n")
    headers = member_headers(world)[0]
    url = f"/t/{world.team_id}/space"
    body = get_page(client, url, headers, **space)[1]
    assert '<span id="index-bytes">0 B</span>, counted against no quota' in body
    world.store.reconcile(ref)  # what a search does first
    index = world.store.usage(ref).index_bytes
    body = get_page(client, url, headers, **space)[1]
    assert 0 < index < 1024 and f'<span id="index-bytes">{index} B</span>' in body
