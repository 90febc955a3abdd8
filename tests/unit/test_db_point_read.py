"""Point reads (keepstone.db.PointRead) and statements on a pooled driver connection
(keepstone.db.on_pooled): what SQLAlchemy's Connection would answer, with no transaction,
and the pooled connection given back as it came — on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from keepstone.db import PointRead, make_engine, on_pooled, utc
from keepstone.errors import StoreUnavailable
from tests.conftest import fresh_database

meta = sa.MetaData()
notes = sa.Table(
    "notes",
    meta,
    sa.Column("id", sa.String(16), primary_key=True),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("pinned", sa.Boolean, nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
)
AT = datetime(2026, 12, 1, 6, 30, 15, 123456, tzinfo=UTC)
BY_ID = sa.select(notes.c.body, notes.c.pinned, notes.c.at.label("when")).where(
    notes.c.id == sa.bindparam("id")
)


@pytest.fixture(params=["sqlite", "postgres"])
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    with fresh_database(request.param, tmp_path_factory) as url:
        engine = make_engine(url)
        meta.create_all(engine)
        with engine.begin() as conn:
            conn.execute(
                notes.insert(),
                [
                    {"id": "a", "body": "alpha", "pinned": True, "at": AT, "kind": "note"},
                    {"id": "b", "body": "beta", "pinned": False, "at": AT, "kind": "draft"},
                ],
            )
        try:
            yield engine
        finally:
            engine.dispose()


def test_a_point_read_answers_what_a_connection_would(engine: Engine) -> None:
    read = PointRead(BY_ID)
    for key in ("a", "b"):
        row = read.first(engine, {"id": key})
        with engine.connect() as conn:
            expected = conn.execute(BY_ID, {"id": key}).one()
        assert tuple(row) == tuple(expected)
        assert (row.body, row.pinned, utc(row.when)) == (expected.body, expected.pinned, AT)
        assert isinstance(row.pinned, bool)  # SQLite's 0/1 made a boolean, as SQLAlchemy does
    assert read.first(engine, {"id": "none"}) is None


def test_the_statements_own_literals_are_bound(engine: Engine) -> None:
    read = PointRead(
        sa.select(notes.c.id).where(notes.c.kind == "draft", notes.c.id > sa.bindparam("after"))
    )
    assert read.first(engine, {"after": ""}).id == "b"
    assert read.first(engine, {"after": "b"}) is None


def test_a_list_parameter_is_refused_plainly(engine: Engine) -> None:
    read = PointRead(
        sa.select(notes.c.id).where(notes.c.id.in_(sa.bindparam("ids", expanding=True)))
    )
    with pytest.raises(ValueError, match="no list parameter"):
        read.first(engine, {"ids": ["a"]})


def test_a_driver_failure_is_store_unavailable_and_the_pool_still_serves(
    engine: Engine,
) -> None:
    read = PointRead(BY_ID)
    if engine.dialect.name == "postgresql":
        # The server ends the pooled connection's session (a restart, an idle timeout):
        # the next read on it fails, and the connection is never handed out again.
        engine.pool.dispose()
        pid = on_pooled(engine, lambda driver: driver.info.backend_pid)
        import psycopg

        url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(url, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", [pid])
    else:
        # A table the file does not have (a database file replaced by another).
        read = PointRead(sa.select(sa.literal_column("x")).select_from(sa.table("missing")))
    with pytest.raises(StoreUnavailable):
        read.first(engine, {"id": "a"})
    # The pool still serves, and what it serves is not left in autocommit on PostgreSQL:
    # a Connection's transaction there still rolls back.
    read = PointRead(BY_ID)
    assert read.first(engine, {"id": "a"}).body == "alpha"
    with engine.connect() as conn:
        conn.execute(notes.update().where(notes.c.id == "a").values(body="changed"))
        conn.rollback()
    assert read.first(engine, {"id": "a"}).body == "alpha"


def test_on_pooled_runs_in_autocommit_and_gives_the_connection_back_as_it_came(
    engine: Engine,
) -> None:
    def state(driver: Any) -> Any:
        if engine.dialect.name == "postgresql":
            return driver.autocommit
        return driver.isolation_level, driver.in_transaction

    during = on_pooled(engine, state)
    if engine.dialect.name == "postgresql":
        assert during is True
        with engine.connect() as conn:
            raw: Any = conn.connection.driver_connection
            assert raw.autocommit is False
    else:
        assert during == (None, False)  # SQLite's connections are always in autocommit


def test_postgresql_keeps_its_prepared_statements_across_point_reads(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with fresh_database("postgres", tmp_path_factory) as url:
        engine = make_engine(url, pool_size=1)
        try:
            meta.create_all(engine)
            read = PointRead(BY_ID)
            for _ in range(8):  # past psycopg's prepare threshold (5)
                assert read.first(engine, {"id": "a"}) is None
            prepared = on_pooled(
                engine,
                lambda driver: driver.execute(
                    "SELECT count(*) FROM pg_prepared_statements"
                ).fetchone()[0],
            )
        finally:
            engine.dispose()
    # A point read never leaves a transaction for the pool to roll back, which would make
    # psycopg drop every prepared statement of the connection.
    assert prepared >= 1
