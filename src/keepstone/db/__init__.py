"""SQL plumbing shared by every SQL-backed part of Keepstone (documents, identity, records).

The bottom layer: it imports nothing of Keepstone's but :mod:`keepstone.errors`.

* :mod:`keepstone.db.files`: what a database file needs before any engine (SQLite's WAL
  mode, whether an error says the disk is full), without SQLAlchemy.
* :mod:`keepstone.db.durability`: SQLite's writers' turn and the shared fsync of its WAL.
* :mod:`keepstone.db.engine`: engines, transactions, driver errors, point reads, claims.
* :mod:`keepstone.db.migrations`: each component's ordered migrations, recorded in
  ``keepstone_migrations``.
* :mod:`keepstone.db.statistics`: ``ANALYZE`` after a bulk change, on PostgreSQL.
* :mod:`keepstone.db.vectors`: the vector blob codec, the format of every ``embedding``
  column.
* :mod:`keepstone.db.pgvector`: where PostgreSQL has pgvector, the ``vec`` column beside
  those blobs, its HNSW indexes and their queries; the documents' and the records'
  stores both use it.

The public names of the first five are re-exported here, so that a caller writes
``from keepstone.db import write_transaction``. Each is loaded on first use, from the module
that defines it: what needs only :mod:`keepstone.db.files` (the filesystem store) loads no
SQLAlchemy, and the last two (numpy) are imported from their own modules.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # "X as X" marks each name exported, as __all__ is built, not literal
    from keepstone.db.durability import SqliteWriters as SqliteWriters
    from keepstone.db.durability import WalSync as WalSync
    from keepstone.db.durability import made_durable as made_durable
    from keepstone.db.durability import sqlite_writers as sqlite_writers
    from keepstone.db.durability import syncs_deferred as syncs_deferred
    from keepstone.db.durability import wal_sync as wal_sync
    from keepstone.db.engine import PointRead as PointRead
    from keepstone.db.engine import again_if_rolled_back as again_if_rolled_back
    from keepstone.db.engine import as_sqlalchemy as as_sqlalchemy
    from keepstone.db.engine import begin_immediate as begin_immediate
    from keepstone.db.engine import begins_immediate as begins_immediate
    from keepstone.db.engine import claim_rows as claim_rows
    from keepstone.db.engine import driver_cursor as driver_cursor
    from keepstone.db.engine import lock_waits_at_most as lock_waits_at_most
    from keepstone.db.engine import make_engine as make_engine
    from keepstone.db.engine import normalize_url as normalize_url
    from keepstone.db.engine import on_pooled as on_pooled
    from keepstone.db.engine import read_statements as read_statements
    from keepstone.db.engine import read_transaction as read_transaction
    from keepstone.db.engine import sqlite_path as sqlite_path
    from keepstone.db.engine import translated_errors as translated_errors
    from keepstone.db.engine import utc as utc
    from keepstone.db.engine import utcnow as utcnow
    from keepstone.db.engine import validate_schema_name as validate_schema_name
    from keepstone.db.engine import write_transaction as write_transaction
    from keepstone.db.files import DISK_FULL_MESSAGE as DISK_FULL_MESSAGE
    from keepstone.db.files import enter_wal as enter_wal
    from keepstone.db.files import is_disk_full as is_disk_full
    from keepstone.db.migrations import Migration as Migration
    from keepstone.db.migrations import Steps as Steps
    from keepstone.db.migrations import applied_versions as applied_versions
    from keepstone.db.migrations import upgrade as upgrade
    from keepstone.db.statistics import refresh_statistics as refresh_statistics

# The names loaded on first use, by the module that defines them.
_FILES = ("DISK_FULL_MESSAGE", "enter_wal", "is_disk_full")
_DURABILITY = (
    "SqliteWriters",
    "WalSync",
    "made_durable",
    "sqlite_writers",
    "syncs_deferred",
    "wal_sync",
)
_ENGINE = (
    "PointRead",
    "again_if_rolled_back",
    "as_sqlalchemy",
    "begin_immediate",
    "begins_immediate",
    "claim_rows",
    "driver_cursor",
    "lock_waits_at_most",
    "make_engine",
    "normalize_url",
    "on_pooled",
    "read_statements",
    "read_transaction",
    "sqlite_path",
    "translated_errors",
    "utc",
    "utcnow",
    "validate_schema_name",
    "write_transaction",
)
_MIGRATIONS = ("Migration", "Steps", "applied_versions", "upgrade")

#: Spelled from the tuples above, so each name is written once; refresh_statistics is its own.
__all__ = [*_FILES, *_DURABILITY, *_ENGINE, *_MIGRATIONS, "refresh_statistics"]


def __getattr__(name: str) -> Any:
    # Plain imports (PEP 562), which the import contracts see: the module that defines
    # ``name`` is loaded the first time one of its names is asked for.
    home: ModuleType
    if name in _FILES:
        from keepstone.db import files as home
    elif name in _DURABILITY:
        from keepstone.db import durability as home
    elif name in _ENGINE:
        from keepstone.db import engine as home
    elif name in _MIGRATIONS:
        from keepstone.db import migrations as home
    elif name == "refresh_statistics":
        from keepstone.db import statistics as home
    else:
        raise AttributeError(f"module 'keepstone.db' has no attribute {name!r}")
    found = globals()[name] = getattr(home, name)  # the next lookup is a plain attribute
    return found


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
