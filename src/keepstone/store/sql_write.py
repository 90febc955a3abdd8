"""The SQL store's change statement: what every write, delete and move of a document does
after it has locked the document row, in as few round trips as the dialect allows.

The live version of a document is its row in ``memory_documents`` (its ``version``,
``actor`` and ``updated_at``); the table of versions holds the versions that were replaced
and deletion markers (docs/history.md, "Where"). SQL copies a small version into the table
when a change replaces it; SQL cannot compress a large one (from
``version_pack.COMPRESS_FROM`` bytes), so the store packs it: on SQLite when a change
replaces it, from the content the row lock read (in-process, a read costs microseconds); on
PostgreSQL when it is written, while its bytes are at hand, into a row of the table beside
the live document (the one-statement write could not read and compress the replaced
content, and a second round trip costs more than the compression). A change is up to eight
steps, in this order on PostgreSQL (the store's lock order after the path's: document → its
chunks → space counter → team counter, then the history, which only inserts):

1. ``doc``: the document row itself — inserted as the path's next version
   (``ON CONFLICT DO NOTHING``: a concurrent creator makes it return nothing), updated to
   the next version, deleted, or left alone (a move does its own);
2. ``gone``: the path's chunks dropped (new content is chunked again by the next search);
3. ``space``: the space counter's compare-and-swap (``used + d <= cap``, a credit always
   passes) with the space's ``search_version`` bumped;
4. ``team``: the team (or instance) counter's compare-and-swap, and, in the same row
   update, the team's history counter grown by the version this change replaces;
5. ``keep``: the live version this change replaces, copied from its row into the table:
   a small one as its text after a zero byte (version_pack's format, made in SQL), a large
   one on SQLite as the store packed it (``:kept_packed``); none when its row is there
   already (a large one on PostgreSQL);
6. ``live`` (PostgreSQL): the new content's packed row, when it is large;
7. ``mark``: a deletion marker, numbered after the version it ends.

On PostgreSQL the steps are data-modifying CTEs of ONE statement, each reading the one
before it (``FROM doc``, ``FROM team``, ...), so a step that refuses (the insert that met a
concurrent creator, a counter over its quota) stops every later one, and the whole change
is one round trip; every CTE reads the statement's snapshot, so ``keep`` copies the row as
it was before ``doc`` changed it. SQLite has no data-modifying CTEs; it runs the same step
texts one by one on the driver's cursor (in-process, so a statement costs microseconds),
``keep`` first (it must read the row before ``doc`` changes it), stopping at the first
that refuses. Either way :meth:`ChangeStatements.run` answers what each step did; the store
raises the refusal, which rolls the transaction back.

On PostgreSQL a plain write is sent with its row lock and condition as ONE statement in
autocommit (:meth:`ChangeStatements.put`): one round trip and one commit. It writes, or
answers that the condition refused, or writes nothing and hands the write to the
transaction path (docs/storage.md, "A PostgreSQL write in one round trip").

The statements are plain SQL text (:mod:`keepstone.store.sql_steps` writes each step once
and builds every statement from them) run on the driver's own cursor: SQLAlchemy's
per-statement work (cache key, parameter and result processing) cost more than SQLite's
execution of them, and as much as a round trip on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql.base import PGDialect
from sqlalchemy.engine import Connection, Dialect, Engine

from keepstone.db import as_sqlalchemy, driver_cursor, on_pooled, utc
from keepstone.store.sql_schema import memory_documents
from keepstone.store.sql_steps import (
    CARRY,
    LAST_AT,
    PATH_LOCK,
    RENUMBER,
    UNDO,
    DocStep,
    Shape,
    lock_statement,
    path_lock,
    postgres_change,
    postgres_put,
    sqlite_steps,
    try_lock_statement,
)

#: The SQLSTATE of the one-statement write's undo (:data:`~keepstone.store.sql_steps.UNDO`).
_UNDO_STATE = "22P02"
#: unique_violation: the one statement met a version number the table holds already.
_DUPLICATE_STATE = "23505"


class Locked(NamedTuple):
    """The document row a change locked."""

    size_bytes: int
    etag: str
    #: Its version number.
    version: int
    #: The stored bytes of its version's packed row (a large one on PostgreSQL, or on
    #: SQLite one packed when it was written, before this store), or None: none, the
    #: change copies the version into the table when it replaces it.
    row_stored: int | None
    #: On SQLite a large version's content, for the store to pack when the change replaces
    #: it (unless ``row_stored``); None otherwise.
    content: str | None = None
    #: Its version's time (``updated_at``): a change of the document is timed no earlier.
    at: datetime | None = None
    #: PostgreSQL: the newest version number the path holds in the table. Above the
    #: document's own, the document took a number a concurrent deletion kept (a create
    #: numbered from a snapshot taken before another writer created the document and a third
    #: deleted it, all inside the create's one statement): the change renumbers it first.
    newest_kept: int | None = None


class Team(NamedTuple):
    """The team (or instance) counter after the change."""

    used_bytes: int
    quota_bytes: int
    history_used_bytes: int
    history_quota_bytes: int | None
    history_versions: int | None


class Outcome(NamedTuple):
    """What each step did; a step after one that refused did nothing (None)."""

    #: False: the insert met a concurrent creator (nothing else happened).
    doc_done: bool
    space_used: int | None
    team: Team | None
    #: The path's newest version after the change: the document's (written) or the
    #: deletion marker's; None when the change made neither.
    version: int | None


#: The savepoint of :meth:`ChangeStatements.put_in` (a name SQLAlchemy's never take).
_SAVEPOINT = "SAVEPOINT keepstone_put"
_RELEASE = "RELEASE SAVEPOINT keepstone_put"
_ROLLBACK_TO = "ROLLBACK TO SAVEPOINT keepstone_put"


def _in_transaction_instead(raw: Any) -> bool:
    """Whether the one-statement write's error ``raw`` (the driver's) means the write runs
    on the transaction path: the statement undid itself (:data:`_UNDO`), or it met a
    version number the table holds already (the document took a number a concurrent
    deletion kept, ``Locked.newest_kept``: the transaction path renumbers it)."""
    state = getattr(raw, "sqlstate", None)
    return (state == _UNDO_STATE and UNDO in str(raw)) or state == _DUPLICATE_STATE


def _put_answer(row: Any) -> tuple[bool, str | None] | None:
    """The one-statement write's row as :meth:`ChangeStatements.put` answers it."""
    fresh, ok, etag, done, changed, _ = row
    if not fresh or (ok and changed and not done):
        return None
    return bool(ok), etag


#: PostgreSQL dialects compiling the statements' ``:name`` parameters as psycopg takes them
#: (SQLAlchemy's rules for the parameters of plain text).
_PYFORMAT = PGDialect(paramstyle="pyformat")  # type: ignore[no-untyped-call]
_NUMBERED = PGDialect(paramstyle="numeric_dollar")  # type: ignore[no-untyped-call]


def _native(sql: str) -> tuple[str, list[str]]:
    """``:name`` parameters as PostgreSQL's own ``$1``, and the names in their order: psycopg
    sends such a statement as it is, where it would parse a ``%(name)s`` one longer than
    4 KB again at every execution (its cache keeps shorter ones only)."""
    compiled = sa.text(sql).compile(dialect=_NUMBERED)
    return str(compiled), list(compiled.positiontup or ())


def _pyformat(sql: str) -> str:
    """``:name`` parameters as psycopg's ``%(name)s``."""
    return str(sa.text(sql).compile(dialect=_PYFORMAT))


__all__ = ["ChangeStatements", "DocStep", "Locked", "Outcome", "Shape", "Team"]


class ChangeStatements:
    """The change statement's texts for one dialect, built once per variant."""

    def __init__(self, dialect: Dialect, history: bool = True) -> None:
        self.postgres = dialect.name == "postgresql"
        #: A timestamp as the dialect stores it (SQLite: SQLAlchemy's text form, which every
        #: other statement compares with); None: the driver's own.
        impl = memory_documents.c.updated_at.type.dialect_impl(dialect)
        self.bind_time: Callable[[Any], Any] | None = impl.bind_processor(dialect)
        self._read_time: Callable[[Any], Any] | None = impl.result_processor(dialect, None)
        self._built: dict[Shape, str] = {}
        self._steps: dict[Shape, list[tuple[str, str]]] = {}
        self._puts: dict[tuple[bool, bool], tuple[str, list[str]]] = {}
        self._lock = self._for_driver(lock_statement(self.postgres, history))
        self._carry = self._for_driver(CARRY)
        self._last_at = self._for_driver(LAST_AT)
        self._renumber = _pyformat(RENUMBER)  # PostgreSQL only (Locked.newest_kept)
        self._path_lock = _pyformat(PATH_LOCK)  # PostgreSQL only
        self._history = history
        self._try_locks: dict[int, str] = {}  # PostgreSQL only, by how many paths

    def _for_driver(self, sql: str) -> str:
        """``sql`` with its parameters as the dialect's driver takes them."""
        return _pyformat(sql) if self.postgres else sql

    def path_locks(self, address: dict[str, Any], *paths: str) -> tuple[int, ...]:
        """PostgreSQL: the keys of the locks of ``paths`` in the space at ``address`` (its
        ``t`` and ``k``), in the order every writer takes them, so two writers of the same
        two paths cannot each hold one (:func:`~keepstone.store.sql_steps.path_lock`).
        SQLite: none (its writers queue for the whole database)."""
        if not self.postgres:
            return ()
        return tuple(sorted({path_lock(address, path) for path in paths}))

    def lock(
        self, conn: Connection, params: dict[str, Any], path_locks: Sequence[int] = ()
    ) -> Locked | None:
        """Lock the document row of ``params`` (its address and path); None when there is
        no document. First wait for ``path_locks`` (:meth:`path_locks`), held to the end
        of the transaction."""
        row = self._row_lock(conn, params, path_locks)
        if row is None:
            return None
        return Locked(
            int(row[0]),
            str(row[1]),
            int(row[2]),
            None if row[3] is None else int(row[3]),
            None if row[4] is None else str(row[4]),
            self._time_of(row[5]),
            None if row[6] is None else int(row[6]),
        )

    def _try_lock(self, paths: int) -> str:
        sql = self._try_locks.get(paths)
        if sql is None:
            sql = self._try_locks[paths] = _pyformat(try_lock_statement(self._history, paths))
        return sql

    def _row_lock(self, conn: Connection, params: dict[str, Any], path_locks: Sequence[int]) -> Any:
        """The row lock's row (None: no document), after ``path_locks``: taken while free
        in the row lock's own statement (no round trip more while no other writer holds
        one), else waited for first, in the same order."""
        with driver_cursor(conn, "lock") as cursor:
            if path_locks:
                keys = {f"path_lock{n}": key for n, key in enumerate(path_locks)}
                cursor.execute(self._try_lock(len(path_locks)), {**params, **keys})
                got, *row = cursor.fetchone()
                if got:
                    return None if row[0] is None else row
            for key in path_locks:
                cursor.execute(self._path_lock, {"path_lock": key})
            cursor.execute(self._lock, params)
            return cursor.fetchone()

    def renumbered(self, conn: Connection, params: dict[str, Any], locked: Locked) -> Locked:
        """``locked`` as its change must see it: a document numbered below the newest version
        its path's table holds (``Locked.newest_kept``, PostgreSQL) renumbered after it (a
        large live version's own packed row has the document's number)."""
        if locked.newest_kept is None or locked.newest_kept <= locked.version:
            return locked
        number = locked.newest_kept + 1
        with driver_cursor(conn, "renumber") as cursor:
            cursor.execute(self._renumber, {**params, "n": number})
            at = cursor.fetchone()[0]
        return locked._replace(version=number, at=self._time_of(at), newest_kept=None)

    def _time_of(self, value: Any) -> datetime:
        """A stored timestamp as an aware UTC datetime (SQLite stores text)."""
        return utc(value if self._read_time is None else self._read_time(value))

    def last_at(self, conn: Connection, params: dict[str, Any]) -> datetime | None:
        """The time of the newest version the path of ``params`` holds in the table (a
        deletion marker, or a version a move carried away), None when it has none."""
        with driver_cursor(conn, "last_at") as cursor:
            cursor.execute(self._last_at, params)
            row = cursor.fetchone()
        return None if row is None or row[0] is None else self._time_of(row[0])

    def carry(self, conn: Connection, params: dict[str, Any]) -> None:
        """A moved large document's packed row copied to its new path (see :data:`_CARRY`)."""
        with driver_cursor(conn, "carry") as cursor:
            cursor.execute(self._carry, params)

    def run(
        self,
        conn: Connection,
        shape: Shape,
        params: dict[str, Any],
    ) -> Outcome:
        """Run the change ``shape`` = (doc, drop_chunks, keep, live, mark) in ``conn``'s
        transaction: ``doc``, then (``drop_chunks``) the path's chunks, the counters (the
        team's history counter grown by ``params["kept_stored"]``), then (``keep``) the
        live version it replaces copied into the table (SQLite: a large one as
        ``params["kept_packed"]``), (``live``) the new content's packed row
        (``params["live_packed"]``), and (``mark``) a deletion marker numbered
        ``params["mark"]``."""
        with driver_cursor(conn, "change") as cursor:
            if self.postgres:
                sql = self._built.get(shape) or self._built.setdefault(
                    shape, _pyformat(postgres_change(shape))
                )
                cursor.execute(sql, params)
                row = cursor.fetchone()
                team = None if row[2] is None else Team(*row[2:7])
                return Outcome(bool(row[0]), row[1], team, row[7])
            steps = self._steps.get(shape) or self._steps.setdefault(shape, sqlite_steps(shape))
            return self._run_sqlite(cursor, steps, params)

    def put(
        self, engine: Engine, record: bool, params: dict[str, Any]
    ) -> tuple[bool, str | None] | None:
        """PostgreSQL: a write of a document as ONE statement in autocommit (its own
        transaction: one round trip, one durable commit) — the row lock, the write's
        condition (``if_match``/``if_none_match`` in ``params``), then the change's steps
        (``record``: with the history's).

        Answers (True, the etag it replaced or None when it created the document), or
        (False, the current etag or None) when the condition refused (nothing written),
        or None when the write must run in a transaction instead (nothing written): the
        statement's snapshot was older than the row it locked (a concurrent writer of
        the document committed meanwhile, so the chunks and versions it read may be
        stale), a live version not older than the write's time, a concurrent creator, a
        counter refused, or the history to trim. The same bytes again change nothing:
        (True, their etag).
        """
        sql, args = self._put_statement(record, params)

        def execute(driver: Any) -> Any:
            from psycopg import RawCursor  # PostgreSQL only

            with RawCursor(driver) as cursor:
                cursor.execute(sql, args)
                return cursor.fetchone()

        try:
            row: Any = on_pooled(engine, execute, what="put")
        except sa.exc.DBAPIError as exc:
            if _in_transaction_instead(exc.orig):
                return None
            raise
        return _put_answer(row)

    def put_in(
        self, conn: Connection, record: bool, params: dict[str, Any]
    ) -> tuple[bool, str | None] | None:
        """:meth:`put` in the transaction of ``conn`` (an import batch's), inside a savepoint
        of its own sent with it in one round trip: the savepoint, the statement and the
        savepoint's release go in one pipeline, so a document costs the batch one round trip
        where the transaction path costs four (savepoint, lock, change, release).

        Answers as :meth:`put` does. When the statement fails, the savepoint is rolled back
        (the batch's earlier documents stay) before the answer: None when the write must
        run on the transaction path, else the error, raised as SQLAlchemy's (a
        ``lock_timeout`` among them)."""
        from psycopg import RawCursor  # PostgreSQL only

        sql, args = self._put_statement(record, params)
        driver: Any = conn.connection.dbapi_connection
        error = conn.dialect.loaded_dbapi.Error
        failed: Exception | None = None
        try:
            with driver.pipeline(), RawCursor(driver) as cursor:
                try:
                    driver.execute(_SAVEPOINT, prepare=False)
                    cursor.execute(sql, args)
                    driver.execute(_RELEASE, prepare=False)
                    row: Any = cursor.fetchone()  # one round trip: the pipeline's sync
                except error as exc:
                    # The statement's error, wherever psycopg reads it: at the fetch, or
                    # already while it sends the release (the server skips the release).
                    failed = exc
        except error as exc:
            # The pipeline's end after an error read while sending (``PipelineAborted``):
            # the statement's own error, caught above, is the one that counts.
            failed = failed or exc
        if failed is None:
            return _put_answer(row)
        with driver_cursor(conn, "rollback to savepoint") as rollback:
            rollback.execute(_ROLLBACK_TO)  # what the statement did, undone
            rollback.execute(_RELEASE)  # and the savepoint itself gone
        if _in_transaction_instead(failed):
            return None
        raise as_sqlalchemy(failed, "put", conn.dialect) from failed

    def _put_statement(self, record: bool, params: dict[str, Any]) -> tuple[str, list[Any]]:
        """The one-statement write's text (built once per variant) and its arguments."""
        variant = (record, record and params.get("live_packed") is not None)
        sql, names = self._puts.get(variant) or self._puts.setdefault(
            variant, _native(postgres_put(*variant))
        )
        return sql, [params[name] for name in names]

    @staticmethod
    def _run_sqlite(cursor: Any, steps: list[tuple[str, str]], params: dict[str, Any]) -> Outcome:
        got: dict[str, Any] = {}
        for name, sql in steps:
            cursor.execute(sql, params)
            if name in ("keep", "live", "mark", "gone"):  # inserts, a delete: nothing to read
                got[name] = ()
                continue
            row = cursor.fetchone()
            if row is None:
                break
            got[name] = row
            if name == "doc":  # the new content's number, for its packed row
                params = {**params, "version": row[0]}
        team = got.get("team")
        version: int | None = None
        if "mark" in got:
            version = int(params["mark"])
        elif "doc" in got:
            version = int(got["doc"][0])
        return Outcome(
            "doc" in got or "delete" in got or not any(n in ("doc", "delete") for n, _ in steps),
            got["space"][0] if "space" in got else None,
            None if team is None else Team(*team),
            version,
        )
