"""The activity feed's plans: newest first along the indexes that lead with the team (and
the space), never a read of a big table from end to end — on PostgreSQL with tables filled
in bulk and never analyzed (the planner knows nothing), and on SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from keepstone.activity import FeedQuery
from keepstone.db import write_transaction
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.sql import SqlStore

#: Long: handed out first under pytest-xdist (tests/conftest.py).
pytestmark = pytest.mark.slow

ROWS = 5_000
TEAM = "team-a"
REFS = [SpaceRef.build(Visibility.PROJECT, name, tenant=TEAM, project="p1") for name in ("a", "b")]
BIG = {"memory_documents", "memory_document_versions"}


def _fill(store: SqlStore, postgres: bool) -> None:
    """ROWS live documents and ROWS replaced versions in each of two spaces."""
    series = (
        f"generate_series(1, {ROWS}) AS s(i)"
        if postgres
        else f"(WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {ROWS}) "
        "SELECT i FROM s)"
    )
    at = (
        "now() - i * interval '1 second'" if postgres else "datetime('now', '-' || i || ' seconds')"
    )
    flag = "false" if postgres else "0"
    for ref in REFS:
        addr = store._address(ref)
        with write_transaction(store.engine) as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO memory_documents (tenant_id, space_key, path, space_id, "
                    "visibility, content, size_bytes, etag, updated_at, version, actor, chunked, "
                    "action, actor_kind) SELECT :t, :k, 'doc' || i || '.md', :sid, 'project', "
                    f"'x', 1, 'e', {at}, 2, 'bulk', {flag}, 'write', 'user' FROM {series}"
                ),
                addr,
            )
            conn.execute(
                sa.text(
                    "INSERT INTO memory_document_versions (tenant_id, space_key, path, version, "
                    "space_id, etag, size_bytes, stored_bytes, content, at, actor, deleted, "
                    "action, actor_kind) SELECT :t, :k, 'doc' || i || '.md', 1, :sid, 'e', 1, 2, "
                    f"NULL, {at}, 'bulk', {flag}, 'write', 'api_key' FROM {series}"
                ),
                addr,
            )


def _statements(engine: Engine, work: Any) -> list[tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append((statement, params))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        work()
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    assert seen
    return seen


def _reads(store: SqlStore) -> list[tuple[str, Any]]:
    """The feed's statements: a space's first page and its next, the team's with filters."""

    def work() -> None:
        page = store.activity(REFS[:1], FeedQuery(None, None, 50, None))
        assert len(page.changes) == 50 and page.next_cursor
        store.activity(REFS[:1], FeedQuery(None, None, 50, page.next_cursor))
        team = store.activity(REFS, FeedQuery(None, None, 20, None))
        assert len(team.changes) == 20
        keyed = store.activity(REFS, FeedQuery(None, "api_key", 20, None))
        assert {c.actor.kind for c in keyed.changes} == {"api_key"}

    return _statements(store.engine, work)


@pytest.fixture(scope="module")
def pg_store(postgres_url: str) -> Iterator[SqlStore]:
    store = SqlStore.open(postgres_url, pgvector_mode="off")
    _fill(store, postgres=True)
    try:
        yield store
    finally:
        store.close()


@pytest.mark.postgres
def test_postgres_reads_the_feed_newest_first_by_index_without_statistics(
    pg_store: SqlStore,
) -> None:
    engine = pg_store.engine
    with engine.connect() as conn:
        stats = conn.execute(
            sa.text("SELECT count(*) FROM pg_stats WHERE tablename = ANY(:t)"), {"t": sorted(BIG)}
        ).scalar()
    assert stats == 0, "the tables have statistics: the plans below prove nothing"
    indexes: set[str] = set()
    for statement, params in _reads(pg_store):
        with engine.connect() as conn:
            plan = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, params).scalar()
        nodes: list[tuple[str, str, str]] = []

        def walk(node: dict[str, Any], into: list[tuple[str, str, str]] = nodes) -> None:
            into.append(
                (node["Node Type"], node.get("Relation Name", ""), node.get("Index Name", ""))
            )
            for child in node.get("Plans", []):
                walk(child)

        walk(plan[0]["Plan"])
        scans = [n for n in nodes if n[0] == "Seq Scan" and n[1] in BIG]
        assert not scans, f"{scans} in {statement}"
        indexes |= {n[2] for n in nodes if n[2]}
        # Each space's rows by its feed index (at worst once each, sorted: a planner that
        # knows nothing may take the space for a small one), never by another; the version
        # before each change by the primary key alone, never a read of the space per row.
        named = [n for n in nodes if n[2]]
        feed, key = "_space_recent", "memory_document_versions_pkey"
        assert all(n[2].endswith(feed) or n[2] == key for n in named), (statement[-300:], nodes)
        assert any(n[2].endswith(feed) for n in named), nodes
    recent = {f"ix_{t}_space_recent" for t in BIG}
    assert recent <= indexes


def test_sqlite_reads_the_feed_newest_first_by_index(tmp_path: Path) -> None:
    store = SqlStore.open(f"sqlite:///{tmp_path}/plans.db")
    try:
        _fill(store, postgres=False)
        for statement, params in _reads(store):
            with store.engine.connect() as conn:
                plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()
            details = [str(row[-1]) for row in plan]
            full = [d for d in details if d.startswith("SCAN") and "INDEX" not in d]
            assert not any(t in d for d in full for t in BIG), details
            # Newest first off the feed's indexes: no sort of what a space or a team holds.
            assert "_recent" in " ".join(details), details
            if "UNION ALL" not in statement:  # several spaces: SQLite merges their pages
                assert not any("TEMP B-TREE" in d for d in details), details
    finally:
        store.close()
