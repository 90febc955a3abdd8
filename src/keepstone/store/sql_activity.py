"""The SQL store's activity feed (docs/history.md, "Activity"): the changes of some spaces of
one team, newest first, read from the history.

Every change made a version: the live one is its document row (``updated_at``, ``actor``,
``action``, ``actor_kind``), a replaced one or a deletion marker a row of the table of
versions. The feed reads both newest first along v8's index of each space (space, time,
path, ...), each space's part cut at the page's size before they are merged, so a page costs
a page per space (docs/history.md, "Activity", says what a planner without statistics may
do). A large live version's packed row in the table repeats the document's version: the
feed shows it once.

The cursor is the last change's sort key (time, space key, path, version): a change made
meanwhile sorts before it, and a version replaced meanwhile keeps its key in the table, so
paging on never repeats or skips a change.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from keepstone.activity import UNKNOWN, ChangePage, FeedQuery, StoredChange, feed_page
from keepstone.db import read_transaction, utc
from keepstone.spaces import SpaceRef
from keepstone.store.sql_schema import memory_document_versions, memory_documents, space_key

V = memory_document_versions
D = memory_documents


def _side(
    table: sa.Table,
    at: sa.ColumnElement[Any],
    where: list[sa.ColumnElement[bool]],
    position: tuple[Any, ...] | None,
    limit: int,
) -> sa.Subquery:
    """One table's changes in the feed's order, after ``position``, at most ``limit``."""
    deleted = table.c.deleted if "deleted" in table.c else sa.false()
    cols = (at.label("at"), table.c.space_key, table.c.space_id, table.c.path, table.c.version)
    if position is not None:
        when, key, path, version = position
        bound = sa.bindparam(None, when, type_=at.type)
        where = [
            *where,
            at <= bound,
            sa.tuple_(at, table.c.space_key, table.c.path, table.c.version)
            < sa.tuple_(bound, sa.literal(key), sa.literal(path), sa.literal(version)),
        ]
    # The size of the version before (None: not kept), a lookup by the primary key per row.
    p = V.alias("before")
    before = (
        sa.select(sa.case((p.c.deleted, 0), else_=p.c.size_bytes))
        .where(
            p.c.tenant_id == table.c.tenant_id,
            p.c.space_key == table.c.space_key,
            p.c.path == table.c.path,
            p.c.version == table.c.version - 1,
        )
        .scalar_subquery()
    )
    # The order of the table's index (a document row is the only one of its path).
    order = [at.desc(), table.c.space_key.desc(), table.c.path.desc()]
    if table is V:
        order.append(table.c.version.desc())
    return (
        sa.select(
            *cols,
            table.c.action,
            table.c.actor_kind,
            table.c.actor,
            deleted.label("deleted"),
            table.c.size_bytes,
            before.label("before"),
        )
        .where(*where)
        .order_by(*order)
        .limit(limit)
        .subquery()
    )


def _one_space(table: sa.Table, ref: SpaceRef) -> list[sa.ColumnElement[bool]]:
    """The rows of the space ``ref``: by its key, which leads its feed index (and names its
    team: no condition on the team, which would make the primary key look as good to a
    planner without statistics), and its full id, as every statement of the store compares."""
    return [table.c.space_key == space_key(ref.id), table.c.space_id == ref.id]


def _kind_is(table: sa.Table, kind: str) -> sa.ColumnElement[bool]:
    # Rows recorded before kinds were hold '': their maker is unknown.
    if kind == UNKNOWN:
        return table.c.actor_kind.in_(("", UNKNOWN))
    return table.c.actor_kind == kind


def read_activity(engine: Engine, refs: Sequence[SpaceRef], query: FeedQuery) -> ChangePage:
    """The changes of the spaces ``refs`` (all of one team, or one global space) that
    ``query`` asks for, newest first."""
    if not refs:
        return ChangePage((), None)
    since, kind, limit = query.since, query.kind, query.limit
    position = query.position()
    by_key = {space_key(ref.id): ref for ref in sorted(refs, key=lambda r: r.id)}
    sides = []
    for table, at in ((V, V.c.at), (D, D.c.updated_at)):
        # Along the partial index by time, whose condition only a reader by time states.
        where: list[sa.ColumnElement[bool]] = [at.isnot(None)]
        if since is not None:
            where.append(at >= since)
        if kind is not None:
            where.append(_kind_is(table, kind))
        # Each space newest first along its own index, a page's worth, merged: a page costs
        # a page per space at most, whatever the planner knows.
        spaces = [
            _side(table, at, [*where, *_one_space(table, ref)], position, limit + 1)
            for ref in by_key.values()
        ]
        if len(spaces) == 1:
            sides.append(spaces[0])
            continue
        every = sa.union_all(*(sa.select(one) for one in spaces)).subquery()
        order = [every.c.at.desc(), every.c.space_key.desc(), every.c.path.desc()]
        sides.append(
            sa.select(every).order_by(*order, every.c.version.desc()).limit(limit + 1).subquery()
        )
    with read_transaction(engine) as conn:
        rows, cut = _merged([conn.execute(sa.select(side)).all() for side in sides], limit + 1)
    more = cut or len(rows) > limit
    rows = rows[:limit]
    return feed_page(map(_stored, rows), _key(rows[-1]) if more else None)


def _key(row: Any) -> tuple[datetime, str, str, int]:
    return (_at(row), row.space_key, row.path, int(row.version))


def _merged(sides: list[Sequence[Any]], full: int) -> tuple[list[Any], bool]:
    """Each table's rows (newest first, at most ``full`` each) as one list newest first,
    without a large live version's packed row in the table, which repeats its document's
    (the same key); and whether a side was cut at ``full`` (more follow). Only rows no older
    than the oldest row of a cut side are known complete: a page may hold fewer changes
    than asked when a repeat fell in it, and its cursor goes on from its last."""
    rows = sorted((row for side in sides for row in side), key=_key, reverse=True)
    cut = [_key(side[-1]) for side in sides if len(side) >= full]
    oldest = max(cut) if cut else None
    out: list[Any] = []
    for row in rows:
        key = _key(row)
        if oldest is not None and key < oldest:
            break
        if not out or _key(out[-1]) != key:
            out.append(row)
    return out, bool(cut)


def _at(row: Any) -> datetime:
    return utc(row.at if isinstance(row.at, datetime) else datetime.fromisoformat(row.at))


def _stored(row: Any) -> StoredChange:
    def before() -> int | None:
        return None if row.before is None else int(row.before)

    return StoredChange(
        _at(row),
        row.space_id,
        row.path,
        int(row.version),
        row.action,
        row.actor_kind,
        row.actor,
        bool(row.deleted),
        row.size_bytes,
        before,
    )


class DocumentActivity:
    """Mixin: the activity feed of :class:`~keepstone.store.sql.SqlStore`."""

    engine: Engine

    def activity(self, refs: Sequence[SpaceRef], query: FeedQuery) -> ChangePage:
        """See :meth:`keepstone.store.base.MemoryStore.activity`."""
        return read_activity(self.engine, refs, query)
