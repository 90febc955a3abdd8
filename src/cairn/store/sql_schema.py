"""Tables of the SQL document store and their migrations (component ``documents``).

One schema for SQLite and PostgreSQL. Every row carries its tenant (the team id) and
every primary key leads with it, so the tables can be distributed by tenant (SPEC §10).
Rows of a ``global`` space carry no tenant: their ``tenant_id`` is the empty string,
which no team id can be (a team id is a non-empty segment). The instance counter is
the ``memory_tenant_usage`` row with that same reserved key.

A space is keyed by ``space_key``, a hash of its full id, because the full id can be
longer than a PostgreSQL index entry allows; the full id is stored beside it and every
query compares it too, so a document is always addressed by its full space id.

Paths sort by code point on both databases: SQLite's default BINARY collation compares
UTF-8 bytes, and the PostgreSQL columns use the ``C`` collation (byte order), which is
what a Python sort of the same strings gives.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from cairn.db import Migration

COMPONENT = "documents"

metadata = sa.MetaData()

TS = sa.DateTime(timezone=True)
#: Text compared and sorted by code point on both dialects.
BinaryText = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")

memory_documents = sa.Table(
    "memory_documents",
    metadata,
    sa.Column("tenant_id", BinaryText, primary_key=True),
    sa.Column("space_key", sa.String(64), primary_key=True),
    sa.Column("path", BinaryText, primary_key=True),
    sa.Column("space_id", BinaryText, nullable=False),
    sa.Column("visibility", sa.String(32), nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("etag", sa.String(64), nullable=False),
    sa.Column("updated_at", TS, nullable=False),
)

memory_space_usage = sa.Table(
    "memory_space_usage",
    metadata,
    sa.Column("tenant_id", BinaryText, primary_key=True),
    sa.Column("space_key", sa.String(64), primary_key=True),
    sa.Column("space_id", BinaryText, nullable=False),
    sa.Column("used_bytes", sa.BigInteger, nullable=False),
)

memory_tenant_usage = sa.Table(
    "memory_tenant_usage",
    metadata,
    sa.Column("tenant_id", BinaryText, primary_key=True),
    sa.Column("used_bytes", sa.BigInteger, nullable=False),
    sa.Column("quota_bytes", sa.BigInteger, nullable=False),
)


def _v1_create_tables(conn: Connection) -> None:
    # Create the tables as they stood at version 1; later migrations alter them.
    metadata.create_all(conn, checkfirst=True)


MIGRATIONS: list[Migration] = [
    Migration(
        COMPONENT,
        1,
        "memory_documents, memory_space_usage and memory_tenant_usage",
        _v1_create_tables,
    ),
]


# --- v2: the platform audit log -------------------------------------------------------------
#
# Every mutation of a global space writes one row here in the same transaction as the
# mutation (SPEC §5 "Global"). The table was first created by identity's migration 1; it
# belongs to the document store, which writes it, so this creates it where it is missing.

audit_events = sa.Table(
    "audit_events",
    sa.MetaData(),
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("at", TS, nullable=False, index=True),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("actor", sa.String(128), nullable=False),
    sa.Column("space_id", sa.String(1024), nullable=False, server_default=""),
    sa.Column("path", sa.String(1024), nullable=False, server_default=""),
)


def _v2_audit_events(conn: Connection) -> None:
    audit_events.create(conn, checkfirst=True)


MIGRATIONS.append(
    Migration(COMPONENT, 2, "audit_events (the platform audit log)", _v2_audit_events)
)
