"""The columns every component's tables declare alike: opaque string ids and times; and
the partial indexes they declare alike.

Each call makes a new :class:`sqlalchemy.Column` (a column belongs to one table); the
declarations are the ones the tables always had, so the schema they create is unchanged.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

#: A time with its zone (UTC in every row).
TS = sa.DateTime(timezone=True)


def id_key(name: str = "id") -> sa.Column[str]:
    """An opaque string id that is (part of) the table's primary key."""
    return sa.Column(name, sa.String(64), primary_key=True)


def timestamp(name: str, *, nullable: bool = False, index: bool = False) -> sa.Column[datetime]:
    """A time column, NOT NULL unless ``nullable``."""
    return sa.Column(name, TS, nullable=nullable, index=index or None)


def partial_index(
    name: str,
    table: sa.Table,
    columns: tuple[str, ...],
    where: sa.ColumnElement[bool] | sa.TextClause,
) -> sa.Index:
    """An index of ``table``'s rows that satisfy ``where`` alone, on both dialects: a
    statement whose conditions include ``where`` itself reads it (SQLite uses a partial
    index only for a query holding its condition as written)."""
    cols = [table.c[c] for c in columns]
    return sa.Index(name, *cols, postgresql_where=where, sqlite_where=where)
