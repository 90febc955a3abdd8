"""History over REST (docs/api.md "History"): versions, reads of a version or an instant,
listings and exports as of an instant, diff, restore; usage counts history apart; an org's
history limits; the purge job prunes history. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import io
import tarfile
import time
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from fastapi.testclient import TestClient

from keepstone.store.sql import SqlStore
from keepstone.store.sql_schema import memory_document_versions
from tests.api.world import SPACE, World, admin_headers, unique


def key(world: World, role: str = "member") -> dict[str, str]:
    return {"Authorization": f"Bearer {world.keys[role]}"}


def code(r: Any) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


class Clock:
    """The store's "now", stepped by hand: each version gets a known instant."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def step(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


@pytest.fixture
def clock(app: FastAPI) -> Iterator[Clock]:
    store: SqlStore = app.state.runtime.store
    saved = store.clock
    # Ahead of the real clock, so instants between this test's versions hold no other's.
    fake = Clock(datetime.now(UTC).replace(microsecond=0) + timedelta(days=1))
    store.clock = fake
    try:
        yield fake
    finally:
        store.clock = saved


def put(client: TestClient, h: dict[str, str], q: dict[str, str], text: str) -> Any:
    r = client.put("/api/memory/doc", params=q, json={"content": text}, headers=h)
    assert r.status_code in (200, 201), r.text
    return r


def iso(at: datetime) -> str:
    return at.isoformat()


@pytest.fixture
def history(client: TestClient, world: World, clock: Clock) -> dict[str, Any]:
    """One document with three versions an hour apart and then a deletion; the instants
    between them."""
    q = {**SPACE, "path": f"notes/{unique('h')}.md"}
    h = key(world)
    t1 = clock.now
    put(client, h, q, "# Deploy\nstep one\n")
    t2 = clock.step(hours=1)
    put(client, h, q, "# Deploy\nstep one\nstep two\n")
    t3 = clock.step(hours=1)
    put(client, h, q, "# Deploy\nstep two\n")
    t4 = clock.step(hours=1)
    assert client.delete("/api/memory/doc", params=q, headers=h).status_code == 204
    clock.step(hours=1)
    return {"q": q, "h": h, "at": [t1, t2, t3, t4]}


# --- versions ------------------------------------------------------------------------------


def test_versions_newest_first_with_actor_and_deletion(
    client: TestClient, world: World, history: dict[str, Any]
) -> None:
    r = client.get("/api/memory/doc/versions", params=history["q"], headers=history["h"])
    assert r.status_code == 200
    versions = r.json()["versions"]
    assert [v["version"] for v in versions] == [4, 3, 2, 1]
    assert versions[0] == {
        "version": 4,
        "etag": "",
        "size": 0,
        "at": iso(history["at"][3]),
        "actor": versions[0]["actor"],
        "deleted": True,
    }
    assert [v["at"] for v in versions[1:]] == [iso(t) for t in reversed(history["at"][:3])]
    assert versions[3]["size"] == len(b"# Deploy\nstep one\n")
    # Attributed to the key's user, and to the key itself.
    actor = f"user:{world.users['member']} key:{world.key_ids['member']}"
    assert all(v["actor"] == actor for v in versions)


def test_versions_live_one_included_and_unknown_path(client: TestClient, world: World) -> None:
    q = {**SPACE, "path": f"{unique('live')}.md"}
    etag = put(client, key(world), q, "v1").json()["etag"]
    versions = client.get("/api/memory/doc/versions", params=q, headers=key(world)).json()
    assert [(v["version"], v["etag"], v["deleted"]) for v in versions["versions"]] == [
        (1, etag, False)
    ]
    r = client.get(
        "/api/memory/doc/versions", params={**SPACE, "path": "never.md"}, headers=key(world)
    )
    assert code(r) == (404, "not_found") and "never.md" in r.json()["error"]["message"]


# --- reading the past ----------------------------------------------------------------------


def test_read_a_version_answers_as_a_plain_read(
    client: TestClient, history: dict[str, Any]
) -> None:
    q, h = history["q"], history["h"]
    r = client.get("/api/memory/doc", params={**q, "version": "2"}, headers=h)
    assert r.status_code == 200
    body = r.json()
    assert body["content"] == "# Deploy\nstep one\nstep two\n"
    assert set(body) == {"path", "size_bytes", "updated_at", "etag", "content"}
    assert r.headers["etag"] == f'"{body["etag"]}"'
    assert body["updated_at"] == iso(history["at"][1])
    # The deletion and a version never made: 404.
    for version in ("4", "9"):
        r = client.get("/api/memory/doc", params={**q, "version": version}, headers=h)
        assert code(r) == (404, "not_found")
    for bad in ("0", "-1", "two", "1.5", "99999999999999999999"):
        r = client.get("/api/memory/doc", params={**q, "version": bad}, headers=h)
        assert code(r) == (400, "invalid_request") and r.json()["error"]["field"] == "version"


def test_read_as_of_between_versions(client: TestClient, history: dict[str, Any]) -> None:
    q, h = history["q"], history["h"]
    t1, t2, t3, t4 = history["at"]
    expect = {
        t1 - timedelta(seconds=1): None,
        t1: "# Deploy\nstep one\n",
        t1 + timedelta(minutes=30): "# Deploy\nstep one\n",
        t2: "# Deploy\nstep one\nstep two\n",
        t3 + timedelta(minutes=59): "# Deploy\nstep two\n",
        t4: None,  # deleted then
    }
    for at, content in expect.items():
        r = client.get("/api/memory/doc", params={**q, "as_of": iso(at)}, headers=h)
        if content is None:
            assert code(r) == (404, "not_found"), at
        else:
            assert r.status_code == 200 and r.json()["content"] == content, at
            assert r.headers["etag"] == f'"{r.json()["etag"]}"'


def test_as_of_forms(client: TestClient, history: dict[str, Any]) -> None:
    q, h = history["q"], history["h"]
    t1 = history["at"][0] + timedelta(minutes=30)  # within version 1
    utc = t1.astimezone(UTC)
    forms = [
        utc.strftime("%Y-%m-%dT%H:%M:%SZ"),  # Z
        utc.strftime("%Y-%m-%dT%H:%M:%S"),  # naive: UTC
        utc.strftime("%Y-%m-%d %H:%M:%S"),  # a space for the T
        utc.astimezone(_offset(2)).isoformat(),  # +02:00
        utc.astimezone(_offset(-5)).isoformat(),  # -05:00
    ]
    for form in forms:
        r = client.get("/api/memory/doc", params={**q, "as_of": form}, headers=h)
        assert r.status_code == 200 and r.json()["content"] == "# Deploy\nstep one\n", form
    # A '+' sent unencoded arrives as a space: still the offset it was.
    raw = utc.astimezone(_offset(2)).isoformat()
    url = "/api/memory/doc?" + "&".join(f"{k}={v}" for k, v in q.items()) + f"&as_of={raw}"
    r = client.get(url, headers=h)
    assert r.status_code == 200 and r.json()["content"] == "# Deploy\nstep one\n"
    # The far past and future are instants too (nothing existed then, or what is now).
    r = client.get("/api/memory/doc", params={**q, "as_of": "0001-01-01"}, headers=h)
    assert code(r) == (404, "not_found")
    r = client.get("/api/memory/doc", params={**q, "as_of": "9999-12-31T23:59:59Z"}, headers=h)
    assert code(r) == (404, "not_found")  # deleted by then
    bad_forms = ("yesterday", "2026-13-01T00:00:00Z", "", "12:00", "0001-01-01T00:00:00+05:00")
    for bad in bad_forms:
        r = client.get("/api/memory/doc", params={**q, "as_of": bad}, headers=h)
        assert code(r) == (400, "invalid_request"), bad
        message = r.json()["error"]["message"]
        assert "ISO 8601" in message and "2026-11-30T14:05:00Z" in message
        assert r.json()["error"]["field"] == "as_of"


def _offset(hours: int) -> Any:
    from datetime import timezone

    return timezone(timedelta(hours=hours))


def test_version_and_as_of_together_and_unknown_parameters(
    client: TestClient, history: dict[str, Any]
) -> None:
    q, h = history["q"], history["h"]
    r = client.get(
        "/api/memory/doc", params={**q, "version": "1", "as_of": iso(history["at"][0])}, headers=h
    )
    assert code(r) == (400, "invalid_request") and "not both" in r.json()["error"]["message"]
    for url, extra in (
        ("/api/memory/doc/versions", {"version": "1"}),
        ("/api/memory/doc/versions", {"team": "x"}),
        ("/api/memory/doc/diff", {"from": "1", "as_of": "2026-01-01"}),
        ("/api/memory/doc/restore", {"version": "1", "tenant": "x"}),
        ("/api/memory/usage", {"as_of": "2026-01-01"}),
    ):
        method = "POST" if url.endswith("restore") else "GET"
        r = client.request(method, url, params={**q, **extra}, headers=h)
        assert code(r) == (400, "unknown_parameter"), (url, extra)


def test_list_and_export_as_of(client: TestClient, world: World, clock: Clock) -> None:
    name = unique("asof")
    space = {"name": name, "project": "p1"}
    h = key(world)
    put(client, h, {**space, "path": "a.md"}, "a1")
    put(client, h, {**space, "path": "notes/b.md"}, "b1")
    t1 = clock.step(minutes=1)
    put(client, h, {**space, "path": "a.md"}, "a2")
    client.delete("/api/memory/doc", params={**space, "path": "notes/b.md"}, headers=h)
    put(client, h, {**space, "path": "notes/c.md"}, "c1")
    t2 = clock.step(minutes=1)

    def listed(at: datetime, **extra: str) -> list[tuple[str, int]]:
        params = {**space, "as_of": iso(at), **extra}
        r = client.get("/api/memory/docs", params=params, headers=h)
        assert r.status_code == 200, r.text
        return [(d["path"], d["size_bytes"]) for d in r.json()["documents"]]

    assert listed(t1 - timedelta(minutes=2)) == []
    assert listed(t1 - timedelta(seconds=1)) == [("a.md", 2), ("notes/b.md", 2)]
    assert listed(t1 - timedelta(seconds=1), dir="notes") == [("notes/b.md", 2)]
    # The same instant written in other zones is the same listing.
    for hours in (2, -7):
        local = (t1 - timedelta(seconds=1)).astimezone(_offset(hours))
        assert listed(local) == [("a.md", 2), ("notes/b.md", 2)], hours
    assert listed(t2) == [("a.md", 2), ("notes/c.md", 2)]
    r = client.get("/api/memory/docs", params={**space, "as_of": "soon"}, headers=h)
    assert code(r) == (400, "invalid_request")

    r = client.get(
        "/api/memory/export",
        params={**space, "as_of": iso(t1 - timedelta(seconds=1))},
        headers=h,
    )
    assert r.status_code == 200 and r.headers["content-type"] == "application/gzip"
    assert _members(r.content) == {"a.md": b"a1", "notes/b.md": b"b1"}
    r = client.get("/api/memory/export", params={**space, "as_of": "nope"}, headers=h)
    assert code(r) == (400, "invalid_request")
    # The archive of an instant imports into a fresh space byte for byte.
    fresh = {"name": unique("fresh"), "project": "p1"}
    r = client.post(
        "/api/memory/import",
        params=fresh,
        content=_export(client, h, space, t1),
        headers={**h, "Content-Type": "application/gzip"},
    )
    assert r.status_code == 200 and r.json()["written"] == ["a.md", "notes/b.md"]
    assert _members(_export(client, h, fresh, None)) == {"a.md": b"a1", "notes/b.md": b"b1"}


def _export(client: TestClient, h: dict[str, str], space: dict[str, str], at: Any) -> bytes:
    params = dict(space)
    if at is not None:
        params["as_of"] = iso(at - timedelta(seconds=1))
    r = client.get("/api/memory/export", params=params, headers=h)
    assert r.status_code == 200
    return r.content


def _members(data: bytes) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for m in tar.getmembers():
            f = tar.extractfile(m)
            out[m.name] = f.read() if f else b""
    return out


# --- diff ----------------------------------------------------------------------------------


def test_diff_is_unified_text(client: TestClient, history: dict[str, Any]) -> None:
    q, h = history["q"], history["h"]
    r = client.get("/api/memory/doc/diff", params={**q, "from": "1", "to": "2"}, headers=h)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/x-diff")
    path = q["path"]
    assert r.text == (
        f"--- a/{path} (version 1)\n"
        f"+++ b/{path} (version 2)\n"
        "@@ -1,2 +1,3 @@\n"
        " # Deploy\n"
        " step one\n"
        "+step two\n"
    )
    # To the newest by default: the deletion, which compares as empty text.
    r = client.get("/api/memory/doc/diff", params={**q, "from": "3"}, headers=h)
    assert r.text.splitlines()[:2] == [f"--- a/{path} (version 3)", f"+++ b/{path} (version 4)"]
    assert r.text.splitlines()[-2:] == ["-# Deploy", "-step two"]
    r = client.get("/api/memory/doc/diff", params={**q, "from": "2", "to": "2"}, headers=h)
    assert r.status_code == 200 and r.text == ""


def test_diff_refusals(client: TestClient, history: dict[str, Any]) -> None:
    q, h = history["q"], history["h"]
    r = client.get("/api/memory/doc/diff", params=q, headers=h)
    assert code(r) == (400, "invalid_request") and r.json()["error"]["field"] == "from"
    r = client.get("/api/memory/doc/diff", params={**q, "from": "1", "to": "x"}, headers=h)
    assert code(r) == (400, "invalid_request") and r.json()["error"]["field"] == "to"
    r = client.get("/api/memory/doc/diff", params={**q, "from": "1", "to": "9"}, headers=h)
    assert code(r) == (404, "not_found") and "9" in r.json()["error"]["message"]
    r = client.get(
        "/api/memory/doc/diff", params={**SPACE, "path": "never.md", "from": "1"}, headers=h
    )
    assert code(r) == (404, "not_found")


# --- restore: a write ----------------------------------------------------------------------


def test_restore_is_a_new_version_with_write_semantics(
    client: TestClient, history: dict[str, Any]
) -> None:
    q, h = history["q"], history["h"]
    # The document is deleted: restoring brings it back (201, as a PUT that creates).
    r = client.post("/api/memory/doc/restore", params={**q, "version": "2"}, headers=h)
    assert r.status_code == 201 and r.json()["created"] is True
    etag = r.json()["etag"]
    assert r.headers["etag"] == f'"{etag}"'
    doc = client.get("/api/memory/doc", params=q, headers=h).json()
    assert doc["content"] == "# Deploy\nstep one\nstep two\n" and doc["etag"] == etag
    versions = client.get("/api/memory/doc/versions", params=q, headers=h).json()["versions"]
    assert [v["version"] for v in versions] == [5, 4, 3, 2, 1] and versions[0]["etag"] == etag
    # Over a live document: 200; If-Match honoured.
    stale = {**h, "If-Match": '"0123"'}
    r = client.post("/api/memory/doc/restore", params={**q, "version": "1"}, headers=stale)
    assert code(r) == (412, "precondition_failed")
    r = client.post(
        "/api/memory/doc/restore", params={**q, "version": "1"}, headers={**h, "If-Match": etag}
    )
    assert r.status_code == 200 and r.json()["created"] is False
    assert client.get("/api/memory/doc", params=q, headers=h).json()["content"] == (
        "# Deploy\nstep one\n"
    )
    # Restoring what the document already holds: a 200 that makes no version.
    r = client.post("/api/memory/doc/restore", params={**q, "version": "1"}, headers=h)
    assert r.status_code == 200 and r.json()["created"] is False
    versions = client.get("/api/memory/doc/versions", params=q, headers=h).json()["versions"]
    assert [v["version"] for v in versions] == [6, 5, 4, 3, 2, 1]
    # No such version, the deletion marker, a bad or missing number.
    r = client.post("/api/memory/doc/restore", params={**q, "version": "4"}, headers=h)
    assert code(r) == (404, "not_found")
    r = client.post("/api/memory/doc/restore", params={**q, "version": "40"}, headers=h)
    assert code(r) == (404, "not_found")
    for params in ({**q, "version": "x"}, q):
        r = client.post("/api/memory/doc/restore", params=params, headers=h)
        assert code(r) == (400, "invalid_request") and r.json()["error"]["field"] == "version"


def test_restore_refused_to_a_viewer_before_anything_is_read(
    client: TestClient, world: World, history: dict[str, Any]
) -> None:
    q = history["q"]
    for version in ("1", "40"):  # an existing version and none: the same refusal
        r = client.post(
            "/api/memory/doc/restore",
            params={**q, "version": version},
            headers=key(world, "viewer"),
        )
        assert code(r) == (403, "member_role_required")
    # The viewer still reads the history.
    r = client.get("/api/memory/doc/versions", params=q, headers=key(world, "viewer"))
    assert r.status_code == 200


def test_restore_of_a_version_holding_a_secret_is_refused(
    app: FastAPI, client: TestClient, world: World
) -> None:
    q = {**SPACE, "path": f"{unique('sec')}.md"}
    h = key(world)
    put(client, h, q, "clean one")
    put(client, h, q, "clean two")
    # A version from before a scanner rule (say): its stored content holds a secret now.
    secret = "token ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    V = memory_document_versions
    engine = app.state.runtime.engine
    with engine.begin() as conn:
        conn.execute(
            sa.update(V)
            .where(V.c.path == q["path"], V.c.version == 1)
            .values(content=zlib.compress(secret.encode()))
        )
    r = client.post("/api/memory/doc/restore", params={**q, "version": "1"}, headers=h)
    assert code(r) == (422, "secret_detected")
    assert client.get("/api/memory/doc", params=q, headers=h).json()["content"] == "clean two"


def test_restore_is_held_to_the_quota(client: TestClient, world: World) -> None:
    org = world.identity.create_org(unique("quota"))
    team = world.identity.create_team(org, "t")
    user = world.scratch_user()
    world.identity.add_team_member(team, user, "member")
    _, secret = world.identity.create_api_key(user, team)
    h = {"Authorization": f"Bearer {secret}"}
    q = {**SPACE, "path": "big.md"}
    put(client, h, q, "x" * 40)
    put(client, h, q, "y")
    r = client.patch(
        f"/api/admin/orgs/{org}", json={"memory_quota_bytes": 20}, headers=admin_headers()
    )
    assert r.status_code == 200
    r = client.post("/api/memory/doc/restore", params={**q, "version": "1"}, headers=h)
    assert code(r) == (413, "quota_exceeded")
    assert client.get("/api/memory/doc", params=q, headers=h).json()["content"] == "y"


def test_restore_in_a_global_space_needs_authority_and_is_audited(
    client: TestClient, world: World
) -> None:
    g = {"name": unique("g"), "visibility": "global", "path": "policy.md"}
    a = admin_headers()
    put(client, a, g, "first")
    put(client, a, g, "second")
    r = client.post("/api/memory/doc/restore", params={**g, "version": "1"}, headers=key(world))
    assert code(r) == (403, "platform_authority_required")
    r = client.post("/api/memory/doc/restore", params={**g, "version": "1"}, headers=a)
    assert r.status_code == 200
    events = client.get("/api/admin/audit", params={"limit": 1}, headers=a).json()["events"]
    assert events[0]["action"] == "memory.global_write" and events[0]["path"] == "policy.md"
    assert events[0]["actor"] == "admin-token"
    versions = client.get("/api/memory/doc/versions", params=g, headers=key(world)).json()
    assert [(v["version"], v["actor"]) for v in versions["versions"]][0] == (3, "admin-token")


# --- isolation -----------------------------------------------------------------------------


def test_another_team_sees_no_history_of_the_same_path(
    client: TestClient, world: World, history: dict[str, Any]
) -> None:
    org = world.identity.create_org(unique("other"))
    team = world.identity.create_team(org, "t")
    user = world.scratch_user()
    world.identity.add_team_member(team, user, "member")
    _, secret = world.identity.create_api_key(user, team)
    other = {"Authorization": f"Bearer {secret}"}
    q = history["q"]
    at = iso(history["at"][0])
    for method, url, extra in (
        ("GET", "/api/memory/doc/versions", {}),
        ("GET", "/api/memory/doc", {"version": "1"}),
        ("GET", "/api/memory/doc", {"as_of": at}),
        ("GET", "/api/memory/doc/diff", {"from": "1", "to": "2"}),
        ("POST", "/api/memory/doc/restore", {"version": "1"}),
    ):
        r = client.request(method, url, params={**q, **extra}, headers=other)
        assert code(r) == (404, "not_found"), (method, url, extra)
    r = client.get("/api/memory/docs", params={**SPACE, "as_of": at}, headers=other)
    assert r.status_code == 200 and r.json() == {"documents": [], "next_cursor": None}
    # The restore refused above wrote nothing in the other team either.
    r = client.get("/api/memory/doc", params=q, headers=other)
    assert code(r) == (404, "not_found")


# --- usage ---------------------------------------------------------------------------------


def test_usage_counts_history_apart(client: TestClient, world: World) -> None:
    org = world.identity.create_org(unique("usage"))
    team = world.identity.create_team(org, "t")
    user = world.scratch_user()
    world.identity.add_team_member(team, user, "member")
    _, secret = world.identity.create_api_key(user, team)
    h = {"Authorization": f"Bearer {secret}"}

    def usage() -> dict[str, Any]:
        r = client.get("/api/memory/usage", params=SPACE, headers=h)
        assert r.status_code == 200
        body: dict[str, Any] = r.json()
        return body

    fresh = usage()
    assert (fresh["history_used_bytes"], fresh["history_quota_bytes"]) == (0, 1 << 30)
    q = {**SPACE, "path": "u.md"}
    put(client, h, q, "a" * 5000)  # past the size from which versions are compressed
    assert usage()["history_used_bytes"] == 0  # the live version is not history
    put(client, h, q, "b" * 10)
    after = usage()
    assert after["used_bytes"] == 10
    assert 0 < after["history_used_bytes"] < 5000  # compressed
    assert after["history_quota_bytes"] == 1 << 30


# --- the org's history limits (admin) ------------------------------------------------------


def test_org_history_limits_are_pushed_to_its_teams(client: TestClient, world: World) -> None:
    org = world.identity.create_org(unique("limits"))
    teams = sorted(world.identity.create_team(org, f"t{i}") for i in range(2))
    a = admin_headers()
    r = client.patch(
        f"/api/admin/orgs/{org}",
        json={"history_days": 7, "history_versions": 2, "history_quota_bytes": 5000},
        headers=a,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["history_days"], body["history_versions"], body["history_quota_bytes"]) == (
        7,
        2,
        5000,
    )
    assert body["teams_updated"] == teams and body["teams_failed"] == []
    store: SqlStore = world.app.state.runtime.store
    for team in teams:  # set before either team ever wrote
        assert store.history_limits(team) == (7, 2, 5000)
        assert store.history_usage(team) == (0, 5000)
    # A limit not named keeps its value; null puts one back at the default.
    r = client.patch(f"/api/admin/orgs/{org}", json={"history_days": None}, headers=a)
    assert r.status_code == 200 and r.json()["history_days"] is None
    assert "history_versions" not in r.json()
    assert store.history_limits(teams[0]) == (None, 2, 5000)
    # A PATCH without them answers as before (no history fields).
    r = client.patch(f"/api/admin/orgs/{org}", json={"plan": "pro"}, headers=a)
    assert r.status_code == 200 and "history_days" not in r.json()

    # The limit holds: two versions per document kept.
    user = world.scratch_user()
    world.identity.add_team_member(teams[0], user, "member")
    _, secret = world.identity.create_api_key(user, teams[0])
    h = {"Authorization": f"Bearer {secret}"}
    q = {**SPACE, "path": "kept.md"}
    for text in ("one", "two", "three", "four"):
        put(client, h, q, text)
    versions = client.get("/api/memory/doc/versions", params=q, headers=h).json()["versions"]
    assert [v["version"] for v in versions] == [4, 3]


@pytest.mark.parametrize(
    "body",
    [
        {"history_days": 0},
        {"history_days": -3},
        {"history_versions": "5"},
        {"history_versions": 2.5},
        {"history_quota_bytes": True},
        {"history_days": 36_501},
        {"history_colour": 1},
    ],
)
def test_org_history_limits_refusals(client: TestClient, world: World, body: Any) -> None:
    r = client.patch(f"/api/admin/orgs/{world.org_id}", json=body, headers=admin_headers())
    assert code(r) == (400, "invalid_request")
    assert next(iter(body)) in r.json()["error"]["message"]


def test_org_history_limits_need_platform_authority(client: TestClient, world: World) -> None:
    r = client.patch(
        f"/api/admin/orgs/{world.org_id}", json={"history_days": 3}, headers=key(world, "admin")
    )
    assert code(r) == (403, "forbidden")
    r = client.patch("/api/admin/orgs/nope", json={"history_days": 3}, headers=admin_headers())
    assert code(r) == (404, "not_found")


# --- the purge job prunes history ----------------------------------------------------------


def test_purge_job_prunes_old_versions(
    app: FastAPI, client: TestClient, world: World, clock: Clock
) -> None:
    from keepstone.api.routes.records import purge_periodically

    org = world.identity.create_org(unique("purge"))
    team = world.identity.create_team(org, "t")
    r = client.patch(f"/api/admin/orgs/{org}", json={"history_days": 1}, headers=admin_headers())
    assert r.json()["teams_updated"] == [team]
    user = world.scratch_user()
    world.identity.add_team_member(team, user, "member")
    _, secret = world.identity.create_api_key(user, team)
    h = {"Authorization": f"Bearer {secret}"}
    q = {**SPACE, "path": "old.md"}
    put(client, h, q, "first")
    clock.step(hours=1)
    put(client, h, q, "second")
    clock.step(hours=1)
    put(client, h, q, "third")
    clock.step(days=2)  # versions 1 and 2 replaced more than a day ago

    def listed() -> list[int]:
        got = client.get("/api/memory/doc/versions", params=q, headers=h).json()["versions"]
        return [v["version"] for v in got]

    async def run_until_pruned() -> None:
        # Until a pass has pruned (each pass purges expired records first, which on a
        # busy machine can take longer than a fixed wait), or a minute has passed.
        task = asyncio.create_task(purge_periodically(app, interval=0.05))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and await asyncio.to_thread(listed) != [3]:
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run_until_pruned())
    assert listed() == [3]
    usage = client.get("/api/memory/usage", params=SPACE, headers=h).json()
    assert usage["history_used_bytes"] == 0


# --- the HTTP client store over these routes ---------------------------------------------


def test_http_store_reads_the_past_through_the_routes(
    client: TestClient, world: World, clock: Clock
) -> None:
    from keepstone import errors
    from keepstone.spaces import SpaceRef
    from keepstone.store.http import HttpMemoryStore
    from tests.conformance.helpers import AppTransport

    def store_for(secret: str) -> HttpMemoryStore:
        base = str(client.base_url)
        return HttpMemoryStore(base, secret, transport=AppTransport(client))

    mine = store_for(world.keys["member"])
    ref = SpaceRef.build("project", unique("client"), tenant="ignored", project="p1")
    try:
        assert "history" in mine.capabilities
        mine.write(ref, "a.md", "one")
        t1 = clock.step(minutes=1)
        mine.write(ref, "a.md", "two")
        mine.write(ref, "b.md", "bee")
        clock.step(minutes=1)
        assert [v.version for v in mine.versions(ref, "a.md")] == [2, 1]
        assert mine.read_version(ref, "a.md", 1).content == "one"
        early = t1 - timedelta(seconds=1)
        assert mine.read_as_of(ref, "a.md", early).content == "one"
        assert [d.path for d in mine.list_as_of(ref, early)] == ["a.md"]
        assert {d.path: d.content for d in mine.iter_documents_as_of(ref, clock.now)} == {
            "a.md": "two",
            "b.md": "bee",
        }
        assert mine.usage(ref).history_used_bytes > 0
        with pytest.raises(errors.NotFound, match="no history"):
            mine.versions(ref, "never.md")
        with pytest.raises(errors.NotFound):
            mine.read_as_of(ref, "b.md", early)
    finally:
        mine.close()

    # Another team's key: the same names are its own, empty, space.
    org = world.identity.create_org(unique("client"))
    team = world.identity.create_team(org, "t")
    user = world.scratch_user()
    world.identity.add_team_member(team, user, "member")
    _, secret = world.identity.create_api_key(user, team)
    other = store_for(secret)
    try:
        with pytest.raises(errors.NotFound, match="no history"):
            other.versions(ref, "a.md")
        with pytest.raises(errors.NotFound):
            other.read_version(ref, "a.md", 1)
        assert other.list_as_of(ref, clock.now) == []
        # A refusal that is a 404 of another kind is not taken for "no history".
        world.identity.remove_team_member(team, user)
        with pytest.raises(errors.TeamNotFound):
            other.versions(ref, "a.md")
    finally:
        other.close()
