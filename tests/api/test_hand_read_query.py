"""Query parameters read by hand (keepstone.api.routes.common: a space's four on every spaces
route, and GET /api/memory/doc's own): the same values, refusals and OpenAPI entries as
parameters FastAPI reads."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.api.world import SPACE, World, unique


def key(world: World) -> dict[str, str]:
    return world.headers("api_key")


def test_a_missing_path_is_invalid_path_naming_it(client: TestClient, world: World) -> None:
    r = client.get("/api/memory/doc", params=SPACE, headers=key(world))
    assert r.status_code == 422, r.text  # invalid_path, as for any bad path
    error = r.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_path", "path")
    assert error["message"] == (
        "query parameter 'path' is required; give the document's path, e.g. ?path=MEMORY.md"
    )


def test_a_missing_name_is_refused_before_a_missing_path(client: TestClient, world: World) -> None:
    r = client.get("/api/memory/doc", params={"project": "x"}, headers=key(world))
    error = r.json()["error"]
    assert (r.status_code, error["code"], error["field"]) == (400, "invalid_space_ref", "name")
    assert (
        error["message"] == "query parameter 'name' is required; name the space, e.g. ?name=notes"
    )


def test_values_are_read_as_declared_ones_were(client: TestClient, world: World) -> None:
    path = f"{unique('hand')}.md"
    q = {**SPACE, "path": path}
    assert client.put("/api/memory/doc", params=q, json={"content": "v1"}, headers=key(world))
    # A repeated parameter: its last value.
    r = client.get(
        "/api/memory/doc",
        params=[*q.items(), ("path", "other.md"), ("path", path)],
        headers=key(world),
    )
    assert r.status_code == 200 and r.json()["content"] == "v1", r.text
    # An empty visibility is not the default: it is refused as a bad one.
    r = client.get("/api/memory/doc", params={**q, "visibility": ""}, headers=key(world))
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_space_ref"
    # An empty version is a bad version, not "no version".
    r = client.get("/api/memory/doc", params={**q, "version": ""}, headers=key(world))
    assert r.status_code == 400 and r.json()["error"]["field"] == "version", r.text


def test_openapi_lists_every_parameter_read_by_hand(app: FastAPI) -> None:
    paths: dict[str, Any] = app.openapi()["paths"]
    space = {"name", "visibility", "project", "bot"}
    for route, methods in (
        ("/api/memory/doc", ("get", "put", "delete")),
        ("/api/memory/docs", ("get",)),
        ("/api/memory/doc/versions", ("get",)),
        ("/api/memory/usage", ("get",)),
    ):
        for method in methods:
            listed = {p["name"]: p for p in paths[route][method]["parameters"]}
            assert space <= set(listed), (route, method)
            assert listed["name"]["required"] is True
            assert listed["visibility"]["schema"]["default"] == "project"
            assert listed["project"]["required"] is False
    get_doc = {p["name"]: p for p in paths["/api/memory/doc"]["get"]["parameters"]}
    assert set(get_doc) == space | {"path", "version", "as_of"}
    assert get_doc["path"]["required"] is True
    assert get_doc["path"]["schema"]["pattern"] == r"\.md$"
    assert get_doc["as_of"]["schema"]["format"] == "date-time"


def test_put_and_delete_read_path_and_if_match_as_declared_ones_were(
    client: TestClient, world: World
) -> None:
    path = f"{unique('hand-write')}.md"
    q = {**SPACE, "path": path}
    # A missing path: the same refusal as GET's, for PUT and DELETE alike.
    for method in ("PUT", "DELETE"):
        r = client.request(method, "/api/memory/doc", params=SPACE, headers=key(world))
        error = r.json()["error"]
        assert (r.status_code, error["code"], error["field"]) == (422, "invalid_path", "path")
    created = client.put("/api/memory/doc", params=q, json={"content": "v1"}, headers=key(world))
    assert created.status_code == 201, created.text
    etag = created.json()["etag"]
    # If-Match: a stale etag is refused 412 and changes nothing; quoted, bare and weak
    # forms of the current one are each accepted.
    stale = client.put(
        "/api/memory/doc",
        params=q,
        json={"content": "lost"},
        headers={**key(world), "If-Match": '"0000"'},
    )
    assert stale.status_code == 412, stale.text
    for n, shape in enumerate(('"{}"', "{}", 'W/"{}"')):
        form = shape.format(etag)
        r = client.put(
            "/api/memory/doc",
            params=q,
            json={"content": f"v{n + 2}"},
            headers={**key(world), "If-Match": form},
        )
        assert r.status_code == 200, (form, r.text)
        etag = r.json()["etag"]
    assert client.get("/api/memory/doc", params=q, headers=key(world)).json()["content"] == "v4"
    gone = client.delete("/api/memory/doc", params=q, headers={**key(world), "If-Match": '"0000"'})
    assert gone.status_code == 412, gone.text
    gone = client.delete("/api/memory/doc", params=q, headers={**key(world), "If-Match": etag})
    assert gone.status_code == 204, gone.text


def test_openapi_lists_the_write_routes_path_and_if_match(app: FastAPI) -> None:
    doc: dict[str, Any] = app.openapi()["paths"]["/api/memory/doc"]
    for method in ("put", "delete"):
        listed = [(p["name"], p["in"]) for p in doc[method]["parameters"]]
        # In FastAPI's own order: the route's parameters, then the space's.
        assert listed[:2] == [("path", "query"), ("If-Match", "header")], method
        by_name = {p["name"]: p for p in doc[method]["parameters"]}
        assert by_name["path"]["required"] is True
        assert by_name["If-Match"]["required"] is False
        assert by_name["If-Match"]["schema"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert set(doc["put"]["requestBody"]["content"]) == {"application/json", "text/markdown"}
