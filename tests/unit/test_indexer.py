"""The background indexer (``keepstone.service.indexer``) on SQLite and PostgreSQL.

A pass chunks unindexed documents and embeds a batch of pending chunks; a document
rewritten while its chunks are being embedded keeps its new text pending; another model
re-embeds everything; a failing embedder stores nothing and the thread lives on; two
indexers on one PostgreSQL database never embed a row twice; ``keepstone serve``'s runtime
starts and stops it, and ``KEEPSTONE_INDEXER`` / ``KEEPSTONE_EMBEDDER=none`` keep it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from keepstone.api.indexer_process import IndexerProcess
from keepstone.config import Config
from keepstone.db import make_engine
from keepstone.db.vectors import decode
from keepstone.errors import InvalidRequest, StoreUnavailable
from keepstone.records.schema import records
from keepstone.records.sql import SqlRecordStore
from keepstone.runtime import open_indexer, open_runtime
from keepstone.service.indexer import Indexer, Source, document_sources, record_sources
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.sql import ChunkRow, SqlStore
from tests.conftest import create_postgres_database, drop_postgres_database
from tests.records.conftest import make_world
from tests.unit.conftest import Backend

DIM = 8
TEAM = "team-a"


class HashEmbedder:
    """A deterministic embedder: each text's vector comes from its SHA-256."""

    dim = DIM

    def __init__(self, model_id: str = "hash-a", before: Callable[[], None] | None = None):
        self.model_id = model_id
        self.before = before
        self.texts: list[str] = []
        self.lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
        if self.before is not None:
            self.before()
        with self.lock:
            self.texts.extend(texts)
        return np.stack([vector_of(t) for t in texts]) if texts else np.zeros((0, DIM))


def vector_of(text: str) -> np.ndarray:  # type: ignore[type-arg]
    digest = hashlib.sha256(text.encode()).digest()
    v = np.frombuffer(digest[:DIM], dtype=np.uint8).astype(np.float32) + 1.0
    return (v / np.linalg.norm(v)).astype(np.float32)


def space(name: str = "notes") -> SpaceRef:
    return SpaceRef.build(Visibility.PROJECT, name, tenant=TEAM, project="p1")


def doc(i: int) -> str:
    return f"# Note {i}\n\nThe deploy of service {i} failed.\n\n## Fix {i}\n\nRestart worker {i}.\n"


def write_docs(store: SqlStore, n: int, ref: SpaceRef | None = None) -> None:
    for i in range(n):
        store.write(ref or space(), f"notes/{i}.md", doc(i))


def chunks(store: SqlStore, ref: SpaceRef | None = None) -> list[ChunkRow]:
    return store.chunk_rows(ref or space())


def indexer_for(store: SqlStore, embedder: HashEmbedder, **kw: object) -> Indexer:
    return Indexer(embedder, document_sources(store), backfill=store.backfill_chunks, **kw)  # type: ignore[arg-type]


def search_text(row: ChunkRow, store: SqlStore) -> str:
    pending = {(p.path, p.seq): p.search_text for p in store.pending_chunks(10_000, "nobody")}
    return pending[(row.path, row.seq)]


def test_run_once_chunks_then_embeds_one_batch_at_a_time(store: SqlStore) -> None:
    write_docs(store, 3)  # 2 chunks each: 6 pending once chunked
    embedder = HashEmbedder()
    indexer = indexer_for(store, embedder, batch_size=4, fresh_seconds=0)
    assert chunks(store) == []  # a write never chunks
    assert indexer.run_once() == 4
    assert indexer.documents == 3
    assert sum(r.embedding is not None for r in chunks(store)) == 4
    assert indexer.run_once() == 2
    assert indexer.run_once() == 0
    rows = chunks(store)
    assert len(rows) == 6
    for row in rows:
        assert row.model == "hash-a"
        assert row.embedding is not None
        np.testing.assert_allclose(decode(row.embedding), vector_of(search_text(row, store)))
    assert indexer.embedded == {"chunks": 6}
    assert store.pending_chunks(100, "hash-a") == []


def test_a_fresh_write_is_embedded_before_the_backlog(store: SqlStore) -> None:
    write_docs(store, 20)  # 40 chunks: the backlog
    # Newest first alone (no fresh lane): the fresh note is the next claim's.
    indexer = indexer_for(store, HashEmbedder(), batch_size=4, fresh_seconds=0)
    assert indexer.run_once() == 4
    time.sleep(0.01)  # the fresh note's chunks are strictly newer
    store.write(space(), "notes/fresh.md", doc(99))
    assert indexer.run_once() == 4  # one pass: chunked, then claimed first
    rows = chunks(store)
    fresh = [r for r in rows if r.path == "notes/fresh.md"]
    assert len(fresh) == 2 and all(r.embedding is not None for r in fresh)
    assert sum(r.embedding is None for r in rows) == 40 - 4 - 2  # the backlog still drains
    assert store.count_pending([space()], "hash-a") == 34


def test_the_fresh_lane_embeds_recent_writes_first_on_the_indexers_own_thread(
    store: SqlStore,
) -> None:
    """Rows written in the last ``FRESH_SECONDS`` are claimed before each backlog batch and
    embedded on the calling thread (normal priority in ``keepstone serve``'s indexer
    process), the backlog on the low-priority compute thread."""
    from concurrent.futures import ThreadPoolExecutor

    write_docs(store, 10)
    store.backfill_chunks()
    time.sleep(0.6)  # the backlog is older than the fresh lane's window
    calls: list[tuple[str, list[str]]] = []

    class Recording(HashEmbedder):
        def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
            calls.append((threading.current_thread().name, list(texts)))
            return super().embed(texts)

    store.write(space(), "notes/fresh.md", doc(99))
    store.backfill_chunks()
    with ThreadPoolExecutor(1, thread_name_prefix="compute") as compute:
        indexer = indexer_for(store, Recording(), batch_size=4, compute=compute, fresh_seconds=0.5)
        assert indexer.run_once() == 2 + 4
    (fresh_thread, fresh_texts), (backlog_thread, backlog_texts) = calls
    assert all("Note 99" in t or "Fix 99" in t for t in fresh_texts) and len(fresh_texts) == 2
    assert fresh_thread == threading.current_thread().name
    assert backlog_thread.startswith("compute") and len(backlog_texts) == 4
    assert not any("99" in t for t in backlog_texts)


def test_the_fresh_lane_is_served_while_a_backlog_batch_embeds(store: SqlStore) -> None:
    """A write made while the compute thread embeds a slow backlog batch is embedded by
    the indexer's own thread before that batch ends."""
    from concurrent.futures import ThreadPoolExecutor

    write_docs(store, 10)
    store.backfill_chunks()
    time.sleep(0.6)  # the backlog is older than the fresh lane's window
    done: list[tuple[str, float]] = []

    class SlowBacklog(HashEmbedder):
        def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
            if threading.current_thread().name.startswith("compute"):
                store.write(space(), "notes/fresh.md", doc(99))  # written meanwhile
                time.sleep(1.5)
            done.append((threading.current_thread().name, time.monotonic()))
            return super().embed(texts)

    with ThreadPoolExecutor(1, thread_name_prefix="compute") as compute:
        indexer = indexer_for(
            store, SlowBacklog(), batch_size=4, compute=compute, fresh_seconds=0.5
        )
        indexer.run_once()
    (fresh_thread, fresh_at), (backlog_thread, backlog_at) = done
    assert fresh_thread == threading.current_thread().name and backlog_thread.startswith("compute")
    assert fresh_at < backlog_at
    fresh = [r for r in chunks(store) if r.path == "notes/fresh.md"]
    assert len(fresh) == 2 and all(r.embedding is not None for r in fresh)


def test_batches_last_about_batch_seconds(store: SqlStore) -> None:
    """A claim takes as many rows as embedded in ``batch_seconds`` last time: fewer for a
    slow embedder, growing (doubling at most) to ``batch_size`` for a quick one."""
    write_docs(store, 40)
    claimed: list[int] = []

    def counting(source: Source) -> Source:
        def claim(limit: int, model: str) -> Any:
            claimed.append(limit)
            return source.claim(limit, model)

        return Source(source.name, claim)

    def slow() -> None:
        time.sleep(0.1)  # per batch; with 4 texts: 40 texts a second at most

    sources = [counting(s) for s in document_sources(store)]
    quick = Indexer(
        HashEmbedder(), sources, backfill=store.backfill_chunks, batch_size=16, fresh_seconds=0
    )
    for _ in range(4):
        quick.run_once()
    assert claimed == [4, 8, 16, 16]
    claimed.clear()
    slowed = Indexer(
        HashEmbedder(before=slow), sources, batch_size=16, batch_seconds=0.05, fresh_seconds=0
    )
    for _ in range(3):
        slowed.run_once()
    assert claimed[0] == 4 and all(n <= 2 for n in claimed[1:])


def test_a_document_rewritten_while_embedding_keeps_its_new_text_pending(
    backend: Backend, store: SqlStore
) -> None:
    write_docs(store, 1)
    store.backfill_chunks()
    writer: list[threading.Thread] = []

    def rewrite() -> None:
        if writer:
            return
        # Another connection rewrites the document while its chunks are claimed. On
        # PostgreSQL the write waits for the claim's lock; on SQLite it commits at once.
        t = threading.Thread(
            target=store.write, args=(space(), "notes/0.md", "# Note 0\n\nRolled back instead.\n")
        )
        writer.append(t)
        t.start()
        if backend.kind == "sqlite":
            t.join()

    embedder = HashEmbedder(before=rewrite)
    indexer = indexer_for(store, embedder)
    indexer.run_once()
    writer[0].join()
    # The old text's vectors were not stored over the new text: it is pending again.
    assert all("Rolled back" in r.text for r in chunks(store))
    assert all(r.embedding is None for r in chunks(store))
    indexer.drain()
    (row,) = chunks(store)
    assert row.text.endswith("Rolled back instead.")
    assert row.embedding is not None
    np.testing.assert_allclose(decode(row.embedding), vector_of(search_text(row, store)))


def test_a_model_change_re_embeds_everything(store: SqlStore) -> None:
    write_docs(store, 2)
    first = indexer_for(store, HashEmbedder("hash-a"))
    assert first.drain() == {"chunks": 4}
    assert first.drain() == {"chunks": 0}
    second = indexer_for(store, HashEmbedder("hash-b"))
    assert second.drain() == {"chunks": 4}
    assert {r.model for r in chunks(store)} == {"hash-b"}
    # And back: the first model's indexer finds every row pending again.
    assert first.drain() == {"chunks": 4}
    assert {r.model for r in chunks(store)} == {"hash-a"}


def test_a_failing_embedder_leaves_everything_pending_and_the_thread_alive(
    store: SqlStore, caplog: pytest.LogCaptureFixture
) -> None:
    write_docs(store, 2)
    failures = [3]

    def unreachable() -> None:
        if failures[0]:
            failures[0] -= 1
            raise StoreUnavailable("the embeddings server http://127.0.0.1:9 cannot be reached")

    indexer = indexer_for(
        store, HashEmbedder(before=unreachable), first_backoff=0.01, idle_seconds=0.01
    )
    with pytest.raises(StoreUnavailable):
        indexer.run_once()
    assert len(chunks(store)) == 4  # chunked: keyword search has them
    assert all(r.embedding is None for r in chunks(store))  # nothing half-indexed
    assert len(store.pending_chunks(100, "hash-a")) == 4

    indexer.start()
    try:
        deadline = time.monotonic() + 30
        while store.pending_chunks(100, "hash-a") and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        indexer.stop()
    assert not indexer.running
    assert store.pending_chunks(100, "hash-a") == []
    assert indexer.failures == 2  # the two left after run_once's, then success
    assert indexer.last_error is None
    warnings = [r.getMessage() for r in caplog.records if r.name == "keepstone.service.indexer"]
    assert len(warnings) >= 2
    assert all("\n" not in w and "cannot be reached" in w for w in warnings[:2])
    assert all(r.exc_info is None for r in caplog.records)  # one line each, no traceback


def test_an_unexpected_error_does_not_kill_the_thread(store: SqlStore) -> None:
    write_docs(store, 1)
    store.backfill_chunks()
    calls = [0]

    def broken_once() -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("boom")

    indexer = indexer_for(store, HashEmbedder(before=broken_once), first_backoff=0.01)
    indexer.start()
    try:
        deadline = time.monotonic() + 30
        while store.pending_chunks(10, "hash-a") and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        indexer.stop()
    assert store.pending_chunks(10, "hash-a") == []
    assert indexer.failures == 1


@pytest.mark.postgres
def test_two_indexers_on_postgres_never_embed_a_row_twice(postgres_url: str) -> None:
    schema = f"t_{uuid.uuid4().hex[:16]}"
    one, two = (
        SqlStore.open(postgres_url, schema=schema),
        SqlStore.open(postgres_url, schema=schema),
    )
    try:
        for i in range(60):
            one.write(space(), f"n/{i}.md", f"Unique note number {i} about topic {i * 7}.")
        one.backfill_chunks()
        slow = lambda: time.sleep(0.005)  # noqa: E731 - so the two claims overlap
        a, b = HashEmbedder(before=slow), HashEmbedder(before=slow)
        indexers = [indexer_for(one, a, batch_size=4), indexer_for(two, b, batch_size=4)]
        threads = [threading.Thread(target=ix.drain) for ix in indexers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        embedded = a.texts + b.texts
        assert len(embedded) == 60
        assert len(set(embedded)) == 60
        assert one.pending_chunks(100, "hash-a") == []
        assert all(r.model == "hash-a" for r in one.chunk_rows(space()))
    finally:
        one.close()
        two.close()


def test_record_sources_need_a_claiming_record_store() -> None:
    assert record_sources(None) == []
    assert record_sources(object()) == []


def test_the_setting_is_on_or_off() -> None:
    assert Config.from_env({}).indexer is True
    assert Config.from_env({"KEEPSTONE_INDEXER": "off"}).indexer is False
    assert Config.from_env({"KEEPSTONE_INDEXER": " ON "}).indexer is True
    with pytest.raises(InvalidRequest, match="KEEPSTONE_INDEXER='maybe' is not on or off"):
        Config.from_env({"KEEPSTONE_INDEXER": "maybe"})


def test_the_indexer_is_off_when_asked_or_with_no_embedder(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    for settings in ({"KEEPSTONE_INDEXER": "off"}, {"KEEPSTONE_EMBEDDER": "none"}):
        config = Config.from_env({"KEEPSTONE_DATABASE_URL": url, **settings})
        runtime = open_runtime(config)
        try:
            assert open_indexer(runtime) is None
        finally:
            runtime.close()
        background = IndexerProcess(config)
        assert not background.wanted
        background.start()
        assert background.process is None


def wait_for_vector(store: SqlStore, ref: SpaceRef, model: str) -> ChunkRow:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        rows = store.chunk_rows(ref)
        if [r.model for r in rows] == [model]:
            break
        time.sleep(0.05)
    (row,) = store.chunk_rows(ref)
    return row


def test_the_runtime_builds_the_indexer_with_the_real_model(tmp_path: Path) -> None:
    config = Config.from_env(
        {
            "KEEPSTONE_DATABASE_URL": f"sqlite:///{tmp_path / 'c.db'}",
            "KEEPSTONE_HOME": str(tmp_path),
        }
    )
    runtime = open_runtime(config)
    indexer = open_indexer(runtime)
    assert indexer is not None
    try:
        runtime.store.write(space(), "runbook.md", "# Rollback\n\nRun the rollback script.\n")
        indexer.start()
        assert indexer.running
        assert indexer.model == "all-MiniLM-L6-v2"
        row = wait_for_vector(runtime.store, space(), indexer.model)
        assert row.embedding is not None and len(decode(row.embedding)) == 384
    finally:
        indexer.stop()
        runtime.close()
    assert not indexer.running


def test_keepstone_serve_runs_the_indexer_in_a_child_process_it_stops(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    config = Config.from_env({"KEEPSTONE_DATABASE_URL": url, "KEEPSTONE_HOME": str(tmp_path)})
    runtime = open_runtime(config)  # migrates: the child opens the database as it is
    background = IndexerProcess(config)
    try:
        runtime.store.write(space(), "runbook.md", "# Rollback\n\nRun the rollback script.\n")
        background.start()
        assert background.process is not None and background.process.is_alive()
        row = wait_for_vector(runtime.store, space(), "all-MiniLM-L6-v2")
        assert row.embedding is not None and len(decode(row.embedding)) == 384
        process = background.process
    finally:
        background.stop()
        runtime.close()
    assert not process.is_alive()
    assert process.exitcode == 0  # SIGTERM asked it to finish its batch and return


# --- Team records: the same indexer, the records' claim --------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def records_world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, str]]:
    """A runtime over a database with one team whose memory is on, and the team's id."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'r.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    runtime = open_runtime(Config(database_url=url, home=tmp_path))
    try:
        yield runtime, make_world(runtime.engine).team_id
    finally:
        runtime.close()


def team_vectors(engine: Any, team: str) -> dict[str, tuple[str | None, bytes | None]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(records.c.id, records.c.model, records.c.embedding).where(
                records.c.team_id == team
            )
        )
        return {r.id: (r.model, None if r.embedding is None else bytes(r.embedding)) for r in rows}


def test_the_indexer_embeds_team_records_and_re_embeds_on_a_model_change(
    records_world: tuple[Any, str],
) -> None:
    runtime, team = records_world
    texts = [f"Fixed flaky deploy number {i} by pinning the base image" for i in range(5)]
    ids = [runtime.records.save_as_server(team, t).id for t in texts]
    record_store = SqlRecordStore(runtime.engine)
    assert {m for m, _ in team_vectors(runtime.engine, team).values()} == {None}

    first = Indexer(HashEmbedder("hash-a"), record_sources(record_store), batch_size=2)
    drained = first.drain()
    assert drained["records"] >= 5  # (other tests' teams may share the database)
    stored = team_vectors(runtime.engine, team)
    assert sorted(stored) == sorted(ids)
    by_id = dict(zip(ids, texts, strict=True))
    for record_id, (model, blob) in stored.items():
        assert model == "hash-a" and blob is not None
        np.testing.assert_allclose(decode(blob), vector_of(by_id[record_id]))

    second = Indexer(HashEmbedder("hash-b"), record_sources(record_store))
    assert second.drain()["records"] >= 5
    assert {m for m, _ in team_vectors(runtime.engine, team).values()} == {"hash-b"}


def test_rows_a_store_keeps_refusing_do_not_make_the_loop_spin() -> None:
    @dataclass(frozen=True)
    class Row:
        key: int
        search_text: str

    class Refusing:
        """A claim whose vectors never take: the same rows stay pending."""

        rows = [Row(1, "one"), Row(2, "two")]

        def store_embeddings(self, blobs: Sequence[bytes]) -> None:
            pass

    @contextlib.contextmanager
    def claim(_limit: int, _model: str) -> Iterator[Refusing]:
        yield Refusing()

    indexer = Indexer(HashEmbedder(), [Source("chunks", claim)])
    assert indexer.run_once() == 2
    assert indexer.run_once() == 0  # the same rows again: no progress
    assert indexer.drain() == {"chunks": 2}  # it ends instead of looping forever


@pytest.mark.postgres
def test_two_indexers_on_postgres_never_embed_a_record_twice(tmp_path: Path) -> None:
    url = create_postgres_database()
    engines = [make_engine(url), make_engine(url)]
    try:
        runtime = open_runtime(Config(database_url=url, home=tmp_path), engine=engines[0])
        team = make_world(runtime.engine).team_id
        for i in range(60):
            runtime.records.save_as_server(team, f"Unique record {i} about topic {i * 7}")
        slow = lambda: time.sleep(0.005)  # noqa: E731 - so the two claims overlap
        a, b = HashEmbedder(before=slow), HashEmbedder(before=slow)
        indexers = [
            Indexer(e, record_sources(SqlRecordStore(engine)), batch_size=4)
            for e, engine in zip((a, b), engines, strict=True)
        ]
        threads = [threading.Thread(target=ix.drain) for ix in indexers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        embedded = a.texts + b.texts
        assert len(embedded) == 60
        assert len(set(embedded)) == 60
        assert {m for m, _ in team_vectors(runtime.engine, team).values()} == {"hash-a"}
    finally:
        for engine in engines:
            engine.dispose()
        drop_postgres_database(url)
