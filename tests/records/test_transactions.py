"""A records search or listing over HTTP costs at most two database transactions,
counting the credential's resolution: an API key's is one; the gates — the team's
setting, the repository — and the query share the other. A save by the service token
costs one: its team's check shares the write."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.engine import Engine

from keepstone.api.app import create_app
from keepstone.config import Config
from keepstone.records.ratelimit import LocalRateLimiter
from keepstone.service.records import build_record_service
from tests.records.conftest import World, identity_of, make_world
from tests.transactions import Transactions

SERVICE = "svc-token-for-transaction-tests"


@pytest.fixture(scope="module")
def app(engine: Engine) -> FastAPI:
    app = create_app(Config(database_url="unused://", service_token=SERVICE), engine=engine)
    limiter = LocalRateLimiter(rate=10**6, max_in_flight=10**6)
    app.state.records = build_record_service(engine, app.state.runtime.identity, limiter)
    return app


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


def _key(world: World) -> dict[str, str]:
    key = identity_of(world.engine).create_api_key(world.member, world.team_id)[1]
    return {"Authorization": f"Bearer {key}"}


def _seed(world: World, n: int) -> None:
    world.records.save_many(
        world.team_id,
        [(f"deploy note {i} for the payments service", world.repo_a) for i in range(n)],
    )


def test_search_takes_two_transactions(client: TestClient, engine: Engine) -> None:
    world = make_world(engine)
    _seed(world, 3)
    headers = _key(world)
    url = f"/api/teams/{world.team_id}/memory/search"
    body = {"query": "deploy payments", "repo_id": world.repo_a}
    client.post(url, json=body, headers=headers)  # warm: anything loaded once per process
    count, r = Transactions(engine).during(lambda: client.post(url, json=body, headers=headers))
    assert r.status_code == 200 and len(r.json()["results"]) == 3, r.text
    assert count <= 2, count


def test_a_warm_keyword_search_reads_in_two_statements(client: TestClient, engine: Engine) -> None:
    # The team's setting and search counters in one query, then the hits' texts (on
    # PostgreSQL without BEGIN/COMMIT around them): the records' share of a search.
    world = make_world(engine)
    _seed(world, 3)
    who = world.principal(world.member)
    world.records.search(who, world.team_id, "deploy payments")  # the index built
    statements: list[str] = []
    # Per records statement: (the driver's autocommit, the driver in a transaction, the
    # number of transactions begun so far).
    states: list[tuple[bool, bool, int]] = []
    begun: list[Any] = []
    postgres = engine.dialect.name == "postgresql"

    def on_begin(conn: Any) -> None:
        begun.append(conn)

    def on_execute(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)
        if "record" in statement:
            driver = conn.connection.driver_connection
            if postgres:
                states.append((driver.autocommit, False, len(begun)))
            else:
                states.append((False, driver.in_transaction, len(begun)))

    event.listen(engine, "begin", on_begin)
    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        answer = world.records.search(who, world.team_id, "deploy payments")
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)
        event.remove(engine, "begin", on_begin)
    assert len(answer.hits) == 3
    # The caller's standing is identity's read; the records' own are these.
    ours = [s for s in statements if "record" in s]
    assert len(ours) == 2, statements
    if postgres:
        # No BEGIN/COMMIT round trips around them.
        assert [autocommit for autocommit, _, _ in states] == [True, True]
    else:
        # One read transaction holds both (SQLite's BEGIN goes to the driver, not through
        # SQLAlchemy's execution, so it is seen as SQLAlchemy's begin and the driver's state).
        assert [inside for _, inside, _ in states] == [True, True], states
        assert states[0][2] == states[1][2], states


def test_save_takes_one_transaction(client: TestClient, engine: Engine) -> None:
    """The service token's team and plan are read in the save's own write."""
    world = make_world(engine)
    url = f"/api/internal/teams/{world.team_id}/memory"
    headers = {"Authorization": f"Bearer {SERVICE}"}
    body = {"text": "rotated the deploy key", "repo_id": world.repo_a}
    client.post(url, json=body, headers=headers)
    count, r = Transactions(engine).during(lambda: client.post(url, json=body, headers=headers))
    assert r.status_code == 201, r.text
    assert count == 1, count


def test_list_takes_two_transactions(client: TestClient, engine: Engine) -> None:
    world = make_world(engine)
    _seed(world, 60)
    headers = _key(world)
    url = f"/api/teams/{world.team_id}/memory"
    first = client.get(url, params={"repo_id": world.repo_a}, headers=headers).json()
    params = {"repo_id": world.repo_a, "next_token": first["next_token"]}
    count, r = Transactions(engine).during(lambda: client.get(url, params=params, headers=headers))
    assert r.status_code == 200 and len(r.json()["records"]) == 10, r.text
    assert count <= 2, count


def test_a_refusal_before_the_store_costs_no_second_transaction(
    client: TestClient, engine: Engine
) -> None:
    # A field outside its limit is refused after the caller's access, before the store.
    world = make_world(engine)
    headers = _key(world)
    url = f"/api/teams/{world.team_id}/memory/search"
    client.post(url, json={"query": "warm"}, headers=headers)
    count, r = Transactions(engine).during(
        lambda: client.post(url, json={"query": "q" * 1001}, headers=headers)
    )
    assert r.status_code == 400
    assert count == 1, count
