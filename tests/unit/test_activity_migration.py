"""Changes recorded before actions and actor kinds were: written the old way (a database at
migration 7, a filesystem history file without the columns), then migrated, they read as a
write or a deletion (by their deleted flag) by an ``unknown`` actor, and new changes beside
them record both."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from keepstone.activity import FeedQuery, changing
from keepstone.db import upgrade, write_transaction
from keepstone.documents import acting_as
from keepstone.schema import upgrade_all
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.fs import FilesystemStore
from keepstone.store.sql import SqlStore
from keepstone.store.sql_schema import MIGRATIONS, space_key
from tests.conftest import fresh_database

REF = SpaceRef.build(Visibility.PROJECT, "notes", tenant="team-a", project="p1")


@pytest.fixture(params=["sqlite", "postgres"])
def old_database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A database migrated up to 7, holding a document with a replaced version and a
    deleted one's marker, written as the store wrote them then."""
    with fresh_database(request.param, tmp_path_factory) as url:
        engine = sa.create_engine(url)
        upgrade(engine, MIGRATIONS[:7])
        key = {"t": "team-a", "k": space_key(REF.id), "sid": REF.id}
        with write_transaction(engine) as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO memory_documents (tenant_id, space_key, path, space_id, "
                    "visibility, content, size_bytes, etag, updated_at, version, actor) VALUES "
                    "(:t, :k, 'a.md', :sid, 'project', 'hello world', 11, 'e2', "
                    "'2026-01-02 00:00:00+00:00', 2, 'user:u1')"
                ),
                key,
            )
            for path, version, size, deleted, day in (
                ("a.md", 1, 5, False, "01"),
                ("b.md", 1, 3, False, "01"),
                ("b.md", 2, 0, True, "03"),
            ):
                conn.execute(
                    sa.text(
                        "INSERT INTO memory_document_versions (tenant_id, space_key, path, "
                        "version, space_id, etag, size_bytes, stored_bytes, content, at, actor, "
                        f"deleted) VALUES (:t, :k, :p, :v, :sid, 'e', :s, 0, NULL, "
                        f"'2026-01-{day} 00:00:00+00:00', 'user:u1', :d)"
                    ),
                    {**key, "p": path, "v": version, "s": size, "d": deleted},
                )
        engine.dispose()
        yield url


def test_sql_rows_written_before_read_as_writes_and_deletions_by_unknown(
    old_database: str,
) -> None:
    store = SqlStore.open(old_database, pgvector_mode="off")
    try:
        upgrade_all(store.engine)  # idempotent: v8 ran in open
        page = store.activity([REF], FeedQuery(None, None, 10, None))
        got = [(c.path, c.version, c.action, c.actor.kind, c.size_delta) for c in page.changes]
        assert got == [
            ("b.md", 2, "delete", "unknown", -3),
            ("a.md", 2, "write", "unknown", 6),
            ("b.md", 1, "write", "unknown", 3),
            ("a.md", 1, "write", "unknown", 5),
        ]
        unknown = store.activity([REF], FeedQuery(None, "unknown", 10, None))
        assert len(unknown.changes) == 4
        with acting_as("user:u2"), changing(kind="api_key"):
            store.write(REF, "a.md", "hello again, world")
        newest = store.activity([REF], FeedQuery(None, None, 1, None)).changes[0]
        assert (newest.path, newest.version, newest.action, newest.actor.kind) == (
            "a.md",
            3,
            "write",
            "api_key",
        )
        # The version it replaced keeps what it was: written before, by an unknown actor.
        second = store.activity([REF], FeedQuery(None, "unknown", 2, None))
        assert [(c.path, c.version) for c in second.changes] == [("b.md", 2), ("a.md", 2)]
    finally:
        store.close()


def test_an_old_filesystem_history_file_gains_the_columns(tmp_path: Path) -> None:
    ref = SpaceRef.build(Visibility.PROJECT, "notes", tenant="local", project="p1")
    store = FilesystemStore(tmp_path)
    with acting_as("local-cli"), changing(kind="user"):
        store.write(ref, "a.md", "hello")
    store.close()
    # Back to the old file: the table as it was, the row as the old store wrote it.
    path = tmp_path / ".keepstone-history.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE old AS SELECT space_id, path, version, etag, size, stored_bytes, "
            "at_us, actor, deleted, content FROM versions"
        )
        conn.execute("DROP TABLE versions")
        conn.execute("ALTER TABLE old RENAME TO versions")
    reopened = FilesystemStore(tmp_path)
    try:
        with acting_as("local-cli"), changing(kind="agent_run"):
            reopened.write(ref, "a.md", "hello, world")
        page = reopened.activity([ref], FeedQuery(None, None, 10, None))
        got = [(c.version, c.action, c.actor.kind, c.size_delta) for c in page.changes]
        assert got == [(2, "write", "agent_run", 7), (1, "write", "unknown", 5)]
    finally:
        reopened.close()
