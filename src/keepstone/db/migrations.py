"""Migrations: each component keeps an ordered list of :class:`Migration` steps;
:func:`upgrade` applies those not yet recorded in ``keepstone_migrations`` (component,
version), each in its own transaction with its record, under a lock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from keepstone.db.engine import read_transaction, utcnow, write_transaction

metadata_migrations = sa.MetaData()

migrations_table = sa.Table(
    "keepstone_migrations",
    metadata_migrations,
    sa.Column("component", sa.String(64), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("description", sa.String(256), nullable=False),
    sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False),
)


@dataclass(frozen=True, slots=True)
class Migration:
    """One step of a component's schema. ``up`` may branch on ``conn.dialect.name``."""

    component: str
    version: int
    description: str
    up: Callable[[Connection], None]


class Steps(list[Migration]):
    """A component's ordered migrations, each registered where its function is defined:
    ``@steps.add(4, "what it makes")`` above ``def _v4_…(conn)``."""

    def __init__(self, component: str) -> None:
        super().__init__()
        self.component = component

    def add(
        self, version: int, description: str
    ) -> Callable[[Callable[[Connection], None]], Callable[[Connection], None]]:
        """Register the decorated function as step ``version``; steps come in order."""

        def register(up: Callable[[Connection], None]) -> Callable[[Connection], None]:
            if self and self[-1].version >= version:
                raise ValueError(f"{self.component} migration {version} follows {self[-1].version}")
            self.append(Migration(self.component, version, description, up))
            return up

        return register


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
