"""The writes of the SQL store: how a write, delete and move of a document runs, in ONE
write transaction (a mixin of :class:`~keepstone.store.sql.SqlStore`).

Quotas (SPEC §4): a write or delete runs in ONE write transaction that

1. locks the current document row (``FOR UPDATE``; a concurrent creator of the same
   path is caught by ``ON CONFLICT DO NOTHING`` and the row is read again),
2. writes the document,
3. charges the size delta to the space counter (sub-cap), then the team counter (or,
   for global, the instance counter) with a compare-and-swap upsert whose ``WHERE
   used_bytes + :d <= quota`` is evaluated by the database on the locked, latest row
   version — so under READ COMMITTED no update is lost and no counter passes its
   quota, across threads, processes and replicas,
4. for global, debits the grant's attribution team (``PlatformGrant.attribution_team``)
   without enforcement, and writes the audit row — all in the write's one transaction.

Steps 2 and 3 (and the version the change keeps) are the change statement
(:mod:`keepstone.store.sql_write`). On PostgreSQL a plain write (no grant) is all of 1-3
as ONE statement in autocommit, which hands the write to this transaction path whenever it
cannot answer alone (:meth:`keepstone.store.sql_write.ChangeStatements.put`).

Credits (shrink, delete) clamp at zero. Locks are always taken in the order path (on
PostgreSQL: an advisory lock, :func:`~keepstone.store.sql_steps.path_lock`; a move takes
both of its paths', in key order) → document → its chunks → space counter → team/instance
counter → attributed team counter, so writers cannot deadlock one another (the indexer
takes chunks → space counters, in key order). Without the path lock, a path with no
document had no row to lock, and a move changes its row's path: writers of the same paths
met in cycles of row waits.

A write of new content and a delete remove the path's chunk rows and bump the space's
``search_version``, in the write's one transaction (a refused write leaves the old ones);
a write never chunks or analyses text. A write that leaves the content unchanged (same
etag) keeps the chunks and their vectors.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from keepstone.activity import current_action, current_kind
from keepstone.db import (
    again_if_rolled_back,
    translated_errors,
    utc,
    utcnow,
    write_transaction,
)
from keepstone.documents import PlatformGrant, WriteResult, current_actor
from keepstone.errors import Conflict, QuotaExceeded, no_document
from keepstone.quota import Limits
from keepstone.spaces import SpaceRef, validate_segment
from keepstone.store.prelude import (
    CheckedDelete,
    CheckedMove,
    CheckedWrite,
    ImportWriter,
    check_move_target,
    check_precondition,
)
from keepstone.store.sql_import import DocumentWrites, import_batch
from keepstone.store.sql_index import NO_TENANT
from keepstone.store.sql_schema import ACTOR_WIDTH, audit_events
from keepstone.store.sql_statements import Statements
from keepstone.store.sql_steps import path_lock
from keepstone.store.sql_write import ChangeStatements, DocStep, Locked, Team
from keepstone.store.version_pack import COMPRESS_FROM, pack_version

#: Stands in for "no sub-cap" in the compare-and-swap (far above any real byte count).
_UNCAPPED = 2**62
#: How often a write re-reads a row that a concurrent writer created or removed meanwhile.
_WRITE_ATTEMPTS = 8


def _actor() -> str:
    """Who is changing the document, cut to the width of the ``actor`` columns (256)."""
    return current_actor()[:ACTOR_WIDTH]


def _who() -> dict[str, str]:
    """Who is changing the document and what the change does (docs/history.md, "Activity"):
    the parameters of the actor, its kind, and the action of a new version and of a
    deletion marker."""
    return {
        "actor": _actor(),
        "kind": current_kind(),
        "action": current_action(),
        "mark_action": current_action(deleted=True),
    }


P = ParamSpec("P")
R = TypeVar("R")


def _again_if_rolled_back(write: Callable[P, R]) -> Callable[P, R]:
    """A single write, made again when PostgreSQL rolls its transaction back as a
    deadlock's victim (:func:`keepstone.db.again_if_rolled_back`): writers of the same
    paths queue on their path locks, but an import batch's document takes its lock only
    when it is free, so a writer may still meet the batch's rows."""

    @functools.wraps(write)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return again_if_rolled_back(lambda: write(*args, **kwargs))

    return run


class DocumentMutations:
    """Mixin: the writes of :class:`~keepstone.store.sql.SqlStore` (see the module doc).

    Uses the store's engine, statements, limits and clock, its row addressing
    (``_address``, the index mixin's) and its history's trimming in a change's transaction
    (``_keep_history``, ``_trim_versions``, the history mixin's)."""

    engine: Engine
    limits: Limits
    #: What "now" is for a new version (a test gives the store a clock of its own).
    clock: Callable[[], datetime]
    keeps_history: bool
    _sql: Statements
    _change_sql: ChangeStatements
    _packs_on_write: bool
    _address: Callable[[SpaceRef], dict[str, str]]
    _keep_history: Callable[[Connection, str, dict[str, str], int, Team], None]
    _trim_versions: Callable[[Connection, str, dict[str, str], int, Team], None]

    @_again_if_rolled_back
    def _write(self, ref: SpaceRef, w: CheckedWrite) -> WriteResult:
        addr = self._address(ref)  # a tenant-less team ref is refused before any I/O
        if self._change_sql.postgres and w.grant is None:
            # One statement (no attribution, no audit row: those are a grant's).
            done = self._put_at_once(ref, w)
            if done is not None:
                return done
        locks = self._change_sql.path_locks(addr, w.path)
        with write_transaction(self.engine) as conn:
            return self._write_in(conn, ref, w, locks)

    def _put_at_once(
        self, ref: SpaceRef, w: CheckedWrite, batch: Connection | None = None
    ) -> WriteResult | None:
        """The write ``w`` as one statement (:meth:`ChangeStatements.put`, or in the import
        batch's transaction ``batch``, :meth:`ChangeStatements.put_in`); None when it must
        run on the transaction path instead (nothing was written)."""
        now = self.clock()
        addr = self._address(ref)
        key = {**addr, "p": w.path}
        params = {
            **self._change_params(ref, key, 0, None, now),
            "path_lock": path_lock(addr, w.path),
            **self._body(ref, w),
            "now": self._time(now),
            "if_match": w.if_match,
            "if_none_match": w.if_none_match,
            "keep": self.limits.history_versions,
            "hquota": self.limits.history_quota,
        }
        if batch is None:
            with translated_errors():
                put = self._change_sql.put(self.engine, self.keeps_history, params)
        else:  # the batch translates the errors it does not handle (it waits out a lock)
            put = self._change_sql.put_in(batch, self.keeps_history, params)
        if put is None:
            return None
        written, current = put
        if written:
            return WriteResult(w.path, len(w.data), w.etag, current is None)
        check_precondition(w.path, current, w.if_match, w.if_none_match)  # raises
        return None

    def _write_in(
        self, conn: Connection, ref: SpaceRef, w: CheckedWrite, path_locks: Sequence[int] = ()
    ) -> WriteResult:
        """The write ``w``, in the transaction of ``conn`` (its own, after its path's lock,
        or an import batch's)."""
        doc = {**self._address(ref), "p": w.path, **self._body(ref, w)}
        created = self._put(conn, ref, doc, w, path_locks)
        if w.grant is not None and ref.is_global:
            verb = "import" if w.grant.importing else "write"
            _audit(conn, w.grant, verb, ref, w.path)
        return WriteResult(w.path, len(w.data), w.etag, created)

    def _body(self, ref: SpaceRef, w: CheckedWrite) -> dict[str, Any]:
        """What a write stores in the document row: the new live version, all but its
        time (``now``), which each write path adds (the transaction path once it holds the
        row lock, :meth:`_put`)."""
        return {
            "vis": ref.visibility.value,
            "content": w.content,
            "size": len(w.data),
            "etag": w.etag,
            **_who(),
            # PostgreSQL: a large version is packed now, while its bytes are at hand, into
            # its row of the history (SQLite packs it when a change replaces it; SQL copies
            # a small one then), docs/history.md "Where".
            **self._live_row(w.data),
        }

    def _live_row(self, data: bytes) -> dict[str, Any]:
        large = self._packs_on_write and len(data) >= COMPRESS_FROM
        packed = pack_version(data) if large else None
        return {"live_packed": packed, "live_stored": 0 if packed is None else len(packed)}

    @contextlib.contextmanager
    def import_writer(self, ref: SpaceRef, grant: PlatformGrant | None) -> Iterator[ImportWriter]:
        """Many documents to a transaction, each refused as a write would refuse it
        (:mod:`keepstone.store.sql_import`)."""
        self._address(ref)  # a tenant-less team ref is refused before any I/O
        writes = DocumentWrites(
            at_once=(
                (lambda conn, w: self._put_at_once(ref, w, batch=conn))
                if self._change_sql.postgres
                else None
            ),
            in_transaction=lambda conn, w: self._write_in(conn, ref, w),
            alone=lambda w: self._write(ref, w),
        )
        with import_batch(self.engine, writes) as write:
            yield write

    def _put(
        self,
        conn: Connection,
        ref: SpaceRef,
        doc: dict[str, Any],
        w: CheckedWrite,
        path_locks: Sequence[int],
    ) -> bool:
        """Lock the row (after ``path_locks``), check the write's condition, then create or
        replace the document in one change (:mod:`keepstone.store.sql_write`); return
        whether it was created."""
        for _ in range(_WRITE_ATTEMPTS):
            current = self._locked(conn, doc, path_locks)
            path_locks = ()  # held to the transaction's end
            check_precondition(
                w.path, current.etag if current else None, w.if_match, w.if_none_match
            )
            if current is not None and current.etag == w.etag:
                # The same bytes again: nothing changes (no version; the time is kept).
                return False
            # The version's time is read under the lock: a writer that committed while this
            # one waited for it took its time earlier, so the path's versions follow each
            # other in time as in number (a time read before the wait could precede the
            # version it replaces, and a read as of a moment between the two would see this
            # version before it was written). Nor before the version it replaces when the
            # clock stepped back (a new document: the insert sees to it, _INSERT_AT).
            now = _not_before(self.clock(), current)
            doc["now"] = self._time(now)
            team = self._change(
                conn,
                ref,
                doc,
                "insert" if current is None else "update",
                len(w.data) - (0 if current is None else current.size_bytes),
                # New content: its old chunks go now; the next search of the space (or the
                # indexer) chunks it again (reconcile), so a write never waits on analysis.
                drop_chunks=current is not None,
                replaced=current,
                mark=False,
                at=now,
                attributed=_attributed_team(w.grant),
            )
            if team is not None:
                return current is None
            # A concurrent writer created it and has committed: lock and replace it.
        raise Conflict(f"{w.path!r} is being created and removed concurrently; retry the write")

    def _locked(
        self, conn: Connection, key: dict[str, Any], path_locks: Sequence[int] = ()
    ) -> Locked | None:
        """The document row of ``key`` locked for a change (after ``path_locks``),
        renumbered first when it holds a number its path's history holds too
        (``Locked.newest_kept``)."""
        current = self._change_sql.lock(conn, key, path_locks)
        return None if current is None else self._change_sql.renumbered(conn, key, current)

    @_again_if_rolled_back
    def _delete(self, ref: SpaceRef, d: CheckedDelete) -> None:
        addr = self._address(ref)
        key = {**addr, "p": d.path}
        with write_transaction(self.engine) as conn:
            current = self._locked(conn, key, self._change_sql.path_locks(addr, d.path))
            if current is None:
                raise no_document(d.path, addr["sid"])
            check_precondition(d.path, current.etag, d.if_match)
            self._change(
                conn,
                ref,
                key,
                "delete",
                -current.size_bytes,
                drop_chunks=True,
                replaced=current,
                mark=True,
                at=_not_before(self.clock(), current),
                attributed=_attributed_team(d.grant),
            )
            if d.grant is not None and ref.is_global:
                _audit(conn, d.grant, "delete", ref, d.path)

    @_again_if_rolled_back
    def _move(self, ref: SpaceRef, m: CheckedMove) -> WriteResult:
        addr = self._address(ref)
        key, target = {**addr, "p": m.path}, {**addr, "p": m.to}
        with write_transaction(self.engine) as conn:
            current, replaced = self._both_locked(conn, key, target)
            if current is None:
                raise no_document(m.path, addr["sid"])
            check_precondition(m.path, current.etag, m.if_match)
            check_move_target(m, replaced is not None)
            # Both paths' newest versions come before the move's (m.to without a document
            # may hold a deletion marker).
            now = _not_before(self.clock(), current, replaced)
            if replaced is None and self.keeps_history:
                last = self._change_sql.last_at(conn, target)
                now = now if last is None else max(now, last)
            # The chunks before any counter, in the store's lock order: the indexer holds
            # the chunks it embeds until it bumps the space's counter.
            if replaced is not None:
                conn.execute(self._sql.delete_chunks, target)
            with _created_meanwhile(m.to):
                conn.execute(self._sql.move_chunks, {**key, "to": m.to})
            if replaced is not None:
                # What m.to held is kept in its history, ended by the moved document (its
                # next version), not by a marker.
                self._change(
                    conn,
                    ref,
                    target,
                    "delete",
                    -replaced.size_bytes,
                    drop_chunks=False,
                    replaced=replaced,
                    mark=False,
                    at=now,
                    attributed=_attributed_team(m.grant),
                )
            # History: the old path's version is kept and a marker ends it.
            team = self._change(conn, ref, key, None, 0, False, current, True, now, None)
            with _created_meanwhile(m.to):
                moved = conn.execute(
                    self._sql.move_doc,
                    {**key, "to": m.to, "now": now, "actor": _actor(), "kind": current_kind()},
                ).scalar_one()
            if team is not None and self.keeps_history:
                if self._packs_on_write and current.size_bytes >= COMPRESS_FROM:
                    # Its packed row goes with it (SQLite packs the version the move
                    # replaced at the old path, from the content its lock read).
                    at, actor = self._time(now), _actor()
                    carried = {**key, "to": m.to, "moved": moved, "v": current.version}
                    who = {"at": at, "actor": actor, "kind": current_kind()}
                    self._change_sql.carry(conn, {**carried, **who})
                self._trim_versions(conn, self._aggregate(ref)[0], target, int(moved), team)
            if m.grant is not None and ref.is_global:
                _audit(conn, m.grant, "move", ref, m.path, to=m.to)
        return WriteResult(m.to, current.size_bytes, current.etag, replaced is None)

    def _both_locked(
        self, conn: Connection, key: dict[str, Any], target: dict[str, Any]
    ) -> tuple[Locked | None, Locked | None]:
        """A move's rows, ``key``'s and ``target``'s, locked after both paths' locks, in
        path order, as every writer of two documents takes them."""
        locks = self._change_sql.path_locks(key, key["p"], target["p"])
        first, second = sorted((key, target), key=lambda k: k["p"])
        rows = {first["p"]: self._locked(conn, first, locks)}
        rows[second["p"]] = self._locked(conn, second)
        return rows[key["p"]], rows[target["p"]]

    def _aggregate(self, ref: SpaceRef) -> tuple[str, int]:
        """The counter a space answers to, and the quota it starts at."""
        if ref.is_global:
            return NO_TENANT, self.limits.instance_quota
        return ref.tenant, self.limits.team_quota

    def _time(self, at: datetime) -> Any:
        """``at`` as the change statement binds a timestamp (SQLite: SQLAlchemy's text)."""
        bind = self._change_sql.bind_time
        return utc(at) if bind is None else bind(utc(at))

    def _change(
        self,
        conn: Connection,
        ref: SpaceRef,
        key: dict[str, Any],
        doc: DocStep,
        delta: int,
        drop_chunks: bool,
        replaced: Locked | None,
        mark: bool,
        at: datetime,
        attributed: str | None,
    ) -> Team | None:
        """One change of the path ``key`` (its address and path, plus the document's
        fields when ``doc`` writes it), under the row lock the caller holds: the document,
        its chunks (``drop_chunks``), ``delta`` charged to every counter of the space
        (refusing past a quota, bumping the space's ``search_version``), the live version
        ``replaced`` (the locked row; None: none is replaced) kept in the history, the new
        content's packed row when it is large, and (``mark``) a deletion marker after it.
        The team's counters after it, or None when the insert met a concurrent creator
        (nothing was done)."""
        tenant, _ = self._aggregate(ref)
        subcap = self.limits.subcap(ref.visibility)
        cap = subcap if subcap > 0 else _UNCAPPED
        if not self.keeps_history:
            replaced = None
        params = self._change_params(ref, key, delta, replaced, at)
        shape = (
            doc,
            drop_chunks,
            replaced is not None and replaced.row_stored is None,  # a small one: copied
            doc in ("insert", "update") and key.get("live_packed") is not None,
            mark and replaced is not None,
        )
        got = self._change_sql.run(conn, shape, params)
        if not got.doc_done:
            return None
        if got.space_used is None:
            used = conn.execute(self._sql.space_used, key).scalar() or 0
            raise _exceeded("space", int(used), subcap, delta)
        if delta > 0 and got.space_used > cap:  # a counter created by this very change
            raise _exceeded("space", 0, subcap, delta)
        team = got.team
        if team is None or (delta > 0 and team.used_bytes > team.quota_bytes):
            limit = "instance" if ref.is_global else "team"
            if team is not None:  # a counter created by this very change, over its quota
                raise _exceeded(limit, 0, int(team.quota_bytes), delta)
            current = conn.execute(self._sql.tenant_used, {"t": tenant}).one()
            raise _exceeded(limit, int(current.used_bytes), int(current.quota_bytes), delta)
        if attributed is not None:
            row = {"t": attributed, "d": delta, "fresh": max(delta, 0)}
            conn.execute(
                self._sql.attribute_tenant, {**row, "default_quota": self.limits.team_quota}
            )
        if self.keeps_history and got.version is not None:
            self._keep_history(conn, tenant, key, got.version, team)
        return team

    def _change_params(
        self,
        ref: SpaceRef,
        key: dict[str, Any],
        delta: int,
        replaced: Locked | None,
        at: datetime,
    ) -> dict[str, Any]:
        """The change statement's parameters (see :meth:`_change`)."""
        tenant, default = self._aggregate(ref)
        subcap = self.limits.subcap(ref.visibility)
        return {
            **key,
            "tt": tenant,
            "d": delta,
            "fresh": max(delta, 0),
            "cap": subcap if subcap > 0 else _UNCAPPED,
            "default_quota": default,
            **_kept(replaced),
            "mark": None if replaced is None else replaced.version + 1,
            "at": self._time(at),
            **_who(),
        }


def _exceeded(limit: str, used: int, quota: int, needed: int) -> QuotaExceeded:
    return QuotaExceeded(
        f"{limit} quota exceeded: {used} of {quota} bytes used, the write needs {needed} more",
        limit=limit,
        used_bytes=used,
        quota_bytes=quota,
        needed_bytes=needed,
    )


def _not_before(now: datetime, *locked: Locked | None) -> datetime:
    """``now``, or the latest version time of the ``locked`` rows when it is later: a change
    is never timed before a version it replaces (a clock that stepped back, or a replica
    whose clock is behind the one that wrote the document)."""
    times = [now] + [row.at for row in locked if row is not None and row.at is not None]
    return max(times)


def _kept(replaced: Locked | None) -> dict[str, Any]:
    """What the version a change replaces takes in the history (``kept_stored``), and on
    SQLite a large one packed now from the content its lock read (``kept_packed``; None:
    SQL copies a small one, or its row is there already)."""
    packed = None
    if replaced is None:
        stored = 0
    elif replaced.row_stored is not None:
        stored = replaced.row_stored
    elif replaced.content is not None:
        packed = pack_version(replaced.content.encode("utf-8"))
        stored = len(packed)
    else:
        stored = replaced.size_bytes + 1
    return {"kept_stored": stored, "kept_packed": packed}


@contextlib.contextmanager
def _created_meanwhile(path: str) -> Iterator[None]:
    """A move's refusal when a writer created a document at ``path`` after the move's lock
    found none (PostgreSQL; SQLite's writers queue), which the move must not replace: its
    row, or its chunks (a backfill chunked it meanwhile), are already there. The
    transaction rolls back with the refusal."""
    try:
        yield
    except sa.exc.IntegrityError:
        raise Conflict(
            f"a document was just created at {path!r}; retry the move, with overwrite to replace it"
        ) from None


def _attributed_team(grant: PlatformGrant | None) -> str | None:
    team = grant.attribution_team if grant is not None else None
    return validate_segment("attribution team", team) if team else None


def _audit(
    conn: Connection, grant: PlatformGrant, verb: str, ref: SpaceRef, path: str, to: str = ""
) -> None:
    """The audit row of a global mutation, in the mutation's own transaction (a move's
    row names both paths: ``from -> to``)."""
    conn.execute(
        audit_events.insert().values(
            id="evt_" + uuid.uuid4().hex,
            at=utcnow(),
            action=f"memory.global_{verb}",
            actor=grant.actor,
            space_id=ref.id,
            path=(f"{path} -> {to}" if to else path)[:1024],  # the column's width
        )
    )
