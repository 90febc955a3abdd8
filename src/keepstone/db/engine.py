"""Engines and transactions: the SQL plumbing every SQL-backed part of Keepstone shares.

* :func:`make_engine` turns ``sqlite:///path`` or ``postgresql://...`` into a
  SQLAlchemy engine (pysqlite in WAL mode; psycopg 3 with a connection pool).
* :func:`write_transaction` / :func:`read_transaction` open a transaction; on SQLite
  a write transaction is ``BEGIN IMMEDIATE``, taken in the writers' turn
  (:mod:`keepstone.db.durability`), so concurrent writers queue instead of failing at
  commit; :func:`read_statements` reads without a transaction of its own on PostgreSQL
  (one round trip per statement).
* :func:`translated_errors`: driver failures surface as ``StoreUnavailable`` (and a NUL
  PostgreSQL refuses as ``InvalidRequest``).
* :class:`PointRead` and :func:`on_pooled`: the statements of every request's path, run on
  a pooled driver connection without SQLAlchemy's per-statement work.
* :func:`claim_rows`: rows claimed to work on outside the database (embedding them),
  the same way for every index.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import sqlite3
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Dialect, Engine

from keepstone.db.durability import SqliteWriters, made_durable, sqlite_writers
from keepstone.db.files import DISK_FULL_MESSAGE, enter_wal, is_disk_full
from keepstone.errors import (
    DATABASE_AWAY,
    DatabaseMissing,
    InsufficientStorage,
    InvalidRequest,
    StoreUnavailable,
)

T = TypeVar("T")


def utcnow() -> datetime:
    return datetime.now(UTC)


def utc(value: datetime) -> datetime:
    """``value`` as aware UTC (SQLite hands back naive datetimes; every stored time is UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def normalize_url(url: str) -> str:
    """Accept ``sqlite:///path`` and ``postgresql://...``; pick the psycopg 3 driver."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        return "postgresql+psycopg://" + url[len("postgresql://") :]
    if url.startswith(("postgresql+psycopg://", "sqlite://")):
        return url
    raise InvalidRequest(
        f"unsupported database URL {url.split(':', 1)[0]!r}; "
        "use sqlite:///path/to/keepstone.db or postgresql://user@host/db"
    )


_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def validate_schema_name(schema: str) -> str:
    """A PostgreSQL schema name Keepstone will put on a search_path: ``[a-z_][a-z0-9_]*``."""
    if not _SCHEMA_NAME.match(schema):
        raise InvalidRequest(
            f"schema {schema!r} is not a plain identifier; use lowercase letters, digits "
            "and '_' (at most 63 characters, not starting with a digit)"
        )
    return schema


def sqlite_path(url: str) -> str | None:
    """The file of a ``sqlite:///path`` URL, absolute; None for PostgreSQL or ``:memory:``."""
    url = normalize_url(url)
    if not url.startswith("sqlite"):
        return None
    path = sa.engine.make_url(url).database
    return os.path.abspath(path) if path and path != ":memory:" else None


def make_engine(url: str, *, pool_size: int = 10, schema: str | None = None) -> Engine:
    """An engine for ``url``, configured for Keepstone's transaction discipline.

    Every engine hides its statements' parameters from errors and logs (they carry
    password hashes, key hashes, document text, emails).

    ``schema`` (PostgreSQL only; ignored for SQLite, which has no schemas) puts every
    connection's ``search_path`` on that schema, so one database can hold several
    independent Keepstone schemas (tests use a fresh one each). It does not create it.
    """
    url = normalize_url(url)
    _rows_never_logged()
    if url.startswith("sqlite"):
        path = sa.engine.make_url(url).database
        if path and path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
        engine = sa.create_engine(
            url,
            connect_args={"timeout": 60, "check_same_thread": False},
            pool_pre_ping=False,
            hide_parameters=True,
        )
        _configure_sqlite(engine)
        return engine
    try:
        import psycopg  # noqa: F401  (the dialect imports it when it first connects)
    except ImportError:
        raise InvalidRequest(
            "a PostgreSQL database needs the postgres extra: pip install 'keepstone[postgres]'"
        ) from None
    connect_args: dict[str, Any] = {}
    if schema is not None:
        connect_args["options"] = f"-csearch_path={validate_schema_name(schema)}"
    engine = sa.create_engine(
        url,
        connect_args=connect_args,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=False,
        pool_recycle=1800,
        pool_timeout=30,
        # A failing statement's error (and SQLAlchemy's echo) never shows its values: they
        # hold password and key hashes, document text and emails.
        hide_parameters=True,
    )
    event.listen(engine, "handle_error", _missing_database)
    return engine


class _NoRows(logging.Filter):
    """Drops SQLAlchemy's ``Row %r`` lines: at DEBUG it logs every row it reads, and rows
    hold password hashes, key hashes, document text and emails."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != "Row %r"


def _rows_never_logged() -> None:
    engines = logging.getLogger("sqlalchemy.engine.Engine")
    if not any(isinstance(f, _NoRows) for f in engines.filters):
        engines.addFilter(_NoRows())


_MISSING_DATABASE = re.compile(r'database "([^"]+)" does not exist')


def _missing_database(context: sa.engine.ExceptionContext) -> BaseException | None:
    """A PostgreSQL connection refused because its database does not exist tells the
    operator so, with the command that creates it, instead of "cannot be reached"
    (retrying cannot help); a caller of the API still hears the outage's message."""
    found = _MISSING_DATABASE.search(str(context.original_exception))
    if found is None or context.engine is None:
        return None
    url = context.engine.url
    flags = [
        f"-h {url.host}" if url.host else "",
        f"-p {url.port}" if url.port else "",
        f"-U {url.username}" if url.username else "",
    ]
    command = " ".join(["createdb", *filter(None, flags), shlex.quote(found[1])])
    return DatabaseMissing(f'database "{found[1]}" does not exist; create it with: {command}')


#: How long a SQLite connection waits for another's lock (seconds).
_BUSY_SECONDS = 60.0


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take transaction control away from pysqlite so BEGIN IMMEDIATE is ours to send.
        dbapi_conn.isolation_level = None
        try:
            enter_wal(dbapi_conn, _BUSY_SECONDS)
        except sqlite3.OperationalError:  # a lock held past the wait: the file is sound
            raise
        except sqlite3.DatabaseError as exc:  # the first read of the file's header
            raise InvalidRequest(
                f"{engine.url.database} is not a SQLite database ({exc}); choose another --database"
            ) from None
        # A commit writes the WAL without syncing it; a durable write then syncs it once,
        # outside the writers' turn, shared with its concurrent writers (WalSync).
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute(f"PRAGMA busy_timeout={_BUSY_SECONDS * 1000:.0f}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Sent on the driver itself: SQLAlchemy's execution of this one statement through
        # exec_driver_sql is a share of every document write (docs/performance.md).
        begin = "BEGIN IMMEDIATE" if begins_immediate(conn) else "BEGIN DEFERRED"
        try:
            conn.connection.dbapi_connection.execute(begin)  # type: ignore[union-attr]
        except sqlite3.Error as exc:
            raise as_sqlalchemy(exc, begin, conn.dialect) from exc


#: Set in ``Connection.info`` for the one ``begin()`` of :func:`begin_immediate`: an
#: execution option would do the same, at the cost of a copy of the Connection a write.
_IMMEDIATE = "keepstone.begin_immediate"


def begins_immediate(conn: Connection) -> bool:
    """In a ``begin`` listener of a SQLite engine: whether the transaction ``conn`` begins
    is :func:`begin_immediate`'s (a write's)."""
    return bool(conn.info.get(_IMMEDIATE))


def begin_immediate(conn: Connection) -> sa.RootTransaction:
    """``conn.begin()``, sent as ``BEGIN IMMEDIATE`` on SQLite: the transaction takes the
    database's write lock now, not at its first write (a deferred one that read first
    could not take it then without failing). A plain ``begin()`` on PostgreSQL."""
    if conn.dialect.name != "sqlite":
        return conn.begin()
    conn.info[_IMMEDIATE] = True
    try:
        return conn.begin()
    finally:
        del conn.info[_IMMEDIATE]


@contextlib.contextmanager
def write_transaction(engine: Engine, *, durable: bool = True) -> Iterator[Connection]:
    """A transaction that will write: ``BEGIN IMMEDIATE`` on SQLite.

    ``durable`` (the default): the commit is on disk before the block returns, so what a
    caller is told was written survives a power loss, not only a killed process:
    PostgreSQL's commit always is; on SQLite the WAL is synced after the commit, outside
    the writers' turn (:class:`~keepstone.db.durability.WalSync`). Documents, records,
    settings, users and keys all commit so: a revoked key or an acknowledged
    ``MEMORY.md`` never comes back changed after a crash of the machine.

    ``durable=False``: for what is made again from durable data when lost (search chunks
    and vectors, a purge's pass). On SQLite its commit is not synced (durable against a
    killed process; a power loss may take it back, never corrupt the database). The WAL
    is sequential, so the next durable commit makes it durable too.
    """
    with translated_errors():
        if engine.dialect.name == "sqlite":
            with sqlite_writers(engine) as turn, _in_turn(engine, turn) as conn:
                with begin_immediate(conn):
                    yield conn
            if durable:
                made_durable(engine)
        else:
            with engine.begin() as conn:
                wait = _LOCK_WAIT.get()
                if wait is not None:
                    conn.exec_driver_sql(f"SET LOCAL lock_timeout = {wait}")
                yield conn


#: The lock wait, in milliseconds, of the PostgreSQL write transactions begun in a block of
#: :func:`lock_waits_at_most` (None: PostgreSQL's own, no bound).
_LOCK_WAIT: ContextVar[int | None] = ContextVar("keepstone_lock_wait", default=None)


@contextlib.contextmanager
def lock_waits_at_most(seconds: float) -> Iterator[None]:
    """Every PostgreSQL write transaction this thread begins in the block waits at most
    ``seconds`` for a lock, then fails (StoreUnavailable) rather than wait on: for work
    done while the caller holds locks in another transaction, which a cycle of waits
    through the caller's thread would otherwise stop for good (PostgreSQL sees a cycle
    only among waiting transactions). SQLite's writers take turns: no effect there."""
    token = _LOCK_WAIT.set(max(1, round(seconds * 1000)))
    try:
        yield
    finally:
        _LOCK_WAIT.reset(token)


@contextlib.contextmanager
def _in_turn(engine: Engine, turn: SqliteWriters) -> Iterator[Connection]:
    """A connection for a write transaction in the writers' turn of ``engine``'s SQLite
    database: the turn's shared one (left open for the next writer), else one from the
    pool."""
    shared = turn.shared_connection(lambda: _out_of_pool(engine))
    if shared is None:
        with engine.connect() as conn:
            yield conn
        return
    try:
        yield shared
    finally:
        turn.after_shared_use()


def _out_of_pool(engine: Engine) -> Connection:
    """A connection of ``engine`` that its pool neither counts nor hands out again, and that
    ``close`` closes: it has no finalizer either, which would warn when an engine never
    disposed is collected with it."""
    conn = engine.connect()
    conn.detach()
    return conn


@contextlib.contextmanager
def read_transaction(engine: Engine) -> Iterator[Connection]:
    with translated_errors(), engine.connect() as conn, conn.begin():
        yield conn


@contextlib.contextmanager
def read_statements(engine: Engine) -> Iterator[Connection]:
    """Reads that need no transaction of their own: on PostgreSQL each statement runs in
    autocommit, since at READ COMMITTED every statement of a transaction takes its own
    snapshot anyway, and BEGIN and COMMIT would only add two round trips to each read
    (docs/performance.md). On SQLite a read transaction, which is in-process and keeps one
    snapshot across the statements. Not for reads that rely on a transaction: ``SET
    LOCAL``/``set_config(..., true)``, ``FOR UPDATE``, server-side cursors."""
    if engine.dialect.name != "postgresql":
        with read_transaction(engine) as conn:
            yield conn
        return
    with translated_errors(), engine.connect() as conn:
        yield conn.execution_options(isolation_level="AUTOCOMMIT")


def as_sqlalchemy(
    exc: Exception, what: str, dialect: Dialect, *, invalidated: bool = False
) -> sa.exc.StatementError:
    """A driver's error as SQLAlchemy's (which :func:`translated_errors` translates), for
    statements run on the driver itself: ``what`` names the statement, never its
    parameters."""
    return sa.exc.DBAPIError.instance(
        what,
        None,
        exc,
        dialect.loaded_dbapi.Error,
        hide_parameters=True,
        connection_invalidated=invalidated,
        dialect=dialect,
    )


@contextlib.contextmanager
def driver_cursor(conn: Connection, what: str) -> Iterator[Any]:
    """A cursor of ``conn``'s own driver connection, in its transaction: statements sent
    as they are, without SQLAlchemy's per-statement work; closed after, and a driver
    error raised as SQLAlchemy's (:func:`as_sqlalchemy`)."""
    dbapi: Any = conn.dialect.loaded_dbapi
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        yield cursor
    except dbapi.Error as exc:
        raise as_sqlalchemy(exc, what, conn.dialect) from exc
    finally:
        cursor.close()


def on_pooled(engine: Engine, work: Callable[[Any], T], *, what: str = "statement") -> T:
    """``work(driver_connection)`` on a pooled DBAPI connection, in autocommit, without
    SQLAlchemy's ``Connection``: its checkout, events, transaction and reset on return cost
    about as much CPU as a point read or a one-statement write itself (docs/performance.md).

    SQLite's connections are always in autocommit (Keepstone sends its own ``BEGIN``), so a
    statement is its own transaction. On PostgreSQL the connection is switched to
    autocommit for ``work`` and back (a client-side switch: psycopg sends nothing), or
    invalidated when it cannot be switched back (a broken connection); in a transaction
    the pool would roll it back on return, and psycopg drops every prepared statement of
    the connection at a rollback. A driver error is raised as SQLAlchemy's (``what`` names
    the statement, never its parameters), which :func:`translated_errors` translates."""
    dbapi: Any = engine.dialect.loaded_dbapi
    try:
        # The pool hands the driver's own error out when it cannot connect (SQLAlchemy's
        # Connection would wrap it); wrapped here, so it is translated as any other.
        pooled = engine.raw_connection()
    except dbapi.Error as exc:
        raise as_sqlalchemy(exc, "connect", engine.dialect, invalidated=True) from exc
    try:
        driver: Any = pooled.dbapi_connection
        postgres = engine.dialect.name == "postgresql"
        if postgres:
            driver.autocommit = True
        try:
            return work(driver)
        except dbapi.Error as exc:
            gone = engine.dialect.is_disconnect(exc, driver, None)
            if gone:  # never handed out again, as SQLAlchemy's Connection would do
                pooled.invalidate(exc)
            raise as_sqlalchemy(exc, what, engine.dialect, invalidated=gone) from exc
        finally:
            if postgres and pooled.is_valid:
                try:
                    driver.autocommit = False
                except Exception:
                    pooled.invalidate()
    finally:
        pooled.close()


@dataclass(frozen=True, slots=True)
class _CompiledRead:
    sql: str
    #: Parameter names in the statement's order (qmark/numeric), or None (named).
    order: tuple[str, ...] | None
    binds: dict[str, Callable[[Any], Any]]
    #: The values of the statement's own parameters (literals it was built with).
    fixed: dict[str, Any]
    results: tuple[Callable[[Any], Any] | None, ...]
    row: Callable[..., Any]


class PointRead:
    """One ``SELECT`` of every request's path (a credential's row, a document, a listing),
    compiled once per dialect and run by :func:`on_pooled`: the statement's text, its
    parameters bound and its columns processed by the column types as SQLAlchemy would (a
    SQLite timestamp is parsed, a boolean made one), each row answered as a named tuple.

    One statement is one snapshot on either engine. Not for statements that take lists
    (``IN`` expanded at execution) or that need a transaction."""

    def __init__(self, stmt: sa.Select[Any]) -> None:
        self.stmt = stmt
        self._compiled: dict[str, _CompiledRead] = {}

    def first(self, engine: Engine, params: dict[str, Any]) -> Any | None:
        """The statement's first row for ``params`` (by bind name), or None."""
        c, rows = self._run(engine, params, lambda cursor: [cursor.fetchone()])
        row = rows[0]
        if row is None:
            return None
        return c.row(*(v if f is None else f(v) for f, v in zip(c.results, row, strict=True)))

    def all(self, engine: Engine, params: dict[str, Any]) -> list[Any]:
        """Every row of the statement for ``params``: for a bounded read (a listing of a
        space's documents), which then costs none of a ``Connection``'s overhead."""
        c, rows = self._run(engine, params, lambda cursor: cursor.fetchall())
        results, make = c.results, c.row
        if not any(results):
            return [make(*row) for row in rows]
        return [
            make(*(v if f is None else f(v) for f, v in zip(results, row, strict=True)))
            for row in rows
        ]

    def _run(
        self, engine: Engine, params: dict[str, Any], fetch: Callable[[Any], list[Any]]
    ) -> tuple[_CompiledRead, list[Any]]:
        c = self._compiled.get(engine.dialect.name) or self._compile(engine.dialect)
        given = {**c.fixed, **params}
        bound = {k: (c.binds[k](v) if k in c.binds else v) for k, v in given.items()}
        args: Any = bound if c.order is None else [bound[k] for k in c.order]

        def run(driver: Any) -> list[Any]:
            cursor = driver.cursor()
            try:
                cursor.execute(c.sql, args)
                return fetch(cursor)
            finally:
                cursor.close()

        with translated_errors():
            return c, on_pooled(engine, run, what="point read")

    def _compile(self, dialect: Dialect) -> _CompiledRead:
        from collections import namedtuple

        compiled: Any = self.stmt.compile(dialect=dialect)
        binds, fixed = {}, {}
        for name, bind in compiled.binds.items():
            if bind.expanding:
                raise ValueError(f"a point read takes no list parameter ({name!r})")
            if not bind.required:
                fixed[name] = bind.effective_value
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if process is not None:
                binds[name] = process
        columns = list(self.stmt.selected_columns)
        results = tuple(
            c.type.dialect_impl(dialect).result_processor(dialect, None) for c in columns
        )
        done = _CompiledRead(
            compiled.string,
            tuple(compiled.positiontup) if compiled.positional else None,
            binds,
            fixed,
            results,
            namedtuple("PointRow", [c.key for c in columns], rename=True),  # type: ignore[misc]
        )
        self._compiled[dialect.name] = done
        return done


#: PostgreSQL's codes for a deadlock's victim and a serialization failure: rolled back whole.
_ROLLED_BACK = frozenset({"40P01", "40001"})
#: How often such a write is made again before its caller hears of it.
ROLLBACK_ATTEMPTS = 3


def rolled_back(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is PostgreSQL rolling a transaction back as a
    deadlock's victim or a serialization failure: sending the same write again is safe."""
    cause: BaseException | None = exc
    while cause is not None:
        found = getattr(cause, "sqlstate", None) or getattr(
            getattr(cause, "orig", None), "sqlstate", None
        )
        if found in _ROLLED_BACK:
            return True
        cause = cause.__cause__
    return False


def again_if_rolled_back(work: Callable[[], T]) -> T:
    """``work()`` (a whole write transaction) made again when PostgreSQL rolled it back as
    a deadlock's victim, at most :data:`ROLLBACK_ATTEMPTS` times: a cycle of waits the
    store's lock order does not rule out (its callers say which) is no outage, and the
    victim's caller should not hear of it as one."""
    for attempt in range(1, ROLLBACK_ATTEMPTS + 1):
        try:
            return work()
        except StoreUnavailable as exc:
            if attempt == ROLLBACK_ATTEMPTS or not rolled_back(exc):
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")


@contextlib.contextmanager
def translated_errors() -> Iterator[None]:
    """Driver failures (connection refused, database gone, disk I/O) → StoreUnavailable;
    a full disk → InsufficientStorage (507)."""
    try:
        yield
    except (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.TimeoutError) as exc:
        if is_disk_full(exc):
            raise InsufficientStorage(DISK_FULL_MESSAGE) from exc
        away = StoreUnavailable(DATABASE_AWAY)
        # The operator (a command's output, the server's log) hears the driver's reason too.
        reason = (
            str(getattr(exc, "orig", None) or exc).strip().splitlines() or ["no reason given"]
        )[0]
        away.operator_message = (
            f"a write was rolled back by the database ({reason}) each time it was sent; "
            "writers of the same documents are contending"
            if rolled_back(exc)
            else f"the database cannot be reached: {reason}; check KEEPSTONE_DATABASE_URL "
            "(or --database), or try again once it is up"
        )
        raise away from exc
    except sa.exc.DataError as exc:
        # The last net under the checks of each field (keepstone.text): PostgreSQL takes no
        # NUL in any text; anything else is a bug and stays one.
        if "NUL" not in str(exc.orig):
            raise
        raise InvalidRequest(
            "a value sent holds a NUL character (U+0000); remove it and retry"
        ) from None


C = TypeVar("C")


@contextlib.contextmanager
def claim_rows(
    engine: Engine,
    claim: Callable[[Connection, bool], C],
    finish: Callable[[Connection, C], object],
    dirty: Callable[[C], bool],
) -> Iterator[C]:
    """``with claim_rows(engine, claim, finish, dirty) as c:`` — rows claimed by
    ``claim(conn, lock)`` for the block to work on, and ``finish(conn, c)`` writing what
    it made when the block exits normally.

    PostgreSQL: one write transaction held while the block runs; ``claim`` reads with
    ``lock`` True (``FOR UPDATE SKIP LOCKED``: concurrent claimers, threads or replicas,
    take other rows) and ``finish`` writes in the same transaction, committed with it (an
    exception, or a crash, rolls back: the rows stay to do). SQLite: ``claim`` reads with
    ``lock`` False in a read transaction that ends before the block (a lock would stop
    every writer while it runs), and ``finish`` runs in one short write transaction
    afterwards, when ``dirty(c)``; it must leave alone a row changed meanwhile.
    """
    if engine.dialect.name == "postgresql":
        with write_transaction(engine) as conn:
            claimed = claim(conn, True)
            yield claimed
            finish(conn, claimed)
        return
    with read_transaction(engine) as conn:
        claimed = claim(conn, False)
    yield claimed
    if dirty(claimed):
        with write_transaction(engine, durable=False) as conn:  # vectors: made again
            finish(conn, claimed)
