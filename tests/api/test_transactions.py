"""A document write over HTTP costs at most two database transactions, counting the
credential's resolution: an API key (with its standing in its team) is one query in one
transaction; the write — the document, its usage charge and, for a global space, the
instance counter, the attributed team and the audit row — is the other."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.engine import Engine

from tests.api.world import GLOBAL_SPACE, SPACE, World
from tests.transactions import Transactions


def _engine(app: FastAPI) -> Engine:
    engine: Engine = app.state.runtime.engine
    return engine


def test_a_document_write_takes_two_transactions(
    app: FastAPI, client: TestClient, world: World
) -> None:
    headers = world.headers("api_key")
    params = {**SPACE, "path": "notes/counted.md"}
    client.put("/api/memory/doc", params=params, json={"content": "warm"}, headers=headers)
    count, r = Transactions(_engine(app)).during(
        lambda: client.put(
            "/api/memory/doc", params=params, json={"content": "counted"}, headers=headers
        )
    )
    assert r.status_code == 200, r.text
    assert count <= 2, f"a document write took {count} transactions"


def test_a_global_write_and_its_audit_row_commit_together(
    app: FastAPI, client: TestClient, world: World
) -> None:
    headers = world.headers("super_admin")
    params = {**GLOBAL_SPACE, "path": "counted-global.md"}
    count, r = Transactions(_engine(app)).during(
        lambda: client.put(
            "/api/memory/doc", params=params, json={"content": "shared"}, headers=headers
        )
    )
    assert r.status_code == 201, r.text
    # The session's resolution, then one transaction for the document, the counters
    # and the audit row.
    assert count <= 2, f"a global write took {count} transactions"
    events = client.get("/api/admin/audit", headers=world.headers("admin_token")).json()
    newest = events["events"][0]
    assert (newest["action"], newest["path"]) == ("memory.global_write", "counted-global.md")


def test_a_refused_global_write_leaves_no_audit_row(
    app: FastAPI, client: TestClient, world: World
) -> None:
    admin = world.headers("admin_token")
    used, quota = app.state.runtime.store.instance_usage()
    before = client.get("/api/admin/audit", headers=admin).json()["events"][:1]
    # The instance counter is full: the write is refused inside its transaction, after
    # the document row was written, so everything of it — the audit row too — rolls back.
    assert client.patch("/api/admin/instance", json={"memory_quota_bytes": used}, headers=admin)
    try:
        params = {**GLOBAL_SPACE, "path": "over-quota.md"}
        r = client.put(
            "/api/memory/doc",
            params=params,
            json={"content": "does not fit"},
            headers=world.headers("super_admin"),
        )
        assert r.status_code == 413 and r.json()["error"]["code"] == "quota_exceeded", r.text
    finally:
        client.patch("/api/admin/instance", json={"memory_quota_bytes": quota}, headers=admin)
    assert client.get("/api/admin/audit", headers=admin).json()["events"][:1] == before
    r = client.get("/api/memory/doc", params=params, headers=world.headers("super_admin"))
    assert r.status_code == 404


def test_a_document_read_sends_no_begin_or_commit_on_postgresql(
    app: FastAPI, client: TestClient, world: World
) -> None:
    # Reads are statement by statement on PostgreSQL (READ COMMITTED gives each statement
    # of a transaction its own snapshot anyway): the key's resolution and the read are a
    # round trip each, not four. SQLite keeps a read transaction, in-process.
    engine = _engine(app)
    headers = world.headers("api_key")
    params = {**SPACE, "path": "notes/read.md"}
    client.put("/api/memory/doc", params=params, json={"content": "read me"}, headers=headers)
    seen: list[tuple[str, bool]] = []

    def on_execute(conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        raw = conn.connection.dbapi_connection
        seen.append((statement, bool(getattr(raw, "autocommit", False))))

    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        r = client.get("/api/memory/doc", params=params, headers=headers)
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)
    assert r.status_code == 200, r.text
    assert len(seen) >= 2, seen  # the key, then the document
    if engine.dialect.name == "postgresql":
        assert all(autocommit for _, autocommit in seen), seen
    else:
        assert not any(autocommit for _, autocommit in seen), seen
