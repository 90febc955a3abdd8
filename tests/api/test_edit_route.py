"""POST /api/memory/doc/edit (docs/api.md "Moving and editing documents"): replace the one
exact occurrence of a text or insert lines, answered as a write; the errors of Memory.edit;
If-Match as on PUT; the HTTP store sends an edit as this one request. SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from keepstone import errors
from keepstone.documents import Insert, Replace
from keepstone.spaces import SpaceRef
from keepstone.store.http import HttpMemoryStore
from tests.api.world import SPACE, World, unique

EDIT = "/api/memory/doc/edit"


def key(world: World, role: str = "member") -> dict[str, str]:
    return {"Authorization": f"Bearer {world.keys[role]}"}


def seeded(client: TestClient, world: World, text: str) -> dict[str, str]:
    """The query of a new document holding ``text``."""
    q = {**SPACE, "path": f"{unique('edit')}.md"}
    r = client.put("/api/memory/doc", params=q, json={"content": text}, headers=key(world))
    assert r.status_code == 201, r.text
    return q


def content(client: TestClient, world: World, q: dict[str, str]) -> str:
    r = client.get("/api/memory/doc", params=q, headers=key(world))
    assert r.status_code == 200, r.text
    return str(r.json()["content"])


def error(r: Any) -> dict[str, Any]:
    body: dict[str, Any] = r.json()["error"]
    return body


def test_a_replace_is_answered_as_a_write(client: TestClient, world: World) -> None:
    q = seeded(client, world, "# Deploy\n\nport 8000\n")
    r = client.post(EDIT, params=q, json={"old": "8000", "new": "8421"}, headers=key(world))
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"path", "size_bytes", "etag", "created"}
    assert body["path"] == q["path"] and body["created"] is False
    assert body["size_bytes"] == len("# Deploy\n\nport 8421\n")
    assert r.headers["ETag"] == f'"{body["etag"]}"'
    read = client.get("/api/memory/doc", params=q, headers=key(world))
    assert read.json()["content"] == "# Deploy\n\nport 8421\n"
    assert read.headers["ETag"] == r.headers["ETag"]


def test_an_insert_puts_whole_lines_after_the_line(client: TestClient, world: World) -> None:
    q = seeded(client, world, "one\nthree\n")
    body = {"insert_line": 1, "text": "two"}
    r = client.post(EDIT, params=q, json=body, headers=key(world))
    assert r.status_code == 200, r.text
    assert content(client, world, q) == "one\ntwo\nthree\n"
    r = client.post(EDIT, params=q, json={"insert_line": 0, "text": "# top"}, headers=key(world))
    assert r.status_code == 200, r.text
    assert content(client, world, q) == "# top\none\ntwo\nthree\n"


def test_an_absent_or_ambiguous_text_is_refused_with_its_count(
    client: TestClient, world: World
) -> None:
    q = seeded(client, world, "a\nx\nb\nx\n")
    r = client.post(EDIT, params=q, json={"old": "x", "new": "y"}, headers=key(world))
    assert r.status_code == 422, r.text
    err = error(r)
    assert err["code"] == "invalid_edit" and err["reason"] == "ambiguous"
    assert err["occurrences"] == 2 and err["lines"] == [2, 4]
    assert "occurs 2 times" in err["message"]
    r = client.post(EDIT, params=q, json={"old": "zzz", "new": "y"}, headers=key(world))
    assert r.status_code == 422 and error(r)["reason"] == "no_match", r.text
    r = client.post(EDIT, params=q, json={"insert_line": 9, "text": "t"}, headers=key(world))
    assert r.status_code == 422 and error(r)["reason"] == "line_out_of_range", r.text
    assert error(r)["lines"] == 4
    assert content(client, world, q) == "a\nx\nb\nx\n"  # nothing was written


def test_if_match_is_honoured_as_on_put(client: TestClient, world: World) -> None:
    q = seeded(client, world, "v1\n")
    etag = client.get("/api/memory/doc", params=q, headers=key(world)).headers["ETag"]
    stale = {**key(world), "If-Match": '"0000"'}
    r = client.post(EDIT, params=q, json={"old": "v1", "new": "v2"}, headers=stale)
    assert r.status_code == 412 and error(r)["code"] == "precondition_failed", r.text
    assert content(client, world, q) == "v1\n"
    for sent in (etag, f"W/{etag}", etag.strip('"')):
        edited = client.post(
            EDIT,
            params=q,
            json={"old": "v1", "new": "v1"},
            headers={**key(world), "If-Match": sent},
        )
        assert edited.status_code == 200, (sent, edited.text)
    fresh = {**key(world), "If-Match": etag}
    r = client.post(EDIT, params=q, json={"old": "v1", "new": "v2"}, headers=fresh)
    assert r.status_code == 200, r.text
    r = client.post(EDIT, params=q, json={"old": "v2", "new": "v3"}, headers=fresh)
    assert r.status_code == 412, r.text  # the etag of v1 no longer matches


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"old": "a", "new": "b", "insert_line": 0, "text": "t"}, None),
        ({"old": "a"}, None),
        ({"insert_line": "1", "text": "t"}, None),
        ({"insert_line": True, "text": "t"}, None),
        ({}, None),
        ({"old": "a", "new": "b", "content": "c"}, "content"),
        ([1, 2], "body"),
    ],
)
def test_a_body_of_neither_form_is_refused(
    client: TestClient, world: World, body: Any, field: str | None
) -> None:
    q = seeded(client, world, "a\n")
    r = client.post(EDIT, params=q, json=body, headers=key(world))
    assert r.status_code == 400 and error(r)["code"] == "invalid_request", r.text
    assert "old and new" in error(r)["message"] or "insert_line" in error(r)["message"]
    assert error(r).get("field") == field
    assert content(client, world, q) == "a\n"


def test_no_json_no_document_no_rung(client: TestClient, world: World) -> None:
    q = seeded(client, world, "a\n")
    r = client.post(EDIT, params=q, content=b"{not json", headers=key(world))
    assert r.status_code == 400 and error(r)["code"] == "invalid_request", r.text
    gone = {**SPACE, "path": f"{unique('none')}.md"}
    r = client.post(EDIT, params=gone, json={"old": "a", "new": "b"}, headers=key(world))
    assert r.status_code == 404 and error(r)["code"] == "not_found", r.text
    r = client.post(EDIT, params=q, json={"old": "a", "new": "b"}, headers=key(world, "viewer"))
    assert r.status_code == 403 and error(r)["code"] == "member_role_required", r.text
    r = client.post(
        EDIT, params={**q, "to": "x.md"}, json={"old": "a", "new": "b"}, headers=key(world)
    )
    assert r.status_code == 400 and error(r)["code"] == "unknown_parameter", r.text


def test_an_edit_is_checked_as_a_write(client: TestClient, world: World) -> None:
    q = seeded(client, world, "key: none\n")
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    r = client.post(EDIT, params=q, json={"old": "none", "new": secret}, headers=key(world))
    assert r.status_code == 422 and error(r)["code"] == "secret_detected", r.text
    assert content(client, world, q) == "key: none\n"


def test_the_http_store_sends_an_edit_as_one_request(client: TestClient, world: World) -> None:
    q = seeded(client, world, "alpha\nbeta\n")
    sent: list[tuple[str, str]] = []

    def forward(request: httpx.Request) -> httpx.Response:
        sent.append((request.method, request.url.path))
        r = client.request(
            request.method,
            request.url.path,
            params=request.url.params,
            content=request.content,
            headers=dict(request.headers),
        )
        return httpx.Response(r.status_code, headers=r.headers, content=r.content)

    store = HttpMemoryStore(
        "http://keepstone.test", world.keys["member"], transport=httpx.MockTransport(forward)
    )
    ref = SpaceRef.build("project", SPACE["name"], project=SPACE["project"])
    try:
        result = store.edit(ref, q["path"], Replace("beta", "gamma"))
        assert sent == [("POST", EDIT)]
        assert result.created is False and result.path == q["path"]
        store.edit(ref, q["path"], Insert(0, "top"), if_match=result.etag)
        assert content(client, world, q) == "top\nalpha\ngamma\n"
        with pytest.raises(errors.InvalidEdit) as refused:
            store.edit(ref, q["path"], Replace("a", "b"))
        assert refused.value.details["occurrences"] == 4
        with pytest.raises(errors.PreconditionFailed):
            store.edit(ref, q["path"], Replace("top", "t"), if_match=result.etag)
    finally:
        store.close()
