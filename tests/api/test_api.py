"""Behaviour of the HTTP layer: error model, credentials, sessions, limits, operations."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from keepstone.api.app import create_app
from keepstone.api.logs import JsonFormatter
from tests.api.conftest import make_settings
from tests.api.world import (
    ADMIN_TOKEN,
    PASSWORD,
    SERVICE_TOKEN,
    SPACE,
    World,
    admin_headers,
    tarball,
    unique,
)


def key(world: World, role: str = "member") -> dict[str, str]:
    return {"Authorization": f"Bearer {world.keys[role]}"}


# --- error model -------------------------------------------------------------------------


def test_unknown_route_and_method_use_the_error_shape(client: TestClient) -> None:
    r = client.get("/api/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = client.post("/healthz")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


def test_validation_errors_are_400_naming_the_field(client: TestClient) -> None:
    r = client.post("/api/admin/users", json={"email": 5}, headers=admin_headers())
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_request"
    assert "email" in r.json()["error"]["message"]
    r = client.post("/api/admin/orgs", json={"name": "x", "colour": "red"}, headers=admin_headers())
    assert r.status_code == 400 and "colour" in r.json()["error"]["message"]


def test_missing_name_and_bad_visibility(client: TestClient, world: World) -> None:
    r = client.get("/api/memory/docs", headers=key(world))
    # A missing name is a bad space reference, not a bare 400.
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_space_ref"
    r = client.get(
        "/api/memory/docs", params={"name": "n", "visibility": "team"}, headers=key(world)
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_space_ref"
    assert "cross_project" in r.json()["error"]["message"]
    r = client.get("/api/memory/docs", params={"name": "n"}, headers=key(world))
    assert r.json()["error"]["code"] == "invalid_space_ref"  # project visibility needs project


@pytest.mark.parametrize("param", ["tenant", "team", "user", "colour"])
def test_unknown_parameters(client: TestClient, world: World, param: str) -> None:
    r = client.get("/api/memory/usage", params={**SPACE, param: "x"}, headers=key(world))
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_parameter"


def test_document_round_trip_etag_and_preconditions(client: TestClient, world: World) -> None:
    path = f"{unique('doc')}.md"
    q = {**SPACE, "path": path}
    r = client.put("/api/memory/doc", params=q, json={"content": "v1"}, headers=key(world))
    assert r.status_code == 201 and r.json()["created"] is True
    etag = r.json()["etag"]
    r = client.get("/api/memory/doc", params=q, headers=key(world))
    assert r.headers["etag"] == f'"{etag}"' and r.json()["content"] == "v1"
    h = {**key(world), "Content-Type": "text/markdown", "If-Match": f'"{etag}"'}
    r = client.put("/api/memory/doc", params=q, content=b"# v2\n", headers=h)
    assert r.status_code == 200 and r.json()["created"] is False
    r = client.put("/api/memory/doc", params=q, content=b"v3", headers=h)  # stale etag
    assert r.status_code == 412 and r.json()["error"]["code"] == "precondition_failed"
    assert client.get("/api/memory/doc", params=q, headers=key(world)).json()["content"] == "# v2\n"
    r = client.delete("/api/memory/doc", params=q, headers=key(world))
    assert r.status_code == 204
    r = client.get("/api/memory/doc", params=q, headers=key(world))
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_put_body_errors(client: TestClient, world: World) -> None:
    q = {**SPACE, "path": "x.md"}
    r = client.put("/api/memory/doc", params=q, json={"content": "a", "x": 1}, headers=key(world))
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
    h = {**key(world), "Content-Type": "text/markdown"}
    r = client.put("/api/memory/doc", params=q, content=b"\xff\xfe", headers=h)
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_document"
    r = client.put(
        "/api/memory/doc",
        params={**SPACE, "path": "a//b.md"},
        json={"content": "a"},
        headers=key(world),
    )
    assert r.status_code == 422 and "a/b.md" in r.json()["error"]["message"]
    secret = "token ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    r = client.put("/api/memory/doc", params=q, json={"content": secret}, headers=key(world))
    assert r.status_code == 422 and r.json()["error"]["code"] == "secret_detected"
    assert "a1B2c3D4e5F6g7H8i9J0" not in r.text


def test_body_over_the_limit_is_refused_before_it_is_read(client: TestClient, world: World) -> None:
    limit = client.app.state.settings.max_json_bytes  # type: ignore[attr-defined]
    q = {**SPACE, "path": "big.md"}
    h = {**key(world), "Content-Type": "text/markdown"}
    r = client.put("/api/memory/doc", params=q, content=b"x" * (limit + 1), headers=h)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(limit // 65536 + 2):
            yield b"y" * 65536

    r = client.put("/api/memory/doc", params=q, content=chunks(), headers=h)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"


def test_chunked_json_over_the_limit_is_413_on_any_route(database_url: str) -> None:
    app = create_app(make_settings(database_url, max_json_bytes=1000), migrate=False)

    def chunks() -> Iterator[bytes]:
        yield b'{"name": "'
        for _ in range(5):
            yield b"x" * 500
        yield b'"}'

    with TestClient(app) as c:
        h = {**admin_headers(), "Content-Type": "application/json"}
        r = c.post("/api/admin/orgs", content=chunks(), headers=h)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    app.state.runtime.engine.dispose()


def test_import_reports_and_refuses_bad_archives(client: TestClient, world: World) -> None:
    h = {**key(world), "Content-Type": "application/gzip"}
    name = {**SPACE, "name": unique("imp")}
    archive = tarball({"a.md": "# a", "b.txt": "no", "./c.md": "# c"})
    r = client.post("/api/memory/import", params=name, content=archive, headers=h)
    assert r.status_code == 200
    body = r.json()
    assert sorted(body["written"]) == ["a.md", "c.md"]
    assert [x["path"] for x in body["rejected"]] == ["b.txt"]
    r = client.post(
        "/api/memory/import", params={**name, "strategy": "rename"}, content=archive, headers=h
    )
    assert r.json()["renamed"] == {"a.md": "a-1.md", "c.md": "c-1.md"}
    r = client.post(
        "/api/memory/import", params={**name, "strategy": "merge"}, content=archive, headers=h
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
    r = client.post("/api/memory/import", params=name, content=archive[:40], headers=h)
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_archive"


def test_import_upload_cap(database_url: str, world: World) -> None:
    app = create_app(make_settings(database_url, max_import_bytes=1000), migrate=False)
    with TestClient(app) as c:
        h = {**key(world), "Content-Type": "application/gzip"}
        r = c.post("/api/memory/import", params=SPACE, content=b"z" * 2000, headers=h)
        assert r.status_code == 413 and r.json()["error"]["code"] == "import_too_large"

        def chunks() -> Iterator[bytes]:
            for _ in range(4):
                yield b"z" * 600

        r = c.post("/api/memory/import", params=SPACE, content=chunks(), headers=h)
        assert r.status_code == 413 and r.json()["error"]["code"] == "import_too_large"
    app.state.runtime.engine.dispose()


def test_export_round_trips_into_another_space(client: TestClient, world: World) -> None:
    src = {**SPACE, "name": unique("src")}
    docs = {"a.md": "# A\n", "deep/b.md": "émoji ✓\n"}
    for path, text in docs.items():
        client.put(
            "/api/memory/doc",
            params={**src, "path": path},
            json={"content": text},
            headers=key(world),
        )
    r = client.get("/api/memory/export", params=src, headers=key(world))
    assert r.headers["content-disposition"] == 'attachment; filename="memory-export.tar.gz"'
    dst = {**SPACE, "name": unique("dst")}
    h = {**key(world), "Content-Type": "application/gzip"}
    assert (
        client.post("/api/memory/import", params=dst, content=r.content, headers=h).status_code
        == 200
    )
    for path, text in docs.items():
        got = client.get("/api/memory/doc", params={**dst, "path": path}, headers=key(world))
        assert got.json()["content"] == text


# --- credentials -------------------------------------------------------------------------


def test_revoked_key_is_unauthenticated(client: TestClient, world: World) -> None:
    user = world.scratch_user()
    world.identity.add_team_member(world.team_id, user, "member")
    key_id, secret = world.identity.create_api_key(user, world.team_id)
    h = {"Authorization": f"Bearer {secret}"}
    assert client.get("/api/memory/docs", params=SPACE, headers=h).status_code == 200
    assert (
        client.delete(f"/api/admin/api-keys/{key_id}", headers=admin_headers()).status_code == 204
    )
    r = client.get("/api/memory/docs", params=SPACE, headers=h)
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
    assert (
        client.delete(f"/api/admin/api-keys/{key_id}", headers=admin_headers()).status_code == 404
    )


@pytest.mark.parametrize(
    ("route", "credential", "status"),
    [
        ("/api/memory/doc", "Bearer keepstone_not-a-live-key", 401),
        ("/api/memory/docs", "Bearer keepstone_not-a-live-key", 401),
        ("/api/memory/doc/versions", "Bearer keepstone_not-a-live-key", 401),
        ("/api/memory/doc", f"Bearer {SERVICE_TOKEN}", 403),
    ],
)
def test_a_bad_credential_is_refused_before_a_missing_parameter(
    client: TestClient, route: str, credential: str, status: int
) -> None:
    # The credential is looked up after the parameters are parsed (one thread hop); a
    # request failing both (no `name`, no `path`) still gets the credential's refusal first
    # (docs/api.md, "Order of refusals").
    no_name = {"visibility": "project"}
    r = client.get(route, params=no_name, headers={"Authorization": credential})
    assert r.status_code == status, r.text
    r = client.get(route, params=no_name, headers={"Cookie": "keepstone_session=not-a-live-one"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"


def test_removed_member_is_refused_at_once(client: TestClient, world: World) -> None:
    user = world.scratch_user()
    world.identity.add_team_member(world.team_id, user, "member")
    _, secret = world.identity.create_api_key(user, world.team_id)
    h = {"Authorization": f"Bearer {secret}"}
    assert client.get("/api/memory/docs", params=SPACE, headers=h).status_code == 200
    r = client.delete(f"/api/admin/teams/{world.team_id}/members/{user}", headers=admin_headers())
    assert r.status_code == 204
    r = client.get("/api/memory/docs", params=SPACE, headers=h)
    assert r.status_code == 404 and r.json()["error"]["code"] == "team_not_found"


@pytest.mark.parametrize(
    "value", ["Bearer nope", "Basic abc", "Bearer keepstone_forged", "Bearer "]
)
def test_bad_bearer_values(client: TestClient, value: str) -> None:
    r = client.get("/api/memory/docs", params=SPACE, headers={"Authorization": value})
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"


def test_keys_are_stored_only_as_hashes(app: FastAPI, world: World) -> None:
    import sqlalchemy as sa

    from keepstone.identity.schema import api_keys

    with app.state.runtime.engine.connect() as conn:
        hashes = [r[0] for r in conn.execute(sa.select(api_keys.c.key_hash))]
    assert world.keys["member"].startswith("keepstone_") and len(world.keys["member"]) > 40
    assert world.keys["member"] not in hashes
    assert world.identity.hasher.hash(world.keys["member"]) in hashes


def test_session_login_logout_and_team_choice(client: TestClient, world: World) -> None:
    r = client.post(
        "/api/auth/login", json={"email": world.emails["org_owner"], "password": PASSWORD}
    )
    assert r.status_code == 200
    set_cookie = r.headers["set-cookie"].lower()
    assert "httponly" in set_cookie and "samesite=lax" in set_cookie
    cookie, csrf = r.cookies["keepstone_session"], r.json()["csrf_token"]
    client.cookies.clear()
    world.identity.create_team(world.org_id, unique("second"))  # the owner now has two teams
    h = {"Cookie": f"keepstone_session={cookie}", "X-CSRF-Token": csrf}
    r = client.get("/api/memory/docs", params=SPACE, headers=h)
    assert r.status_code == 400 and "X-Keepstone-Team" in r.json()["error"]["message"]
    r = client.get(
        "/api/memory/docs", params=SPACE, headers={**h, "X-Keepstone-Team": world.team_id}
    )
    assert r.status_code == 200
    r = client.post("/api/auth/logout", headers=h)
    assert r.status_code == 204
    client.cookies.clear()
    r = client.get(
        "/api/memory/docs", params=SPACE, headers={**h, "X-Keepstone-Team": world.team_id}
    )
    assert r.status_code == 401


def test_wrong_password_is_throttled(client: TestClient, world: World) -> None:
    email = world.emails["viewer"]
    codes = []
    for _ in range(6):
        r = client.post("/api/auth/login", json={"email": email, "password": "wrong-password"})
        codes.append(r.status_code)
    assert codes == [401] * 5 + [429]
    assert r.json()["error"]["code"] == "rate_limited"
    assert int(r.headers["retry-after"]) >= 1
    # Even the right password waits out the window: guessing gets no signal.
    r = client.post("/api/auth/login", json={"email": email, "password": PASSWORD})
    assert r.status_code == 429


# --- admin effects -----------------------------------------------------------------------


def test_org_quota_is_written_onto_team_counters(client: TestClient, world: World) -> None:
    org = client.post("/api/admin/orgs", json={"name": "small"}, headers=admin_headers()).json()[
        "id"
    ]
    team = client.post(
        "/api/admin/teams", json={"org_id": org, "name": "t"}, headers=admin_headers()
    ).json()["id"]
    user = world.scratch_user()
    world.identity.add_team_member(team, user, "member")
    _, secret = world.identity.create_api_key(user, team)
    h = {"Authorization": f"Bearer {secret}"}
    r = client.patch(
        f"/api/admin/orgs/{org}", json={"memory_quota_bytes": 10}, headers=admin_headers()
    )
    assert r.status_code == 200
    assert r.json()["teams_updated"] == [team] and r.json()["teams_failed"] == []
    assert r.json()["memory_quota_bytes"] == 10
    r = client.put(
        "/api/memory/doc", params={**SPACE, "path": "a.md"}, json={"content": "x" * 11}, headers=h
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "quota_exceeded"
    assert r.json()["error"]["limit"] == "team"
    over_cap = {"content": "x" * (2 * 1024 * 1024 + 1)}
    r = client.put("/api/memory/doc", params={**SPACE, "path": "b.md"}, json=over_cap, headers=h)
    assert r.status_code == 413 and r.json()["error"]["code"] == "document_too_large"
    metrics = client.get("/metrics").text
    assert 'keepstone_quota_refusals_total{limit="team"}' in metrics
    assert 'keepstone_quota_refusals_total{limit="document"}' in metrics  # the cap too
    r = client.get(f"/api/orgs/{org}/usage", headers=h)
    assert r.json()["effective_memory_quota_bytes"] == 10
    assert r.json()["teams"] == [{"team_id": team, "used_bytes": 0, "quota_bytes": 10}]
    # Back to the default: the audit log says so in words, not as Python's None.
    r = client.patch(
        f"/api/admin/orgs/{org}", json={"memory_quota_bytes": None}, headers=admin_headers()
    )
    assert r.status_code == 200 and r.json()["memory_quota_bytes"] is None
    events = client.get("/api/admin/audit", headers=admin_headers()).json()["events"]
    assert events[0]["action"] == "admin.org_quota"
    assert events[0]["path"] == f"org {org} quota default plan free"


def test_instance_quota_and_global_audit(client: TestClient, world: World) -> None:
    g = {"name": unique("g"), "visibility": "global", "path": "x.md"}
    r = client.put("/api/memory/doc", params=g, json={"content": "hello"}, headers=admin_headers())
    assert r.status_code == 201
    assert client.delete("/api/memory/doc", params=g, headers=admin_headers()).status_code == 204
    events = client.get("/api/admin/audit", headers=admin_headers()).json()["events"]
    assert [e["action"] for e in events[:2]] == ["memory.global_delete", "memory.global_write"]
    assert events[0]["actor"] == "admin-token" and events[0]["path"] == "x.md"
    r = client.patch("/api/admin/instance", json={"memory_quota_bytes": 0}, headers=admin_headers())
    assert r.json() == {"memory_quota_bytes": 0}
    r = client.put("/api/memory/doc", params=g, json={"content": "hello"}, headers=admin_headers())
    assert r.status_code == 413 and r.json()["error"]["limit"] == "instance"
    client.patch(
        "/api/admin/instance", json={"memory_quota_bytes": 1 << 30}, headers=admin_headers()
    )
    # Team-space mutations are not audited.
    client.put(
        "/api/memory/doc",
        params={**SPACE, "path": "n.md"},
        json={"content": "x"},
        headers=key(world),
    )
    latest = client.get("/api/admin/audit", params={"limit": 10}, headers=admin_headers()).json()
    memory = [e for e in latest["events"] if e["action"].startswith("memory.")]
    assert memory[0]["id"] == events[0]["id"]
    # The quota changes themselves are administration, audited as such.
    assert latest["events"][0]["action"] == "admin.instance_quota"


def test_super_admin_global_write_is_attributed_to_its_team(
    client: TestClient, world: World
) -> None:
    org = world.identity.create_org(unique("attr"))
    team = world.identity.create_team(org, "t")
    root = world.identity.create_user(f"{unique('root')}@example.com", super_admin=True)
    world.identity.add_team_member(team, root, "member")
    _, secret = world.identity.create_api_key(root, team)
    h = {"Authorization": f"Bearer {secret}"}
    g = {"name": unique("g"), "visibility": "global", "path": "a.md"}
    assert (
        client.put("/api/memory/doc", params=g, json={"content": "x" * 100}, headers=h).status_code
        == 201
    )
    usage = client.get(f"/api/orgs/{org}/usage", headers=h).json()
    assert usage["teams"] == [{"team_id": team, "used_bytes": 100, "quota_bytes": 1 << 30}]
    events = client.get("/api/admin/audit", params={"limit": 1}, headers=h).json()["events"]
    assert events[0]["actor"] == f"user:{root}"


def test_admin_refusals(client: TestClient, world: World) -> None:
    r = client.post(
        f"/api/admin/teams/{world.team_id}/members",
        json={"user_id": "nobody", "role": "member"},
        headers=admin_headers(),
    )
    assert r.status_code == 404
    r = client.post(
        f"/api/admin/teams/{world.team_id}/members",
        json={"user_id": world.users["viewer"], "role": "boss"},
        headers=admin_headers(),
    )
    assert r.status_code == 400 and "viewer" in r.json()["error"]["message"]
    r = client.post(
        "/api/admin/users", json={"email": world.emails["viewer"]}, headers=admin_headers()
    )
    assert r.status_code == 409
    r = client.post(
        "/api/admin/api-keys",
        json={"user_id": world.users["org_admin"], "team_id": world.team_id, "name": "k"},
        headers=admin_headers(),
    )
    assert r.status_code == 201  # an org admin acts in every team of its org
    r = client.post(
        "/api/admin/api-keys",
        json={"user_id": world.users["super_admin"], "team_id": world.team_id, "name": "k"},
        headers=admin_headers(),
    )
    assert r.status_code == 400 and r.json()["error"]["field"] == "team_id"


# --- operations --------------------------------------------------------------------------


def test_request_id_is_echoed_or_made(client: TestClient) -> None:
    r = client.get("/healthz", headers={"X-Request-ID": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    r = client.get("/healthz", headers={"X-Request-ID": "bad id;" + "x" * 200})
    assert r.headers["x-request-id"] != "bad id" and len(r.headers["x-request-id"]) == 32


def test_logs_are_json_and_never_carry_secrets(
    client: TestClient, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="keepstone")
    body = f"the body {unique('secretbody')}"
    client.put(
        "/api/memory/doc",
        params={**SPACE, "path": "logged.md"},
        json={"content": body},
        headers=key(world),
    )
    client.post("/api/auth/login", json={"email": world.emails["member"], "password": PASSWORD})
    client.cookies.clear()
    client.get("/api/memory/docs", params=SPACE, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    lines = [JsonFormatter().format(rec) for rec in caplog.records]
    text = "\n".join(lines)
    logged = [json.loads(line) for line in lines]
    assert any(entry.get("route") == "/api/memory/doc" for entry in logged)
    for secret in (body, world.keys["member"], ADMIN_TOKEN, PASSWORD, world.sessions["member"][0]):
        assert secret not in text


def test_readyz_reports_an_unreachable_database(tmp_path: object) -> None:
    import os
    import shutil

    path = os.path.join(str(tmp_path), "gone", "keepstone.db")
    os.makedirs(os.path.dirname(path))  # a database's directory must exist to open it
    app = create_app(make_settings(f"sqlite:///{path}"))
    app.state.runtime.engine.dispose()  # drop pooled connections, then the database itself
    shutil.rmtree(os.path.dirname(path))
    with TestClient(app) as c:
        assert c.get("/healthz").status_code == 200
        r = c.get("/readyz")
        assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"
        assert "store_errors" in c.get("/metrics").text
    app.state.runtime.engine.dispose()


def test_unexpected_errors_are_plain_500(database_url: str) -> None:
    from fastapi import APIRouter

    app = create_app(make_settings(database_url), migrate=False)
    router = APIRouter()

    @router.get("/boom")
    def boom() -> None:
        raise RuntimeError("internal detail")

    app.include_router(router)
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/boom")
    assert r.status_code == 500
    assert r.json() == {"error": {"code": "internal_error", "message": "internal error; see logs"}}
    app.state.runtime.engine.dispose()


def test_local_mode_needs_no_credential(tmp_path: object) -> None:
    import os

    url = f"sqlite:///{os.path.join(str(tmp_path), 'local.db')}"
    app = create_app(make_settings(url, local=True))
    with TestClient(app) as c:
        q = {"name": "n", "project": "p", "path": "a.md"}
        assert c.put("/api/memory/doc", params=q, json={"content": "x"}).status_code == 201
        g = {"name": "n", "visibility": "global", "path": "a.md"}
        assert c.put("/api/memory/doc", params=g, json={"content": "x"}).status_code == 201
        r = c.get("/api/memory/usage", params={"name": "n", "project": "p"})
        assert ":local:" in r.json()["space_id"]
        assert c.post("/api/admin/users", json={"email": "a@b.c"}).status_code == 404
        buf = io.BytesIO(c.get("/api/memory/export", params={"name": "n", "project": "p"}).content)
        assert buf.getvalue()[:2] == b"\x1f\x8b"
    app.state.runtime.engine.dispose()
