"""Every SQL component's migrations, in the order they apply (``keepstone db upgrade``).

Each component keeps its own ordered list, recorded per component in
``keepstone_migrations``; identity comes first because the others refer to its teams.
"""

from __future__ import annotations

from sqlalchemy.engine import Engine

from keepstone.db import Migration, upgrade
from keepstone.identity import schema as identity_schema
from keepstone.records import schema as records_schema
from keepstone.store import sql_schema

_COMPONENTS = (identity_schema, sql_schema, records_schema)
COMPONENT_MODULES = tuple(component.__name__ for component in _COMPONENTS)


def all_migrations() -> list[Migration]:
    return [migration for component in _COMPONENTS for migration in component.MIGRATIONS]


def upgrade_all(engine: Engine) -> list[Migration]:
    """Apply every pending migration of every component; return those applied."""
    return upgrade(engine, all_migrations())
