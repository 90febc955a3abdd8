"""Every component's migrations, applied from a blank database on SQLite and PostgreSQL.

``cairn.schema.upgrade_all`` must bring a blank database to the current schema, record
exactly the versions it applied, and be a no-op the second time (SPEC §1: migrations
run at every start, on every replica).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cairn import schema
from cairn.db import applied_versions, make_engine, upgrade
from cairn.store import sql_schema
from tests.conftest import create_postgres_database, drop_postgres_database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def blank_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An engine on a database nothing has touched yet."""
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'blank.db'}")
        try:
            yield engine
        finally:
            engine.dispose()
        return
    url = create_postgres_database()
    engine = make_engine(url, pool_size=2)
    try:
        yield engine
    finally:
        engine.dispose()
        drop_postgres_database(url)


def test_documents_migrations_are_ordered_and_numbered() -> None:
    versions = [m.version for m in sql_schema.MIGRATIONS]
    assert versions == list(range(1, len(versions) + 1))
    assert {m.component for m in sql_schema.MIGRATIONS} == {"documents"}
    assert all(m.description for m in sql_schema.MIGRATIONS)
    assert "cairn.store.sql_schema" in schema.COMPONENT_MODULES
    assert set(sql_schema.MIGRATIONS) <= set(schema.all_migrations())


def test_upgrade_all_from_blank_then_no_op(blank_engine: Engine) -> None:
    expected = {(m.component, m.version) for m in schema.all_migrations()}
    assert applied_versions(blank_engine) == set()

    applied = schema.upgrade_all(blank_engine)
    assert [(m.component, m.version) for m in applied] == [
        (m.component, m.version) for m in schema.all_migrations()
    ]
    assert applied_versions(blank_engine) == expected

    assert schema.upgrade_all(blank_engine) == []
    assert applied_versions(blank_engine) == expected


def test_documents_migrations_build_the_tables(blank_engine: Engine) -> None:
    applied = upgrade(blank_engine, sql_schema.MIGRATIONS)
    assert applied == sql_schema.MIGRATIONS
    assert upgrade(blank_engine, sql_schema.MIGRATIONS) == []
    with blank_engine.connect() as conn:
        inspector = sa.inspect(conn)
        for table in sql_schema.metadata.sorted_tables:
            assert inspector.has_table(table.name)
            columns = {c["name"] for c in inspector.get_columns(table.name)}
            assert columns == {c.name for c in table.columns}
            pk = inspector.get_pk_constraint(table.name)["constrained_columns"]
            assert pk == [c.name for c in table.primary_key.columns]
            assert pk[0] == "tenant_id"
    recorded = {v for c, v in applied_versions(blank_engine) if c == "documents"}
    assert recorded == {m.version for m in sql_schema.MIGRATIONS}


def test_documents_v3_adds_the_index_to_a_v2_database(blank_engine: Engine) -> None:
    """A database at documents v2 (rows and all) gains memory_chunks and a zero
    search_version on every space counter."""
    v2 = sql_schema.MIGRATIONS[:2]
    assert upgrade(blank_engine, v2) == v2
    with blank_engine.connect() as conn:
        inspector = sa.inspect(conn)
        assert not inspector.has_table("memory_chunks")
        columns = {c["name"] for c in inspector.get_columns("memory_space_usage")}
        assert "search_version" not in columns
    with blank_engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO memory_space_usage (tenant_id, space_key, space_id, used_bytes) "
                "VALUES ('team-a', 'k', 'project/team-a/p1/notes', 42)"
            )
        )

    assert upgrade(blank_engine, sql_schema.MIGRATIONS) == sql_schema.MIGRATIONS[2:]
    with blank_engine.connect() as conn:
        inspector = sa.inspect(conn)
        chunks = sql_schema.memory_chunks
        assert {c["name"] for c in inspector.get_columns("memory_chunks")} == {
            c.name for c in chunks.columns
        }
        pk = inspector.get_pk_constraint("memory_chunks")["constrained_columns"]
        assert pk == ["tenant_id", "space_key", "path", "seq"]
        indexes = {i["name"]: i["column_names"] for i in inspector.get_indexes("memory_chunks")}
        assert indexes["ix_memory_chunks_model"] == ["model"]
        row = conn.execute(
            sa.text("SELECT used_bytes, search_version FROM memory_space_usage")
        ).one()
        assert tuple(row) == (42, 0)
    assert upgrade(blank_engine, sql_schema.MIGRATIONS) == []
