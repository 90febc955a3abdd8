"""The columns every component's tables declare alike: opaque string ids and times.

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
