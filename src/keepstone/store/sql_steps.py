"""The SQL text of the SQL store's change statement: each step of a change, written once in
plain SQL with ``:name`` parameters, and the statements built from those steps
(:mod:`keepstone.store.sql_write` runs them; its docstring says what each step does).

A step's text is a template whose ``{named}`` parts are filled when a statement is built:
``{src}`` and ``{when}`` (a FROM clause and an extra condition: how a step reads the step
before it inside one PostgreSQL statement), ``{d}`` and ``{fresh}`` (the size delta and
what a new counter starts at: the parameters ``:d`` and ``:fresh``, or, in the
one-statement write, the delta that statement computes). Filled once per variant; every
text here is the same for every call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Literal

from keepstone.store.version_pack import COMPRESS_FROM

#: What a change does to the document row (None: nothing; a move moves it itself).
DocStep = Literal["insert", "update", "delete"] | None
#: A change's shape: (doc, drop_chunks, keep, live, mark).
Shape = tuple[DocStep, bool, bool, bool, bool]

# --- Addressing ----------------------------------------------------------------------------

_ONE = "tenant_id = :t AND space_key = :k AND space_id = :sid AND path = :p"
#: :data:`_ONE` for ``memory_documents AS d`` among other tables.
_D_ONE = "d.tenant_id = :t AND d.space_key = :k AND d.space_id = :sid AND d.path = :p"
#: The document row of :data:`_ONE`, as ``d``.
_ROW = "FROM memory_documents AS d WHERE " + _ONE
#: A large live version's row in the table, for ``memory_documents AS d``.
_LIVE_ROW = (
    "(SELECT v.stored_bytes FROM memory_document_versions AS v WHERE v.tenant_id = d.tenant_id "
    "AND v.space_key = d.space_key AND v.space_id = d.space_id AND v.path = d.path "
    "AND v.version = d.version)"
)
#: A live version is large from this many bytes: its packed row is in the table.
_LARGE = f"d.size_bytes >= {COMPRESS_FROM}"
#: The live version has no row in the table yet (for ``_KEEP``'s ``{when}``).
_UNKEPT = (
    " AND NOT EXISTS (SELECT 1 FROM memory_document_versions AS v WHERE "
    "v.tenant_id = memory_documents.tenant_id AND v.space_key = memory_documents.space_key "
    "AND v.space_id = memory_documents.space_id AND v.path = memory_documents.path "
    "AND v.version = memory_documents.version)"
)

#: PostgreSQL: wait for the path's lock (:func:`path_lock`), held to the transaction's end.
PATH_LOCK = "SELECT pg_advisory_xact_lock(CAST(:path_lock AS bigint))"


def path_lock(address: Mapping[str, str], path: str) -> int:
    """The key of a document path's advisory lock on PostgreSQL: 64 bits of a hash of its
    team, space and path (``address``: ``t`` and ``k``), as ``pg_advisory_xact_lock``'s one
    signed bigint. Every writer of the path takes it first, before any row, so writers of
    the same paths queue on it instead of meeting in a cycle of row waits (a path with no
    document yet has no row to lock, and a move changes a row's path); two paths whose keys
    collide only queue too."""
    name = "\0".join((address["t"], address["k"], path)).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(name, digest_size=8).digest(), "big", signed=True)


# --- A path's versions -----------------------------------------------------------------------

#: The path's newest version in the table (PostgreSQL's lock, for ``{newest}``).
_NEWEST_KEPT = (
    "(SELECT max(v.version) FROM memory_document_versions AS v WHERE v.tenant_id = d.tenant_id "
    "AND v.space_key = d.space_key AND v.space_id = d.space_id AND v.path = d.path)"
)
#: The path's rows in the table. The parameters are cast to their columns' types: the
#: insert that numbers a document with :data:`_NEXT` also stores them, and PostgreSQL must
#: deduce one type for each.
_OF_PATH = (
    "FROM memory_document_versions WHERE tenant_id = CAST(:t AS text) "
    "AND space_key = CAST(:k AS varchar) AND space_id = CAST(:sid AS text) "
    "AND path = CAST(:p AS text)"
)
#: The number of a new path's first version: after the versions an earlier document at
#: the path left (the table holds them; a path never written starts at 1).
_NEXT = f"coalesce((SELECT max(version) {_OF_PATH}), 0) + 1"
#: The time of the path's newest version in the table (NULL: it has none), found by the
#: primary key: ``max(at)`` would walk the team's ``at`` index back to the path's rows, all
#: of the team's history for a path that has none.
_NEWEST_AT = f"(SELECT at {_OF_PATH} ORDER BY version DESC LIMIT 1)"

# --- Statements of their own ------------------------------------------------------------------

#: The row lock a write takes before its change (SQLite: its writers queue on BEGIN
#: IMMEDIATE, so a plain read; PostgreSQL: FOR UPDATE), with the stored bytes of a large
#: live version's row in the table (``{row}``; NULL: none, the change copies the version),
#: on SQLite a large version's content for the store to pack (``{content}``), and on
#: PostgreSQL the path's newest version in the table (``{newest}``).
_LOCK = (
    "SELECT d.size_bytes, d.etag, d.version, {row}, {content}, d.updated_at, {newest} "
    "FROM memory_documents AS d WHERE " + _ONE
)
#: A document numbered before a version its path holds already (see ``Locked.newest_kept``)
#: renumbered after it, and timed no earlier than it.
RENUMBER = (
    f"UPDATE memory_documents SET version = :n, updated_at = greatest(updated_at, {_NEWEST_AT}) "
    f"WHERE {_ONE} RETURNING updated_at"
)
#: The time of a path's newest version in the table (a move's target without a document).
LAST_AT = f"SELECT {_NEWEST_AT}"
_VERSION_COLUMNS = (
    "INSERT INTO memory_document_versions (tenant_id, space_key, path, version, space_id, "
    "etag, size_bytes, stored_bytes, content, at, actor, action, actor_kind, deleted) "
)
#: A moved large document's packed row, carried from the path it left (``:p``, its version
#: ``:v``) to the path it now holds as version ``:moved`` (``:to``). None there (a large
#: version kept before its packed row was): nothing, and SQL keeps it as it is once replaced.
CARRY = (
    _VERSION_COLUMNS + "SELECT tenant_id, space_key, :to, :moved, space_id, etag, size_bytes, "
    "stored_bytes, content, :at, :actor, 'move', :kind, false FROM memory_document_versions "
    f"WHERE {_ONE} AND version = :v"
)


def lock_statement(postgres: bool, history: bool) -> str:
    """The row lock (:data:`_LOCK`) as the dialect takes it. Without history (the
    benchmark's baseline) it reads no row of the table. On PostgreSQL neither: a lock that
    waited for a concurrent writer returns that writer's row, but its subqueries read the
    snapshot from before the wait, which lacks the writer's packed row; the change
    statement, a new snapshot, looks. SQLite packs a large version when a change replaces
    it: the lock reads its content (the store ignores it where an earlier store's packed
    row is there already)."""
    sqlite_history = history and not postgres
    lock = _LOCK.format(
        row=f"CASE WHEN {_LARGE} THEN {_LIVE_ROW} END" if sqlite_history else "NULL",
        content=f"CASE WHEN {_LARGE} THEN d.content END" if sqlite_history else "NULL",
        newest=_NEWEST_KEPT if history and postgres else "NULL",
    )
    return lock + " FOR UPDATE OF d" if postgres else lock


def try_lock_statement(history: bool, paths: int) -> str:
    """PostgreSQL: the locks of ``paths`` paths taken in order while each is free
    (:data:`PATH_LOCK`'s, keys ``:path_lock0``, ``:path_lock1``, ...), then the row lock
    (:func:`lock_statement`), in one statement: ``got``, then the row lock's columns (NULL
    without a document). When another writer holds one of the paths' locks, no later one
    is tried and no row is locked: the caller waits for them in the same order and locks
    the row then. Each materialized CTE takes its lock once, after the one before it (it
    reads its answer), and the lateral row lock reads the last."""
    steps = []
    for n in range(paths):
        after = f" FROM g{n - 1} WHERE g{n - 1}.got" if n else ""
        steps.append(
            f"g{n} AS MATERIALIZED (SELECT pg_try_advisory_xact_lock("
            f"CAST(:path_lock{n} AS bigint)) AS got{after})"
        )
    steps.append(
        f"g AS MATERIALIZED (SELECT coalesce((SELECT got FROM g{paths - 1}), false) AS got)"
    )
    lock = lock_statement(True, history).removesuffix(" FOR UPDATE OF d")
    return (
        f"WITH {', '.join(steps)} SELECT g.got, l.* FROM g "
        f"LEFT JOIN LATERAL ({lock} AND g.got FOR UPDATE OF d) AS l ON true"
    )


# --- The steps of a change ----------------------------------------------------------------

#: ``doc``, an insert: the path's next version (a new document's time is ``{at}``).
_INSERT = (
    "INSERT INTO memory_documents (tenant_id, space_key, path, space_id, visibility, "
    "content, size_bytes, etag, updated_at, version, actor, action, actor_kind, chunked) "
    "SELECT :t, :k, :p, :sid, :vis, :content, :size, :etag, {at}, " + _NEXT + ", :actor, "
    ":action, :kind, false"
    "{src} WHERE true{when} "
    "ON CONFLICT (tenant_id, space_key, path) DO NOTHING RETURNING version"
)
#: A new document's time (``{at}`` of ``_INSERT``): the write's, but never before the
#: newest version its path holds already (a clock that stepped back, or a replica's clock
#: behind another's, would time it before the deletion it follows). Its own lookup of the
#: path's versions, which a path never written finds empty at once.
_INSERT_AT = {
    "sqlite": f"max(:now, coalesce({_NEWEST_AT}, :now))",
    "postgresql": f"greatest(CAST(:now AS timestamptz), {_NEWEST_AT})",
}
#: ``doc`` as each dialect runs it.
_DOCS = {
    dialect: {
        "insert": _INSERT.format(at=at, src="{src}", when="{when}"),
        "update": (
            "UPDATE memory_documents SET content = :content, size_bytes = :size, etag = :etag, "
            "updated_at = :now, version = memory_documents.version + 1, actor = :actor, "
            "action = :action, actor_kind = :kind, "
            # New content: not chunked until the indexer chunks it (its old chunks go in
            # the same change, ``gone``).
            "chunked = false"
            "{src} WHERE " + _ONE + "{when} RETURNING memory_documents.version"
        ),
        "delete": f"DELETE FROM memory_documents WHERE {_ONE} RETURNING 1",
    }
    for dialect, at in _INSERT_AT.items()
}
#: The document is not in the statement's snapshot (PostgreSQL's insert, for ``{when}``).
_ABSENT = f" AND NOT EXISTS (SELECT 1 FROM memory_documents WHERE {_ONE})"
#: ``gone``: the path's chunks dropped.
_GONE = f"DELETE FROM memory_chunks WHERE {_ONE}"
#: ``space``: the space counter's compare-and-swap, its ``search_version`` bumped.
_SPACE = (
    "INSERT INTO memory_space_usage AS s (tenant_id, space_key, space_id, used_bytes, "
    "search_version) SELECT :t, :k, :sid, {fresh}, 1{src} WHERE true "
    "ON CONFLICT (tenant_id, space_key) DO UPDATE SET "
    "used_bytes = CASE WHEN s.used_bytes + {d} < 0 THEN 0 ELSE s.used_bytes + {d} END, "
    "search_version = s.search_version + 1 "
    "WHERE {d} <= 0 OR s.used_bytes + {d} <= :cap RETURNING used_bytes"
)
_TEAM_COUNTERS = (
    "used_bytes, quota_bytes, history_used_bytes, history_quota_bytes, history_versions"
)
#: ``team``: the team counter's compare-and-swap, its history counter grown by ``{grown}``.
_TEAM = (
    "INSERT INTO memory_tenant_usage AS u (tenant_id, used_bytes, quota_bytes, "
    "history_used_bytes) SELECT :tt, {fresh}, :default_quota, {grown}{src} WHERE true "
    "ON CONFLICT (tenant_id) DO UPDATE SET "
    "used_bytes = CASE WHEN u.used_bytes + {d} < 0 THEN 0 ELSE u.used_bytes + {d} END, "
    "history_used_bytes = u.history_used_bytes + {grown} "
    "WHERE {d} <= 0 OR u.used_bytes + {d} <= u.quota_bytes RETURNING " + _TEAM_COUNTERS
)
#: The size delta and a new counter's start as the parameters of a change.
_BOUND_DELTA = {"d": ":d", "fresh": ":fresh"}
#: ``keep``: the live version, copied from its row before the change replaces it: a large
#: one as the store packed it (SQLite: ``:kept_packed``, ``:kept_stored`` bytes), a small
#: one as its text after a zero byte, as version_pack stores a small version (made in SQL).
_KEEP = (
    _VERSION_COLUMNS + "SELECT tenant_id, space_key, path, version, space_id, etag, "
    "size_bytes, {stored}, {packed}, updated_at, actor, action, actor_kind, false "
    "FROM memory_documents{src} WHERE " + _ONE + "{when}"
)
#: ``_KEEP`` as each dialect runs it.
_KEEPS = {
    "sqlite": _KEEP.format(
        stored=":kept_stored",
        packed="coalesce(:kept_packed, CAST(X'00' || content AS BLOB))",
        src="{src}",
        when="{when}",
    ),
    "postgresql": _KEEP.format(
        stored="size_bytes + 1",
        packed="decode('00', 'hex') || convert_to(content, 'UTF8')",
        src="{src}",
        when="{when}",
    ),
}
#: ``live``: the packed row of a large new content, numbered as its document (``{version}``).
_LIVE = (
    _VERSION_COLUMNS + "SELECT :t, :k, :p, {version}, :sid, :etag, :size, :live_stored, "
    ":live_packed, :now, :actor, :action, :kind, false{src} WHERE true"
)
#: ``mark``: a deletion marker: the path holds nothing from ``:at`` on.
_MARK = (
    _VERSION_COLUMNS + "SELECT :t, :k, :p, :mark, :sid, '', 0, 0, NULL, :at, :actor, "
    ":mark_action, :kind, true"
    "{src} WHERE true"
)


def sqlite_steps(shape: Shape) -> list[tuple[str, str]]:
    """The change ``shape`` as SQLite runs it: (step name, text) one by one."""
    doc, drop_chunks, keep, live, mark = shape
    # The copy of the live version reads the row before the document step changes it.
    steps = [("keep", _KEEPS["sqlite"].format(src="", when=""))] if keep else []
    if doc is not None:
        # An insert or update answers the document's new version number.
        name = "delete" if doc == "delete" else "doc"
        steps.append((name, _DOCS["sqlite"][doc].format(src="", when="")))
    if drop_chunks:
        steps.append(("gone", _GONE))
    steps.append(("space", _SPACE.format(src="", **_BOUND_DELTA)))
    steps.append(("team", _TEAM.format(grown=":kept_stored", src="", **_BOUND_DELTA)))
    if live:
        steps.append(("live", _LIVE.format(version=":version", src="")))
    if mark:
        steps.append(("mark", _MARK.format(src="")))
    return steps


def postgres_change(shape: Shape) -> str:
    """The change ``shape`` as PostgreSQL runs it: its steps as data-modifying CTEs of one
    statement, each reading the one before, answering (done, space used, the team's
    counters, the path's newest version)."""
    doc, drop_chunks, keep, live, mark = shape
    ctes: list[str] = []
    sources: list[str] = []
    if doc is not None:
        # An insert follows a lock that found no document. When the statement's
        # snapshot has one (created since the lock, perhaps being deleted by a writer
        # the insert would wait for, whose kept versions this snapshot lacks), a number
        # taken from it could be one that deletion keeps: insert nothing, and the store
        # locks again.
        when = _ABSENT if doc == "insert" else ""
        ctes.append(f"doc AS ({_DOCS['postgresql'][doc].format(src='', when=when)})")
        sources.append("doc")
    if drop_chunks:
        after_doc = " AND EXISTS (SELECT 1 FROM doc)" if doc is not None else ""
        ctes.append(f"gone AS ({_GONE}{after_doc} RETURNING 1)")
        # Read in full before the counters: the chunks are locked before the space row.
        sources.append("(SELECT count(*) FROM gone) AS g")
    src = f" FROM {', '.join(sources)}" if sources else ""
    ctes.append(f"space AS ({_SPACE.format(src=src, **_BOUND_DELTA)})")
    # What the replaced version adds to the history: its packed row's bytes, or its
    # text's after a zero byte (copied below) — in the statement's snapshot, the
    # document row as it was before ``doc`` changed it.
    grown = f"coalesce((SELECT coalesce({_LIVE_ROW}, d.size_bytes + 1) {_ROW}), 0)" if keep else "0"
    team = _TEAM.format(grown=grown, src=" FROM space", **_BOUND_DELTA)
    ctes.append(f"team AS ({team})")
    if keep:
        # The version replaced, unless its packed row is in the table already.
        body = _KEEPS["postgresql"].format(src=", (SELECT 1 FROM team) AS tm", when=_UNKEPT)
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
    return (
        f"WITH {', '.join(ctes)} SELECT {done}, (SELECT used_bytes FROM space), "
        f"{team_cols}, {version} FROM (SELECT 1) AS one LEFT JOIN team AS tm ON true"
    )


# --- PostgreSQL's one-statement write --------------------------------------------------------
#
# A plain write (ChangeStatements.put) as ONE statement in autocommit: the row lock, the
# write's condition and the change's steps above, all data-modifying CTEs of one
# statement. It writes, or answers that its condition refused, or writes nothing and hands
# the write to the transaction path; a refusal after the document was written undoes all
# of it (UNDO).

#: What the one-statement write raises to undo itself (a counter refused after the
#: document was written, or the history needs trimming): the write then runs in a
#: transaction, which refuses or trims exactly as before. A cast error (SQLSTATE 22P02)
#: because plain SQL has no RAISE; the text names it in the server's log.
UNDO = "keepstone write undone, retried in a transaction"
#: The size delta and a new counter's start as the one-statement write computes them
#: (``go``): the content's size less the size the row lock found.
_PUT_DELTA = {"d": "(SELECT d FROM go)", "fresh": "(SELECT greatest(d, 0) FROM go)"}
#: What the version a write replaces adds to the history (``d`` its row): a large one's
#: packed row's bytes, a small one's text after a zero byte.
_REPLACED = (
    f"CASE WHEN {_LARGE} THEN coalesce({_LIVE_ROW}, d.size_bytes + 1) ELSE d.size_bytes + 1 END"
)


def _history_quota(counter: str, default: str = "") -> str:
    """The history quota of the team counter row ``counter``."""
    return f"coalesce({counter}.history_quota_bytes, :hquota, {counter}.quota_bytes{default})"


def _put_pre(record: bool) -> str:
    """``pre``: the live version's number, what it adds to the history when replaced, and
    whether its packed row is in the table already (a large one), as the statement's
    snapshot sees them, and the history's limits. A write that would trim or prune (the
    path's versions past the count, the team's history past its quota: ``record`` only),
    or whose path's lock another writer holds (``:path_lock``, :func:`path_lock`), takes
    the transaction path (``busy``) before locking anything."""
    trim = (
        "r.next > coalesce(u.history_versions, :keep) OR coalesce(u.history_used_bytes, 0) "
        f"+ r.replaced > {_history_quota('u', ', :default_quota')} OR "
        if record
        else ""
    )
    # The path's lock taken if it is free (the transaction path waits for it): a writer in
    # a transaction holds it, so this statement never waits on that writer's rows.
    busy = f"({trim}NOT pg_try_advisory_xact_lock(CAST(:path_lock AS bigint)))"
    # The document row read once (none for a new path), beside the team's counter.
    return (
        "pre AS MATERIALIZED (SELECT r.replaced, r.prekept, "
        f"{busy} AS busy FROM (SELECT coalesce({_REPLACED}, 0) AS replaced, "
        f"coalesce({_LARGE} AND {_LIVE_ROW} IS NOT NULL, false) AS prekept, "
        f"coalesce(d.version + 1, {_NEXT}) AS next FROM (SELECT 1) AS one "
        f"LEFT JOIN memory_documents AS d ON {_D_ONE}) AS r "
        "LEFT JOIN memory_tenant_usage AS u ON u.tenant_id = :tt)"
    )


#: ``cur``: the row lock; ``seen``: the same row in the statement's snapshot; ``st``: both.
#: A concurrent writer that committed while this statement waited for the lock leaves
#: them different (PostgreSQL locks the newest row, the snapshot keeps the old one): the
#: chunks and versions this snapshot reads may be stale, so nothing is written (``fresh``
#: false) and the write runs in a transaction, whose statements see it. Nor when the live
#: version is not older than this write's time (``:now``, read before the statement: a
#: writer committed in between): the transaction path reads its time under the lock, so a
#: path's versions follow each other in time as in number.
_PUT_LOCK = (
    "cur AS MATERIALIZED (SELECT ctid AS tid, size_bytes, etag FROM memory_documents "
    f"WHERE {_ONE} AND NOT (SELECT busy FROM pre) FOR UPDATE)",
    "seen AS MATERIALIZED (SELECT ctid AS tid, updated_at AS at FROM memory_documents "
    f"WHERE {_ONE})",
    "st AS MATERIALIZED (SELECT c.etag AS cur_etag, coalesce(c.size_bytes, 0) AS cur_size, "
    "NOT pre.busy AND c.tid IS NOT DISTINCT FROM s.tid AND (s.at IS NULL OR s.at < :now) "
    "AS fresh, pre.replaced, pre.prekept "
    "FROM pre LEFT JOIN cur AS c ON true LEFT JOIN seen AS s ON true)",
)
#: ``go``: the write's condition as check_precondition states it (if_match demands that
#: etag, an absent document never matches; if_none_match demands absence), the size delta,
#: and whether the content changed (the same bytes again change nothing).
_PUT_CONDITION = (
    "go AS MATERIALIZED (SELECT cur_etag, fresh, fresh "
    "AND (CAST(:if_match AS text) IS NULL OR cur_etag IS NOT DISTINCT FROM :if_match) "
    "AND NOT (:if_none_match AND cur_etag IS NOT NULL) AS ok, "
    ":size - cur_size AS d, cur_etag IS DISTINCT FROM :etag AS changed, replaced, prekept "
    "FROM st)"
)


def _put_change(record: bool) -> list[str]:
    """The change's own steps, reading ``go``: the document inserted or updated, its old
    chunks dropped, the counters' compare-and-swap with the delta computed in SQL."""
    insert = _DOCS["postgresql"]["insert"].format(
        src=" FROM go", when=" AND go.ok AND go.cur_etag IS NULL"
    )
    update = _DOCS["postgresql"]["update"].format(
        src=" FROM go", when=" AND go.ok AND go.changed AND go.cur_etag IS NOT NULL"
    )
    # Read in full before the counters: the chunks are locked before the space row.
    space = _SPACE.format(src=" FROM doc, (SELECT count(*) FROM gone) AS g", **_PUT_DELTA)
    grown = (
        "(SELECT CASE WHEN changed AND cur_etag IS NOT NULL THEN replaced ELSE 0 END FROM go)"
        if record
        else "0"
    )
    return [
        f"ins_doc AS ({insert})",
        f"upd_doc AS ({update})",
        "doc AS (SELECT version FROM ins_doc UNION ALL SELECT version FROM upd_doc)",
        f"gone AS ({_GONE} AND EXISTS (SELECT 1 FROM upd_doc) RETURNING 1)",
        f"space AS ({space})",
        f"team AS ({_TEAM.format(grown=grown, src=' FROM space', **_PUT_DELTA)})",
    ]


def _put_history(live: bool) -> list[str]:
    """The history's steps: the replaced small version copied from the snapshot's row (as
    it was before ``upd_doc`` changed it) and, ``live``, the new large content's packed
    row."""
    keep = _KEEPS["postgresql"].format(
        src=", (SELECT 1 FROM team) AS tm",
        when=" AND EXISTS (SELECT 1 FROM upd_doc) AND NOT (SELECT prekept FROM go)",
    )
    ctes = [f"kept AS ({keep} RETURNING 1)"]
    if live:
        body = _LIVE.format(version="(SELECT version FROM doc)", src=" FROM team")
        ctes.append(f"lived AS ({body} RETURNING 1)")
    return ctes


def _put_undone(record: bool) -> str:
    """When a write that wrote its document must undo itself: a counter over its quota (or
    one this very write created over it) and, ``record``, a history to trim."""
    undo = [
        "sp.used_bytes IS NULL",
        "tm.used_bytes IS NULL",
        "(go.d > 0 AND (sp.used_bytes > :cap OR tm.used_bytes > tm.quota_bytes))",
    ]
    if record:
        undo.append("(SELECT version FROM doc) > coalesce(tm.history_versions, :keep)")
        undo.append(
            "((SELECT changed AND cur_etag IS NOT NULL FROM go) AND tm.history_used_bytes > "
            f"{_history_quota('tm')})"
        )
    return "(" + " OR ".join(undo) + ")"


def postgres_put(record: bool, live: bool) -> str:
    """The one-statement write (``record``: with the history's steps; ``live``: the new
    content is large, its packed row written too), answering (fresh, ok, the etag it
    found, done, changed, the undo marker)."""
    ctes = [
        _put_pre(record),
        *_PUT_LOCK,
        _PUT_CONDITION,
        *_put_change(record),
        *(_put_history(live) if record else []),
    ]
    done = "(SELECT count(*) FROM doc)"
    undo = f"CASE WHEN {done} > 0 AND {_put_undone(record)} THEN '{UNDO}' END"
    return (
        f"WITH {', '.join(ctes)} SELECT go.fresh, go.ok, go.cur_etag, {done} AS done, "
        f"go.changed, CAST({undo} AS integer) "
        "FROM go LEFT JOIN space AS sp ON true LEFT JOIN team AS tm ON true"
    )
