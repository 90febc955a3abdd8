"""The records routes over HTTP (in-process), one test per refusal row of SPEC §6
and one proving their order."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from argon2 import PasswordHasher
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from keepstone.api.app import create_app
from keepstone.config import Config
from keepstone.db import make_engine, write_transaction
from keepstone.errors import RecordNotFound
from keepstone.identity import schema as ids
from keepstone.identity.service import IdentityService
from keepstone.principal import CredentialKind
from keepstone.records.ratelimit import LocalRateLimiter, RateLimiter, RedisRateLimiter
from keepstone.records.render import NOTICE, render_text
from keepstone.service.records import MEMORY_OFF_HINT, build_record_service
from tests.records.conftest import World, identity_of, make_world, records_of, set_plan

SERVICE = "svc-token-for-tests"
ADMIN = "admin-token-for-tests"
PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def app(engine: Engine) -> Iterator[FastAPI]:
    settings = Config(database_url="unused://", service_token=SERVICE, admin_token=ADMIN)
    yield create_app(settings, engine=engine)


def use_limiter(app: FastAPI, limiter: RateLimiter, engine: Engine | None = None) -> None:
    """The app's records service anew, with ``limiter`` (and over ``engine``, when given)."""
    state = app.state
    state.records = build_record_service(
        engine or state.runtime.engine, state.runtime.identity, limiter
    )


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    # A fresh generous limiter per test; rate tests install their own.
    use_limiter(app, LocalRateLimiter(rate=10_000))
    with TestClient(app) as c:
        yield c


@dataclass
class Creds:
    world: World
    keys: dict[str, str]
    identity: IdentityService

    def key(self, user: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[user]}"}


@pytest.fixture
def creds(engine: Engine) -> Creds:
    world = make_world(engine)
    identity = identity_of(engine)
    keys = {}
    for user in (world.owner, world.admin, world.member, world.limited, world.viewer):
        keys[user] = identity.create_api_key(user, world.team_id)[1]
    keys[world.outsider] = identity.create_api_key(world.outsider, world.other_team)[1]
    hashed = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1).hash(PASSWORD)
    with write_transaction(engine) as conn:
        conn.execute(
            sa.update(ids.users)
            .values(password_hash=hashed)
            .where(ids.users.c.id.in_([world.owner, world.admin, world.member]))
        )
    return Creds(world, keys, identity)


def session(client: TestClient, creds: Creds, user: str) -> dict[str, str]:
    """Sign ``user`` in; returns the headers of a browser request with its CSRF token."""
    client.cookies.clear()
    r = client.post("/api/auth/login", json={"email": f"{user}@example.com", "password": PASSWORD})
    assert r.status_code == 200, r.text
    return {"X-CSRF-Token": r.json()["csrf_token"], "X-Keepstone-Team": creds.world.team_id}


def code(r: Any) -> tuple[int, str]:
    body: Any = r.json() if r.content else {}
    return r.status_code, body.get("error", {}).get("code", "")


def search(client: TestClient, team: str, headers: dict[str, str], **body: Any) -> Any:
    body.setdefault("query", "deploy")
    return client.post(f"/api/teams/{team}/memory/search", json=body, headers=headers)


def save(client: TestClient, team: str, headers: dict[str, str], **body: Any) -> Any:
    return client.post(f"/api/internal/teams/{team}/memory", json=body, headers=headers)


SERVICE_H = {"Authorization": f"Bearer {SERVICE}"}


# ----------------------------------------------------------------------------- happy paths


def test_save_search_list_delete_roundtrip(client: TestClient, creds: Creds) -> None:
    w = creds.world
    r = save(client, w.team_id, SERVICE_H, text="Fixed the ```deploy``` script", repo_id=w.repo_a)
    assert r.status_code == 201, r.text
    saved = r.json()
    assert set(saved) == {"id", "expires_at"}
    found = search(client, w.team_id, creds.key(w.member), query="deploy script").json()
    assert found["state"] == "on" and found["notice"] == NOTICE
    assert [x["id"] for x in found["results"]] == [saved["id"]]
    assert found["results"][0]["text"] == render_text("Fixed the ```deploy``` script")
    assert list(found["results"][0]) == [
        *("id", "repo_id", "score", "created_at", "text", "matched", "also_in")
    ]
    assert found["results"][0]["matched"] == ["keyword"]
    listed = client.get(f"/api/teams/{w.team_id}/memory", headers=creds.key(w.member)).json()
    assert listed["records"][0]["id"] == saved["id"]
    assert listed["next_token"] is None and listed["notice"] == NOTICE
    h = session(client, creds, w.owner)
    r = client.delete(f"/api/teams/{w.team_id}/memory/{saved['id']}", headers=h)
    assert r.status_code == 204
    assert code(client.delete(f"/api/teams/{w.team_id}/memory/{saved['id']}", headers=h)) == (
        404,
        "record_not_found",
    )


def test_pending_before_during_and_after_a_backlog(
    client: TestClient, creds: Creds, engine: Engine
) -> None:
    """A records search answer says how many of the team's records wait for a vector of
    the search's model: all of a fresh backlog, fewer as the indexer drains it (newest
    first), none after; another team's backlog is not counted."""
    from keepstone.records.sql import SqlRecordStore
    from keepstone.service.indexer import Indexer, record_sources
    from keepstone.service.record_search import RecordSearch
    from tests.api.test_pending import StandIn

    w = creds.world
    member = creds.key(w.member)
    other = make_world(engine)
    for i in range(6):
        assert save(client, w.team_id, SERVICE_H, text=f"deploy note {i}").status_code == 201
        assert save(client, other.team_id, SERVICE_H, text=f"deploy {i}").status_code == 201
    # Keyword-only search (this app's records service has no embedder) embeds nothing.
    assert search(client, w.team_id, member).json()["pending"] == 0
    state = client.app.state  # type: ignore[attr-defined]
    state.records = build_record_service(
        engine, state.runtime.identity, LocalRateLimiter(rate=10_000), RecordSearch(StandIn())
    )
    before = search(client, w.team_id, member).json()["pending"]
    assert before >= 6
    indexer = Indexer(
        StandIn(), record_sources(SqlRecordStore(engine)), batch_size=4, fresh_seconds=0
    )  # type: ignore[arg-type]
    assert indexer.run_once() == 4  # the newest four, of both teams
    during = search(client, w.team_id, member).json()["pending"]
    assert before - 4 <= during < before
    indexer.drain()
    assert search(client, w.team_id, member).json()["pending"] == 0


def test_settings_routes(client: TestClient, creds: Creds) -> None:
    w = creds.world
    url = f"/api/teams/{w.team_id}/memory-settings"
    got = client.get(url, headers=creds.key(w.member)).json()
    assert got == {"enabled": True, "plan_allows": True, "store_ready": True, "can_edit": False}
    h = session(client, creds, w.admin)
    assert client.get(url, headers=h).json()["can_edit"] is True
    r = client.put(url, json={"enabled": False}, headers=h)
    assert r.status_code == 200 and r.json()["enabled"] is False
    off = search(client, w.team_id, creds.key(w.member)).json()
    # Empty, so it carries a hint, as every empty search answer does (SPEC §12).
    assert off == {
        "state": "off",
        "notice": NOTICE,
        "results": [],
        "pending": 0,
        "hint": MEMORY_OFF_HINT,
    }


def test_list_pagination_over_http(client: TestClient, creds: Creds) -> None:
    w = creds.world
    for i in range(60):
        w.records.save_as_server(w.team_id, f"record {i}")
    url = f"/api/teams/{w.team_id}/memory"
    first = client.get(url, headers=creds.key(w.member)).json()
    assert len(first["records"]) == 50
    second = client.get(
        url, params={"next_token": first["next_token"]}, headers=creds.key(w.member)
    ).json()
    assert len(second["records"]) == 10 and second["next_token"] is None
    r = client.get(
        url, params={"next_token": first["next_token"][:-3]}, headers=creds.key(w.member)
    )
    assert code(r) == (400, "invalid_request")


# ----------------------------------------------------------------------------- refusal rows


def test_401_unauthenticated(client: TestClient, creds: Creds) -> None:
    t = creds.world.team_id
    bad = {"Authorization": "Bearer keepstone_not_a_key"}
    for headers in ({}, bad):
        assert code(search(client, t, headers)) == (401, "unauthenticated")
        assert code(client.get(f"/api/teams/{t}/memory", headers=headers))[0] == 401
        assert code(client.get(f"/api/teams/{t}/memory-settings", headers=headers))[0] == 401
        assert code(save(client, t, headers, text="x"))[0] == 401
        assert code(client.delete(f"/api/teams/{t}/memory/rec_x", headers=headers))[0] == 401


def test_404_team_not_found(client: TestClient, creds: Creds) -> None:
    w = creds.world
    outsider = creds.key(w.outsider)
    assert code(search(client, w.team_id, outsider)) == (404, "team_not_found")
    assert code(client.get(f"/api/teams/{w.team_id}/memory", headers=outsider))[1] == (
        "team_not_found"
    )
    # A member's API key is bound to its team: another team is a 404, even one they see.
    assert code(search(client, w.other_team, creds.key(w.member))) == (404, "team_not_found")
    assert code(search(client, "team_missing", creds.key(w.member))) == (404, "team_not_found")
    assert code(save(client, "team_missing", SERVICE_H, text="x")) == (404, "team_not_found")


def test_403_forbidden(client: TestClient, creds: Creds) -> None:
    w = creds.world
    rec = w.records.save_as_server(w.team_id, "keep me")
    delete_url = f"/api/teams/{w.team_id}/memory/{rec.id}"
    settings_url = f"/api/teams/{w.team_id}/memory-settings"
    # An API key can never delete a record or change the setting, even the owner's.
    assert code(client.delete(delete_url, headers=creds.key(w.owner))) == (403, "forbidden")
    r = client.put(settings_url, json={"enabled": False}, headers=creds.key(w.owner))
    assert code(r) == (403, "forbidden")
    # A plain member in a browser is not an org owner/admin.
    h = session(client, creds, w.member)
    assert code(client.delete(delete_url, headers=h)) == (403, "forbidden")
    # Every user credential is refused on the internal save route.
    assert code(save(client, w.team_id, creds.key(w.owner), text="x")) == (403, "forbidden")
    assert code(save(client, w.team_id, h, text="x")) == (403, "forbidden")
    # The service token saves only.
    assert code(search(client, w.team_id, SERVICE_H)) == (403, "forbidden")
    admin_token = {"Authorization": f"Bearer {ADMIN}"}
    assert code(save(client, w.team_id, admin_token, text="x")) == (403, "forbidden")
    assert (
        client.get(f"/api/teams/{w.team_id}/memory", headers=creds.key(w.member)).json()["records"][
            0
        ]["id"]
        == rec.id
    )


def test_a_token_refused_is_told_who_may_instead(client: TestClient, creds: Creds) -> None:
    # Each refusal names a credential the same route takes, not one it refuses as well.
    w = creds.world
    rec = w.records.save_as_server(w.team_id, "keep me as well")
    admin_token = {"Authorization": f"Bearer {ADMIN}"}
    said = {
        "save": save(client, w.team_id, admin_token, text="x"),
        "delete": client.delete(f"/api/teams/{w.team_id}/memory/{rec.id}", headers=admin_token),
        "setting": client.put(
            f"/api/teams/{w.team_id}/memory-settings", json={"enabled": False}, headers=SERVICE_H
        ),
        "search": search(client, w.team_id, SERVICE_H),
    }
    message = {k: r.json()["error"]["message"] for k, r in said.items()}
    assert all(code(r) == (403, "forbidden") for r in said.values()), message
    assert message["save"].startswith("the admin token cannot save")
    assert "with the service token" in message["save"] and "API key" not in message["save"]
    assert "signed in, in a browser" in message["delete"] and "API key" not in message["delete"]
    assert message["setting"].startswith("the service token cannot delete a record or change")
    assert "team member's API key or browser session" in message["search"]


def test_403_csrf_required(client: TestClient, creds: Creds) -> None:
    w = creds.world
    rec = w.records.save_as_server(w.team_id, "keep me too")
    h = session(client, creds, w.owner)
    no_csrf = {"X-Keepstone-Team": w.team_id}
    r = client.delete(f"/api/teams/{w.team_id}/memory/{rec.id}", headers=no_csrf)
    assert code(r) == (403, "csrf_required")
    r = client.put(
        f"/api/teams/{w.team_id}/memory-settings", json={"enabled": False}, headers=no_csrf
    )
    assert code(r) == (403, "csrf_required")
    assert client.delete(f"/api/teams/{w.team_id}/memory/{rec.id}", headers=h).status_code == 204


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": "q" * 1001}, "query"),
        ({"query": "q", "limit": 0}, "limit"),
        ({"query": "q", "limit": 51}, "limit"),
        ({"query": "q", "limit": "5"}, "limit"),
        ({"query": "q", "team_id": "x"}, "team_id"),
        ({"limit": 5}, "query"),
    ],
)
def test_400_search_fields(
    client: TestClient, creds: Creds, body: dict[str, Any], field: str
) -> None:
    w = creds.world
    r = client.post(f"/api/teams/{w.team_id}/memory/search", json=body, headers=creds.key(w.member))
    assert code(r) == (400, "invalid_request")
    assert field in r.json()["error"]["message"]


def test_400_other_bodies_and_params(client: TestClient, creds: Creds) -> None:
    w = creds.world
    t = w.team_id
    member = creds.key(w.member)
    r = client.post(f"/api/teams/{t}/memory/search?team=x", json={"query": "q"}, headers=member)
    assert code(r) == (400, "invalid_request") and "'team'" in r.json()["error"]["message"]
    r = client.get(f"/api/teams/{t}/memory?limit=5", headers=member)
    assert code(r) == (400, "invalid_request") and "'limit'" in r.json()["error"]["message"]
    r = client.post(f"/api/teams/{t}/memory/search", content=b"{not json", headers=member)
    assert code(r) == (400, "invalid_request")
    assert code(save(client, t, SERVICE_H, text="x" * 8001)) == (400, "invalid_request")
    assert code(save(client, t, SERVICE_H, text="")) == (400, "invalid_request")
    assert code(save(client, t, SERVICE_H, text="x", team_id="y")) == (400, "invalid_request")
    h = session(client, creds, w.owner)
    r = client.put(f"/api/teams/{t}/memory-settings", json={"enabled": "yes"}, headers=h)
    assert code(r) == (400, "invalid_request") and "enabled" in r.json()["error"]["message"]


def test_402_plan_required(client: TestClient, creds: Creds) -> None:
    w = creds.world
    set_plan(w.engine, w.org_id, "pro")
    assert code(search(client, w.team_id, creds.key(w.member))) == (402, "plan_required")
    assert code(save(client, w.team_id, SERVICE_H, text="x")) == (402, "plan_required")
    # List, delete and settings work whatever the plan.
    assert (
        client.get(f"/api/teams/{w.team_id}/memory", headers=creds.key(w.member)).status_code == 200
    )
    got = client.get(f"/api/teams/{w.team_id}/memory-settings", headers=creds.key(w.member))
    assert got.json()["plan_allows"] is False


def test_200_off_and_409_memory_off(client: TestClient, creds: Creds) -> None:
    w = creds.world
    w.records.set_enabled_as_server(w.team_id, False)
    r = search(client, w.team_id, creds.key(w.member))
    assert r.status_code == 200 and r.json()["state"] == "off" and r.json()["results"] == []
    assert code(save(client, w.team_id, SERVICE_H, text="x")) == (409, "memory_off")


def test_404_repo_not_found(client: TestClient, creds: Creds) -> None:
    w = creds.world
    assert code(search(client, w.team_id, creds.key(w.member), repo_id=w.other_repo)) == (
        404,
        "repo_not_found",
    )
    assert code(search(client, w.team_id, creds.key(w.limited), repo_id=w.repo_b)) == (
        404,
        "repo_not_found",
    )
    r = client.get(
        f"/api/teams/{w.team_id}/memory", params={"repo_id": w.repo_b}, headers=creds.key(w.limited)
    )
    assert code(r) == (404, "repo_not_found")
    assert code(save(client, w.team_id, SERVICE_H, text="x", repo_id=w.other_repo)) == (
        404,
        "repo_not_found",
    )
    assert search(client, w.team_id, creds.key(w.limited), repo_id=w.repo_a).status_code == 200


def test_429_rate_limited(app: FastAPI, client: TestClient, creds: Creds) -> None:
    w = creds.world
    # A clock that stands still: the six searches fall in one window however slow they are.
    use_limiter(app, LocalRateLimiter(clock=lambda: 1000.0))
    for _ in range(5):
        assert search(client, w.team_id, creds.key(w.member)).status_code == 200
    r = search(client, w.team_id, creds.key(w.member))
    assert code(r) == (429, "rate_limited")
    assert int(r.headers["Retry-After"]) >= 1


def test_429_in_flight(app: FastAPI, client: TestClient, creds: Creds) -> None:
    w = creds.world
    limiter = LocalRateLimiter(rate=10_000)
    use_limiter(app, limiter)
    held = [limiter.acquire(w.team_id) for _ in range(10)]
    r = search(client, w.team_id, creds.key(w.member))
    assert code(r) == (429, "rate_limited") and "Retry-After" in r.headers
    held[0]()
    assert search(client, w.team_id, creds.key(w.member)).status_code == 200


def test_503_store_unavailable(app: FastAPI, client: TestClient, creds: Creds) -> None:
    w = creds.world
    # The records store (and the limiter's Redis) unreachable; identity still answers.
    use_limiter(app, RedisRateLimiter("redis://127.0.0.1:1/0"))
    assert code(search(client, w.team_id, creds.key(w.member))) == (503, "store_unavailable")
    nowhere = make_engine("postgresql://postgres@127.0.0.1:1/nowhere")
    use_limiter(app, LocalRateLimiter(rate=10_000), nowhere)
    try:
        assert code(save(client, w.team_id, SERVICE_H, text="x")) == (503, "store_unavailable")
        r = client.get(f"/api/teams/{w.team_id}/memory", headers=creds.key(w.member))
        assert code(r) == (503, "store_unavailable")
    finally:
        nowhere.dispose()
        use_limiter(app, LocalRateLimiter(rate=10_000))


def test_removed_member_refused_at_once(client: TestClient, creds: Creds) -> None:
    w = creds.world
    member = creds.key(w.member)
    assert search(client, w.team_id, member).status_code == 200
    r = client.delete(
        f"/api/admin/teams/{w.team_id}/members/{w.member}",
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 204, r.text
    assert code(search(client, w.team_id, member)) == (404, "team_not_found")


# ----------------------------------------------------------------------------- the order


def test_refusal_order(app: FastAPI, client: TestClient, creds: Creds, engine: Engine) -> None:
    """Each request fails every check from some point on; it gets the first of them."""
    w = creds.world
    lapsed = make_world(engine, plan="free", enabled=False)
    lapsed_key = creds.identity.create_api_key(lapsed.member, lapsed.team_id)[1]
    lapsed_h = {"Authorization": f"Bearer {lapsed_key}"}
    bad = {"query": "", "limit": 99, "extra": 1, "repo_id": lapsed.other_repo}

    # 401 before everything (other team, bad body, lapsed plan).
    assert code(search(client, lapsed.team_id, {}, **bad))[0] == 401
    # 404 team before 403/400/402.
    assert code(search(client, lapsed.team_id, creds.key(w.member), **bad))[1] == "team_not_found"
    r = client.put(
        f"/api/teams/{lapsed.team_id}/memory-settings",
        json={"enabled": "nope"},
        headers=creds.key(w.owner),
    )
    assert code(r) == (404, "team_not_found")
    # 403 before 400: an API key changing the setting with a bad body.
    r = client.put(
        f"/api/teams/{w.team_id}/memory-settings?x=1",
        json={"enabled": "nope"},
        headers=creds.key(w.owner),
    )
    assert code(r) == (403, "forbidden")
    # 400 before 402/off/repo.
    assert code(search(client, lapsed.team_id, lapsed_h, **bad)) == (400, "invalid_request")
    # 402 before off and repo.
    r = search(client, lapsed.team_id, lapsed_h, repo_id=lapsed.other_repo)
    assert code(r) == (402, "plan_required")
    # Off (200) before repo.
    set_plan(engine, lapsed.org_id, "enterprise")
    r = search(client, lapsed.team_id, lapsed_h, repo_id=lapsed.other_repo)
    assert r.status_code == 200 and r.json()["state"] == "off"
    # Repo before rate: with the team's rate used up, a bad repo is still a 404.
    records_of(engine).set_enabled_as_server(lapsed.team_id, True)
    limiter = LocalRateLimiter()
    use_limiter(app, limiter)
    for _ in range(5):
        limiter.acquire(lapsed.team_id)()
    r = search(client, lapsed.team_id, lapsed_h, repo_id=lapsed.other_repo)
    assert code(r) == (404, "repo_not_found")
    assert code(search(client, lapsed.team_id, lapsed_h)) == (429, "rate_limited")
    # Save: team before 400 (the service token's team is checked in the save's write,
    # but a bad field still hears of a missing team first), 400 before plan, plan
    # before off before repo.
    set_plan(engine, lapsed.org_id, "free")
    records_of(engine).set_enabled_as_server(lapsed.team_id, False)
    assert code(save(client, "team_missing", SERVICE_H, text=""))[1] == "team_not_found"
    assert code(save(client, "team_missing", SERVICE_H, text="x"))[1] == "team_not_found"
    assert code(save(client, lapsed.team_id, SERVICE_H, text="", repo_id="nope")) == (
        400,
        "invalid_request",
    )
    assert code(save(client, lapsed.team_id, SERVICE_H, text="x", repo_id="nope"))[1] == (
        "plan_required"
    )
    set_plan(engine, lapsed.org_id, "pro_plus")
    assert code(save(client, lapsed.team_id, SERVICE_H, text="x", repo_id="nope"))[1] == (
        "memory_off"
    )


def test_odd_ids_never_reach_the_driver(client: TestClient, creds: Creds) -> None:
    w = creds.world
    member = creds.key(w.member)
    assert code(search(client, "team%00x", member)) == (404, "team_not_found")
    assert code(search(client, w.team_id, member, repo_id="a\x00b")) == (400, "invalid_request")
    r = client.get(f"/api/teams/{w.team_id}/memory", params={"repo_id": "a\x00b"}, headers=member)
    assert code(r) == (400, "invalid_request")  # a control character in a query parameter
    h = session(client, creds, w.owner)
    assert code(client.delete(f"/api/teams/{w.team_id}/memory/x%00y", headers=h)) == (
        404,
        "record_not_found",
    )
    r = client.post(
        f"/api/teams/{w.team_id}/memory/search",
        content=b'{"query": "\\ud800 deploy"}',
        headers={**member, "Content-Type": "application/json"},
    )
    assert code(r) == (400, "invalid_request")
    r = save(client, w.team_id, SERVICE_H, text="nul \x00 inside")
    assert code(r) == (400, "invalid_request")  # NUL is refused on every store
    assert save(client, w.team_id, SERVICE_H, text="tab\tand\nnewline").status_code == 201


def test_purge_runs_periodically(app: FastAPI, creds: Creds) -> None:
    import asyncio
    from datetime import UTC, datetime, timedelta

    from keepstone.api.routes.records import purge_periodically

    w = creds.world
    old = w.records.save_as_server(w.team_id, "stale", now=datetime.now(UTC) - timedelta(days=400))

    async def run_briefly() -> None:
        task = asyncio.create_task(purge_periodically(app, interval=0.05))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run_briefly())
    with pytest.raises(RecordNotFound):
        w.records.delete(w.principal(w.owner, CredentialKind.SESSION), w.team_id, old.id)


def test_the_app_s_lifespan_runs_the_purge(engine: Engine, creds: Creds) -> None:
    """The periodic purge is part of the app's own lifespan (the records router has
    none, so its routes can be the app's own): it runs while the app serves, and stops
    with it."""
    import time
    from datetime import UTC, datetime, timedelta

    from keepstone.records.schema import records

    w = creds.world
    settings = Config(
        database_url="unused://",
        service_token=SERVICE,
        admin_token=ADMIN,
        records_purge_interval=0.05,
    )
    served = create_app(settings, engine=engine)

    def stale() -> str:
        old = datetime.now(UTC) - timedelta(days=400)
        return w.records.save_as_server(w.team_id, "stale", now=old).id

    def kept(record_id: str) -> bool:
        with engine.connect() as conn:
            found = sa.select(records.c.id).where(records.c.id == record_id)
            return conn.execute(found).first() is not None

    before = stale()
    with TestClient(served):
        deadline = time.monotonic() + 10
        while kept(before) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not kept(before), "no purge ran within 10 s of the app's start"
    after = stale()  # the app has stopped, and its purge with it
    time.sleep(0.3)
    assert kept(after)
    w.records.purge_expired()  # expired, it is the purge's to remove (a delete finds nothing)
    assert not kept(after)


def test_stopping_lets_a_purge_under_way_finish() -> None:
    """The purge's work runs in a thread that a cancel cannot stop: leaving ``purging``
    waits for a round under way (else it would go on deleting after the app has stopped,
    on an engine the lifespan closes next), and starts no further chore."""
    import asyncio
    import threading
    import time
    from types import SimpleNamespace

    from keepstone.api.routes.records import purging

    started, rounds = threading.Event(), []

    def slow_purge() -> int:
        started.set()
        time.sleep(0.3)
        rounds.append("records")
        return 0

    def prune() -> int:
        rounds.append("history")
        return 0

    bare = FastAPI()
    bare.state.settings = SimpleNamespace(records_purge_interval=0.01)
    bare.state.records = SimpleNamespace(purge_expired=slow_purge)
    bare.state.admin = SimpleNamespace(prune_history=prune)

    async def stop_mid_round() -> None:
        async with purging(bare):
            assert await asyncio.to_thread(started.wait, 10)

    asyncio.run(stop_mid_round())
    assert rounds == ["records"]  # the round under way finished; the next chore did not start


def test_openapi_lists_the_routes(app: FastAPI) -> None:
    paths = app.openapi()["paths"]
    for path in (
        "/api/teams/{team}/memory/search",
        "/api/internal/teams/{team}/memory",
        "/api/teams/{team}/memory",
        "/api/teams/{team}/memory/{id}",
        "/api/teams/{team}/memory-settings",
    ):
        assert path in paths
    body = paths["/api/teams/{team}/memory/search"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"]["additionalProperties"] is False
    # The save and the search read their team by hand: listed as FastAPI lists a declared
    # one (the list route still declares it).
    declared = paths["/api/teams/{team}/memory"]["get"]["parameters"][0]
    assert declared == {
        "in": "path",
        "name": "team",
        "required": True,
        "schema": {"title": "Team", "type": "string"},
    }
    for path in ("/api/teams/{team}/memory/search", "/api/internal/teams/{team}/memory"):
        assert paths[path]["post"]["parameters"] == [declared], path
