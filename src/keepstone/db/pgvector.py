"""The dense side on PostgreSQL with pgvector: a ``vec`` column and HNSW indexes
(docs/search.md, "pgvector").

Vectors stay ``keepstone.db.vectors`` blobs in ``embedding`` on every engine; where the
``vector`` extension is there, a table that holds them (``memory_chunks``; ``records``)
also gets ``vec vector`` — no fixed dimension, so vectors of several models share it —
written by the same statement as the blob, and one partial HNSW index per (model,
dimension), pgvector's documented way to index mixed dimensions::

    CREATE INDEX memory_chunks_vec_<hash of model>_384 ON memory_chunks
        USING hnsw ((vec::vector(384)) vector_cosine_ops)
        WHERE model = 'all-MiniLM-L6-v2' AND vector_dims(vec) = 384

A scope's nearest rows are then one indexed statement (:meth:`Pgvector.nearest`):
``WHERE <scope> AND <the index's predicate> ORDER BY vec::vector(384) <=> :q LIMIT k``
with ``hnsw.iterative_scan = relaxed_order`` (pgvector 0.8), so the scan goes on past
``ef_search`` candidates while the scope's condition filters most of them out.

Detection (:func:`setup`, every time a store is built, not a recorded migration: the
extension may be installed, or ``KEEPSTONE_PGVECTOR`` changed, after the migrations ran):
under an advisory lock (:data:`SETUP_LOCK`), ``CREATE EXTENSION IF NOT EXISTS vector``
only when ``pg_available_extensions`` lists it (``auto`` and ``on``), then ``ADD COLUMN vec`` where
it is missing, and ``vec`` filled from the blobs of rows that have none (a replica of an
older version, or a store built without the handle, may have written some). A plain
PostgreSQL, or a role that may not create the extension, leaves everything as it was
(``auto``) or refuses to start (``on``). Once the column exists, every store given the
handle keeps it in step, ``off`` included (``off`` only never queries it); a vector
crosses as its text literal (``'[x1,x2,...]'``, nine significant digits: exact for
float32), so no ``pgvector`` Python package is needed.

Indexes are built ``CONCURRENTLY``, outside any transaction, never inside a write: a
plain ``CREATE INDEX`` takes a lock that stops writers for the whole build, and taken
inside a claim holding row locks it could wait on a writer that waits on the claim. A
store builds the index of a model after its vectors commit, and setup for every model
it finds (:meth:`Pgvector.ensure_index`, one process at a time); a search only checks
that it is there, and without it the query is still right (the scope's rows filtered
and sorted), only slower.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from keepstone.db.engine import read_transaction, write_transaction
from keepstone.db.vectors import Blob, decode_many
from keepstone.errors import InvalidRequest, StoreUnavailable

log = logging.getLogger(__name__)

Mode = Literal["auto", "on", "off"]
MODES: Final = ("auto", "on", "off")
#: The tables whose ``embedding`` blobs get a ``vec`` column beside them.
TABLES: Final = ("memory_chunks", "records")
#: ``hnsw.ef_search`` of a query (raised to the k asked for): the candidate list the
#: graph search keeps. On the product's path it finds nearly all of the true top 50 (what
#: a search asks for), and a longer list buys little recall for much more time
#: (bench/bench_pgvector.py, clustered vectors).
EF_SEARCH: Final = 64
#: A scope with fewer vectors of the model than this keeps the cached numpy path: exact,
#: and faster below about this size, where the two paths' latencies cross
#: (bench/bench_pgvector.py).
MIN_VECTORS: Final = 30_000
#: Serialises setup and index builds across processes (keepstone.db.migrations: 872361).
SETUP_LOCK: Final = 872363
#: Rows whose ``vec`` a backfill statement fills at a time.
BACKFILL_BATCH: Final = 500


def check_mode(mode: str, setting: str = "KEEPSTONE_PGVECTOR") -> Mode:
    """``mode`` if it is ``auto``, ``on`` or ``off``; else the error naming ``setting``."""
    if mode == "auto":
        return "auto"
    if mode == "on":
        return "on"
    if mode == "off":
        return "off"
    raise InvalidRequest(f"{setting}={mode!r} is not one of auto, on, off", field=setting)


def vector_literal(vector: npt.NDArray[np.float32]) -> str:
    """pgvector's text form of ``vector``; ``%.9g`` round-trips every float32 exactly."""
    return "[" + ",".join(f"{x:.9g}" for x in vector.tolist()) + "]"


def blob_values(blobs: Sequence[Blob]) -> list[tuple[str, int]]:
    """Each blob's ``vec`` value (the text literal of the vector it decodes to) and
    dimension."""
    if not blobs:
        return []
    out = []
    for blob in blobs:  # one by one: blobs of one batch may differ in dimension
        vector = decode_many([blob])[0]
        out.append((vector_literal(vector), len(vector)))
    return out


class Vector(sa.types.UserDefinedType[str]):
    """pgvector's ``vector`` of any dimension (``type_name``: the extension's, qualified
    by its schema), bound as its text literal."""

    cache_ok = True

    def __init__(self, type_name: str = "vector") -> None:
        self.type_name = type_name

    def get_col_spec(self, **kw: Any) -> str:
        return self.type_name


@dataclass(frozen=True, slots=True)
class VectorRows:
    """The rows of ``table`` a vector query may see: those where ``where`` holds (SQL over
    ``params``, the caller's: it is what isolates one tenant's rows; ``alias`` names the
    table in it), each named by its ``key`` columns."""

    table: str
    key: tuple[str, ...]
    where: str
    params: Mapping[str, Any]
    alias: str = ""


@dataclass(frozen=True, slots=True)
class Nearest:
    """One row found by :meth:`Pgvector.nearest`: the scope's key columns and the cosine."""

    key: tuple[Any, ...]
    cosine: float


class Pgvector:
    """What one process knows of pgvector in its database (built by :func:`setup`).

    ``tables`` carry ``vec`` and every writer of them sets it; ``search`` says whether
    queries use it (False under ``KEEPSTONE_PGVECTOR=off``). ``min_vectors`` is the scope
    size from which the ranking takes :meth:`nearest` over exact numpy (the choice is
    :func:`keepstone.search.hybrid.dense_side`'s); ``queries`` counts the HNSW queries run
    (tests read it to see which path a search took).
    """

    def __init__(
        self,
        engine: Engine,
        schema: str,
        tables: frozenset[str],
        *,
        search: bool,
        min_vectors: int = MIN_VECTORS,
        ef_search: int = EF_SEARCH,
    ) -> None:
        self.engine = engine
        self.tables = tables
        self.search = search
        self.min_vectors = min_vectors
        self.ef_search = ef_search
        self.queries = 0
        # The extension's objects, qualified by its schema: a store may run with its own
        # schema alone on the search_path while the extension lives in another.
        self._type = _qualified(schema)
        quoted = self._type.removesuffix(".vector")
        self._distance = f"OPERATOR({quoted}.<=>)"
        self._opclass = f"{quoted}.vector_cosine_ops"
        self._indexed: set[str] = set()
        self._lock = threading.Lock()

    def with_vec(self, table: sa.Table) -> sa.Table:
        """``table`` with its ``vec`` column, for a statement that sets it (a copy in a
        metadata of its own, which nothing ever creates)."""
        copy = table.to_metadata(sa.MetaData())
        copy.append_column(sa.Column("vec", Vector(self._type), nullable=True))
        return copy

    @staticmethod
    def vec_values(blobs: Sequence[Blob]) -> list[tuple[str, int]]:
        """Each blob's ``vec`` value and dimension (:func:`blob_values`)."""
        return blob_values(blobs)

    def vec_param(self, name: str = "vec") -> sa.Cast[str]:
        """``CAST(:name AS vector)``: the text literal bound as ``name`` made a vector."""
        return sa.cast(sa.bindparam(name, type_=sa.Text), Vector(self._type))

    # --- Indexes --------------------------------------------------------------------------

    def _model_literal(self, model: str) -> str:
        # The partial index's predicate must be written out in the query for the planner
        # to match it (a bound parameter would not prove it under a generic plan), so
        # the model is a literal, quoted by the dialect (which knows the server's
        # standard_conforming_strings).
        if "\x00" in model:
            raise InvalidRequest("a model name may not contain NUL", field="model")
        literal = sa.literal(model, sa.Text).compile(
            dialect=self.engine.dialect, compile_kwargs={"literal_binds": True}
        )
        return str(literal)

    def _predicate(self, model: str, dim: int) -> str:
        return f"model = {self._model_literal(model)} AND vector_dims(vec) = {int(dim)}"

    @staticmethod
    def index_name(table: str, model: str, dim: int) -> str:
        """``<table>_vec_<10 hex digits of the model's hash>_<dim>`` (within 63 bytes)."""
        digest = hashlib.sha256(model.encode("utf-8")).hexdigest()[:10]
        return f"{table}_vec_{digest}_{int(dim)}"

    def ensure_index(self, table: str, model: str, dim: int, *, create: bool = True) -> bool:
        """Whether the HNSW index of ``model``'s ``dim``-dimension vectors in ``table`` is
        there, making it first when it is not and ``create``: ``CREATE INDEX
        CONCURRENTLY`` (writers go on meanwhile) outside any transaction, one process at
        a time (a try-lock: the others answer False and try again later), replacing an
        invalid one a failed build left behind. False: not there now (a search then
        filters and sorts the scope's rows itself: exact, slower)."""
        name = self.index_name(table, model, dim)
        if name in self._indexed:
            return True
        expression = f"(vec::{self._type}({int(dim)}))"
        ddl = (
            f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{name}" ON {table} USING hnsw'
            f" ({expression} {self._opclass}) WHERE {self._predicate(model, dim)}"
        )
        valid = sa.text("SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(:n)")
        try:
            with self.engine.connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                state = conn.execute(valid, {"n": name}).scalar()
                if state is not True and create:
                    state = self._build(conn, name, ddl, valid)
        except (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.DBAPIError) as exc:
            log.warning("pgvector: the index %s is not there yet (%s)", name, _first_line(exc))
            return False
        if state is not True:
            return False
        with self._lock:
            self._indexed.add(name)
        return True

    def _build(self, conn: Connection, name: str, ddl: str, valid: sa.TextClause) -> bool:
        lock = {"key": SETUP_LOCK}
        if not conn.execute(sa.text("SELECT pg_try_advisory_lock(:key)"), lock).scalar():
            return False  # another process is building (or setting up) right now
        try:
            state = conn.execute(valid, {"n": name}).scalar()
            if state is False:  # left invalid by a build that failed
                conn.execute(sa.text(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"'))
            if state is not True:
                conn.execute(sa.text(ddl))
                log.info("pgvector: created the HNSW index %s", name)
            return conn.execute(valid, {"n": name}).scalar() is True
        finally:
            conn.execute(sa.text("SELECT pg_advisory_unlock(:key)"), lock)

    # --- Queries --------------------------------------------------------------------------

    def _select(self, rows: VectorRows, model: str, dim: int) -> tuple[str, str]:
        """``SELECT <key>, <distance to :knn_query> AS distance … WHERE <scope> AND <the
        index's predicate>``, and that distance expression."""
        vector = f"{self._type}({dim})"
        distance = f"vec::{vector} {self._distance} CAST(:knn_query AS {vector})"
        select = (
            f"SELECT {', '.join(rows.key)}, {distance} AS distance FROM {rows.table} {rows.alias}"
            f" WHERE ({rows.where}) AND {self._predicate(model, dim)}"
        )
        return select, distance

    def _knn(self, rows: VectorRows, model: str, dim: int) -> str:
        select, distance = self._select(rows, model, dim)
        return f"{select} ORDER BY {distance} LIMIT :knn_limit"

    def _found(
        self,
        sql: str,
        bound: Mapping[str, Any],
        width: int,
        conn: Connection | None,
        k: int | None = None,
    ) -> list[Nearest]:
        """The rows of ``sql`` (``width`` key columns, then ``distance``) as cosines, in
        ``conn``'s transaction or a read transaction of its own; ``k``: an HNSW query,
        configured for ``k`` results first."""

        def run(c: Connection) -> list[Any]:
            if k is not None:
                self._configure(c, k)
            return list(c.execute(sa.text(sql), bound).all())

        if conn is not None:
            rows = run(conn)
        else:
            with read_transaction(self.engine) as own:
                rows = run(own)
        return [Nearest(tuple(r[:width]), 1.0 - float(r.distance)) for r in rows]

    def nearest(
        self,
        rows: VectorRows,
        model: str,
        query: npt.NDArray[np.float32],
        k: int,
        *,
        conn: Connection | None = None,
    ) -> list[Nearest]:
        """The ``k`` of ``rows`` made by ``model`` that are nearest to ``query`` by cosine,
        best first, as their key columns and cosine.

        The statement runs in ``conn``'s
        transaction (the caller's search), or a read transaction of its own, with
        ``hnsw.ef_search`` and ``hnsw.iterative_scan = relaxed_order`` set for that
        transaction; relaxed order may hand rows back slightly out of order, so they are
        sorted here.
        """
        if k <= 0:
            return []
        dim = len(query)
        # Never built here: a search must not wait on a build. The stores build it after
        # they store vectors, and setup after it starts.
        self.ensure_index(rows.table, model, dim, create=False)
        sql = self._knn(rows, model, dim)
        bound = {**rows.params, "knn_query": vector_literal(query), "knn_limit": k}
        found = self._found(sql, bound, len(rows.key), conn, k)
        with self._lock:
            self.queries += 1
        found.sort(key=lambda n: -n.cosine)
        return found

    def similarity(
        self,
        rows: VectorRows,
        model: str,
        query: npt.NDArray[np.float32],
        keys: Sequence[tuple[Any, ...]],
        *,
        conn: Connection | None = None,
    ) -> list[Nearest]:
        """The cosine to ``query`` of the ``rows`` named by ``keys`` (values of their key
        columns) that ``model`` embedded, exactly (no
        index: a handful of rows by key). A search scores its keyword candidates on the
        dense side with it (:func:`keepstone.search.hybrid.complete`)."""
        if not keys:
            return []
        bound: dict[str, Any] = {**rows.params, "knn_query": vector_literal(query)}
        tuples = []
        for i, values in enumerate(keys):
            names = []
            for j, value in enumerate(values):
                bound[f"sim_{i}_{j}"] = value
                names.append(f":sim_{i}_{j}")
            tuples.append(f"({', '.join(names)})")
        select, _ = self._select(rows, model, len(query))
        sql = f"{select} AND ({', '.join(rows.key)}) IN ({', '.join(tuples)})"
        return self._found(sql, bound, len(rows.key), conn)

    def explain(self, rows: VectorRows, model: str, query: npt.NDArray[np.float32], k: int) -> str:
        """The plan PostgreSQL chooses for :meth:`nearest` with the same arguments (tests
        and benchmarks check that it scans the HNSW index)."""
        sql = sa.text("EXPLAIN " + self._knn(rows, model, len(query)))
        with read_transaction(self.engine) as conn:
            self._configure(conn, k)
            bound = {**rows.params, "knn_query": vector_literal(query), "knn_limit": k}
            lines = conn.execute(sql, bound).scalars()
            return "\n".join(lines)

    def _configure(self, conn: Connection, k: int) -> None:
        conn.execute(
            sa.text(
                "SELECT set_config('hnsw.ef_search', :ef, true),"
                " set_config('hnsw.iterative_scan', 'relaxed_order', true)"
            ),
            {"ef": str(max(self.ef_search, k))},
        )


# --- Detection and setup ------------------------------------------------------------------


def setup(
    engine: Engine,
    mode: str = "auto",
    *,
    min_vectors: int = MIN_VECTORS,
    ef_search: int = EF_SEARCH,
) -> Pgvector | None:
    """Find (and, where allowed, create) pgvector in ``engine``'s database and give every
    table of :data:`TABLES` that exists its ``vec`` column; None when there is no
    pgvector to use (SQLite; a plain PostgreSQL; ``off`` before any column exists).

    ``mode`` ``on`` refuses a database without it (:class:`StoreUnavailable` saying
    what to install); ``auto`` goes on without it; ``off`` creates nothing, and returns
    a handle only to keep an existing ``vec`` column written.
    """
    checked = check_mode(mode)
    if engine.dialect.name != "postgresql":
        if checked == "on":
            raise StoreUnavailable(
                "KEEPSTONE_PGVECTOR=on needs PostgreSQL with the pgvector extension, and this "
                "database is SQLite: set KEEPSTONE_PGVECTOR=auto (or off), or use PostgreSQL"
            )
        return None
    prepared = _prepare_tables(engine, checked)
    if prepared is None:
        return None
    schema, models = prepared
    handle = Pgvector(
        engine,
        schema,
        frozenset(models),
        search=checked != "off",
        min_vectors=min_vectors,
        ef_search=ef_search,
    )
    for table, pairs in models.items():
        for model, dim in pairs:
            handle.ensure_index(table, model, dim)
    return handle


def _prepare_tables(
    engine: Engine, mode: Mode
) -> tuple[str, dict[str, list[tuple[str, int]]]] | None:
    """In one transaction under :data:`SETUP_LOCK`: the extension (created unless
    ``mode`` is ``off``), then the ``vec`` column of every table of :data:`TABLES`
    (:func:`_with_vec_column`). The extension's schema and, for each table that has the
    column, its vectors' (model, dimension) pairs; None when there is no pgvector to use."""
    with write_transaction(engine) as conn:
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": SETUP_LOCK})
        schema, problem = _extension(conn, create=mode != "off")
        if schema is None:
            _without_extension(mode, problem)
            return None
        tables = [table for table in TABLES if _with_vec_column(conn, table, schema, mode)]
        models = {table: _models(conn, table) for table in tables}
    return (schema, models) if models else None


def _without_extension(mode: Mode, problem: str) -> None:
    """No vector extension to use (``problem`` says why): ``on`` refuses to start,
    ``auto`` says so and goes on, ``off`` asked for none."""
    if mode == "on":
        raise StoreUnavailable(
            f"KEEPSTONE_PGVECTOR=on but {problem}: install pgvector on the PostgreSQL "
            "server (docs/deploy.md, 'pgvector') or set KEEPSTONE_PGVECTOR=auto"
        )
    if mode == "auto":
        log.info("pgvector: not used, %s; the dense side is exact numpy", problem)


def _with_vec_column(conn: Connection, table: str, schema: str, mode: Mode) -> bool:
    """Whether ``table`` carries ``vec`` once this returns: added where it is missing
    (not under ``off``), and filled from the blobs of rows that have none. False for a
    table not created yet (a store built before the migrations), or without ``vec``
    under ``off``."""
    columns = _columns(conn, table)
    if not {"embedding", "model"} <= columns:
        return False
    if "vec" not in columns:
        if mode == "off":
            return False
        conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN vec {_qualified(schema)}"))
        # Inline, not TOASTed (pgvector's default): a row holds its text and blob
        # too, and a vector moved out of line costs a TOAST fetch per distance.
        conn.execute(sa.text(f"ALTER TABLE {table} ALTER COLUMN vec SET STORAGE MAIN"))
    # Rows with a blob and no vec (written before the column, or by an older
    # replica): a small partial index finds them without scanning the table.
    conn.execute(
        sa.text(
            f"CREATE INDEX IF NOT EXISTS {table}_vec_missing ON {table} (model)"
            " WHERE embedding IS NOT NULL AND vec IS NULL"
        )
    )
    filled = _backfill(conn, table, _qualified(schema))
    if filled:
        log.info("pgvector: filled vec of %d rows of %s from their blobs", filled, table)
    return True


def _extension(conn: Connection, *, create: bool) -> tuple[str | None, str]:
    """(schema of the installed extension, or None and why it is not there)."""
    schema = _installed(conn)
    if schema is not None or not create:
        return schema, "the vector extension is not installed in this database"
    listed = conn.execute(
        sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    ).first()
    if listed is None:
        return None, "the PostgreSQL server has no pgvector (pg_available_extensions)"
    try:
        with conn.begin_nested():
            conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS vector"))
    except sa.exc.DBAPIError as exc:
        return None, f"CREATE EXTENSION vector was refused ({_first_line(exc)})"
    return _installed(conn), "the vector extension could not be created"


def _installed(conn: Connection) -> str | None:
    return conn.execute(
        sa.text(
            "SELECT n.nspname FROM pg_extension e"
            " JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
        )
    ).scalar()


def _columns(conn: Connection, table: str) -> set[str]:
    rows = conn.execute(
        sa.text(
            "SELECT attname FROM pg_attribute"
            " WHERE attrelid = to_regclass(:t) AND attnum > 0 AND NOT attisdropped"
        ),
        {"t": table},
    )
    return set(rows.scalars())


def _qualified(schema: str) -> str:
    return '"' + schema.replace('"', '""') + '".vector'


def _backfill(conn: Connection, table: str, vector: str) -> int:
    """Fill ``vec`` from ``embedding`` where it is missing; return the rows filled."""
    select = sa.text(
        f"SELECT ctid::text AS row, embedding FROM {table}"
        f" WHERE embedding IS NOT NULL AND vec IS NULL LIMIT {BACKFILL_BATCH} FOR UPDATE"
    )
    update = sa.text(
        f"UPDATE {table} SET vec = CAST(:vec AS {vector}) WHERE ctid = CAST(:row AS tid)"
    )
    filled = 0
    while True:
        rows = conn.execute(select).all()
        if not rows:
            return filled
        values = blob_values([bytes(r.embedding) for r in rows])
        conn.execute(
            update, [{"row": r.row, "vec": v} for r, (v, _) in zip(rows, values, strict=True)]
        )
        filled += len(rows)


def _models(conn: Connection, table: str) -> list[tuple[str, int]]:
    """The (model, dimension) pairs of ``table``'s vectors: the models from the ``model``
    index, a dimension from one row of each."""
    models = conn.execute(
        sa.text(f"SELECT DISTINCT model FROM {table} WHERE model IS NOT NULL")
    ).scalars()
    dim = sa.text(
        f"SELECT vector_dims(vec) FROM {table} WHERE model = :m AND vec IS NOT NULL LIMIT 1"
    )
    out = []
    for model in list(models):
        found = conn.execute(dim, {"m": model}).scalar()
        if found is not None:
            out.append((str(model), int(found)))
    return out


def _first_line(exc: BaseException) -> str:
    cause = getattr(exc, "orig", None) or exc.__cause__ or exc
    return str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__


__all__ = [
    "EF_SEARCH",
    "MIN_VECTORS",
    "MODES",
    "Mode",
    "Nearest",
    "Pgvector",
    "blob_values",
    "check_mode",
    "setup",
    "vector_literal",
]
