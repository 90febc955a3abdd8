"""The SQL store's activity feed (docs/history.md, "Activity"): the changes of some spaces of
one team, newest first, read from the history.

Every change made a version: the live one is its document row (``updated_at``, ``actor``,
``action``, ``actor_kind``), a replaced one or a deletion marker a row of the table of
versions. The feed reads both newest first along an index that leads with the team (and
the space, when one space is asked for: v8's indexes), each side cut at the page's size
before they are merged, so a page costs its size whatever the history holds. A large live
version's packed row in the table is the document's version again, read from the
document's side only.

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

from keepstone.activity import (
    UNKNOWN,
    Actor,
    Change,
    ChangePage,
    action_of,
    decode_cursor,
    encode_cursor,
)
from keepstone.db import read_transaction, utc
from keepstone.spaces import SpaceRef
from keepstone.store.sql_schema import memory_document_versions, memory_documents, space_key

V = memory_document_versions
D = memory_documents
_NO_TENANT = ""


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
    order = [c.desc() for c in cols if c.name != "space_id"]
    return (
        sa.select(
            *cols,
            table.c.action,
            table.c.actor_kind,
            table.c.actor,
            deleted.label("deleted"),
            table.c.size_bytes,
        )
        .where(*where)
        .order_by(*order)
        .limit(limit)
        .subquery()
    )


def _kind_is(table: sa.Table, kind: str) -> sa.ColumnElement[bool]:
    # Rows recorded before kinds were hold '': their maker is unknown.
    if kind == UNKNOWN:
        return table.c.actor_kind.in_(("", UNKNOWN))
    return table.c.actor_kind == kind


def read_activity(
    engine: Engine,
    refs: Sequence[SpaceRef],
    *,
    since: datetime | None,
    kind: str | None,
    limit: int,
    cursor: str | None,
) -> ChangePage:
    """The changes of the spaces ``refs`` (all of one team, or one global space) at or after
    ``since``, by actors of ``kind`` (None: any), newest first, after ``cursor``."""
    if not refs:
        return ChangePage((), None)
    position = None if cursor is None else decode_cursor(cursor, 4)
    tenant = refs[0].tenant or _NO_TENANT
    keys = sorted({space_key(ref.id) for ref in refs})
    sides = []
    for table, at in ((V, V.c.at), (D, D.c.updated_at)):
        where = [table.c.tenant_id == tenant]
        where.append(
            table.c.space_key == keys[0] if len(keys) == 1 else table.c.space_key.in_(keys)
        )
        if since is not None:
            where.append(at >= since)
        if kind is not None:
            where.append(_kind_is(table, kind))
        if table is V:
            # A large live version's packed row: the document's side reads that version.
            where.append(
                ~sa.exists().where(
                    D.c.tenant_id == V.c.tenant_id,
                    D.c.space_key == V.c.space_key,
                    D.c.path == V.c.path,
                    D.c.version == V.c.version,
                )
            )
        sides.append(_side(table, at, where, position, limit + 1))
    merged = sa.union_all(*(sa.select(side) for side in sides)).subquery()
    query = (
        sa.select(merged)
        .order_by(
            merged.c.at.desc(),
            merged.c.space_key.desc(),
            merged.c.path.desc(),
            merged.c.version.desc(),
        )
        .limit(limit + 1)
    )
    with read_transaction(engine) as conn:
        rows = conn.execute(query).all()
        more = len(rows) > limit
        rows = rows[:limit]
        before = _previous_sizes(conn, tenant, rows)
    changes = tuple(_change(row, before) for row in rows)
    last = rows[-1] if more else None
    next_cursor = (
        None
        if last is None
        else encode_cursor(_at(last), last.space_key, last.path, int(last.version))
    )
    return ChangePage(changes, next_cursor)


def _at(row: Any) -> datetime:
    return utc(row.at if isinstance(row.at, datetime) else datetime.fromisoformat(row.at))


def _previous_sizes(conn: Any, tenant: str, rows: Sequence[Any]) -> dict[tuple[str, str, int], int]:
    """The size of the version before each row's that the table still keeps (0 for a
    deletion marker), by (space key, path, version)."""
    wanted = [
        sa.and_(V.c.space_key == r.space_key, V.c.path == r.path, V.c.version == r.version - 1)
        for r in rows
        if int(r.version) > 1
    ]
    if not wanted:
        return {}
    found = conn.execute(
        sa.select(V.c.space_key, V.c.path, V.c.version, V.c.size_bytes, V.c.deleted).where(
            V.c.tenant_id == tenant, sa.or_(*wanted)
        )
    )
    return {
        (r.space_key, r.path, int(r.version)): 0 if r.deleted else int(r.size_bytes) for r in found
    }


def _change(row: Any, before: dict[tuple[str, str, int], int]) -> Change:
    deleted = bool(row.deleted)
    action = action_of(row.action, deleted)
    version = int(row.version)
    size = 0 if deleted else int(row.size_bytes)
    delta: int | None
    if action == "move":
        delta = 0  # the space holds the same bytes, at another path
    elif version == 1:
        delta = size
    else:
        prior = before.get((row.space_key, row.path, version - 1))
        delta = None if prior is None else size - prior
    return Change(
        at=_at(row),
        space_id=row.space_id,
        path=row.path,
        action=action,
        actor=Actor(row.actor_kind or UNKNOWN, ""),
        size_delta=delta,
        version=version,
        who=row.actor,
    )


class DocumentActivity:
    """Mixin: the activity feed of :class:`~keepstone.store.sql.SqlStore`."""

    engine: Engine

    def activity(
        self,
        refs: Sequence[SpaceRef],
        *,
        since: datetime | None,
        kind: str | None,
        limit: int,
        cursor: str | None,
    ) -> ChangePage:
        """See :meth:`keepstone.store.base.MemoryStore.activity`."""
        return read_activity(self.engine, refs, since=since, kind=kind, limit=limit, cursor=cursor)
