"""The SQL store on SQLite and PostgreSQL: tenancy, counters, compare-and-swap, streaming.

Behaviour every adapter shares is in tests/conformance/; this module covers what is
particular to the SQL store: rows stamped with their tenant, the team / instance
counters and their attribution, concurrency across threads and processes, and the
translation of driver failures.
"""

from __future__ import annotations

import concurrent.futures
import sqlite3
import tempfile
import threading
import tracemalloc
import uuid
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keepstone.db import make_engine
from keepstone.errors import (
    DocumentTooLarge,
    InvalidDocument,
    InvalidPath,
    InvalidRequest,
    InvalidSpaceRef,
    NotFound,
    PlatformAuthorityRequired,
    PreconditionFailed,
    QuotaExceeded,
    SecretDetected,
    StoreUnavailable,
)
from keepstone.quota import Limits
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store import sql as sql_module
from keepstone.store import sql_statements
from keepstone.store.base import PlatformGrant
from keepstone.store.sql import NO_TENANT, SqlStore
from keepstone.store.sql_schema import memory_documents, memory_tenant_usage
from tests.processes import child_context
from tests.unit.conftest import Backend

TEAM = "team-a"
OTHER = "team-b"


def project(tenant: str = TEAM, name: str = "notes", proj: str = "p1") -> SpaceRef:
    return SpaceRef.build(Visibility.PROJECT, name, tenant=tenant, project=proj)


GLOBAL = SpaceRef.build(Visibility.GLOBAL, "catalogue")


def rows(store: SqlStore, table: sa.Table) -> list[sa.Row[object]]:
    with store.engine.connect() as conn:
        return list(conn.execute(sa.select(table)))


# --- Tenancy -------------------------------------------------------------------------------


def test_rows_carry_their_tenant_and_full_space_id(store: SqlStore) -> None:
    store.write(project(TEAM), "a.md", "alpha")
    store.write(project(OTHER), "a.md", "other team")
    store.write(GLOBAL, "g.md", "shared", grant=PlatformGrant("test"))

    stamped = {
        (r.tenant_id, r.space_id, r.path, r.visibility) for r in rows(store, memory_documents)
    }
    assert stamped == {
        (TEAM, project(TEAM).id, "a.md", "project"),
        (OTHER, project(OTHER).id, "a.md", "project"),
        (NO_TENANT, GLOBAL.id, "g.md", "global"),
    }
    # The same name in another team is another space.
    assert store.read(project(TEAM), "a.md").content == "alpha"
    assert store.read(project(OTHER), "a.md").content == "other team"


def test_document_primary_key_leads_with_tenant(store: SqlStore) -> None:
    with store.engine.connect() as conn:
        inspector = sa.inspect(conn)
        for table in ("memory_documents", "memory_space_usage", "memory_tenant_usage"):
            assert inspector.get_pk_constraint(table)["constrained_columns"][0] == "tenant_id"


@pytest.mark.parametrize("lookup", ["_NEXT", "_NEWEST_AT"])
def test_a_path_s_versions_are_found_by_the_primary_key(tmp_path: Path, lookup: str) -> None:
    # A write's lookups of its path's versions (the next number, the newest time) must
    # search by the whole path: max(at) once walked the team's `at` index instead, every
    # version of the team for a path that had none (20x slower creates at 10,000 versions).
    from keepstone.store import sql_steps as sql_write

    store = SqlStore.open(f"sqlite:///{tmp_path}/plan.db", Limits())
    params = {"t": "team", "k": "key", "sid": "space", "p": "a.md"}
    try:
        with store.engine.connect() as conn:
            plan = conn.exec_driver_sql(
                f"EXPLAIN QUERY PLAN SELECT {getattr(sql_write, lookup)}", params
            ).all()
    finally:
        store.close()
    searches = [row[3] for row in plan if row[3].startswith("SEARCH")]
    assert searches == [
        "SEARCH memory_document_versions USING INDEX "
        "sqlite_autoindex_memory_document_versions_1 (tenant_id=? AND space_key=? AND path=?)"
    ], plan


def test_tenantless_team_ref_is_refused_before_any_io(tmp_path: Path) -> None:
    # Both engines fail on first use (nothing listens on port 1; a directory is no
    # database), so anything but InvalidSpaceRef would mean the store touched them.
    dead = [
        SqlStore(make_engine("postgresql://postgres@127.0.0.1:1/none")),
        SqlStore(make_engine(f"sqlite:///{tmp_path}")),
    ]
    tenantless = SpaceRef(Visibility.ORG, "notes")
    for store in dead:
        calls: list[Callable[[], object]] = [
            partial(store.read, tenantless, "a.md"),
            partial(store.write, tenantless, "a.md", "x"),
            partial(store.delete, tenantless, "a.md"),
            partial(store.list, tenantless),
            partial(store.usage, tenantless),
            partial(store.iter_documents, tenantless),  # refuses when called, not iterated
        ]
        for call in calls:
            with pytest.raises(InvalidSpaceRef) as info:
                call()
            assert info.value.details["field"] == "tenant"
        with pytest.raises(StoreUnavailable):
            store.list(project())
        with pytest.raises(StoreUnavailable):  # a listing is a read off the pool too
            store.list_json(project())
        store.close()


def test_invalid_ref_and_path_are_refused(store: SqlStore) -> None:
    with pytest.raises(InvalidSpaceRef):
        store.read(SpaceRef(Visibility.BOT, "n", tenant=TEAM, project="p"), "a.md")
    with pytest.raises(InvalidSpaceRef):
        store.list(SpaceRef(Visibility.GLOBAL, "n", tenant=TEAM))
    with pytest.raises(InvalidPath, match="not canonical") as info:
        store.write(project(), "a//b.md", "x")
    assert info.value.details["canonical"] == "a/b.md"


# --- Documents -----------------------------------------------------------------------------


def test_write_read_list_delete(store: SqlStore) -> None:
    ref = project()
    first = store.write(ref, "topics/deploy.md", "# Deploy\n")
    assert first.created and first.size_bytes == 9
    again = store.write(ref, "topics/deploy.md", "# Deploy\nstep 1\n")
    assert not again.created and again.etag != first.etag
    doc = store.read(ref, "topics/deploy.md")
    assert doc.content == "# Deploy\nstep 1\n" and doc.etag == again.etag
    assert doc.updated_at.utcoffset() == timedelta(0)
    store.delete(ref, "topics/deploy.md")
    with pytest.raises(NotFound):
        store.read(ref, "topics/deploy.md")
    with pytest.raises(NotFound):
        store.delete(ref, "topics/deploy.md")


def test_listing_sorts_by_code_point_and_filters_by_directory(store: SqlStore) -> None:
    ref = project()
    paths = ["b.md", "B.md", "a.md", "a/z.md", "a/b/c.md", "ab/x.md", "é.md", "a-b.md", "Z.md"]
    for p in paths:
        store.write(ref, p, p)
    assert [d.path for d in store.list(ref)] == sorted(paths)
    assert [d.path for d in store.list(ref, "a")] == ["a/b/c.md", "a/z.md"]
    assert [d.path for d in store.list(ref, "a/b")] == ["a/b/c.md"]
    assert store.list(ref, "missing") == []
    assert [d.path for d in store.iter_documents(ref, "a")] == ["a/b/c.md", "a/z.md"]


def test_preconditions(store: SqlStore) -> None:
    ref = project()
    with pytest.raises(PreconditionFailed):
        store.write(ref, "a.md", "x", if_match="nope")
    made = store.write(ref, "a.md", "x", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        store.write(ref, "a.md", "y", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        store.write(ref, "a.md", "y", if_match="stale")
    with pytest.raises(PreconditionFailed):
        store.delete(ref, "a.md", if_match="stale")
    assert store.read(ref, "a.md").content == "x"
    replaced = store.write(ref, "a.md", "yy", if_match=made.etag)
    store.delete(ref, "a.md", if_match=replaced.etag)
    assert store.usage(ref).used_bytes == 0


def test_refused_bodies_store_nothing(store: SqlStore) -> None:
    ref = project()
    small = SqlStore(store.engine, Limits(max_document=8))
    with pytest.raises(DocumentTooLarge):
        small.write(ref, "a.md", "123456789")
    with pytest.raises(SecretDetected):
        store.write(ref, "a.md", "key AKIAABCDEFGHIJKLMNOP here")
    with pytest.raises(InvalidDocument):
        store.write(ref, "a.md", "nul \x00 byte")
    with pytest.raises(InvalidDocument):
        store.write(ref, "a.md", "lone \ud800 surrogate")
    assert store.list(ref) == [] and store.usage(ref).team_used_bytes == 0


def test_global_mutations_need_platform_authority(store: SqlStore) -> None:
    with pytest.raises(PlatformAuthorityRequired):
        store.write(GLOBAL, "g.md", "x")
    store.write(GLOBAL, "g.md", "x", grant=PlatformGrant("test"))
    with pytest.raises(PlatformAuthorityRequired):
        store.delete(GLOBAL, "g.md")
    assert store.read(GLOBAL, "g.md").content == "x"


# --- Counters ------------------------------------------------------------------------------


def test_counters_follow_writes_shrinks_and_deletes(store: SqlStore) -> None:
    a, b = project(name="a"), project(name="b")
    store.write(a, "x.md", "x" * 100)
    store.write(b, "y.md", "y" * 50)
    assert store.usage(a).used_bytes == 100
    assert store.usage(a).team_used_bytes == 150
    store.write(a, "x.md", "x" * 30)  # shrink credits
    assert (store.usage(a).used_bytes, store.team_usage(TEAM)[0]) == (30, 80)
    store.delete(b, "y.md")
    assert (store.usage(b).used_bytes, store.team_usage(TEAM)[0]) == (0, 30)
    assert store.team_usage(OTHER) == (0, Limits().team_quota)
    assert store.usage(project(OTHER)).team_used_bytes == 0


def test_space_subcap_refuses_with_details(backend: Backend) -> None:
    store = backend.open(Limits().with_subcap(Visibility.PROJECT, 100))
    ref = project()
    store.write(ref, "a.md", "a" * 60)
    with pytest.raises(QuotaExceeded) as info:
        store.write(ref, "b.md", "b" * 41)
    assert info.value.details == {
        "limit": "space",
        "used_bytes": 60,
        "quota_bytes": 100,
        "needed_bytes": 41,
    }
    with pytest.raises(QuotaExceeded) as first:
        store.write(project(name="fresh"), "c.md", "c" * 101)
    assert first.value.details["used_bytes"] == 0
    assert [d.path for d in store.list(ref)] == ["a.md"]
    assert store.team_usage(TEAM)[0] == 60
    store.write(ref, "a.md", "a" * 100)  # growing within the cap is fine
    assert store.usage(ref).used_bytes == 100


def test_team_aggregate_refuses_and_admin_recaps(backend: Backend) -> None:
    store = backend.open(Limits(team_quota=100))
    store.write(project(name="one"), "a.md", "a" * 70)
    with pytest.raises(QuotaExceeded) as info:
        store.write(project(name="two"), "b.md", "b" * 31)
    assert info.value.details == {
        "limit": "team",
        "used_bytes": 70,
        "quota_bytes": 100,
        "needed_bytes": 31,
    }
    assert store.list(project(name="two")) == []
    assert store.usage(project(name="two")).used_bytes == 0
    store.set_team_quota(TEAM, 200)
    store.write(project(name="two"), "b.md", "b" * 31)
    assert store.team_usage(TEAM) == (101, 200)
    # Lowering the quota below usage refuses growth but lets shrinks through.
    store.set_team_quota(TEAM, 50)
    with pytest.raises(QuotaExceeded):
        store.write(project(name="two"), "b.md", "b" * 32)
    store.write(project(name="two"), "b.md", "b")
    assert store.team_usage(TEAM) == (71, 50)
    # A team that never wrote gets a counter at the given quota.
    store.set_team_quota(OTHER, 5)
    assert store.team_usage(OTHER) == (0, 5)
    with pytest.raises(QuotaExceeded):
        store.write(project(OTHER), "a.md", "123456")


def test_counter_created_by_a_write_over_its_default_quota_is_refused(backend: Backend) -> None:
    store = backend.open(Limits(team_quota=10, instance_quota=10))
    with pytest.raises(QuotaExceeded) as info:
        store.write(project(), "a.md", "x" * 11)
    assert info.value.details["limit"] == "team"
    with pytest.raises(QuotaExceeded) as info:
        store.write(GLOBAL, "a.md", "x" * 11, grant=PlatformGrant("test"))
    assert info.value.details["limit"] == "instance"
    assert store.team_usage(TEAM)[0] == 0 and store.instance_usage()[0] == 0


def test_admin_input_is_checked(store: SqlStore) -> None:
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(InvalidRequest):
            store.set_team_quota(TEAM, bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidRequest):
            store.set_instance_quota(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidSpaceRef):
        store.set_team_quota("", 10)
    with pytest.raises(InvalidSpaceRef):
        store.team_usage("a/b")


def test_global_charges_instance_and_debits_attributed_team(backend: Backend) -> None:
    store = backend.open(Limits(team_quota=10))
    store.set_instance_quota(100)
    admin = PlatformGrant("admin-token")  # no team named: no attribution
    attributed = PlatformGrant("admin-token", attribution_team=TEAM)
    store.write(GLOBAL, "plain.md", "p" * 5, grant=admin)
    assert store.instance_usage() == (5, 100)
    assert store.team_usage(TEAM)[0] == 0
    # Attribution is not enforcement: 40 bytes land on a team capped at 10.
    store.write(GLOBAL, "a.md", "a" * 40, grant=attributed)
    assert store.team_usage(TEAM) == (40, 10)
    assert store.instance_usage() == (45, 100)
    usage = store.usage(GLOBAL)
    assert (usage.used_bytes, usage.quota_bytes) == (45, 0)
    assert (usage.team_used_bytes, usage.team_quota_bytes) == (45, 100)
    with pytest.raises(QuotaExceeded) as info:
        store.write(GLOBAL, "b.md", "b" * 56, grant=attributed)
    assert info.value.details["limit"] == "instance"
    assert store.team_usage(TEAM)[0] == 40  # the refused write debited nobody
    # The team is charged nothing of its own for the global bytes' sake.
    with pytest.raises(QuotaExceeded):
        store.write(project(), "t.md", "t")


def test_attribution_credit_lands_on_the_shrinking_team_and_clamps(store: SqlStore) -> None:
    mine = PlatformGrant("user:1", attribution_team=TEAM)
    store.write(GLOBAL, "a.md", "a" * 30, grant=mine)
    # OTHER shrinks it: credited, clamped.
    store.write(GLOBAL, "a.md", "a" * 10, grant=PlatformGrant("user:1", attribution_team=OTHER))
    assert store.team_usage(OTHER)[0] == 0
    assert store.team_usage(TEAM)[0] == 30
    store.delete(GLOBAL, "a.md", grant=mine)
    assert store.team_usage(TEAM)[0] == 20
    assert store.instance_usage()[0] == 0


def test_counters_clamp_at_zero(store: SqlStore) -> None:
    ref = project()
    store.write(ref, "a.md", "a" * 50)
    # A counter that drifted below the bytes stored (e.g. restored from an older
    # backup) must not go negative when the documents go.
    with store.engine.begin() as conn:
        conn.execute(sa.update(memory_tenant_usage).values(used_bytes=10))
    store.delete(ref, "a.md")
    assert store.team_usage(TEAM)[0] == 0
    assert store.usage(ref).used_bytes == 0


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3), st.integers(-1, 120)),
        max_size=14,
    )
)
def test_counters_match_a_model(store: SqlStore, ops: list[tuple[str, int, int]]) -> None:
    """Any sequence of writes/deletes: counters equal stored bytes, refusals exactly when
    the model says a limit would be passed (sub-cap 150 per space, team quota 200)."""
    tenant = f"team-{uuid.uuid4().hex[:8]}"
    limited = SqlStore(store.engine, Limits().with_subcap(Visibility.PROJECT, 150))
    limited.set_team_quota(tenant, 200)
    model: dict[tuple[str, int], int] = {}
    for space, doc, size in ops:
        ref, path = project(tenant, name=space), f"d{doc}.md"
        if size < 0:
            if (space, doc) in model:
                limited.delete(ref, path)
                del model[(space, doc)]
            continue
        delta = size - model.get((space, doc), 0)
        space_used = sum(v for (s, _), v in model.items() if s == space)
        refused = delta > 0 and (space_used + delta > 150 or sum(model.values()) + delta > 200)
        try:
            limited.write(ref, path, "x" * size)
            model[(space, doc)] = size
            assert not refused
        except QuotaExceeded:
            assert refused
    assert limited.team_usage(tenant)[0] == sum(model.values())
    for space in ("a", "b"):
        stored = sum(d.size_bytes for d in limited.list(project(tenant, name=space)))
        assert limited.usage(project(tenant, name=space)).used_bytes == stored


# --- Concurrency ---------------------------------------------------------------------------


def test_cas_holds_under_threads(backend: Backend) -> None:
    store = backend.open(Limits(team_quota=1000))
    start = threading.Barrier(6)

    def writer(worker: int) -> int:
        start.wait()
        done = 0
        for i in range(5):
            try:
                store.write(project(name=f"s{worker % 2}"), f"w{worker}-{i}.md", "x" * 100)
                done += 1
            except QuotaExceeded:
                pass
        return done

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        written = sum(pool.map(writer, range(6)))
    assert written == 10
    stored = sum(d.size_bytes for n in ("s0", "s1") for d in store.list(project(name=n)))
    assert store.team_usage(TEAM) == (stored, 1000)
    assert stored == 1000


def test_concurrent_writers_of_one_path_keep_counters_exact(backend: Backend) -> None:
    store = backend.open()
    ref = project()
    start = threading.Barrier(6)

    def writer(worker: int) -> list[bool]:
        start.wait()
        return [store.write(ref, "same.md", "y" * (worker * 10 + i)).created for i in range(1, 6)]

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        created = [c for batch in pool.map(writer, range(6)) for c in batch]
    assert created.count(True) == 1  # the insert race has exactly one winner
    final = store.read(ref, "same.md").size_bytes
    assert store.usage(ref).used_bytes == final
    assert store.team_usage(TEAM)[0] == final


def _process_writer(url: str, schema: str | None, worker: int) -> tuple[bool, int]:
    """Runs in a child process: race the others to create one path, then write
    50-byte documents until the team quota refuses."""
    store = SqlStore(make_engine(url, schema=schema), Limits(team_quota=600))
    try:
        created = store.write(project(), "shared.md", "s" * (10 + worker)).created
        done = 0
        for i in range(6):
            try:
                store.write(project(), f"p{worker}-{i}.md", "z" * 50)
                done += 1
            except QuotaExceeded:
                pass
    finally:
        store.close()
    return created, done


@pytest.mark.slow
def test_cas_holds_across_processes(backend: Backend) -> None:
    store = backend.open(Limits(team_quota=600))
    ctx = child_context()
    with concurrent.futures.ProcessPoolExecutor(3, mp_context=ctx) as pool:
        futures = [pool.submit(_process_writer, backend.url, backend.schema, w) for w in range(3)]
        results = [f.result() for f in futures]
    assert [created for created, _ in results].count(True) == 1
    # shared.md holds 10-12 bytes, so exactly 11 of the 18 50-byte documents fit in 600.
    assert sum(done for _, done in results) == 11
    stored = sum(d.size_bytes for d in store.list(project()))
    assert store.team_usage(TEAM) == (stored, 600)
    assert store.usage(project()).used_bytes == stored


# --- Streaming -----------------------------------------------------------------------------


def test_iter_documents_pages_in_order(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sql_statements, "ITER_META_PAGE", 7)
    monkeypatch.setattr(sql_module, "ITER_BATCH_DOCS", 3)
    store = backend.open()
    ref = project()
    paths = sorted(f"n{i:02d}.md" for i in range(23))
    for p in paths:
        store.write(ref, p, f"body of {p}")
    docs = store.iter_documents(ref)
    first = next(docs)
    store.delete(ref, "n20.md")  # removed behind the cursor: skipped, not an error
    rest = list(docs)
    assert [d.path for d in [first, *rest]] == [p for p in paths if p != "n20.md"]
    assert all(d.content == f"body of {d.path}" for d in rest)


def test_iter_documents_memory_stays_bounded(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_module, "ITER_BATCH_BYTES", 256 * 1024)
    store = backend.open()
    ref = project()
    body = "m" * (128 * 1024)
    for i in range(24):  # 3 MiB in all
        store.write(ref, f"m{i:02d}.md", body)
    tracemalloc.start()
    try:
        count = sum(1 for _ in store.iter_documents(ref))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 24
    assert peak < 1536 * 1024, f"iterating 3 MiB peaked at {peak} bytes"


def test_batches_bound_count_and_bytes() -> None:
    items = [(f"{i}.md", size) for i, size in enumerate([10, 10, 5_000_000, 10] + [1] * 100)]
    batches = list(sql_module._batches(items))
    assert [p for b in batches for p in b] == [p for p, _ in items]
    assert batches[0] == ["0.md", "1.md"] and batches[1] == ["2.md"]
    assert all(len(b) <= sql_module.ITER_BATCH_DOCS for b in batches)


# --- Statements and failures ---------------------------------------------------------------


def _driver_statements(store: SqlStore, work: Callable[[], object]) -> list[str]:
    """What the driver ran for ``work``, statement by statement, seen by the driver itself
    (the history's statements bypass SQLAlchemy): SQLite's trace callback; on PostgreSQL
    libpq's protocol trace, one entry per round trip (a Query, or an extended-protocol
    Sync), transaction control left out."""
    seen: list[str] = []
    traces: list[tuple[object, tempfile._TemporaryFileWrapper[bytes]]] = []
    tracing: list[sqlite3.Connection] = []

    def traced(dbapi_conn: object) -> None:
        if isinstance(dbapi_conn, sqlite3.Connection):
            dbapi_conn.set_trace_callback(seen.append)
            tracing.append(dbapi_conn)
        elif all(pgconn is not dbapi_conn.pgconn for pgconn, _ in traces):  # type: ignore[attr-defined]
            trace = tempfile.TemporaryFile()
            pgconn = dbapi_conn.pgconn  # type: ignore[attr-defined]
            pgconn.trace(trace.fileno())
            traces.append((pgconn, trace))

    def on_checkout(dbapi_conn: object, _record: object, _proxy: object) -> None:
        traced(dbapi_conn)

    def on_begin(conn: sa.Connection) -> None:  # SQLite's writers keep a connection open
        traced(conn.connection.dbapi_connection)

    sa.event.listen(store.engine, "checkout", on_checkout)
    sa.event.listen(store.engine, "begin", on_begin)
    try:
        work()
    finally:
        sa.event.remove(store.engine, "checkout", on_checkout)
        sa.event.remove(store.engine, "begin", on_begin)
        for dbapi_conn in tracing:
            dbapi_conn.set_trace_callback(None)
    for pgconn, trace in traces:
        pgconn.untrace()  # type: ignore[attr-defined]
        trace.seek(0)
        sent = [line.split("\t") for line in trace.read().decode().splitlines()]
        seen += [m[-1] for m in sent if len(m) > 3 and m[1] == "F" and m[3] in ("Query", "Sync")]
        trace.close()
    skip = ("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA", "SELECT 1", '"BEGIN"', '"COMMIT"')
    return [s for s in seen if not s.lstrip().upper().startswith(skip)]


def test_a_write_is_a_few_statements(store: SqlStore) -> None:
    ref = project()
    store.write(ref, "a.md", "a")
    seen = _driver_statements(store, lambda: store.write(ref, "a.md", "ab"))
    if store.engine.dialect.name == "postgresql":
        # ONE statement (keepstone.store.sql_write.ChangeStatements.put): the row lock, the
        # update, the old chunks, both counters and the new version are CTEs of it.
        assert len(seen) == 1
        return
    # The lock reads the live version's number and stored size; the version it replaces is
    # copied from the document row into the history by one INSERT … SELECT, before the
    # update makes the new content the next version
    assert [s.split()[0] for s in seen[:3]] == ["SELECT", "INSERT", "UPDATE"]
    assert "FROM memory_documents" in seen[0] and "FROM memory_documents" in seen[1]
    assert seen[1].startswith("INSERT INTO memory_document_versions")
    assert seen[2].startswith("UPDATE memory_documents")
    on_chunks = [s for s in seen if s.startswith("DELETE FROM memory_chunks")]
    assert len(on_chunks) == 1  # the old chunks dropped; a search chunks the new content
    # + the space counter (and its search_version) + the team counter, which grows the
    # team's history counter in the same row update, by the replaced bytes the lock read
    assert len(seen) == 6
    # A new path writes no history at all: lock, insert, the two counters
    created = _driver_statements(store, lambda: store.write(ref, "b.md", "b"))
    assert not [s for s in created if "INTO memory_document_versions" in s]
    assert len(created) == 4


def test_dead_postgres_is_store_unavailable() -> None:
    with pytest.raises(StoreUnavailable):
        SqlStore.open("postgresql://postgres@127.0.0.1:1/keepstone")


def test_unwritable_sqlite_path_is_store_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreUnavailable):
        SqlStore.open(f"sqlite:///{blocker / 'sub' / 'keepstone.db'}")
    with pytest.raises(StoreUnavailable):
        SqlStore.open(f"sqlite:///{tmp_path}")  # a directory is no database


def test_reopening_migrates_nothing_and_keeps_data(backend: Backend) -> None:
    first = backend.open()
    first.write(project(), "a.md", "kept")
    first.close()
    again = backend.open()
    assert again.read(project(), "a.md").content == "kept"
    assert again.team_usage(TEAM)[0] == 4


@pytest.mark.postgres
def test_postgres_schemas_are_independent(postgres_url: str) -> None:
    one = SqlStore.open(postgres_url, schema=f"t_{uuid.uuid4().hex[:16]}")
    other = SqlStore.open(postgres_url, schema=f"t_{uuid.uuid4().hex[:16]}")
    try:
        one.write(project(), "a.md", "one")
        assert other.list(project()) == []
        assert [d.path for d in one.list(project())] == ["a.md"]
    finally:
        one.close()
        other.close()
    with pytest.raises(InvalidRequest):
        SqlStore.open(postgres_url, schema='x"; drop table users; --')


def test_small_versions_are_stored_as_they_are_large_ones_compressed(store: SqlStore) -> None:
    from keepstone.store.sql_schema import memory_document_versions as V

    ref = project()
    small, large = "note " * 100, "a line of notes\n" * 1000  # 500 B and 16 KB
    store.write(ref, "small.md", small)
    store.write(ref, "large.md", large)
    # The live versions are the documents' rows. SQL copies a small one into the table when
    # it is replaced; SQLite packs a large one then too, PostgreSQL when it is written.
    postgres = store.engine.dialect.name == "postgresql"
    assert [r.path for r in rows(store, V)] == (["large.md"] if postgres else [])
    assert store.history_usage(TEAM)[0] == 0  # no version was replaced yet
    store.write(ref, "small.md", "next")
    store.write(ref, "large.md", "next")
    stored = {r.path: (r.stored_bytes, r.content) for r in rows(store, V)}
    # A zero byte, then the text: compressing would cost more write time than it saves.
    assert stored["small.md"] == (len(small) + 1, b"\x00" + small.encode())
    assert stored["large.md"][0] < len(large) // 10
    assert stored["large.md"][1][:4] == b"\x28\xb5\x2f\xfd"  # a zstd frame
    assert store.history_usage(TEAM)[0] == stored["small.md"][0] + stored["large.md"][0]
    assert store.read_version(ref, "small.md", 1).content == small
    assert store.read_version(ref, "large.md", 1).content == large
    # Versions stored as zlib streams whatever their size (migration 4's backfill and
    # every version before zstd) still read.
    import zlib

    with store.engine.begin() as conn:
        conn.execute(sa.update(V).where(V.c.path == "small.md").values(content=zlib.compress(b"x")))
        conn.execute(
            sa.update(V).where(V.c.path == "large.md").values(content=zlib.compress(large.encode()))
        )
    assert store.read_version(ref, "small.md", 1).content == "x"
    assert store.read_version(ref, "large.md", 1).content == large


def test_a_moved_large_document_keeps_its_packed_version(store: SqlStore) -> None:
    from keepstone.store.sql_schema import memory_document_versions as V

    ref = project()
    large = "a line of notes\n" * 1000  # 16 KB
    store.write(ref, "a.md", large)
    store.move(ref, "a.md", "b.md")
    kept = {(r.path, r.version): r for r in rows(store, V)}
    # a.md: its version 1, packed, and the marker of the move. PostgreSQL packed it when it
    # was written and carries that row to b.md, whose version 1 it is; SQLite packed it when
    # the move replaced it, and packs b.md's when a change replaces that.
    postgres = store.engine.dialect.name == "postgresql"
    assert sorted(kept) == [("a.md", 1), ("a.md", 2), *([("b.md", 1)] if postgres else [])]
    assert kept[("a.md", 1)].content[:4] == b"\x28\xb5\x2f\xfd"  # a zstd frame, not the text
    if postgres:
        assert kept[("b.md", 1)].content == kept[("a.md", 1)].content
    assert store.read_version(ref, "a.md", 1).content == large
    assert store.read_version(ref, "b.md", 1).content == large
    store.write(ref, "b.md", "next")
    kept = {(r.path, r.version): r for r in rows(store, V)}
    assert sorted(kept) == [("a.md", 1), ("a.md", 2), ("b.md", 1)]
    assert kept[("b.md", 1)].content[:4] == b"\x28\xb5\x2f\xfd"
    assert store.read_version(ref, "b.md", 1).content == large
    assert store.history_usage(TEAM)[0] == sum(
        kept[k].stored_bytes for k in (("a.md", 1), ("b.md", 1))
    )


def test_a_large_version_packed_when_it_was_written_is_kept_as_it_is(store: SqlStore) -> None:
    # PostgreSQL writes a large live version's packed row with it, as SQLite stores of
    # migration 5 did until they packed on replace. Replaced, deleted or moved, that version
    # keeps its row: never a second one, and the history counts the row's bytes.
    from keepstone.documents import content_etag
    from keepstone.store.sql_schema import memory_document_versions as V
    from keepstone.store.version_pack import pack_version

    ref = project()
    bodies = {p: f"{p} holds a line of notes\n" * 800 for p in ("w.md", "d.md", "m.md")}
    for path, body in bodies.items():
        store.write(ref, path, body)
    space = rows(store, memory_documents)[0]
    postgres = store.engine.dialect.name == "postgresql"
    if postgres:
        assert sorted(r.path for r in rows(store, V)) == sorted(bodies)
    with store.engine.begin() as conn:
        for path, body in bodies.items() if not postgres else ():
            packed = pack_version(body.encode())
            conn.execute(
                sa.insert(V).values(
                    tenant_id=space.tenant_id,
                    space_key=space.space_key,
                    space_id=space.space_id,
                    path=path,
                    version=1,
                    etag=content_etag(body.encode()),
                    size_bytes=len(body),
                    stored_bytes=len(packed),
                    content=packed,
                    at=space.updated_at,
                    actor="earlier",
                    deleted=False,
                )
            )
    store.write(ref, "w.md", "next")
    store.delete(ref, "d.md")
    store.move(ref, "m.md", "n.md")
    kept = {(r.path, r.version): r for r in rows(store, V)}
    carried = [("n.md", 1)] if postgres else []  # PostgreSQL's row moves with the document
    assert sorted(kept) == sorted(
        [("d.md", 1), ("d.md", 2), ("m.md", 1), ("m.md", 2), ("w.md", 1), *carried]
    )
    if not postgres:
        assert {kept[(p, 1)].actor for p in bodies} == {"earlier"}
    for path, body in bodies.items():
        assert store.read_version(ref, path, 1).content == body
    assert store.history_usage(TEAM)[0] == sum(kept[(p, 1)].stored_bytes for p in bodies)
