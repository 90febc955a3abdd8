"""Opt-in paging of ``GET /api/memory/docs`` (docs/api.md, "Listing documents"): with
``limit`` a page and its ``next_cursor`` (by path, or by last change with
``sort=updated``); without it the whole listing, as before. A bad ``limit``, ``sort`` or
``cursor`` is a 400 naming the parameter."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from keepstone.api.routes.spaces import INLINE_LISTING
from keepstone.db import write_transaction
from keepstone.paging import MAX_PAGE
from keepstone.store.sql_schema import memory_documents
from tests.api.world import SPACE, World, unique


def _space(world: World, count: int, dir: str = "d") -> dict[str, str]:
    """A fresh space of ``count`` documents under ``dir`` and one outside it."""
    space = {**SPACE, "name": unique("paged")}
    ref = world.team_ref(**space)
    for i in range(count):
        world.store.write(ref, f"{dir}/{(i * 7) % count:03}.md", f"# {i}\n")
    world.store.write(ref, "other.md", "# outside\n")
    return space


def _headers(world: World) -> dict[str, str]:
    return {"Authorization": f"Bearer {world.keys['member']}"}


def _pages(client: TestClient, world: World, **params: Any) -> list[list[dict[str, Any]]]:
    pages: list[list[dict[str, Any]]] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        r = client.get("/api/memory/docs", params=query, headers=_headers(world))
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) == {"documents", "next_cursor"}
        pages.append(body["documents"])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages
        assert len(pages) < 50, "the cursor never ends"


def _whole(client: TestClient, world: World, **params: Any) -> list[dict[str, Any]]:
    r = client.get("/api/memory/docs", params=params, headers=_headers(world))
    assert r.status_code == 200, r.text
    assert r.json()["next_cursor"] is None  # without limit: the whole listing, no next page
    docs: list[dict[str, Any]] = r.json()["documents"]
    return docs


def test_pages_by_path_cover_the_whole_listing_once(client: TestClient, world: World) -> None:
    space = _space(world, 23)
    whole = _whole(client, world, **space, dir="d")
    assert len(whole) == 23
    pages = _pages(client, world, **space, dir="d", limit=5)
    assert [len(p) for p in pages] == [5, 5, 5, 5, 3]
    assert [d for p in pages for d in p] == whole
    # Without dir: the document outside d/ is listed too, in path order.
    everything = [d["path"] for p in _pages(client, world, **space, limit=10) for d in p]
    assert everything == sorted(everything) and len(everything) == 24


def test_pages_by_change_are_newest_first(client: TestClient, world: World) -> None:
    space = _space(world, 12)
    ref = world.team_ref(**space)
    world.store.write(ref, "d/005.md", "# changed last\n")
    listed = [d for p in _pages(client, world, **space, limit=4, sort="updated") for d in p]
    assert listed[0]["path"] == "d/005.md"
    key = [(-datetime.fromisoformat(d["updated_at"]).timestamp(), d["path"]) for d in listed]
    assert key == sorted(key) and len(listed) == 13
    assert {d["path"] for d in listed} == {d["path"] for d in _whole(client, world, **space)}


def test_a_write_between_pages_shifts_nothing(client: TestClient, world: World) -> None:
    space = _space(world, 10)
    r = client.get("/api/memory/docs", params={**space, "limit": 4}, headers=_headers(world))
    first = r.json()
    world.store.write(world.team_ref(**space), "a-first.md", "# sorts before every page\n")
    r = client.get(
        "/api/memory/docs",
        params={**space, "limit": 4, "cursor": first["next_cursor"]},
        headers=_headers(world),
    )
    assert r.json()["documents"][0]["path"] == "d/004.md"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "201"}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"limit": "5", "sort": "size"}, "sort"),
        ({"limit": "5", "cursor": "not a cursor!"}, "cursor"),
        ({"limit": "5", "cursor": "eyJsaXN0Ijoib3JncyIsImFmdGVyIjoieCJ9"}, "cursor"),
        ({"cursor": "abc"}, "cursor"),
        ({"sort": "updated"}, "sort"),
    ],
)
def test_bad_paging_is_400_naming_the_parameter(
    client: TestClient, world: World, params: dict[str, str], field: str
) -> None:
    r = client.get("/api/memory/docs", params={**SPACE, **params}, headers=_headers(world))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_request" and field in error["message"]


def test_a_cursor_of_another_order_or_directory_is_refused(
    client: TestClient, world: World
) -> None:
    space = _space(world, 6)
    r = client.get("/api/memory/docs", params={**space, "limit": 2}, headers=_headers(world))
    cursor = r.json()["next_cursor"]
    for other in ({"sort": "updated"}, {"dir": "d"}):
        r = client.get(
            "/api/memory/docs",
            params={**space, "limit": 2, "cursor": cursor, **other},
            headers=_headers(world),
        )
        assert r.status_code == 400 and "cursor" in r.json()["error"]["message"]


def test_as_of_pages_too(client: TestClient, world: World) -> None:
    space = _space(world, 5)
    now = datetime.now().astimezone().isoformat()
    world.store.write(world.team_ref(**space), "d/new.md", "# after the instant\n")
    pages = _pages(client, world, **space, dir="d", limit=2, as_of=now)
    assert [d["path"] for p in pages for d in p] == [f"d/{i:03}.md" for i in range(5)]


def test_the_rendered_listing_is_the_wire_form_of_every_document(
    client: TestClient, world: World
) -> None:
    # The database renders a whole listing; a page is rendered from the documents. Both
    # must say the same of a time on a whole second, and of a path JSON must escape.
    space = {**SPACE, "name": unique("wire")}
    ref = world.team_ref(**space)
    for path in ('q/"quoted" <b>.md', "q/naïve café.md", "q/plain.md"):
        world.store.write(ref, path, "# x\n")
    engine = world.store.engine  # type: ignore[attr-defined]
    with write_transaction(engine) as conn:
        conn.execute(
            sa.update(memory_documents)
            .where(memory_documents.c.path == "q/plain.md")
            .values(updated_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
        )
    whole = _whole(client, world, **space, dir="q")
    paged = [d for p in _pages(client, world, **space, dir="q", limit=2) for d in p]
    assert whole == paged and len(whole) == 3
    assert whole[2]["updated_at"] == "2026-01-02T03:04:05+00:00"
    assert {d["path"] for d in whole} == {'q/"quoted" <b>.md', "q/naïve café.md", "q/plain.md"}


def test_a_listing_longer_than_the_inline_bound_is_whole(client: TestClient, world: World) -> None:
    # On SQLite a listing of up to INLINE_LISTING documents is read on the event loop; a
    # longer one is read again, whole, in a worker thread.
    space = _space(world, INLINE_LISTING + 1)  # coprime with 7: every path differs
    whole = _whole(client, world, **space)
    assert len(whole) == INLINE_LISTING + 2
    assert whole == [d for p in _pages(client, world, **space, limit=MAX_PAGE) for d in p]
    assert len(_whole(client, world, **space, dir="d")) == INLINE_LISTING + 1
