"""The activity feed over REST (docs/api.md "Activity"): a team's changes newest first, each
with its action, its actor's kind and name (never an id), its size delta and version;
filters by space, time and actor kind; a cursor stable under concurrent writes; bad
parameters refused naming the parameter. On SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from keepstone.activity import changing
from keepstone.documents import acting_as
from tests.api.world import SPACE, World, tarball, unique


def space() -> dict[str, str]:
    return {**SPACE, "name": unique("act")}


def feed(client: TestClient, headers: dict[str, str], **params: Any) -> dict[str, Any]:
    r = client.get("/api/memory/activity", params=params, headers=headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def put(client: TestClient, h: dict[str, str], q: dict[str, str], path: str, text: str) -> None:
    r = client.put("/api/memory/doc", params={**q, "path": path}, json={"content": text}, headers=h)
    assert r.status_code in (200, 201), r.text


def test_each_change_says_what_who_and_how_much(client: TestClient, world: World) -> None:
    q = space()
    person, key = world.headers("member"), world.headers("api_key")
    put(client, person, q, "a.md", "hello")
    put(client, key, q, "a.md", "hello world")
    r = client.post(
        "/api/memory/doc/move", params={**q, "path": "a.md", "to": "b.md"}, headers=person
    )
    assert r.status_code == 201, r.text
    r = client.delete("/api/memory/doc", params={**q, "path": "b.md"}, headers=key)
    assert r.status_code == 204, r.text
    r = client.post(
        "/api/memory/doc/restore", params={**q, "path": "b.md", "version": "1"}, headers=person
    )
    assert r.status_code == 201, r.text
    body = feed(client, person, **q)
    assert body["next_cursor"] is None
    got = [
        (c["path"], c["action"], c["actor"]["kind"], c["actor"]["name"], c["size_delta"])
        for c in body["changes"]
    ]
    email = world.emails["member"]
    assert got == [
        ("b.md", "restore", "user", email, 11),
        ("b.md", "delete", "api_key", "member", -11),
        ("b.md", "move", "user", email, 0),
        ("a.md", "move", "user", email, 0),
        ("a.md", "write", "api_key", "member", 6),
        ("a.md", "write", "user", email, 5),
    ]
    assert [c["version"] for c in body["changes"]] == [3, 2, 1, 3, 2, 1]
    assert {c["space_id"] for c in body["changes"]} == {world.team_ref(name=q["name"]).id}
    ats = [c["at"] for c in body["changes"]]
    assert ats == sorted(ats, reverse=True)
    # By actor kind.
    keyed = feed(client, person, **q, actor_kind="api_key")["changes"]
    assert [(c["path"], c["action"]) for c in keyed] == [("b.md", "delete"), ("a.md", "write")]


def test_without_a_space_the_feed_is_every_readable_space_of_the_team(
    client: TestClient, world: World
) -> None:
    one, two = space(), space()
    h = world.headers("api_key")
    put(client, h, one, "x.md", "one")
    put(client, h, two, "y.md", "two")
    changes = feed(client, h, limit=100)["changes"]
    paths = {(c["space_id"], c["path"]) for c in changes}
    assert (world.team_ref(name=one["name"]).id, "x.md") in paths
    assert (world.team_ref(name=two["name"]).id, "y.md") in paths
    # Another member's user space is not theirs to read: not in their feed.
    mine = {**SPACE, "name": unique("mine"), "visibility": "user"}
    mine.pop("project")
    put(client, world.headers("admin"), mine, "diary.md", "private")
    theirs = feed(client, h, limit=100)["changes"]
    assert not any(c["path"] == "diary.md" for c in theirs)
    assert any(
        c["path"] == "diary.md" for c in feed(client, world.headers("admin"), limit=100)["changes"]
    )


def test_since_keeps_the_changes_at_or_after_it(client: TestClient, world: World) -> None:
    q = space()
    h = world.headers("api_key")
    put(client, h, q, "old.md", "old")
    cut = feed(client, h, **q)["changes"][0]["at"]
    put(client, h, q, "new.md", "new")
    got = [c["path"] for c in feed(client, h, **q, since=cut)["changes"]]
    assert got == ["new.md", "old.md"]  # at or after: the change at the instant itself too
    later = feed(client, h, **q)["changes"][0]["at"]
    assert [c["path"] for c in feed(client, h, **q, since=later)["changes"]] == ["new.md"]


def test_the_cursor_pages_on_without_repeats_or_gaps_while_writes_go_on(
    client: TestClient, world: World
) -> None:
    q = space()
    h = world.headers("api_key")
    for i in range(7):
        put(client, h, q, f"d{i}.md", "x" * (i + 1))
    seen: list[tuple[str, int]] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {**q, "limit": 3}
        if cursor:
            params["cursor"] = cursor
        body = feed(client, h, **params)
        seen += [(c["path"], c["version"]) for c in body["changes"]]
        pages += 1
        # Meanwhile: a new document, and one of those already paged past replaced.
        put(client, h, q, f"late{pages}.md", "late")
        put(client, h, q, "d6.md", f"replaced {pages}")
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == [(f"d{i}.md", 1) for i in reversed(range(7))]


def test_actors_are_named_never_by_id(client: TestClient, world: World) -> None:
    """A user no longer known is "deleted user"; a key without a label is "key of <email>"
    of its owner; the admin token is the platform."""
    q = space()
    ref = world.team_ref(name=q["name"])
    member = world.users["member"]
    with acting_as("user:usr_gone"), changing(kind="user"):
        world.store.write(ref, "gone.md", "by someone gone")
    with acting_as(f"user:{member} key:key_unlabelled"), changing(kind="api_key"):
        world.store.write(ref, "key.md", "by a key without a label")
    changes = feed(client, world.headers("api_key"), **q)["changes"]
    names = {c["path"]: c["actor"] for c in changes}
    assert names["gone.md"] == {"kind": "user", "name": "deleted user"}
    assert names["key.md"] == {"kind": "api_key", "name": f"key of {world.emails['member']}"}
    assert all("usr_" not in c["actor"]["name"] and member not in str(c) for c in changes)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "101"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"since": "yesterday"}, "since"),
        ({"actor_kind": "robot"}, "actor_kind"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": "eyJmZWVkIjpbMV19"}, "cursor"),
        ({"visibility": "org"}, "name"),
        ({"colour": "red"}, "colour"),
        ({"team": "someone-else"}, "team"),
    ],
)
def test_bad_parameters_are_refused_naming_them(
    client: TestClient, world: World, params: dict[str, str], field: str
) -> None:
    r = client.get("/api/memory/activity", params=params, headers=world.headers("api_key"))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert field in error["message"]


def test_the_limit_keeps_the_newest(client: TestClient, world: World) -> None:
    q = space()
    h = world.headers("api_key")
    for i in range(3):
        put(client, h, q, f"n{i}.md", "n")
    body = feed(client, h, **q, limit=2)
    assert [c["path"] for c in body["changes"]] == ["n2.md", "n1.md"]
    assert body["next_cursor"]
    rest = feed(client, h, **q, limit=2, cursor=body["next_cursor"])
    assert [c["path"] for c in rest["changes"]] == ["n0.md"] and rest["next_cursor"] is None


def test_an_import_s_documents_are_imports(client: TestClient, world: World) -> None:
    q = space()
    h = world.headers("api_key")
    archive = tarball({"a.md": "alpha", "b/c.md": "gamma"})
    r = client.post("/api/memory/import", params=q, content=archive, headers=h)
    assert r.status_code == 200, r.text
    changes = feed(client, h, **q)["changes"]
    assert sorted((c["path"], c["action"], c["actor"]["kind"]) for c in changes) == [
        ("a.md", "import", "api_key"),
        ("b/c.md", "import", "api_key"),
    ]
