"""PostgreSQL plans the indexes drive, whatever the planner's statistics.

The statements a search and the indexer run (a reconcile, a space's chunks and version, the
scans of chunks and records to embed, a team's records) are captured as the stores run
them against tables freshly filled in bulk and never analyzed, as a bulk import leaves them
before the autovacuum daemon's next pass; each is then planned again with ``EXPLAIN
(FORMAT JSON)``. None may read a big table from end to end (a ``Seq Scan``), and the
reconcile and the scans of pending work must read their partial indexes. A bulk import,
a backfill and a bulk load of records then leave the tables they filled analyzed.
Timings are ``bench/bench_pg_plans.py``'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from keepstone.db import on_pooled, upgrade, utcnow, write_transaction
from keepstone.db.statistics import BULK_ROWS
from keepstone.records import schema as rschema
from keepstone.records.sql import SqlRecordStore
from keepstone.records.store import Scope
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import WriteTerms
from keepstone.store.sql import SqlStore

pytestmark = pytest.mark.postgres

DOCUMENTS = 10_000
CHUNKS_PER_DOCUMENT = 5
#: Documents written since the last search: not chunked yet.
UNCHUNKED = 40
RECORDS = 20_000
TEAM = "team-a"
MODEL = "model-b"
BIG_TABLES = {"memory_documents", "memory_chunks", "records"}

REF = SpaceRef.build(Visibility.PROJECT, "notes", tenant=TEAM, project="p1")


def _fill_documents(store: SqlStore) -> None:
    """One space of DOCUMENTS documents, each of CHUNKS_PER_DOCUMENT chunks but the last
    UNCHUNKED; a third of the chunks never embedded, a third embedded by another model."""
    addr = store._address(REF)
    chunked = DOCUMENTS - UNCHUNKED
    statements = [
        "INSERT INTO memory_documents (tenant_id, space_key, path, space_id, visibility, "
        "content, size_bytes, etag, updated_at, version, actor, chunked) "
        "SELECT :t, :k, 'doc/' || lpad(i::text, 6, '0') || '.md', :sid, 'project', "
        "'# Title ' || i || E'\\n\\nSome words about topic ' || i, 40, md5(i::text), "
        f"now(), 1, 'bulk', i <= {chunked} FROM generate_series(1, {DOCUMENTS}) AS i",
        "INSERT INTO memory_chunks (tenant_id, space_key, path, seq, space_id, visibility, "
        "heading, context, start_offset, end_offset, text, terms, embedding, model, "
        "updated_at) SELECT :t, :k, 'doc/' || lpad(i::text, 6, '0') || '.md', s, :sid, "
        "'project', 'Title', '', 0, 10, 'Some words', 'some words', "
        "CASE WHEN i % 3 = 0 THEN NULL ELSE '\\x00'::bytea END, "
        "CASE i % 3 WHEN 0 THEN NULL WHEN 1 THEN 'model-a' ELSE 'model-b' END, "
        f"now() - i * interval '1 second' FROM generate_series(1, {chunked}) AS i, "
        f"generate_series(0, {CHUNKS_PER_DOCUMENT - 1}) AS s",
        "INSERT INTO memory_space_usage (tenant_id, space_key, space_id, used_bytes, "
        "search_version) VALUES (:t, :k, :sid, 0, 1)",
    ]
    with write_transaction(store.engine) as conn:
        for statement in statements:
            conn.execute(sa.text(statement), addr)


def _fill_records(engine: Engine) -> None:
    """RECORDS records of one team: a third never embedded, a third of another model."""
    with write_transaction(engine) as conn:
        conn.execute(
            sa.text(
                "INSERT INTO records (team_id, id, repo_id, text, terms, created_at, "
                "expires_at, embedding, model, vector_version) "
                "SELECT :team, 'r' || lpad(i::text, 8, '0'), NULL, 'a note', 'a note', "
                "now() - i * interval '1 second', now() + interval '30 days', "
                "CASE WHEN i % 3 = 0 THEN NULL ELSE '\\x00'::bytea END, "
                "CASE i % 3 WHEN 0 THEN NULL WHEN 1 THEN 'model-a' ELSE 'model-b' END, "
                f"CASE WHEN i % 3 = 0 THEN NULL ELSE 1 END FROM generate_series(1, {RECORDS}) AS i"
            ),
            {"team": TEAM},
        )


@pytest.fixture(scope="module")
def stores(postgres_url: str) -> Iterator[tuple[SqlStore, SqlRecordStore]]:
    documents = SqlStore.open(postgres_url, pgvector_mode="off")
    upgrade(documents.engine, rschema.MIGRATIONS)
    records = SqlRecordStore(documents.engine)
    _fill_documents(documents)
    _fill_records(documents.engine)
    try:
        yield documents, records
    finally:
        documents.close()


class Captured:
    """The SELECTs run on an engine while capturing, as the driver received them."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, Any]] = []

    def __call__(self, conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            self.statements.append((statement, params))


def captured(engine: Engine, work: Any) -> list[tuple[str, Any]]:
    capture = Captured()
    event.listen(engine, "before_cursor_execute", capture)
    try:
        work()
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    assert capture.statements, "nothing was run"
    return capture.statements


def plan_nodes(engine: Engine, statement: str, params: Any) -> list[tuple[str, str, str]]:
    """(node type, relation, index) of every node of the statement's plan."""
    with engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, params).scalar()
    nodes: list[tuple[str, str, str]] = []

    def walk(node: dict[str, Any]) -> None:
        nodes.append((node["Node Type"], node.get("Relation Name", ""), node.get("Index Name", "")))
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return nodes


def assert_index_driven(engine: Engine, statements: list[tuple[str, Any]]) -> list[str]:
    """Every statement's plan reads no big table from end to end; returns the indexes read.
    First, the premise: the planner knows nothing of the tables' contents."""
    with engine.connect() as conn:
        stats = conn.execute(
            sa.text("SELECT count(*) FROM pg_stats WHERE tablename = ANY(:t)"),
            {"t": sorted(BIG_TABLES)},
        ).scalar()
    assert stats == 0, "the tables have statistics: the plans below prove nothing"
    read: list[str] = []
    for statement, params in statements:
        nodes = plan_nodes(engine, statement, params)
        scans = [(kind, rel) for kind, rel, _ in nodes if kind == "Seq Scan" and rel in BIG_TABLES]
        assert not scans, f"{scans} in the plan of {statement!r}: {nodes}"
        read += [index for _, _, index in nodes if index]
    return read


def test_reconcile_reads_the_partial_index_of_documents_to_chunk(
    stores: tuple[SqlStore, SqlRecordStore],
) -> None:
    store = stores[0]
    statements = captured(store.engine, lambda: store.reconciled_versions([REF]))
    # The check, then the version (the backfill, a write, is not a SELECT).
    assert "ix_memory_documents_unchunked" in assert_index_driven(store.engine, statements)
    backfill = captured(store.engine, lambda: store.reconcile(REF))
    assert "ix_memory_documents_unchunked" in assert_index_driven(store.engine, backfill)


def test_a_space_s_chunks_and_version_are_read_by_their_keys(
    stores: tuple[SqlStore, SqlRecordStore],
) -> None:
    store = stores[0]
    statements = captured(store.engine, lambda: (store.search_version(REF), store.chunk_rows(REF)))
    read = set(assert_index_driven(store.engine, statements))
    assert "memory_space_usage_pkey" in read
    # Any index that leads with the space's key reads its chunks: the primary key, the one
    # that counts a space's pending chunks (tenant, space, model), or the one that sums a
    # space's index bytes (tenant, space, stored_bytes).
    leading_with_the_space = {
        "memory_chunks_pkey",
        "ix_memory_chunks_space_model",
        "ix_memory_chunks_space_bytes",
    }
    assert read & leading_with_the_space, read


def test_a_search_after_a_write_reads_the_stamps_index_and_the_documents_changed(
    stores: tuple[SqlStore, SqlRecordStore],
) -> None:
    store = stores[0]
    paths = ["doc/000007.md", "doc/004242.md"]
    statements = captured(
        store.engine, lambda: (store.chunk_digests(REF), store.chunk_rows_of(REF, paths))
    )
    digests, rows = (assert_index_driven(store.engine, [one]) for one in statements)
    # Any index led by the space (with no statistics the planner may take the one that
    # counts a space's pending chunks and read the rows' stamps beside it); the documents'
    # rows by their keys.
    assert {"ix_memory_chunks_space_stamps", "ix_memory_chunks_space_model"} & set(digests)
    assert rows == ["memory_chunks_pkey"], rows


@pytest.mark.parametrize("model", ["model-a", MODEL, "model-c"])
def test_the_scan_of_chunks_to_embed_reads_its_partial_index(
    stores: tuple[SqlStore, SqlRecordStore], model: str
) -> None:
    store = stores[0]

    def claim() -> None:
        with store.claim_pending_chunks(32, model):
            pass

    statements = captured(store.engine, lambda: (store.pending_chunks(32, model), claim()))
    assert "ix_memory_chunks_unembedded" in assert_index_driven(store.engine, statements)


def test_the_scan_of_chunks_of_another_model_reads_the_model_index(
    stores: tuple[SqlStore, SqlRecordStore],
) -> None:
    """Past the chunks never embedded (more than there are), those of another model."""
    store = stores[0]
    many = DOCUMENTS * CHUNKS_PER_DOCUMENT
    statements = captured(store.engine, lambda: store.pending_chunks(many, MODEL))
    # Each model's range of the model index: the probes for the next model, and model-a's.
    assert "ix_memory_chunks_model" in assert_index_driven(store.engine, statements)


@pytest.mark.parametrize("limit", [32, 2 * RECORDS])
def test_the_scan_of_records_to_embed_reads_its_partial_index(
    stores: tuple[SqlStore, SqlRecordStore], limit: int
) -> None:
    records = stores[1]

    def claim() -> None:
        with records.claim_pending_records(limit, MODEL):
            pass

    statements = captured(records.engine, lambda: (records.pending_records(limit, MODEL), claim()))
    read = assert_index_driven(records.engine, statements)
    assert "ix_records_unembedded" in read
    # Past the records never embedded (fewer than the limit), those of another model.
    assert ("ix_records_model" in read) == (limit > RECORDS // 3)


def test_a_team_s_records_are_read_by_the_team_s_indexes(
    stores: tuple[SqlStore, SqlRecordStore],
) -> None:
    records = stores[1]

    def search_reads() -> None:
        with records.reading() as tx:
            tx.search_state(TEAM)
            versions = tx.search_versions(TEAM)
            tx.ranking_rows(TEAM, versions.terms)
            tx.ranking_rows(TEAM, versions.terms + 1, after=versions.terms)
            tx.record_vectors(TEAM, MODEL, upto=1)
            tx.records_by_id(TEAM, ["r00000001", "r00000002"])
            tx.page(Scope(TEAM, None, None, utcnow()), None, 20)

    assert_index_driven(records.engine, captured(records.engine, search_reads))


# --- Statistics after bulk changes ------------------------------------------------------------


def analyzed(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        count = conn.execute(
            sa.text(
                "SELECT analyze_count FROM pg_stat_user_tables "
                "WHERE relname = :t AND schemaname = current_schema()"
            ),
            {"t": table},
        ).scalar()
    return int(count or 0)


@pytest.fixture
def fresh_store(postgres_url: str) -> Iterator[SqlStore]:
    """A store in a schema of its own: its tables apart from the module's."""
    store = SqlStore.open(postgres_url, schema=f"t_{uuid.uuid4().hex[:16]}", pgvector_mode="off")
    try:
        yield store
    finally:
        store.close()


def test_a_bulk_import_and_its_reindex_analyze_the_tables_they_filled(
    fresh_store: SqlStore,
) -> None:
    store = fresh_store
    tables = ("memory_documents", "memory_chunks")

    def counts() -> tuple[int, ...]:
        return tuple(analyzed(store.engine, t) for t in tables)

    docs, chunks = counts()
    create = WriteTerms(if_none_match=True)
    with store.import_writer(REF, None) as write:
        for i in range(BULK_ROWS):
            write(store.check_write(REF, f"d{i}.md", f"# Doc {i}\n\ntext", create))
    assert counts() == (docs + 1, chunks)  # the import filled the documents
    assert store.reindex() == BULK_ROWS
    assert counts() == (docs + 2, chunks + 1)  # the reindex marked them, and filled chunks
    # A change of fewer rows leaves the statistics to the autovacuum daemon.
    with store.import_writer(REF, None) as write:
        write(store.check_write(REF, "one-more.md", "# One\n\nmore", create))
    assert store.reindex() == 1
    assert counts() == (docs + 2, chunks + 1)


def test_a_bulk_load_of_records_analyzes_them(fresh_store: SqlStore) -> None:
    engine = fresh_store.engine
    upgrade(engine, rschema.MIGRATIONS)
    records = SqlRecordStore(engine)
    before = analyzed(engine, "records")
    records.loaded(BULK_ROWS - 1)
    assert analyzed(engine, "records") == before
    records.loaded(BULK_ROWS)
    assert analyzed(engine, "records") == before + 1


def test_a_prepared_write_planned_on_small_tables_reads_only_primary_keys_as_they_grow(
    fresh_store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write is one prepared statement; PostgreSQL keeps the generic plan it made after
    the first few runs, on tables of a few rows, for the connection's life. Every index led
    by the space alone (the feed's by time, a space's chunks by model or by bytes) is
    partial on a condition only a space-wide reader states, so that plan cannot read a
    whole space for one document: it looks documents, versions and chunks up by their
    primary keys however large the space has grown."""
    store = fresh_store
    sent: list[Any] = []
    send = psycopg.RawCursor.execute

    def recording(cursor: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        sent.append((str(query), params))
        return send(cursor, query, params, **kw)

    monkeypatch.setattr(psycopg.RawCursor, "execute", recording)
    for i in range(300):  # creates, then replacements (a replacement drops the chunks)
        store.write(REF, f"grow/{i:04d}.md", f"# Doc {i}\n\ntext {i}")
    for i in range(10):
        store.write(REF, f"grow/{i:04d}.md", f"# Doc {i}\n\nnew text {i}")
    query, params = next((q, p) for q, p in reversed(sent) if q.startswith("WITH pre"))
    literal = ", ".join("NULL" if v is None else sql_literal(v) for v in params)

    def cached_plan(driver: Any) -> list[str]:
        (name,) = driver.execute(
            "SELECT name FROM pg_prepared_statements WHERE statement = %s AND generic_plans > 0",
            (query,),
        ).fetchone()
        driver.execute("BEGIN")  # the plan's writes are rolled back
        try:
            rows = driver.execute(f"EXPLAIN EXECUTE {name}({literal})").fetchall()
        finally:
            driver.execute("ROLLBACK")
        return [row[0] for row in rows]

    plan = on_pooled(store.engine, cached_plan)
    scans = [line.split(" using ")[1].split()[0] for line in plan if " using " in line]
    assert scans and all(index.endswith("_pkey") for index in scans), plan


def sql_literal(value: Any) -> str:
    text = value.isoformat() if hasattr(value, "isoformat") else str(value)
    return "'" + text.replace("'", "''") + "'"
