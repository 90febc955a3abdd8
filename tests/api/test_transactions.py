"""A document write over HTTP costs at most two database transactions, counting the
credential's resolution: an API key (with its standing in its team) is one query in one
transaction; the write — the document, its usage charge and, for a global space, the
instance counter, the attributed team and the audit row — is the other."""

from __future__ import annotations

import tempfile
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

    def newest_memory_event() -> list[dict[str, str]]:
        # (The quota changes around the write are administration, audited as such.)
        events = client.get("/api/admin/audit", headers=admin).json()["events"]
        return [e for e in events if e["action"].startswith("memory.")][:1]

    before = newest_memory_event()
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
    assert newest_memory_event() == before
    r = client.get("/api/memory/doc", params=params, headers=world.headers("super_admin"))
    assert r.status_code == 404


def test_a_document_read_is_two_statements_and_no_begin_or_commit(
    app: FastAPI, client: TestClient, world: World
) -> None:
    # The key's resolution and the document are a point read each (keepstone.db.PointRead):
    # one statement in autocommit, one round trip on PostgreSQL, no BEGIN/COMMIT on either
    # engine. Seen by the driver itself: libpq's trace, SQLite's trace callback.
    engine = _engine(app)
    headers = world.headers("api_key")
    params = {**SPACE, "path": "notes/read.md"}
    client.put("/api/memory/doc", params=params, json={"content": "read me"}, headers=headers)
    seen: list[str] = []
    traced: list[tuple[Any, Any]] = []

    def on_checkout(dbapi_conn: Any, *_args: Any) -> None:
        if engine.dialect.name == "postgresql":
            trace = tempfile.TemporaryFile()
            dbapi_conn.pgconn.trace(trace.fileno())
            traced.append((dbapi_conn.pgconn, trace))
        else:
            dbapi_conn.set_trace_callback(seen.append)
            traced.append((dbapi_conn, None))

    event.listen(engine, "checkout", on_checkout)
    try:
        r = client.get("/api/memory/doc", params=params, headers=headers)
    finally:
        event.remove(engine, "checkout", on_checkout)
        for conn, trace in traced:
            if trace is None:
                conn.set_trace_callback(None)
                continue
            conn.untrace()
            trace.seek(0)
            for line in trace.read().decode().splitlines():
                if "\tReadyForQuery\t" in line:  # the end of one round trip
                    seen.append("round trip")
                elif "\tQuery\t" in line or "\tParse\t" in line:  # a statement's text
                    seen.append(line)
            trace.close()
    assert r.status_code == 200, r.text
    if engine.dialect.name == "postgresql":
        # (a prepared statement is sent by name: its text shows only when it is parsed)
        assert seen.count("round trip") == 2, seen  # the key with its standing, the document
    else:
        assert len(seen) == 2 and all(s.startswith("SELECT") for s in seen), seen
    assert not any(word in s.upper() for s in seen for word in ("BEGIN", "COMMIT")), seen
