"""The dense side through pgvector's HNSW index (docs/search.md, "pgvector").

On the session's PostgreSQL with pgvector (tests/pgvector_server.py), a database made
from ``template0`` (so the extension is not there yet) receives the labelled document
set (tests/data: 326 documents, 1,013 chunks, in 12 spaces of 3 teams) with their
stored all-MiniLM-L6-v2 vectors, first by a store with ``KEEPSTONE_PGVECTOR=off`` (blobs
only), then opened with ``auto``: the extension, the ``vec`` column filled from the
blobs and the HNSW index appear; the HNSW answers agree with exact numpy over the same
vectors; document search takes the HNSW path (a counter and the plan show it) and
returns the numpy path's hits; no query of one space ever returns another's chunk. On
the plain system PostgreSQL nothing changes, and ``KEEPSTONE_PGVECTOR=on`` refuses to start.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import psycopg
import pytest
import sqlalchemy as sa

from keepstone.config import Config
from keepstone.db import make_engine, pgvector
from keepstone.db.pgvector import Pgvector
from keepstone.db.vectors import decode, encode_many
from keepstone.errors import InvalidRequest, StoreUnavailable
from keepstone.records.sql import SqlRecordStore
from keepstone.records.store import Scope, new_record
from keepstone.runtime import open_runtime, reindex_database
from keepstone.schema import upgrade_all
from keepstone.search.cache import VectorCache
from keepstone.search.filters import search_filters
from keepstone.search.vectors import normalize_rows, top_k
from keepstone.service.access import LOCAL_PRINCIPAL
from keepstone.service.record_search import RecordSearch
from keepstone.service.search import DocumentSearch
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.sql import SqlStore
from keepstone.store.sql_index import space_chunks
from tests.pgvector_server import PgvectorServer
from tests.search import labelled

pytestmark = pytest.mark.pgvector

MODEL = "all-MiniLM-L6-v2"
DIM = 384
TEAMS = ("team-a", "team-b", "team-c")
K = 10


def parse_vector(text: str) -> np.ndarray:
    return np.array([float(x) for x in text.strip("[]").split(",")], dtype=np.float32)


@dataclass
class Corpus:
    """The labelled documents, the vector of each chunk's search text, and the queries
    (text, vector, the space that answers them)."""

    docs: list[dict[str, str]]
    vectors: dict[str, np.ndarray]
    queries: list[tuple[str, np.ndarray, str]]


def space_ref(space: str, spaces: Sequence[str]) -> SpaceRef:
    team = TEAMS[sorted(spaces).index(space) % len(TEAMS)]
    return SpaceRef.build(Visibility.PROJECT, space, tenant=team, project="p1")


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    docs_set = labelled.load_docs()
    units, queries = labelled.load_vectors({"docs": docs_set})["docs"]
    units, queries = normalize_rows(units), normalize_rows(queries)
    vectors = {u.text: v for u, v in zip(docs_set.units, units, strict=True)}
    raw = labelled.jsonl("docs_queries.jsonl")
    asked = [
        (q.text, v, r["relevant"][0]["space"])
        for q, v, r in zip(docs_set.queries, queries, raw, strict=True)
    ]
    return Corpus(labelled.jsonl("docs_corpus.jsonl"), vectors, asked)


@pytest.fixture(scope="module")
def spaces(corpus: Corpus) -> list[str]:
    return sorted({d["space"] for d in corpus.docs})


def embed_pending(store: SqlStore, corpus: Corpus) -> int:
    rows = store.pending_chunks(10_000, MODEL)
    vectors = np.stack([corpus.vectors[r.search_text] for r in rows])
    return store.store_embeddings(rows, encode_many(vectors), MODEL)


@pytest.fixture(scope="module")
def url(pgvector_server: PgvectorServer, corpus: Corpus, spaces: list[str]) -> str:
    """A database without the extension, holding the corpus and its vectors as blobs
    only (written with ``KEEPSTONE_PGVECTOR=off``)."""
    name = f"test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pgvector_server.url_for("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    database = pgvector_server.url_for(name)
    store = SqlStore.open(database, pgvector_mode="off")
    try:
        assert store.pgvector is None
        for doc in corpus.docs:
            store.write(space_ref(doc["space"], spaces), doc["path"], doc["content"])
        for space in spaces:
            store.reconcile(space_ref(space, spaces))
        assert embed_pending(store, corpus) >= 1000
    finally:
        store.close()
    return database


@pytest.fixture(scope="module")
def store(url: str) -> Iterator[SqlStore]:
    opened = SqlStore.open(url)  # KEEPSTONE_PGVECTOR=auto
    try:
        yield opened
    finally:
        opened.close()


def pg(store: SqlStore) -> Pgvector:
    assert store.pgvector is not None
    return store.pgvector


def scalar(store: SqlStore, sql: str, **params: object) -> object:
    with store.engine.connect() as conn:
        return conn.execute(sa.text(sql), params).scalar()


def exact_top(store: SqlStore, ref: SpaceRef, query: np.ndarray, k: int) -> list[tuple]:
    """Exact cosine top-k over the space's stored blobs: ((path, seq), cosine)."""
    rows = [r for r in store.chunk_rows(ref) if r.embedding is not None and r.model == MODEL]
    matrix = np.stack([decode(r.embedding) for r in rows if r.embedding is not None])
    picked, scores = top_k(matrix, query, k)
    return [((rows[i].path, rows[i].seq), float(s)) for i, s in zip(picked, scores, strict=True)]


# --- Setup: the extension, the column, the backfill, the index ---------------------------


def test_opening_creates_the_extension_the_column_and_the_index(store: SqlStore) -> None:
    handle = pg(store)
    assert handle.search and handle.tables == frozenset({"memory_chunks"})
    assert scalar(store, "SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    kind = scalar(
        store,
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = 'memory_chunks'::regclass AND attname = 'vec'",
    )
    assert kind == "vector"  # no fixed dimension: every model's vectors share it
    index = Pgvector.index_name("memory_chunks", MODEL, DIM)
    definition = str(scalar(store, "SELECT indexdef FROM pg_indexes WHERE indexname = :n", n=index))
    assert "USING hnsw" in definition and "vector_cosine_ops" in definition
    assert "(384)" in definition and f"'{MODEL}'" in definition, definition


def test_the_vec_column_was_filled_from_the_blobs(store: SqlStore, corpus: Corpus) -> None:
    embedded = scalar(store, "SELECT count(*) FROM memory_chunks WHERE embedding IS NOT NULL")
    filled = scalar(store, "SELECT count(*) FROM memory_chunks WHERE vec IS NOT NULL")
    assert embedded == filled and isinstance(filled, int) and filled >= 1000
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT embedding, vec::text AS vec FROM memory_chunks ORDER BY path LIMIT 50")
        ).all()
    for row in rows:
        assert np.array_equal(parse_vector(row.vec), decode(bytes(row.embedding)))


def test_storing_vectors_writes_vec_and_indexes_a_new_model(
    store: SqlStore, spaces: list[str]
) -> None:
    ref = space_ref(spaces[0], spaces)
    store.write(ref, "new/written-later.md", "# Later\nA note written after the backfill.\n")
    store.reconcile(ref)
    rows = [r for r in store.pending_chunks(100, MODEL) if r.path == "new/written-later.md"]
    assert rows
    vector = normalize_rows(np.random.default_rng(1).standard_normal((len(rows), DIM)))
    assert store.store_embeddings(rows, encode_many(vector, "int8"), MODEL) == len(rows)
    with store.engine.connect() as conn:
        stored = conn.execute(
            sa.text(
                "SELECT embedding, vec::text AS vec FROM memory_chunks"
                " WHERE path = 'new/written-later.md' ORDER BY seq"
            )
        ).all()
    for row in stored:  # an int8 blob's vec is the vector the blob decodes to
        assert np.array_equal(parse_vector(row.vec), decode(bytes(row.embedding)))

    # Vectors of another model and dimension, through the indexer's claim: their own index.
    other = "other-model"
    with store.claim_pending_chunks(5, other) as claim:
        claimed = claim.rows
        claim.store_embeddings(encode_many(normalize_rows(np.ones((len(claimed), 8)))))
    assert claimed
    index = Pgvector.index_name("memory_chunks", other, 8)
    assert scalar(store, "SELECT count(*) FROM pg_indexes WHERE indexname = :n", n=index) == 1
    found = store.nearest_chunks(ref, other, normalize_rows(np.ones((1, 8)))[0], 3)
    assert found is not None and all(abs(c - 1.0) < 1e-6 for _, _, c in found)


def test_off_keeps_an_existing_column_written_and_never_queries_it(
    store: SqlStore, url: str, spaces: list[str]
) -> None:
    off = SqlStore.open(url, pgvector_mode="off")
    try:
        handle = pg(off)
        assert not handle.search and handle.tables == frozenset({"memory_chunks"})
        ref = space_ref(spaces[3], spaces)
        assert off.nearest_chunks(ref, MODEL, np.eye(1, DIM)[0].astype(np.float32), 5) is None
        off.write(ref, "written/while-off.md", "# Off\nWritten with KEEPSTONE_PGVECTOR=off.\n")
        off.reconcile(ref)
        rows = [r for r in off.pending_chunks(100, MODEL) if r.path == "written/while-off.md"]
        off.store_embeddings(rows, encode_many(np.eye(len(rows), DIM)), MODEL)
    finally:
        off.close()
    missing = scalar(
        store,
        "SELECT count(*) FROM memory_chunks WHERE path = 'written/while-off.md' AND vec IS NULL",
    )
    assert rows and missing == 0


def test_a_role_that_may_not_create_the_extension(pgvector_server: PgvectorServer) -> None:
    """pgvector is not a trusted extension: an ordinary role gets numpy under ``auto``
    and a clear refusal under ``on``, and its transaction stays usable."""
    name = f"test_{uuid.uuid4().hex[:16]}"
    role = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pgvector_server.url_for("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f'ALTER DATABASE "{name}" OWNER TO {role}')
    as_app = pgvector_server.url_for(name).replace("postgres@", f"{role}@", 1)
    store = SqlStore.open(as_app)
    try:
        assert store.pgvector is None
    finally:
        store.close()
    with pytest.raises(StoreUnavailable) as refused:
        SqlStore.open(as_app, pgvector_mode="on")
    assert "CREATE EXTENSION vector was refused" in refused.value.message
    assert "KEEPSTONE_PGVECTOR=auto" in refused.value.message


def test_a_search_never_builds_an_index_and_a_failed_build_is_replaced(
    store: SqlStore, spaces: list[str]
) -> None:
    ref, model = space_ref(spaces[4], spaces), "third-model"
    store.write(ref, "third/a.md", "# Third\nA section.\n\n## Two\nAnother one.\n")
    store.reconcile(ref)
    rows = [r for r in store.pending_chunks(10_000, model) if r.path == "third/a.md"]
    assert len(rows) == 2
    vectors = normalize_rows(np.eye(len(rows), 8) + 0.1)
    store.store_embeddings(rows, encode_many(vectors), model)
    name = Pgvector.index_name("memory_chunks", model, 8)
    index_state = "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(:n)"
    assert scalar(store, index_state, n=name) is True
    with store.engine.begin() as conn:
        conn.execute(sa.text(f'DROP INDEX "{name}"'))
    pg(store)._indexed.clear()  # this process forgets it knew the index

    found = store.nearest_chunks(ref, model, vectors[1], 5)
    assert found is not None and (found[0][0], found[0][1]) == ("third/a.md", rows[1].seq)
    assert scalar(store, index_state, n=name) is None  # the search did not build it

    assert pg(store).ensure_index("memory_chunks", model, 8)
    with store.engine.begin() as conn:  # as a CREATE INDEX CONCURRENTLY that failed leaves it
        invalid = "UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass(:n)"
        conn.execute(sa.text(invalid), {"n": name})
    pg(store)._indexed.clear()
    assert not pg(store).ensure_index("memory_chunks", model, 8, create=False)
    assert pg(store).ensure_index("memory_chunks", model, 8)
    assert scalar(store, index_state, n=name) is True


# --- Queries: agreement with exact numpy, isolation -------------------------------------


def test_hnsw_top_10_matches_exact_numpy(
    store: SqlStore, corpus: Corpus, spaces: list[str]
) -> None:
    same = 0
    for _, vector, space in corpus.queries:
        ref = space_ref(space, spaces)
        found = store.nearest_chunks(ref, MODEL, vector, K)
        assert found is not None
        exact = exact_top(store, ref, vector, K)
        cosines = dict(exact)
        for path, seq, cosine in found:
            if (path, seq) in cosines:  # the database's cosine is numpy's
                assert cosine == pytest.approx(cosines[(path, seq)], abs=1e-5)
        assert [c for _, _, c in found] == sorted((c for _, _, c in found), reverse=True)
        same += {(p, s) for p, s, _ in found} == set(cosines)
    assert same / len(corpus.queries) >= 0.95, f"{same} of {len(corpus.queries)} queries"


def test_a_query_never_returns_another_spaces_chunk(
    store: SqlStore, corpus: Corpus, spaces: list[str]
) -> None:
    """Every space asked with every query (and with a chunk of each other space, which
    is its own nearest neighbour there): what comes back is the asked space's own rows,
    with the cosine of its own vector — ``memory.md`` is in every space, so a row of
    another space with the same (path, seq) would show through its cosine."""
    own = {
        space: {
            (r.path, r.seq): decode(r.embedding)
            for r in store.chunk_rows(space_ref(space, spaces))
            if r.embedding is not None and r.model == MODEL
        }
        for space in spaces
    }
    probes = [v for _, v, _ in corpus.queries[::4]]
    probes += [next(iter(vectors.values())) for vectors in own.values()]
    for space in spaces:
        ref = space_ref(space, spaces)
        for probe in probes:
            found = store.nearest_chunks(ref, MODEL, probe, 20)
            assert found is not None and len(found) == min(20, len(own[space]))
            for path, seq, cosine in found:
                assert (path, seq) in own[space], (space, path, seq)
                assert cosine == pytest.approx(float(own[space][(path, seq)] @ probe), abs=1e-5)


def test_path_prefix_is_applied_in_the_query(store: SqlStore, spaces: list[str]) -> None:
    ref = space_ref(spaces[1], spaces)
    rows = [r for r in store.chunk_rows(ref) if r.model == MODEL]
    folders = sorted({r.path.split("/")[0] + "/" for r in rows if "/" in r.path})
    prefix = folders[0]
    under = {(r.path, r.seq) for r in rows if r.path.startswith(prefix)}
    assert 0 < len(under) < len(rows)
    probe = np.full(DIM, DIM**-0.5, np.float32)
    found = store.nearest_chunks(ref, MODEL, probe, 500, path_prefix=prefix)
    assert found is not None and {(p, s) for p, s, _ in found} == under


# --- Document search through the index ----------------------------------------------------


class StoredQueries:
    """An embedder that answers each labelled query with its stored vector."""

    model_id = MODEL
    dim = DIM

    def __init__(self, corpus: Corpus) -> None:
        self.vectors = {text: vector for text, vector, _ in corpus.queries}

    @classmethod
    def of(cls, queries: Sequence[tuple[str, np.ndarray, str]]) -> StoredQueries:
        embedder = cls.__new__(cls)
        embedder.vectors = {text: vector for text, vector, _ in queries}
        return embedder

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.vectors[t] for t in texts])


NO_FLOOR = search_filters(min_score=-1)


def search_all(
    store: SqlStore, corpus: Corpus, spaces: list[str], min_vectors: int
) -> tuple[list[list[tuple[str, str]]], VectorCache, int]:
    """Every query's top-10 sections in its space with the index used from
    ``min_vectors`` vectors on; the vector cache afterwards; the HNSW queries run."""
    handle = pg(store)
    kept, before = handle.min_vectors, handle.queries
    handle.min_vectors = min_vectors
    cache = VectorCache()
    search = DocumentSearch(store, StoredQueries(corpus), cache)  # type: ignore[arg-type]
    try:
        found = [
            # No floor (min_score -1): both paths rank the same candidates, all K of them.
            [
                (h.path, h.heading)
                for h in search.search([space_ref(space, spaces)], text, filters=NO_FLOOR)
            ]
            for text, _, space in corpus.queries
        ]
    finally:
        handle.min_vectors = kept
    return found, cache, handle.queries - before


def test_document_search_takes_the_hnsw_path_and_finds_what_numpy_finds(
    store: SqlStore, corpus: Corpus, spaces: list[str]
) -> None:
    indexed, indexed_cache, hnsw_queries = search_all(store, corpus, spaces, 0)
    exact, exact_cache, none = search_all(store, corpus, spaces, 10**9)
    # The index answered every dense side, and no space's matrix was loaded for it.
    assert hnsw_queries == len(corpus.queries) and indexed_cache.scopes() == []
    assert none == 0 and len(exact_cache.scopes()) == len({s for _, _, s in corpus.queries})
    same = sum(set(a) == set(b) for a, b in zip(indexed, exact, strict=True))
    assert same / len(corpus.queries) >= 0.95, f"{same} of {len(corpus.queries)}"
    assert all(len(hits) == K for hits in indexed)


def test_the_query_plan_scans_the_hnsw_index(
    store: SqlStore, corpus: Corpus, spaces: list[str]
) -> None:
    ref = space_ref(spaces[2], spaces)
    plan = pg(store).explain(space_chunks(ref), MODEL, corpus.queries[0][1], 50)
    index = Pgvector.index_name("memory_chunks", MODEL, DIM)
    assert f"Index Scan using {index}" in plan, plan


# --- Team records through the index ---------------------------------------------------------


@dataclass
class Records:
    """The labelled records saved for three teams with their stored vectors, and the
    queries (text, vector, the team of their first answer)."""

    store: SqlRecordStore
    team_of: dict[str, str]
    queries: list[tuple[str, np.ndarray, str]]


@pytest.fixture(scope="module")
def team_records(pgvector_server: PgvectorServer) -> Iterator[Records]:
    engine = make_engine(pgvector_server.create_database(), pool_size=2)
    upgrade_all(engine)
    store = SqlRecordStore(engine, pgvector.setup(engine))
    records_set = labelled.load_records()
    units, queries = labelled.load_vectors({"records": records_set})["records"]
    units, queries = normalize_rows(units), normalize_rows(queries)
    now = datetime.now(UTC)
    saved = [
        new_record(TEAMS[i % len(TEAMS)], unit.text, None, now)
        for i, unit in enumerate(records_set.units)
    ]
    with store.writing() as tx:
        tx.insert(saved)
    vector_of = {rec.id: units[i] for i, rec in enumerate(saved)}
    with store.claim_pending_records(10_000, MODEL) as claim:
        claim.store_embeddings(encode_many(np.stack([vector_of[r.id] for r in claim.rows])))
    team_of = {rec.id: rec.team_id for rec in saved}
    pairs = zip(records_set.units, saved, strict=True)
    by_label = {unit.section: rec.team_id for unit, rec in pairs}
    asked = [
        (q.text, v, by_label[q.targets[0][0]])
        for q, v in zip(records_set.queries, queries, strict=True)
    ]
    try:
        yield Records(store, team_of, asked)
    finally:
        engine.dispose()


def test_records_get_vec_and_their_index(team_records: Records) -> None:
    store = team_records.store
    assert store.vectors is not None and "records" in store.vectors.tables
    with store.engine.connect() as conn:
        counts = conn.execute(
            sa.text(
                "SELECT count(*) FILTER (WHERE embedding IS NOT NULL),"
                " count(*) FILTER (WHERE vec IS NOT NULL) FROM records"
            )
        ).one()
        index = Pgvector.index_name("records", MODEL, DIM)
        made = conn.execute(
            sa.text("SELECT indexdef FROM pg_indexes WHERE indexname = :n"), {"n": index}
        ).scalar()
    assert counts[0] == counts[1] == len(team_records.team_of)
    assert made is not None and "USING hnsw" in made


def rank_all(records: Records, min_vectors: int) -> tuple[list[list[str]], int]:
    handle = records.store.vectors
    assert handle is not None
    kept, before = handle.min_vectors, handle.queries
    handle.min_vectors = min_vectors
    search = RecordSearch(StoredQueries.of(records.queries), VectorCache())  # type: ignore[arg-type]
    out = []
    try:
        for text, _, team in records.queries:
            scope = Scope(team, None, None, datetime.now(UTC))
            with records.store.reading() as tx:
                out.append([h.record.id for h in search.rank(tx, scope, text, K)])
    finally:
        handle.min_vectors = kept
    return out, handle.queries - before


def test_record_search_takes_the_hnsw_path_and_finds_what_numpy_finds(
    team_records: Records,
) -> None:
    indexed, hnsw_queries = rank_all(team_records, 0)
    exact, none = rank_all(team_records, 10**9)
    assert hnsw_queries == len(team_records.queries) and none == 0
    same = sum(set(a) == set(b) for a, b in zip(indexed, exact, strict=True))
    assert same / len(team_records.queries) >= 0.95, f"{same} of {len(team_records.queries)}"
    for (_, _, team), hits in zip(team_records.queries, indexed, strict=True):
        assert hits and all(team_records.team_of[i] == team for i in hits)


def test_the_records_query_keeps_to_the_team_and_its_unexpired_records(
    team_records: Records,
) -> None:
    store = team_records.store
    probe = team_records.queries[0][1]
    for team in TEAMS:
        with store.reading() as tx:
            found = tx.nearest_records(Scope(team, None, None, datetime.now(UTC)), MODEL, probe, 50)
            later = Scope(team, None, None, datetime.now(UTC) + timedelta(days=400))
            expired = tx.nearest_records(later, MODEL, probe, 50)
        assert found is not None and len(found) == 50
        assert all(team_records.team_of[i] == team for i, _ in found)
        assert expired == []


def test_the_runtime_hands_one_setup_to_both_stores(pgvector_server: PgvectorServer) -> None:
    config = Config(database_url=pgvector_server.create_database(), hnsw_min_vectors=0)
    runtime = open_runtime(config)
    try:
        handle = pg(runtime.store)
        assert handle.tables == frozenset({"memory_chunks", "records"})
        assert handle.min_vectors == 0 and handle.search
        records_store = runtime.records._store
        assert isinstance(records_store, SqlRecordStore) and records_store.vectors is handle
    finally:
        runtime.close()


def test_search_by_meaning_through_the_runtime_with_minilm(
    pgvector_server: PgvectorServer,
) -> None:
    """End to end with the real model: documents written, embedded by ``keepstone reindex``'s
    code, found by a paraphrase through ``SpaceService.search`` on the HNSW path."""
    config = Config(database_url=pgvector_server.create_database(), hnsw_min_vectors=0, local=True)
    runtime = open_runtime(config)
    try:
        ref = SpaceRef.build(Visibility.PROJECT, "ops", tenant="team-a", project="p1")
        notes = {
            "db.md": "# Database\nThe primary ran out of disk; we moved WAL to a bigger volume.",
            "garden.md": "# Garden\nTomatoes want six hours of sun and deep watering.",
            "deploy.md": "# Deploys\nA canary gets 5 % of traffic before the full rollout.",
        }
        for path, text in notes.items():
            runtime.store.write(ref, path, text + "\n")
        embedder = runtime.embedder.get() if runtime.embedder is not None else None
        assert embedder is not None, "the MiniLM model is a dev dependency (make models)"
        reindex_database(runtime, embedder)
        before = pg(runtime.store).queries
        hits = runtime.spaces.search(LOCAL_PRINCIPAL, ref, "storage filled up on the server")
        assert hits[0].path == "db.md" and "meaning" in hits[0].matched
        assert pg(runtime.store).queries == before + 1
    finally:
        runtime.close()


# --- Where pgvector is not: the plain PostgreSQL, SQLite --------------------------------


@pytest.mark.postgres
def test_a_plain_postgresql_keeps_the_numpy_path(postgres_url: str) -> None:
    store = SqlStore.open(postgres_url, schema=f"t_{uuid.uuid4().hex[:12]}")
    try:
        assert store.pgvector is None
        ref = SpaceRef.build(Visibility.PROJECT, "notes", tenant="team-a", project="p1")
        store.write(ref, "a.md", "# A\nsome words\n")
        store.reconcile(ref)
        rows = store.pending_chunks(10, MODEL)
        assert store.store_embeddings(rows, encode_many(np.eye(len(rows), DIM)), MODEL)
        assert store.nearest_chunks(ref, MODEL, np.eye(1, DIM)[0].astype(np.float32), 5) is None
        with store.engine.connect() as conn:
            columns = sa.inspect(conn).get_columns("memory_chunks")
        assert "vec" not in {c["name"] for c in columns}
    finally:
        store.close()


@pytest.mark.postgres
def test_pgvector_on_refuses_a_postgresql_without_it(postgres_url: str) -> None:
    with pytest.raises(StoreUnavailable) as refused:
        SqlStore.open(postgres_url, pgvector_mode="on")
    message = refused.value.message
    assert "KEEPSTONE_PGVECTOR=on" in message and "install pgvector" in message
    assert "pg_available_extensions" in message


def test_pgvector_on_refuses_sqlite(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="KEEPSTONE_PGVECTOR=on needs PostgreSQL"):
        SqlStore.open(f"sqlite:///{tmp_path / 'keepstone.db'}", pgvector_mode="on")


def test_pgvector_on_starts_where_the_extension_is(pgvector_server: PgvectorServer) -> None:
    store = SqlStore.open(pgvector_server.create_database(), pgvector_mode="on")
    try:
        assert pg(store).search
    finally:
        store.close()


def test_the_settings_are_checked() -> None:
    config = Config.from_env({"KEEPSTONE_PGVECTOR": "ON", "KEEPSTONE_HNSW_MIN_VECTORS": "0"})
    assert (config.pgvector, config.hnsw_min_vectors) == ("on", 0)
    default = Config.from_env({})
    assert (default.pgvector, default.hnsw_min_vectors) == ("auto", pgvector.MIN_VECTORS)
    with pytest.raises(InvalidRequest, match="KEEPSTONE_PGVECTOR='maybe' is not one of auto"):
        Config.from_env({"KEEPSTONE_PGVECTOR": "maybe"})
    with pytest.raises(InvalidRequest, match="KEEPSTONE_HNSW_MIN_VECTORS"):
        Config.from_env({"KEEPSTONE_HNSW_MIN_VECTORS": "-5"})
