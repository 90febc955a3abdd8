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
steps, in this order on PostgreSQL (the store's lock order: document → its chunks → space
counter → team counter, then the history, which only inserts):

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

The statements are SQL text run on the driver's own cursor: SQLAlchemy's per-statement
work (cache key, parameter and result processing) cost more than SQLite's execution of
them, and as much as a round trip on PostgreSQL.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect, Engine

from keepstone.db import as_sqlalchemy, driver_cursor, on_pooled, utc
from keepstone.store.sql_schema import memory_documents
from keepstone.store.version_pack import COMPRESS_FROM

#: What a change does to the document row (None: nothing; a move moves it itself).
DocStep = Literal["insert", "update", "delete"] | None

_ONE = "tenant_id = :t AND space_key = :k AND space_id = :sid AND path = :p"
#: :data:`_ONE` for ``memory_documents AS d`` among other tables.
_D_ONE = "d.tenant_id = :t AND d.space_key = :k AND d.space_id = :sid AND d.path = :p"
#: A large live version's row in the table, for ``memory_documents AS d``.
_LIVE_ROW = (
    "(SELECT v.stored_bytes FROM memory_document_versions AS v WHERE v.tenant_id = d.tenant_id "
    "AND v.space_key = d.space_key AND v.space_id = d.space_id AND v.path = d.path "
    "AND v.version = d.version)"
)
#: A live version is large from this many bytes: its packed row is in the table.
_LARGE = f"d.size_bytes >= {COMPRESS_FROM}"
#: The document row of :data:`_ONE`, as ``d``.
_ROW = f"FROM memory_documents AS d WHERE {_ONE}"
#: The live version has no row in the table yet (for ``_KEEP``'s ``{when}``).
_UNKEPT = (
    " AND NOT EXISTS (SELECT 1 FROM memory_document_versions AS v WHERE "
    "v.tenant_id = memory_documents.tenant_id AND v.space_key = memory_documents.space_key "
    "AND v.space_id = memory_documents.space_id AND v.path = memory_documents.path "
    "AND v.version = memory_documents.version)"
)
#: The row lock a write takes before its change (SQLite: its writers queue on BEGIN
#: IMMEDIATE, so a plain read; PostgreSQL: FOR UPDATE), with the stored bytes of a large
#: live version's row in the table (``{row}``; NULL: none, the change copies the version)
#: and, on SQLite, a large version's content for the store to pack (``{content}``).
_LOCK = (
    "SELECT d.size_bytes, d.etag, d.version, {row}, {content}, d.updated_at, {newest} "
    f"FROM memory_documents AS d WHERE {_ONE}"
)
#: The path's newest version in the table (PostgreSQL's lock, for ``{newest}``).
_NEWEST_KEPT = (
    "(SELECT max(v.version) FROM memory_document_versions AS v WHERE v.tenant_id = d.tenant_id "
    "AND v.space_key = d.space_key AND v.space_id = d.space_id AND v.path = d.path)"
)
#: The number of a new path's first version: after the versions an earlier document at
#: the path left (the table holds them; a path never written starts at 1). The parameters
#: are cast to their columns' types: the insert that numbers a document with it also
#: stores them, and PostgreSQL must deduce one type for each.
_OF_PATH = (
    "FROM memory_document_versions WHERE tenant_id = CAST(:t AS text) "
    "AND space_key = CAST(:k AS varchar) AND space_id = CAST(:sid AS text) "
    "AND path = CAST(:p AS text)"
)
_NEXT = f"coalesce((SELECT max(version) {_OF_PATH}), 0) + 1"
#: The time of the path's newest version in the table (NULL: it has none), found by the
#: primary key: ``max(at)`` would walk the team's ``at`` index back to the path's rows, all
#: of the team's history for a path that has none.
_NEWEST_AT = f"(SELECT at {_OF_PATH} ORDER BY version DESC LIMIT 1)"
#: A document numbered before a version its path holds already (see ``Locked.newest_kept``)
#: renumbered after it, and timed no earlier than it.
_RENUMBER = (
    f"UPDATE memory_documents SET version = :n, updated_at = greatest(updated_at, {_NEWEST_AT}) "
    f"WHERE {_ONE} RETURNING updated_at"
)
#: ``{src}``/``{when}``: a FROM clause and an extra condition (the one-statement write's).
_DOC = {
    "insert": (
        "INSERT INTO memory_documents (tenant_id, space_key, path, space_id, visibility, "
        "content, size_bytes, etag, updated_at, version, actor) "
        f"SELECT :t, :k, :p, :sid, :vis, :content, :size, :etag, {{at}}, {_NEXT}, :actor"
        "{src} WHERE true{when} "
        "ON CONFLICT (tenant_id, space_key, path) DO NOTHING RETURNING version"
    ),
    "update": (
        "UPDATE memory_documents SET content = :content, size_bytes = :size, etag = :etag, "
        "updated_at = :now, version = memory_documents.version + 1, actor = :actor"
        f"{{src}} WHERE {_ONE}{{when}} RETURNING memory_documents.version"
    ),
    "delete": f"DELETE FROM memory_documents WHERE {_ONE} RETURNING 1",
}
#: A new document's time (``{at}`` of ``_DOC["insert"]``): the write's, but never before the
#: newest version its path holds already (a clock that stepped back, or a replica's clock
#: behind another's, would time it before the deletion it follows). Its own lookup of the
#: path's versions, which a path never written finds empty at once.
_INSERT_AT = {
    "sqlite": f"max(:now, coalesce({_NEWEST_AT}, :now))",
    "postgresql": f"greatest(CAST(:now AS timestamptz), {_NEWEST_AT})",
}
#: ``_DOC`` as each dialect runs it.
_DOCS = {
    name: {**_DOC, "insert": _DOC["insert"].replace("{at}", at)} for name, at in _INSERT_AT.items()
}
#: The time of a path's newest version in the table (a move's target without a document).
_LAST_AT = f"SELECT {_NEWEST_AT}"
#: The document is not in the statement's snapshot (PostgreSQL's insert, for ``{when}``).
_ABSENT = f" AND NOT EXISTS (SELECT 1 FROM memory_documents WHERE {_ONE})"
_GONE = f"DELETE FROM memory_chunks WHERE {_ONE}"
_SPACE = (
    "INSERT INTO memory_space_usage AS s (tenant_id, space_key, space_id, used_bytes, "
    "search_version) SELECT :t, :k, :sid, :fresh, 1{src} WHERE true "
    "ON CONFLICT (tenant_id, space_key) DO UPDATE SET "
    "used_bytes = CASE WHEN s.used_bytes + :d < 0 THEN 0 ELSE s.used_bytes + :d END, "
    "search_version = s.search_version + 1 "
    "WHERE :d <= 0 OR s.used_bytes + :d <= :cap RETURNING used_bytes"
)
_TEAM_COUNTERS = (
    "used_bytes, quota_bytes, history_used_bytes, history_quota_bytes, history_versions"
)
_TEAM = (
    "INSERT INTO memory_tenant_usage AS u (tenant_id, used_bytes, quota_bytes, "
    "history_used_bytes) SELECT :tt, :fresh, :default_quota, {grown}{src} WHERE true "
    "ON CONFLICT (tenant_id) DO UPDATE SET "
    "used_bytes = CASE WHEN u.used_bytes + :d < 0 THEN 0 ELSE u.used_bytes + :d END, "
    "history_used_bytes = u.history_used_bytes + {grown} "
    f"WHERE :d <= 0 OR u.used_bytes + :d <= u.quota_bytes RETURNING {_TEAM_COUNTERS}"
)
_VERSION_COLUMNS = (
    "INSERT INTO memory_document_versions (tenant_id, space_key, path, version, space_id, "
    "etag, size_bytes, stored_bytes, content, at, actor, deleted) "
)
#: The live version, copied from its row before the change replaces it: a large one as
#: the store packed it (SQLite: ``:kept_packed``, ``:kept_stored`` bytes), a small one as
#: its text after a zero byte, as version_pack stores a small version (made in SQL).
_KEEP = (
    _VERSION_COLUMNS + "SELECT tenant_id, space_key, path, version, space_id, etag, "
    "size_bytes, {stored}, {packed}, updated_at, actor, false "
    f"FROM memory_documents{{src}} WHERE {_ONE}{{when}}"
)
_RAW = {
    "sqlite": "CAST(X'00' || content AS BLOB)",
    "postgresql": "decode('00', 'hex') || convert_to(content, 'UTF8')",
}
#: ``_KEEP``'s stored bytes and content per dialect.
_KEPT = {
    "sqlite": {"stored": ":kept_stored", "packed": f"coalesce(:kept_packed, {_RAW['sqlite']})"},
    "postgresql": {"stored": "size_bytes + 1", "packed": _RAW["postgresql"]},
}
#: The packed row of a large new content, numbered as its document (``{version}``).
_LIVE = (
    _VERSION_COLUMNS + "SELECT :t, :k, :p, {version}, :sid, :etag, :size, :live_stored, "
    ":live_packed, :now, :actor, false{src} WHERE true"
)
#: A moved large document's packed row, carried from the path it left (``:p``, its version
#: ``:v``) to the path it now holds as version ``:moved`` (``:to``). None there (a large
#: version kept before its packed row was): nothing, and SQL keeps it as it is once replaced.
_CARRY = (
    _VERSION_COLUMNS + "SELECT tenant_id, space_key, :to, :moved, space_id, etag, size_bytes, "
    f"stored_bytes, content, :at, :actor, false FROM memory_document_versions "
    f"WHERE {_ONE} AND version = :v"
)
#: A deletion marker: the path holds nothing from ``:at`` on.
_MARK = (
    _VERSION_COLUMNS + "SELECT :t, :k, :p, :mark, :sid, '', 0, 0, NULL, :at, :actor, true"
    "{src} WHERE true"
)


#: What the one-statement write raises to undo itself (a counter refused after the
#: document was written, or the history needs trimming): the write then runs in a
#: transaction, which refuses or trims exactly as before. A cast error (SQLSTATE 22P02)
#: because plain SQL has no RAISE; the text names it in the server's log.
_UNDO = "keepstone write undone, retried in a transaction"
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
    return (state == _UNDO_STATE and _UNDO in str(raw)) or state == _DUPLICATE_STATE


def _put_answer(row: Any) -> tuple[bool, str | None] | None:
    """The one-statement write's row as :meth:`ChangeStatements.put` answers it."""
    fresh, ok, etag, done, changed, _ = row
    if not fresh or (ok and changed and not done):
        return None
    return bool(ok), etag


def _native(sql: str) -> tuple[str, list[str]]:
    """``:name`` parameters as PostgreSQL's own ``$1``, and the names in their order: psycopg
    sends such a statement as it is, where it would parse a ``%(name)s`` one longer than
    4 KB again at every execution (its cache keeps shorter ones only)."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    return re.sub(r"(?<!:):(\w+)", number, sql), names


def _pyformat(sql: str) -> str:
    """``:name`` parameters as psycopg's ``%(name)s``."""
    return re.sub(r"(?<!:):(\w+)", r"%(\1)s", sql)


#: A change's shape: (doc, drop_chunks, keep, live, mark).
Shape = tuple[DocStep, bool, bool, bool, bool]


class ChangeStatements:
    """The change statement's texts for one dialect, built once per variant."""

    def __init__(self, dialect: Dialect, history: bool = True) -> None:
        self.postgres = dialect.name == "postgresql"
        name = "postgresql" if self.postgres else "sqlite"
        self._keep = _KEEP.format(**_KEPT[name], src="{src}", when="{when}")
        #: A timestamp as the dialect stores it (SQLite: SQLAlchemy's text form, which every
        #: other statement compares with); None: the driver's own.
        impl = memory_documents.c.updated_at.type.dialect_impl(dialect)
        self.bind_time: Callable[[Any], Any] | None = impl.bind_processor(dialect)
        self._read_time: Callable[[Any], Any] | None = impl.result_processor(dialect, None)
        self._doc = _DOCS[name]
        self._built: dict[Shape, str] = {}
        self._steps: dict[Shape, list[tuple[str, str]]] = {}
        # Without history (the benchmark's baseline) a lock reads no row of it. On
        # PostgreSQL neither: a lock that waited for a concurrent writer returns that
        # writer's row, but its subqueries read the snapshot from before the wait, which
        # lacks the writer's packed row; the change statement, a new snapshot, looks.
        row = (
            f"CASE WHEN {_LARGE} THEN {_LIVE_ROW} END" if history and not self.postgres else "NULL"
        )
        # SQLite packs a large version when a change replaces it: the lock reads its content
        # (the store ignores it where an earlier store's packed row is there already).
        content = (
            f"CASE WHEN {_LARGE} THEN d.content END" if history and not self.postgres else "NULL"
        )
        newest = _NEWEST_KEPT if history and self.postgres else "NULL"
        lock = _LOCK.format(row=row, content=content, newest=newest)
        self._lock = _pyformat(lock + " FOR UPDATE OF d") if self.postgres else lock
        self._puts: dict[tuple[bool, bool], tuple[str, list[str]]] = {}
        self._carry = _pyformat(_CARRY) if self.postgres else _CARRY
        self._last_at = _pyformat(_LAST_AT) if self.postgres else _LAST_AT
        self._renumber = _pyformat(_RENUMBER)

    def lock(self, conn: Connection, params: dict[str, Any]) -> Locked | None:
        """Lock the document row of ``params`` (its address and path); None when there is
        no document."""
        with driver_cursor(conn, "lock") as cursor:
            cursor.execute(self._lock, params)
            row = cursor.fetchone()
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
                    shape, self._postgres(*shape)
                )
                cursor.execute(sql, params)
                row = cursor.fetchone()
                team = None if row[2] is None else Team(*row[2:7])
                return Outcome(bool(row[0]), row[1], team, row[7])
            steps = self._steps.get(shape) or self._steps.setdefault(shape, self._sqlite(*shape))
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
        driver: Any = conn.connection.driver_connection
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
            variant, _native(_postgres_put(*variant))
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

    def _sqlite(
        self, doc: DocStep, drop_chunks: bool, keep: bool, live: bool, mark: bool
    ) -> list[tuple[str, str]]:
        # The copy of the live version reads the row before the document step changes it.
        steps = [("keep", self._keep.format(src="", when=""))] if keep else []
        if doc is not None:
            # An insert or update answers the document's new version number.
            name = "delete" if doc == "delete" else "doc"
            steps.append((name, self._doc[doc].format(src="", when="")))
        if drop_chunks:
            steps.append(("gone", _GONE))
        steps.append(("space", _SPACE.format(src="")))
        steps.append(("team", _TEAM.format(grown=":kept_stored", src="")))
        if live:
            steps.append(("live", _LIVE.format(version=":version", src="")))
        if mark:
            steps.append(("mark", _MARK.format(src="")))
        return steps

    def _postgres(self, doc: DocStep, drop_chunks: bool, keep: bool, live: bool, mark: bool) -> str:
        ctes: list[str] = []
        sources: list[str] = []
        if doc is not None:
            # An insert follows a lock that found no document. When the statement's
            # snapshot has one (created since the lock, perhaps being deleted by a writer
            # the insert would wait for, whose kept versions this snapshot lacks), a number
            # taken from it could be one that deletion keeps: insert nothing, and the store
            # locks again.
            when = _ABSENT if doc == "insert" else ""
            ctes.append(f"doc AS ({self._doc[doc].format(src='', when=when)})")
            sources.append("doc")
        if drop_chunks:
            after_doc = " AND EXISTS (SELECT 1 FROM doc)" if doc is not None else ""
            ctes.append(f"gone AS ({_GONE}{after_doc} RETURNING 1)")
            # Read in full before the counters: the chunks are locked before the space row.
            sources.append("(SELECT count(*) FROM gone) AS g")
        src = f" FROM {', '.join(sources)}" if sources else ""
        ctes.append(f"space AS ({_SPACE.format(src=src)})")
        # What the replaced version adds to the history: its packed row's bytes, or its
        # text's after a zero byte (copied below) — in the statement's snapshot, the
        # document row as it was before ``doc`` changed it.
        grown = f"coalesce((SELECT coalesce({_LIVE_ROW}, d.size_bytes + 1) {_ROW}), 0)"
        ctes.append(f"team AS ({_TEAM.format(grown=grown if keep else '0', src=' FROM space')})")
        if keep:
            # The version replaced, unless its packed row is in the table already.
            body = self._keep.format(src=", (SELECT 1 FROM team) AS tm", when=_UNKEPT)
            ctes.append(f"kept AS ({body} RETURNING 1)")
        if live:
            body = _LIVE.format(version="(SELECT version FROM doc)", src=" FROM team")
            ctes.append(f"lived AS ({body} RETURNING 1)")
        if mark:
            ctes.append(f"marked AS ({_MARK.format(src=' FROM team')} RETURNING version)")
        done = "(SELECT count(*) FROM doc)" if doc is not None else "1"
        if mark:
            version = "(SELECT version FROM marked)"
        elif doc in ("insert", "update"):
            version = "(SELECT version FROM doc)"
        else:
            version = "NULL"
        team_cols = ", ".join(f"tm.{c.strip()}" for c in _TEAM_COUNTERS.split(","))
        sql = (
            f"WITH {', '.join(ctes)} SELECT {done}, (SELECT used_bytes FROM space), "
            f"{team_cols}, {version} FROM (SELECT 1) AS one LEFT JOIN team AS tm ON true"
        )
        return _pyformat(sql)


def _postgres_put(record: bool, live: bool) -> str:
    """The one-statement write (:meth:`ChangeStatements.put`): the change statement's steps
    after a row lock and the write's condition, all data-modifying CTEs of one statement
    (``record``: with the history's; ``live``: the new content is large, its packed row
    written too).

    * ``pre``: the live version's number, what it adds to the history when replaced, and
      whether its packed row is in the table already (a large one), as the statement's
      snapshot sees them, and the history's limits; a write that would trim or prune (the
      path's versions past the count, the team's history past its quota) takes the
      transaction path (``busy``) before locking anything;
    * ``cur``: the row lock; ``seen``: the same row in the statement's snapshot. A
      concurrent writer that committed while this statement waited for the lock leaves
      them different (PostgreSQL locks the newest row, the snapshot keeps the old one): the
      chunks and versions this snapshot reads may be stale, so nothing is written
      (``fresh`` false) and the write runs in a transaction, whose statements see it.
      Nor when the live version is not older than this write's time (``:now``, read before
      the statement: a writer committed in between): the transaction path reads its time
      under the lock, so a path's versions follow each other in time as in number;
    * ``go``: the write's condition, the size delta, and whether the content changed (the
      same bytes again change nothing);
    * the document inserted or updated, its old chunks dropped, the counters'
      compare-and-swap, the replaced small version copied from the snapshot's row, the new
      large content's packed row — the change statement's own step texts, with the delta
      computed in SQL;
    * a refusal after the document was written (a counter over its quota, or a counter
      this very write created over it) or a history to trim fails the statement with
      :data:`_UNDO`, which undoes all of it.
    """
    go_d, go_fresh = "(SELECT d FROM go)", "(SELECT greatest(d, 0) FROM go)"

    def delta(sql: str) -> str:
        return re.sub(r":fresh\b", go_fresh, re.sub(r":d\b", go_d, sql))

    hist_quota = "coalesce({u}.history_quota_bytes, :hquota, {u}.quota_bytes{dflt})"
    replaced = (
        f"CASE WHEN {_LARGE} THEN coalesce({_LIVE_ROW}, d.size_bytes + 1) ELSE d.size_bytes + 1 END"
    )
    busy = (
        "r.next > coalesce(u.history_versions, :keep) OR coalesce(u.history_used_bytes, 0) "
        f"+ r.replaced > {hist_quota.format(u='u', dflt=', :default_quota')}"
        if record
        else "false"
    )
    grown = (
        "(SELECT CASE WHEN changed AND cur_etag IS NOT NULL THEN replaced ELSE 0 END FROM go)"
        if record
        else "0"
    )
    ctes = [
        # The document row read once (none for a new path), beside the team's counter.
        "pre AS MATERIALIZED (SELECT r.replaced, r.prekept, "
        f"{busy} AS busy FROM (SELECT coalesce({replaced}, 0) AS replaced, "
        f"coalesce({_LARGE} AND {_LIVE_ROW} IS NOT NULL, false) AS prekept, "
        f"coalesce(d.version + 1, {_NEXT}) AS next FROM (SELECT 1) AS one "
        f"LEFT JOIN memory_documents AS d ON {_D_ONE}) AS r "
        "LEFT JOIN memory_tenant_usage AS u ON u.tenant_id = :tt)",
        "cur AS MATERIALIZED (SELECT ctid AS tid, size_bytes, etag FROM memory_documents "
        f"WHERE {_ONE} AND NOT (SELECT busy FROM pre) FOR UPDATE)",
        "seen AS MATERIALIZED (SELECT ctid AS tid, updated_at AS at FROM memory_documents "
        f"WHERE {_ONE})",
        "st AS MATERIALIZED (SELECT c.etag AS cur_etag, coalesce(c.size_bytes, 0) AS cur_size, "
        "NOT pre.busy AND c.tid IS NOT DISTINCT FROM s.tid AND (s.at IS NULL OR s.at < :now) "
        "AS fresh, pre.replaced, pre.prekept "
        "FROM pre LEFT JOIN cur AS c ON true LEFT JOIN seen AS s ON true)",
        # The condition as check_precondition states it: if_match demands that etag (an
        # absent document never matches), if_none_match demands absence.
        "go AS MATERIALIZED (SELECT cur_etag, fresh, fresh "
        "AND (CAST(:if_match AS text) IS NULL OR cur_etag IS NOT DISTINCT FROM :if_match) "
        "AND NOT (:if_none_match AND cur_etag IS NOT NULL) AS ok, "
        ":size - cur_size AS d, cur_etag IS DISTINCT FROM :etag AS changed, replaced, prekept "
        "FROM st)",
        "ins_doc AS ("
        + _DOCS["postgresql"]["insert"].format(
            src=" FROM go", when=" AND go.ok AND go.cur_etag IS NULL"
        )
        + ")",
        "upd_doc AS ("
        + _DOCS["postgresql"]["update"].format(
            src=" FROM go", when=" AND go.ok AND go.changed AND go.cur_etag IS NOT NULL"
        )
        + ")",
        "doc AS (SELECT version FROM ins_doc UNION ALL SELECT version FROM upd_doc)",
        f"gone AS ({_GONE} AND EXISTS (SELECT 1 FROM upd_doc) RETURNING 1)",
        # Read in full before the counters: the chunks are locked before the space row.
        delta(f"space AS ({_SPACE.format(src=' FROM doc, (SELECT count(*) FROM gone) AS g')})"),
        delta(f"team AS ({_TEAM.format(grown=grown, src=' FROM space')})"),
    ]
    undo = (
        "(sp.used_bytes IS NULL OR tm.used_bytes IS NULL "
        "OR (go.d > 0 AND (sp.used_bytes > :cap OR tm.used_bytes > tm.quota_bytes))"
    )
    if record:
        # The snapshot's row, as it was before upd_doc changed it: a small version's text.
        keep = _KEEP.format(
            **_KEPT["postgresql"],
            src=", (SELECT 1 FROM team) AS tm",
            when=" AND EXISTS (SELECT 1 FROM upd_doc) AND NOT (SELECT prekept FROM go)",
        )
        ctes.append(f"kept AS ({keep} RETURNING 1)")
        if live:
            body = _LIVE.format(version="(SELECT version FROM doc)", src=" FROM team")
            ctes.append(f"lived AS ({body} RETURNING 1)")
        undo += (
            " OR (SELECT version FROM doc) > coalesce(tm.history_versions, :keep) "
            "OR ((SELECT changed AND cur_etag IS NOT NULL FROM go) AND tm.history_used_bytes > "
            f"{hist_quota.format(u='tm', dflt='')})"
        )
    undo += ")"
    sql = (
        f"WITH {', '.join(ctes)} SELECT go.fresh, go.ok, go.cur_etag, "
        "(SELECT count(*) FROM doc) AS done, go.changed, "
        f"CAST(CASE WHEN (SELECT count(*) FROM doc) > 0 AND {undo} THEN '{_UNDO}' END AS integer) "
        "FROM go LEFT JOIN space AS sp ON true LEFT JOIN team AS tm ON true"
    )
    return sql
