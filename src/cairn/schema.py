"""Every SQL component's migrations, in the order they apply (``cairn db upgrade``).

Each component keeps its own ordered list, recorded per component in
``cairn_migrations``; identity comes first because the others refer to its teams.
"""

from __future__ import annotations

import importlib

from sqlalchemy.engine import Engine

from cairn.store.db import Migration, upgrade

COMPONENT_MODULES = (
    "cairn.identity.schema",
    "cairn.store.sql_schema",
    "cairn.records.schema",
)


def all_migrations() -> list[Migration]:
    out: list[Migration] = []
    for name in COMPONENT_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        out.extend(module.MIGRATIONS)
    return out


def upgrade_all(engine: Engine) -> list[Migration]:
    """Apply every pending migration of every component; return those applied."""
    return upgrade(engine, all_migrations())
