"""SQL plumbing shared by every SQL-backed part of Keepstone (documents, identity, records).

The bottom layer: it imports nothing of Keepstone's but :mod:`keepstone.errors`.

* :mod:`keepstone.db.engine`: engines, transactions, driver errors, point reads, claims.
* :mod:`keepstone.db.durability`: SQLite's writers' turn and the shared fsync of its WAL.
* :mod:`keepstone.db.migrations`: each component's ordered migrations, recorded in
  ``keepstone_migrations``.
* :mod:`keepstone.db.statistics`: ``ANALYZE`` after a bulk change, on PostgreSQL.
* :mod:`keepstone.db.vectors`: the vector blob codec, the format of every ``embedding``
  column.
* :mod:`keepstone.db.pgvector`: where PostgreSQL has pgvector, the ``vec`` column beside
  those blobs, its HNSW indexes and their queries; the documents' and the records'
  stores both use it.

The public names of the first four are re-exported here, so that a caller writes
``from keepstone.db import write_transaction``; the last two (numpy) are imported from
their own modules, so that what needs only a transaction does not load them.
"""

from keepstone.db.durability import (
    SqliteWriters,
    WalSync,
    enter_wal,
    made_durable,
    sqlite_writers,
    syncs_deferred,
    wal_sync,
)
from keepstone.db.engine import (
    DISK_FULL_MESSAGE,
    PointRead,
    as_sqlalchemy,
    begin_immediate,
    begins_immediate,
    claim_rows,
    driver_cursor,
    is_disk_full,
    make_engine,
    normalize_url,
    on_pooled,
    read_statements,
    read_transaction,
    sqlite_path,
    translated_errors,
    utc,
    utcnow,
    validate_schema_name,
    write_transaction,
)
from keepstone.db.migrations import Migration, Steps, applied_versions, upgrade
from keepstone.db.statistics import refresh_statistics

__all__ = [
    "DISK_FULL_MESSAGE",
    "Migration",
    "Steps",
    "PointRead",
    "SqliteWriters",
    "WalSync",
    "applied_versions",
    "as_sqlalchemy",
    "begin_immediate",
    "begins_immediate",
    "claim_rows",
    "driver_cursor",
    "enter_wal",
    "is_disk_full",
    "made_durable",
    "make_engine",
    "normalize_url",
    "on_pooled",
    "read_statements",
    "read_transaction",
    "refresh_statistics",
    "sqlite_path",
    "sqlite_writers",
    "syncs_deferred",
    "translated_errors",
    "upgrade",
    "utc",
    "utcnow",
    "validate_schema_name",
    "wal_sync",
    "write_transaction",
]
