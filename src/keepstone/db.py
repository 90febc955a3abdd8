"""SQL plumbing shared by every SQL-backed part of Keepstone (documents, identity, records).

* :func:`make_engine` turns ``sqlite:///path`` or ``postgresql://...`` into a
  SQLAlchemy engine (pysqlite in WAL mode; psycopg 3 with a connection pool).
* :func:`write_transaction` / :func:`read_transaction` open a transaction; on SQLite
  a write transaction is ``BEGIN IMMEDIATE`` so concurrent writers queue on the
  database lock instead of failing at commit; :func:`read_statements` reads without a
  transaction of its own on PostgreSQL (one round trip per statement).
* :class:`Migration` and :func:`upgrade`: each component keeps an ordered list of
  migrations; applied ones are recorded in ``keepstone_migrations`` (component, version).
* :func:`translated_errors`: driver failures surface as ``StoreUnavailable``.
* :func:`claim_rows`: rows claimed to work on outside the database (embedding them),
  the same way for every index.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import fcntl
import os
import queue
import re
import shlex
import sqlite3
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeAlias, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Dialect, Engine

from keepstone.errors import InvalidRequest, StoreUnavailable

T = TypeVar("T")

metadata_migrations = sa.MetaData()

migrations_table = sa.Table(
    "keepstone_migrations",
    metadata_migrations,
    sa.Column("component", sa.String(64), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("description", sa.String(256), nullable=False),
    sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
)


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

    ``schema`` (PostgreSQL only; ignored for SQLite, which has no schemas) puts every
    connection's ``search_path`` on that schema, so one database can hold several
    independent Keepstone schemas (tests use a fresh one each). It does not create it.
    """
    url = normalize_url(url)
    if url.startswith("sqlite"):
        path = sa.engine.make_url(url).database
        if path and path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
        engine = sa.create_engine(
            url,
            connect_args={"timeout": 60, "check_same_thread": False},
            pool_pre_ping=False,
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
    )
    event.listen(engine, "handle_error", _missing_database)
    return engine


_MISSING_DATABASE = re.compile(r'database "([^"]+)" does not exist')


def _missing_database(context: sa.engine.ExceptionContext) -> BaseException | None:
    """A PostgreSQL connection refused because its database does not exist says so, with
    the command that creates it, instead of "cannot be reached" (retrying cannot help)."""
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
    return StoreUnavailable(f'database "{found[1]}" does not exist; create it with: {command}')


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take transaction control away from pysqlite so BEGIN IMMEDIATE is ours to send.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            cur.execute("PRAGMA journal_mode=WAL")
        except sqlite3.DatabaseError as exc:  # the first read of the file's header
            cur.close()
            raise InvalidRequest(
                f"{engine.url.database} is not a SQLite database ({exc}); choose another --database"
            ) from None
        # A commit writes the WAL without syncing it; a durable write then syncs it once,
        # outside the writers' turn, shared with its concurrent writers (WalSync).
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=60000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        # Sent on the driver itself: through exec_driver_sql, SQLAlchemy's execution of
        # this one statement cost ~3 % of a document write (docs/performance.md).
        begin = f"BEGIN {mode}"
        try:
            conn.connection.driver_connection.execute(begin)  # type: ignore[union-attr]
        except sqlite3.Error as exc:
            raise as_sqlalchemy(exc, begin, conn.dialect) from exc


class SqliteWriters:
    """The turn of a writer of one SQLite database, taken before ``BEGIN IMMEDIATE``.

    SQLite lets one writer in at a time, and a writer that finds the database locked waits
    in its busy handler by *sleeping* (1, 2, 5, 10 … 100 ms), not in a queue: with four
    request threads writing, most writes paid a sleep long after the lock was free (PUT doc
    p99 180 ms; with ``keepstone serve --workers 2``, 408 ms; docs/performance.md). Writers
    queue here instead: the threads of a process on a lock, and the processes on an
    ``flock`` of a file beside the database (``<database>-writer.lock``; the kernel drops
    it with a process that dies), so the database is taken in turn with no sleep.
    Reentrant in a thread, so a nested write keeps SQLite's own behaviour (its timeout)
    instead of deadlocking.
    """

    def __init__(self, lock_path: str | None) -> None:
        self._threads = threading.RLock()
        self._lock_path = lock_path
        self._fd: int | None = None
        self._depth = 0  # changed only by the thread holding _threads

    def __enter__(self) -> SqliteWriters:
        self._threads.acquire()
        try:
            if self._depth == 0 and self._lock_path is not None:
                if self._fd is None:
                    self._fd = self._open_lock_file(self._lock_path)
                if self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._threads.release()
            raise
        self._depth += 1
        return self

    def try_enter(self) -> bool:
        """Take the turn only if it is free right now, waiting for nothing: True when
        taken (leave it with ``__exit__``), False when a thread or a process has it."""
        if not self._threads.acquire(blocking=False):
            return False
        try:
            if self._depth == 0 and self._lock_path is not None:
                if self._fd is None:
                    self._fd = self._open_lock_file(self._lock_path)
                if self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another process writes
            self._threads.release()
            return False
        except BaseException:
            self._threads.release()
            raise
        self._depth += 1
        return True

    def __exit__(self, *_exc: object) -> None:
        self._depth -= 1
        try:
            if self._depth == 0 and self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def _open_lock_file(self, path: str) -> int | None:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            # A directory this process may not create files in (a read-only copy of the
            # database, say): writers of other processes then meet in SQLite's busy handler
            # as before, and a write there fails as SQLite decides.
            self._lock_path = None
            return None
        weakref.finalize(self, os.close, fd)  # kept open while the engine lives
        return fd

    def held_elsewhere(self) -> bool:
        """Whether another thread of this process holds the turn (for tests)."""
        if not self._threads.acquire(blocking=False):
            return True
        self._threads.release()
        return False


_WRITERS: weakref.WeakKeyDictionary[Engine, SqliteWriters] = weakref.WeakKeyDictionary()
_WRITERS_GUARD = threading.Lock()


def sqlite_writers(engine: Engine) -> SqliteWriters:
    """The :class:`SqliteWriters` of ``engine``'s database (one per engine in a process)."""
    with _WRITERS_GUARD:
        writers = _WRITERS.get(engine)
        if writers is None:
            path = engine.url.database
            on_disk = bool(path) and path != ":memory:" and not str(path).startswith("file:")
            lock_path = f"{os.path.abspath(str(path))}-writer.lock" if on_disk else None
            writers = _WRITERS[engine] = SqliteWriters(lock_path)
        return writers


class WalSync:
    """The fsync that makes a SQLite database's commits durable, shared by the writers
    that wait for it at the same time (a group commit's fsync).

    Connections commit at ``synchronous=NORMAL``: the commit writes its frames to the WAL
    and syncs nothing, so it survives a killed process but not a power loss. A durable
    write then calls :meth:`sync` (or awaits :meth:`synced`) after its commit, once it has
    given back the writers' turn: the next writer commits while this one's fsync runs, and
    writers that arrive while an fsync runs share the next one. That is what
    ``synchronous=FULL`` would give, minus the fsync held inside the turn: FULL serialises
    every fsync behind the lock.

    The WAL is one sequential file, so an fsync of it makes every commit written before
    the call durable. A commit whose frames a checkpoint has since copied into the
    database is durable already (at NORMAL a checkpoint syncs the database file once it
    has copied), and with no WAL file at all (the journal is not a WAL) the database file
    is synced instead. The WAL's descriptor is kept open between syncs: SQLite removes
    the file only when the last connection to the database closes, so it is opened again
    after any of this engine's connections closed (:meth:`reopen`, a pool event).

    A coroutine's wait (:meth:`synced`) adapts to the disk: where an fsync costs the loop
    less than handing it to a thread and back (on the 2-core development machine the
    hand-off cost the loop ~0.3 ms of CPU, and an fsync of the WAL took ~0.15 ms), the
    loop syncs itself, once for the writes of a turn of the loop. When a sync the loop
    made took over :data:`SLOW_FSYNC_S`, or the running mean of those syncs rose over
    :data:`INLINE_FSYNC_S` (a disk slower than the hand-off; an fsync's rare spike moves
    it little), the thread syncs for every coroutine for the next :data:`SLOW_HOLD_S`;
    then the loop tries again, its mean forgotten. A slow disk so stops the loop for one
    fsync every SLOW_HOLD_S at most (docs/storage.md, "Durability"). Only the loop's own
    syncs are timed: the thread's would count its wait for the GIL after the fsync, which
    a busy loop makes long.
    """

    #: The running mean of the loop's fsyncs, in seconds, over which the thread syncs.
    INLINE_FSYNC_S = 0.0005
    #: A sync of the loop this slow sends every coroutine's wait to the thread at once.
    SLOW_FSYNC_S = 0.005
    #: How long the thread syncs for coroutines before the loop tries again.
    SLOW_HOLD_S = 2.0

    def __init__(self, database: str) -> None:
        self._paths = (f"{database}-wal", database)
        self._cond = threading.Condition()
        self._arrived = 0  # callers numbered as they arrive, after their commit
        self._synced = 0  # every caller numbered up to this one is durable
        self._syncing = False
        #: The running mean of the loop's fsyncs (weight 1/32 to the newest; None: none
        #: timed since the last hold), how many it counts (it decides from the eighth),
        #: and until when the thread syncs for coroutines.
        self._fsync_s: float | None = None
        self._timed_n = 0
        self._threaded_until = 0.0
        #: Per event loop, the coroutines whose fsync the loop makes two turns on.
        self._turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_Done]] = (
            weakref.WeakKeyDictionary()
        )
        #: The WAL's descriptor, used and replaced only by the caller that syncs.
        self._fd: list[int] = []
        self._reopen = False
        weakref.finalize(self, _close_all, self._fd)
        #: Coroutines awaiting :meth:`synced`, and the thread that syncs for them.
        self._awaiting: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, _Done]] = (
            queue.SimpleQueue()
        )
        self._syncer: threading.Thread | None = None
        self._syncer_guard = threading.Lock()

    def reopen(self) -> None:
        """The WAL may be another file from now on (a connection closed): open it again
        before the next sync."""
        self._reopen = True

    def sync(self, *, timed: bool = False) -> None:
        """Return once every commit made before this call is on disk. ``timed``: the
        caller is an event loop (:meth:`synced`), whose fsyncs are timed."""
        with self._cond:
            self._arrived += 1
            ticket = self._arrived
            while self._synced < ticket:
                if self._syncing:
                    self._cond.wait()
                    continue
                self._syncing, covers, synced = True, self._arrived, False
                self._cond.release()
                try:
                    started = time.monotonic()
                    self._fsync()
                    if timed:
                        self._timed(time.monotonic() - started)
                    synced = True
                finally:
                    self._cond.acquire()
                    self._syncing = False
                    if synced:
                        self._synced = max(self._synced, covers)
                    self._cond.notify_all()  # done, or failed: a waiter tries its own

    def syncs_inline(self) -> bool:
        """Whether :meth:`synced` syncs on the loop itself: no slow sync of the loop's
        holds the coroutines' waits on the thread now."""
        return time.monotonic() >= self._threaded_until

    async def synced(self) -> None:
        """:meth:`sync` for a coroutine, awaited on its event loop, which a slow fsync must
        not stop: a thread of this database's own syncs once for every coroutine waiting
        by then (sharing the fsync with callers in threads too) and wakes each loop once.
        What a coroutine costs the loop is a future and a queue entry; the thread's own
        turns with the GIL are few (one per fsync, besides the fsync), as every turn it
        takes from a busy loop may wait a switch interval for it. Where the disk's fsyncs
        are quicker than that hand-off (:meth:`syncs_inline`), the loop syncs itself two
        turns later, once for every coroutine that awaited in this turn or the next."""
        if self.syncs_inline():
            loop = asyncio.get_running_loop()
            turn = self._turns.get(loop)
            if turn is None:
                turn = self._turns[loop] = []
                # The writes of two turns share the fsync, scheduled from the next turn:
                # a request read while this turn runs starts its task in the next one,
                # after the callbacks this turn scheduled, so an fsync of the next turn
                # would run before its write. Syncing in the next turn, 4 clients' PUTs
                # made 1.9 writes an fsync, against 3.9 so (docs/performance.md, "An
                # fsync two turns on").
                loop.call_soon(loop.call_soon, self._sync_turn, loop, turn)
            mine: _Done = loop.create_future()
            turn.append(mine)
            await mine
            return
        loop = asyncio.get_running_loop()
        done: _Done = loop.create_future()
        self._awaiting.put((loop, done))
        if self._syncer is None:
            with self._syncer_guard:
                if self._syncer is None:
                    self._syncer = threading.Thread(
                        target=self._sync_awaiting, name="keepstone-wal-sync", daemon=True
                    )
                    self._syncer.start()
        await done

    def _sync_turn(self, loop: asyncio.AbstractEventLoop, turn: list[_Done]) -> None:
        """On the loop: one fsync for the coroutines that awaited :meth:`synced` in a
        turn of it (each its own future, so a cancelled one cancels no other)."""
        del self._turns[loop]
        error: Exception | None = None
        try:
            self.sync(timed=True)
        except Exception as exc:  # handed to every waiter of the turn
            error = exc
        _settle(turn, error)

    def _sync_awaiting(self) -> None:
        """The syncer thread: while coroutines wait, sync for all of them; gone after a
        second with none (started again by the next)."""
        waiting = self._awaiting
        while True:
            try:
                batch = [waiting.get(timeout=1.0)]
            except queue.Empty:
                with self._syncer_guard:
                    if waiting.empty():
                        self._syncer = None
                        return
                continue
            while not waiting.empty():
                batch.append(waiting.get_nowait())
            error: BaseException | None = None
            try:
                self.sync()  # each of the batch arrived after its commit
            except BaseException as exc:  # handed to every waiter; the thread goes on
                error = exc
            loops: dict[asyncio.AbstractEventLoop, list[_Done]] = {}
            for loop, done in batch:
                loops.setdefault(loop, []).append(done)
            for loop, futures in loops.items():
                with contextlib.suppress(RuntimeError):  # a loop closed meanwhile
                    loop.call_soon_threadsafe(_settle, futures, error)

    def _fsync(self) -> None:
        """One fsync, by the one caller that syncs at a time."""
        try:
            if self._reopen or not self._fd:
                self._reopen = False
                _close_all(self._fd)
                with contextlib.suppress(FileNotFoundError):  # no WAL: its database
                    self._fd.append(os.open(self._paths[0], os.O_RDONLY))
            if self._fd:
                _datasync(self._fd[0])
            else:
                fd = os.open(self._paths[1], os.O_RDONLY)
                try:
                    _datasync(fd)
                finally:
                    os.close(fd)
        except OSError as exc:
            self._reopen = True
            raise StoreUnavailable(
                f"the database's disk failed to sync a commit ({exc.strerror or exc}); "
                "check the disk, then read the document back before writing again"
            ) from exc

    def _timed(self, took: float) -> None:
        """Account the duration of a loop's fsync (by the one caller that syncs at a
        time): too slow, or too slow on average, and the thread syncs for a while."""
        mean = took if self._fsync_s is None else self._fsync_s + (took - self._fsync_s) / 32
        self._timed_n += 1
        if took > self.SLOW_FSYNC_S or (mean > self.INLINE_FSYNC_S and self._timed_n >= 8):
            self._threaded_until = time.monotonic() + self.SLOW_HOLD_S
            self._fsync_s, self._timed_n = None, 0
        else:
            self._fsync_s = mean


_Done: TypeAlias = "asyncio.Future[None]"


def _close_all(fds: list[int]) -> None:
    while fds:
        with contextlib.suppress(OSError):
            os.close(fds.pop())


def _settle(futures: list[_Done], error: BaseException | None) -> None:
    for done in futures:
        if done.done():  # its request was cancelled
            continue
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)


@contextlib.contextmanager
def syncs_deferred(syncs: list[WalSync]) -> Iterator[None]:
    """The durable writes of the block do not sync the WAL themselves: each appends its
    :class:`WalSync` to ``syncs`` instead, for the caller to await (:meth:`WalSync.synced`)
    before it answers. For writes run on an event loop (``Runtime.writer_turn_now``),
    where an fsync would stop every request of the process, and inside the writers'
    turn, which the sync would otherwise hold."""
    token = _DEFERRED.set(syncs)
    try:
        yield
    finally:
        _DEFERRED.reset(token)


_DEFERRED: contextvars.ContextVar[list[WalSync] | None] = contextvars.ContextVar(
    "keepstone_deferred_syncs", default=None
)
_datasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)
_SYNCS: weakref.WeakKeyDictionary[Engine, WalSync | None] = weakref.WeakKeyDictionary()
_UNKNOWN = object()


def wal_sync(engine: Engine) -> WalSync | None:
    """The :class:`WalSync` of ``engine``'s SQLite database (one per engine in a process);
    None for a database with no file (``:memory:``), which nothing makes durable."""
    known = _SYNCS.get(engine, _UNKNOWN)  # every durable write asks: no lock once made
    if known is not _UNKNOWN:
        return known  # type: ignore[return-value]
    with _WRITERS_GUARD:
        if engine not in _SYNCS:
            sync = _SYNCS[engine] = _sync_for(str(engine.url.database or ""))
            if sync is not None:
                # A connection that closes may have been the database's last, whose close
                # removes the WAL: the next one makes another file.
                for name in ("close", "close_detached", "invalidate"):
                    event.listen(engine, name, lambda *_: sync.reopen())
        return _SYNCS[engine]


def _sync_for(database: str) -> WalSync | None:
    if database.startswith("file:"):  # a URI: its path, unless it names memory
        uri = urllib.parse.urlsplit(database)
        if "mode=memory" in uri.query or not uri.path:
            return None
        database = urllib.parse.unquote(uri.path)
    if not database or database == ":memory:":
        return None
    return WalSync(os.path.abspath(database))


def made_durable(engine: Engine) -> None:
    """Make the SQLite commits this thread made on ``engine`` durable before going on: sync
    the WAL (shared, :class:`WalSync`), or leave the sync to the caller that deferred it
    (:func:`syncs_deferred`). Call it after the commit, once the writers' turn is given
    back. PostgreSQL's commits are durable already."""
    sync = wal_sync(engine) if engine.dialect.name == "sqlite" else None
    if sync is None:
        return
    deferred = _DEFERRED.get()
    if deferred is None:
        sync.sync()
    else:
        deferred.append(sync)


@contextlib.contextmanager
def write_transaction(engine: Engine, *, durable: bool = True) -> Iterator[Connection]:
    """A transaction that will write: ``BEGIN IMMEDIATE`` on SQLite.

    ``durable`` (the default): the commit is on disk before the block returns, so what a
    caller is told was written survives a power loss, not only a killed process:
    PostgreSQL's commit always is; on SQLite the WAL is synced after the commit, outside
    the writers' turn (:class:`WalSync`). Documents, records, settings, users and keys
    all commit so: a revoked key or an acknowledged ``MEMORY.md`` never comes back
    changed after a crash of the machine.

    ``durable=False``: for what is made again from durable data when lost (search chunks
    and vectors, a purge's pass). On SQLite its commit is not synced (durable against a
    killed process; a power loss may take it back, never corrupt the database). The WAL
    is sequential, so the next durable commit makes it durable too.
    """
    with translated_errors():
        if engine.dialect.name == "sqlite":
            with sqlite_writers(engine), engine.connect() as conn:
                conn = conn.execution_options(sqlite_begin="IMMEDIATE")
                with conn.begin():
                    yield conn
            if durable:
                made_durable(engine)
        else:
            with engine.begin() as conn:
                yield conn


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
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
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
    pooled = engine.raw_connection()
    try:
        driver: Any = pooled.driver_connection
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
    """One ``SELECT`` of every request's path (a credential's row, a document), compiled
    once per dialect and run by :func:`on_pooled`: the statement's text, its parameters
    bound and its columns processed by the column types as SQLAlchemy would (a SQLite
    timestamp is parsed, a boolean made one), its row answered as a named tuple.

    One statement is one snapshot on either engine. Not for statements that take lists
    (``IN`` expanded at execution) or that need a transaction."""

    def __init__(self, stmt: sa.Select[Any]) -> None:
        self.stmt = stmt
        self._compiled: dict[str, _CompiledRead] = {}

    def first(self, engine: Engine, params: dict[str, Any]) -> Any | None:
        """The statement's first row for ``params`` (by bind name), or None."""
        c = self._compiled.get(engine.dialect.name) or self._compile(engine.dialect)
        given = {**c.fixed, **params}
        bound = {k: (c.binds[k](v) if k in c.binds else v) for k, v in given.items()}
        args: Any = bound if c.order is None else [bound[k] for k in c.order]

        def fetch(driver: Any) -> Any:
            cursor = driver.cursor()
            try:
                cursor.execute(c.sql, args)
                return cursor.fetchone()
            finally:
                cursor.close()

        with translated_errors():
            row = on_pooled(engine, fetch, what="point read")
        if row is None:
            return None
        return c.row(*(v if f is None else f(v) for f, v in zip(c.results, row, strict=True)))

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


@contextlib.contextmanager
def translated_errors() -> Iterator[None]:
    """Driver failures (connection refused, database gone, disk I/O) → StoreUnavailable."""
    try:
        yield
    except (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.TimeoutError) as exc:
        raise StoreUnavailable(
            "the database cannot be reached right now; try again shortly"
        ) from exc


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


@dataclass(frozen=True, slots=True)
class Migration:
    """One step of a component's schema. ``up`` may branch on ``conn.dialect.name``."""

    component: str
    version: int
    description: str
    up: Callable[[Connection], None]


def upgrade(engine: Engine, migrations: Sequence[Migration]) -> list[Migration]:
    """Apply every migration not yet recorded, in order; return those applied.

    Each runs in its own transaction with its record, under a lock (an advisory lock
    on PostgreSQL, BEGIN IMMEDIATE on SQLite), so replicas starting together are safe.
    """
    applied: list[Migration] = []
    with write_transaction(engine) as conn:
        _lock(conn)
        metadata_migrations.create_all(conn, checkfirst=True)
    for m in migrations:
        with write_transaction(engine) as conn:
            _lock(conn)
            done = conn.execute(
                sa.select(migrations_table.c.version).where(
                    migrations_table.c.component == m.component,
                    migrations_table.c.version == m.version,
                )
            ).first()
            if done:
                continue
            m.up(conn)
            conn.execute(
                migrations_table.insert().values(
                    component=m.component,
                    version=m.version,
                    description=m.description,
                    applied_at=utcnow(),
                )
            )
            applied.append(m)
    return applied


def applied_versions(engine: Engine) -> set[tuple[str, int]]:
    with read_transaction(engine) as conn:
        if not sa.inspect(conn).has_table("keepstone_migrations"):
            return set()
        rows = conn.execute(sa.select(migrations_table.c.component, migrations_table.c.version))
        return {(r[0], r[1]) for r in rows}


def _lock(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(872361)"))
