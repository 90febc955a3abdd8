"""The SQL store's change statement: what every write, delete and move of a document does
after it has locked the document row, in as few round trips as the dialect allows.

A change is up to six steps, always in this order (the store's lock order: document →
its chunks → space counter → team counter, then the history, which only inserts):

1. ``doc``: the document row itself — inserted (``ON CONFLICT DO NOTHING``: a concurrent
   creator makes it return nothing), updated, deleted, or left alone (a move does its
   own);
2. ``gone``: the path's chunks dropped (new content is chunked again by the next search);
3. ``space``: the space counter's compare-and-swap (``used + d <= cap``, a credit always
   passes) with the space's ``search_version`` bumped;
4. ``team``: the team (or instance) counter's compare-and-swap, and, in the same row
   update, the team's history counter grown by the version this change replaces;
5. ``ins``: the new version (or deletion marker) numbered after the path's newest.

On PostgreSQL the steps are data-modifying CTEs of ONE statement, each reading the one
before it (``FROM doc``, ``FROM space``, ...), so a step that refuses (the insert that
met a concurrent creator, a counter over its quota) stops every later one, the database
runs them in the order above, and the whole change is one round trip. SQLite has no
data-modifying CTEs; it runs the same step texts one by one on the driver's cursor
(in-process, so a statement costs microseconds), stopping at the first that refuses,
except for the history: it reads the path's newest version once before the team step
(``newest``) and appends the next one with a plain ``INSERT … VALUES``.
Either way :meth:`ChangeStatements.run` answers what each step did; the store raises
the refusal, which rolls the transaction back.

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
from typing import Any, Literal, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect, Engine

from cairn.db import driver_cursor, on_pooled
from cairn.store.sql_schema import memory_documents

#: What a change does to the document row (None: nothing; a move moves it itself).
DocStep = Literal["insert", "update", "delete"] | None

_ONE = "tenant_id = :t AND space_key = :k AND space_id = :sid AND path = :p"
#: The row lock a write takes before its change (SQLite: its writers queue on BEGIN
#: IMMEDIATE, so a plain read; PostgreSQL: FOR UPDATE).
_LOCK = f"SELECT size_bytes, etag FROM memory_documents WHERE {_ONE}"
#: ``{src}``/``{when}``: a FROM clause and an extra condition (the one-statement write's).
_DOC = {
    "insert": (
        "INSERT INTO memory_documents (tenant_id, space_key, path, space_id, visibility, "
        "content, size_bytes, etag, updated_at) "
        "SELECT :t, :k, :p, :sid, :vis, :content, :size, :etag, :now{src} WHERE true{when} "
        "ON CONFLICT (tenant_id, space_key, path) DO NOTHING RETURNING 1"
    ),
    "update": (
        "UPDATE memory_documents SET content = :content, size_bytes = :size, etag = :etag, "
        f"updated_at = :now{{src}} WHERE {_ONE}{{when}} RETURNING 1"
    ),
    "delete": f"DELETE FROM memory_documents WHERE {_ONE} RETURNING 1",
}
_GONE = f"DELETE FROM memory_chunks WHERE {_ONE}"
_SPACE = (
    "INSERT INTO memory_space_usage AS s (tenant_id, space_key, space_id, used_bytes, "
    "search_version) SELECT :t, :k, :sid, :fresh, 1{src} WHERE true "
    "ON CONFLICT (tenant_id, space_key) DO UPDATE SET "
    "used_bytes = CASE WHEN s.used_bytes + :d < 0 THEN 0 ELSE s.used_bytes + :d END, "
    "search_version = s.search_version + 1 "
    "WHERE :d <= 0 OR s.used_bytes + :d <= :cap RETURNING used_bytes"
)
#: The stored bytes of the version this change replaces (0: none, or a deletion marker).
_REPLACED = (
    "coalesce((SELECT CASE WHEN deleted THEN 0 ELSE stored_bytes END "
    f"FROM memory_document_versions WHERE {_ONE} ORDER BY version DESC LIMIT 1), 0)"
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
#: The number of the path's next version.
_NEXT = f"coalesce((SELECT max(version) FROM memory_document_versions WHERE {_ONE}), 0) + 1"
_VERSION_COLUMNS = (
    "INSERT INTO memory_document_versions (tenant_id, space_key, path, version, space_id, "
    "etag, size_bytes, stored_bytes, content, at, actor, deleted) "
)
_INS = (
    _VERSION_COLUMNS + f"SELECT :t, :k, :p, {_NEXT}, :sid, :vetag, :vsize, :stored, :packed, "
    ":at, :actor, :deleted{src} WHERE true{when} RETURNING version"
)
#: SQLite: the path's newest version and the stored bytes it would replace, read once
#: before the counters, so that neither the team step nor the insert reads the versions
#: table itself. An ``INSERT … SELECT`` that reads the table it inserts into is copied
#: through a temporary table first, and ``RETURNING`` buffers its row in another: the
#: plain insert below costs half as much (docs/history.md, "Measured").
_NEWEST = (
    "SELECT version, CASE WHEN deleted THEN 0 ELSE stored_bytes END "
    f"FROM memory_document_versions WHERE {_ONE} ORDER BY version DESC LIMIT 1"
)
_INS_VALUES = (
    _VERSION_COLUMNS
    + "VALUES (:t, :k, :p, :version, :sid, :vetag, :vsize, :stored, :packed, :at, :actor, "
    ":deleted)"
)


#: What the one-statement write raises to undo itself (a counter refused after the
#: document was written, or the history needs trimming): the write then runs in a
#: transaction, which refuses or trims exactly as before. A cast error (SQLSTATE 22P02)
#: because plain SQL has no RAISE; the text names it in the server's log.
_UNDO = "cairn write undone, retried in a transaction"
_UNDO_STATE = "22P02"


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
    version: int | None


def _grown(doc: DocStep, record: bool) -> str:
    """What the team's history counter grows by: the version this change replaces. A
    create replaces none that counts (the path's newest version, if any, is the marker of
    its deletion), so it skips the lookup."""
    return _REPLACED if record and doc != "insert" else "0"


def _native(sql: str) -> tuple[str, list[str]]:
    """``:name`` parameters as PostgreSQL's own ``$1``, and the names in their order: psycopg
    sends such a statement as it is, where it would parse a ``%(name)s`` one longer than
    4 KB again at every execution (its cache keeps shorter ones only)."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    return re.sub(r":(\w+)", number, sql), names


def _pyformat(sql: str) -> str:
    """``:name`` parameters as psycopg's ``%(name)s``."""
    return re.sub(r":(\w+)", r"%(\1)s", sql)


class ChangeStatements:
    """The change statement's texts for one dialect, built once per variant."""

    def __init__(self, dialect: Dialect) -> None:
        self.postgres = dialect.name == "postgresql"
        #: A timestamp as the dialect stores it (SQLite: SQLAlchemy's text form, which every
        #: other statement compares with); None: the driver's own.
        impl = memory_documents.c.updated_at.type.dialect_impl(dialect)
        self.bind_time: Callable[[Any], Any] | None = impl.bind_processor(dialect)
        self._built: dict[tuple[DocStep, bool, bool], str] = {}
        self._steps: dict[tuple[DocStep, bool, bool], list[tuple[str, str]]] = {}
        self._lock = _pyformat(_LOCK + " FOR UPDATE") if self.postgres else _LOCK
        self._puts: dict[bool, tuple[str, list[str]]] = {}

    def lock(self, conn: Connection, params: dict[str, Any]) -> tuple[int, str] | None:
        """Lock the document row of ``params`` (its address and path): its (size, etag),
        None when there is no document."""
        with driver_cursor(conn, "lock") as cursor:
            cursor.execute(self._lock, params)
            row = cursor.fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def run(
        self,
        conn: Connection,
        doc: DocStep,
        drop_chunks: bool,
        record: bool,
        params: dict[str, Any],
    ) -> Outcome:
        """Run the change in ``conn``'s transaction: ``doc``, then (``drop_chunks``) the
        path's chunks, the counters, and (``record``) the new version."""
        key = (doc, drop_chunks, record)
        with driver_cursor(conn, "change") as cursor:
            if self.postgres:
                sql = self._built.get(key) or self._built.setdefault(key, self._postgres(*key))
                cursor.execute(sql, params)
                row = cursor.fetchone()
                team = None if row[2] is None else Team(*row[2:7])
                return Outcome(bool(row[0]), row[1], team, row[7])
            steps = self._steps.get(key) or self._steps.setdefault(key, self._sqlite(*key))
            return self._run_sqlite(cursor, steps, params)

    def put(
        self, engine: Engine, record: bool, params: dict[str, Any]
    ) -> tuple[bool, str | None] | None:
        """PostgreSQL: a write of a document as ONE statement in autocommit (its own
        transaction: one round trip, one durable commit) — the row lock, the write's
        condition (``if_match``/``if_none_match`` in ``params``), then the change's steps.

        Answers (True, the etag it replaced or None when it created the document), or
        (False, the current etag or None) when the condition refused (nothing written),
        or None when the write must run in a transaction instead (nothing written): the
        statement's snapshot was older than the row it locked (a concurrent writer of
        the document committed meanwhile, so the chunks and versions it read may be
        stale), a concurrent creator, a counter refused, or the history to trim.
        """
        sql, names = self._puts.get(record) or self._puts.setdefault(
            record, _native(_postgres_put(record))
        )
        args = [params[name] for name in names]

        def execute(driver: Any) -> Any:
            from psycopg import RawCursor  # PostgreSQL only

            with RawCursor(driver) as cursor:
                cursor.execute(sql, args)
                return cursor.fetchone()

        try:
            row: Any = on_pooled(engine, execute, what="put")
        except sa.exc.DBAPIError as exc:
            raw = exc.orig
            if getattr(raw, "sqlstate", None) == _UNDO_STATE and _UNDO in str(raw):
                return None
            raise
        fresh, ok, etag, done, _ = row
        if not fresh or (ok and not done):
            return None
        return bool(ok), etag

    @staticmethod
    def _run_sqlite(cursor: Any, steps: list[tuple[str, str]], params: dict[str, Any]) -> Outcome:
        got: dict[str, Any] = {}
        for name, sql in steps:
            cursor.execute(sql, params)
            if name == "newest":  # a read: what the team step and the insert take
                newest = cursor.fetchone()
                version, replaced = (0, 0) if newest is None else newest
                params = {**params, "version": version + 1, "replaced": replaced}
                continue
            if name == "ins":  # a plain insert: its number is the one just read
                got[name] = (params["version"],)
                continue
            row = cursor.fetchone() if name != "gone" else ()
            if row is None:
                break
            got[name] = row
        team = got.get("team")
        return Outcome(
            "doc" in got or not any(name == "doc" for name, _ in steps),
            got["space"][0] if "space" in got else None,
            None if team is None else Team(*team),
            got["ins"][0] if "ins" in got else None,
        )

    @staticmethod
    def _sqlite(doc: DocStep, drop_chunks: bool, record: bool) -> list[tuple[str, str]]:
        steps = [] if doc is None else [("doc", _DOC[doc].format(src="", when=""))]
        if drop_chunks:
            steps.append(("gone", _GONE))
        steps.append(("space", _SPACE.format(src="")))
        if record:
            steps.append(("newest", _NEWEST))
        grown = ":replaced" if _grown(doc, record) != "0" else "0"
        steps.append(("team", _TEAM.format(grown=grown, src="")))
        if record:
            steps.append(("ins", _INS_VALUES))
        return steps

    @staticmethod
    def _postgres(doc: DocStep, drop_chunks: bool, record: bool) -> str:
        ctes: list[str] = []
        sources: list[str] = []
        if doc is not None:
            ctes.append(f"doc AS ({_DOC[doc].format(src='', when='')})")
            sources.append("doc")
        if drop_chunks:
            after_doc = " AND EXISTS (SELECT 1 FROM doc)" if doc is not None else ""
            ctes.append(f"gone AS ({_GONE}{after_doc} RETURNING 1)")
            # Read in full before the counters: the chunks are locked before the space row.
            sources.append("(SELECT count(*) FROM gone) AS g")
        src = f" FROM {', '.join(sources)}" if sources else ""
        ctes.append(f"space AS ({_SPACE.format(src=src)})")
        ctes.append(f"team AS ({_TEAM.format(grown=_grown(doc, record), src=' FROM space')})")
        if record:
            ctes.append(f"ins AS ({_INS.format(src=' FROM team', when='')})")
        done = "(SELECT count(*) FROM doc)" if doc is not None else "1"
        version = "(SELECT version FROM ins)" if record else "NULL"
        team_cols = ", ".join(f"tm.{c.strip()}" for c in _TEAM_COUNTERS.split(","))
        sql = (
            f"WITH {', '.join(ctes)} SELECT {done}, (SELECT used_bytes FROM space), "
            f"{team_cols}, {version} FROM (SELECT 1) AS one LEFT JOIN team AS tm ON true"
        )
        return _pyformat(sql)


def _postgres_put(record: bool) -> str:
    """The one-statement write (:meth:`ChangeStatements.put`): the change statement's steps
    after a row lock and the write's condition, all data-modifying CTEs of one statement.

    * ``pre``: the history's limits as the statement's snapshot sees them; a write that
      would trim or prune (the path's versions past the count, the team's history past
      its quota) takes the transaction path (``busy``) before locking anything;
    * ``cur``: the row lock; ``seen``: the same row in the statement's snapshot. A
      concurrent writer that committed while this statement waited for the lock leaves
      them different (PostgreSQL locks the newest row, the snapshot keeps the old one): the
      chunks and versions this snapshot reads may be stale, so nothing is written
      (``fresh`` false) and the write runs in a transaction, whose statements see it;
    * ``go``: the write's condition, the size delta, and whether the content changed;
    * the document inserted or updated, its old chunks dropped (new content only), the
      counters' compare-and-swap, the new version (new content only) — the change
      statement's own step texts, with the delta computed in SQL;
    * a refusal after the document was written (a counter over its quota, or a counter
      this very write created over it) or a history to trim fails the statement with
      :data:`_UNDO`, which undoes all of it.
    """
    go_d, go_fresh = "(SELECT d FROM go)", "(SELECT greatest(d, 0) FROM go)"

    def delta(sql: str) -> str:
        return re.sub(r":fresh\b", go_fresh, re.sub(r":d\b", go_d, sql))

    hist_quota = "coalesce({u}.history_quota_bytes, :hquota, {u}.quota_bytes{dflt})"
    busy = (
        f"{_NEXT} > coalesce(u.history_versions, :keep) OR coalesce(u.history_used_bytes, 0) "
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
        f"pre AS MATERIALIZED (SELECT r.replaced, {busy} AS busy FROM (SELECT {_REPLACED} "
        "AS replaced) AS r LEFT JOIN memory_tenant_usage AS u ON u.tenant_id = :tt)",
        "cur AS MATERIALIZED (SELECT ctid AS tid, size_bytes, etag FROM memory_documents "
        f"WHERE {_ONE} AND NOT (SELECT busy FROM pre) FOR UPDATE)",
        f"seen AS MATERIALIZED (SELECT ctid AS tid FROM memory_documents WHERE {_ONE})",
        "st AS MATERIALIZED (SELECT c.etag AS cur_etag, coalesce(c.size_bytes, 0) AS cur_size, "
        "NOT pre.busy AND c.tid IS NOT DISTINCT FROM s.tid AS fresh, pre.replaced "
        "FROM pre LEFT JOIN cur AS c ON true LEFT JOIN seen AS s ON true)",
        # The condition as check_precondition states it: if_match demands that etag (an
        # absent document never matches), if_none_match demands absence.
        "go AS MATERIALIZED (SELECT cur_etag, fresh, fresh "
        "AND (CAST(:if_match AS text) IS NULL OR cur_etag IS NOT DISTINCT FROM :if_match) "
        "AND NOT (:if_none_match AND cur_etag IS NOT NULL) AS ok, "
        ":size - cur_size AS d, cur_etag IS DISTINCT FROM :etag AS changed, replaced FROM st)",
        "ins_doc AS ("
        + _DOC["insert"].format(src=" FROM go", when=" AND go.ok AND go.cur_etag IS NULL")
        + ")",
        "upd_doc AS ("
        + _DOC["update"].format(src=" FROM go", when=" AND go.ok AND go.cur_etag IS NOT NULL")
        + ")",
        "doc AS (SELECT 1 FROM ins_doc UNION ALL SELECT 1 FROM upd_doc)",
        f"gone AS ({_GONE} AND EXISTS (SELECT 1 FROM upd_doc) AND (SELECT changed FROM go) "
        "RETURNING 1)",
        # Read in full before the counters: the chunks are locked before the space row.
        delta(f"space AS ({_SPACE.format(src=' FROM doc, (SELECT count(*) FROM gone) AS g')})"),
        delta(f"team AS ({_TEAM.format(grown=grown, src=' FROM space')})"),
    ]
    undo = (
        "(sp.used_bytes IS NULL OR tm.used_bytes IS NULL "
        "OR (go.d > 0 AND (sp.used_bytes > :cap OR tm.used_bytes > tm.quota_bytes))"
    )
    versions = "NULL"
    if record:
        ctes.append(
            f"ins AS ({_INS.format(src=' FROM team', when=' AND (SELECT changed FROM go)')})"
        )
        versions = "(SELECT version FROM ins)"
        undo += (
            f" OR {versions} > coalesce(tm.history_versions, :keep) "
            f"OR ({versions} IS NOT NULL AND tm.history_used_bytes > "
            f"{hist_quota.format(u='tm', dflt='')})"
        )
    undo += ")"
    sql = (
        f"WITH {', '.join(ctes)} SELECT go.fresh, go.ok, go.cur_etag, "
        "(SELECT count(*) FROM doc) AS done, "
        f"CAST(CASE WHEN (SELECT count(*) FROM doc) > 0 AND {undo} THEN '{_UNDO}' END AS integer) "
        "FROM go LEFT JOIN space AS sp ON true LEFT JOIN team AS tm ON true"
    )
    return sql
