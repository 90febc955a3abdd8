"""Tables of team memory records (SPEC §6), component ``records``.

* ``records`` — one row per record, keyed ``(team_id, id)`` so it distributes by
  tenant. ``terms`` is the record's search text: every (folded, stemmed) word of
  ``text`` prefixed with the team's index key (:func:`team_key`), e.g.
  ``t1a2b3c4d5e6fdeploy``. The full-text index is built over ``terms``, so a team's
  words are distinct index tokens from every other team's: the team condition lives
  *inside* the index lookup (a query can only name its own team's tokens), the index
  hands back only that team's records, and the work done per search depends on the
  team's records, not on the size of the whole table. Queries also carry
  ``team_id = :team`` so that even a key collision could only disturb ranking,
  never return another team's record.
* SQLite: ``records_fts``, an FTS5 external-content table over ``terms`` kept in
  step by triggers, ranked by ``bm25()``.
* PostgreSQL: a stored ``tsv`` column, ``to_tsvector('simple', terms)``, with a GIN
  index (``fastupdate`` off), ranked by ``ts_rank_cd``.
* ``record_settings`` — the per-team on/off switch (off until turned on).
* ``records_meta`` — instance-wide values, e.g. the key that signs list page tokens,
  created once in the database so every replica shares it without configuration.
"""

from __future__ import annotations

import hashlib
import secrets

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from cairn.db import Migration

metadata = sa.MetaData()
TS = sa.DateTime(timezone=True)

records = sa.Table(
    "records",
    metadata,
    sa.Column("team_id", sa.String(64), primary_key=True),
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("repo_id", sa.String(64), nullable=True),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("terms", sa.Text, nullable=False),
    sa.Column("created_at", TS, nullable=False),
    sa.Column("expires_at", TS, nullable=False),
)

record_settings = sa.Table(
    "record_settings",
    metadata,
    sa.Column("team_id", sa.String(64), primary_key=True),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("updated_at", TS, nullable=False),
)

records_meta = sa.Table(
    "records_meta",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(256), nullable=False),
)

CURSOR_KEY_NAME = "cursor_signing_key"


def team_key(team_id: str) -> str:
    """The fixed-length prefix of every index token of ``team_id``'s records.

    ``t`` and 11 hex digits of a hash: letters and digits only, so every tokenizer
    (FTS5 unicode61, PostgreSQL ``simple``) keeps a prefixed word whole, and of fixed
    length, so no team's tokens can be spelled by another's (a raw id such as ``a-b``
    would split, and ``ab`` + ``c…`` would read as ``a`` + ``bc…``). Short, because it
    is repeated in every token; isolation does not rest on it (see module doc).
    """
    return "t" + hashlib.sha256(team_id.encode("utf-8")).hexdigest()[:11]


_SQLITE_DDL = [
    """
    CREATE TABLE records (
        rowid_ INTEGER PRIMARY KEY AUTOINCREMENT,
        team_id VARCHAR(64) NOT NULL,
        id VARCHAR(64) NOT NULL,
        repo_id VARCHAR(64),
        text TEXT NOT NULL,
        terms TEXT NOT NULL,
        created_at DATETIME NOT NULL,
        expires_at DATETIME NOT NULL,
        UNIQUE (team_id, id)
    )
    """,
    "CREATE INDEX ix_records_team_created ON records (team_id, created_at DESC, id DESC)",
    "CREATE INDEX ix_records_expires ON records (expires_at)",
    """
    CREATE VIRTUAL TABLE records_fts USING fts5(
        terms, content='records', content_rowid='rowid_',
        tokenize='unicode61 remove_diacritics 0'
    )
    """,
    """
    CREATE TRIGGER records_ai AFTER INSERT ON records BEGIN
        INSERT INTO records_fts(rowid, terms) VALUES (new.rowid_, new.terms);
    END
    """,
    """
    CREATE TRIGGER records_ad AFTER DELETE ON records BEGIN
        INSERT INTO records_fts(records_fts, rowid, terms)
        VALUES ('delete', old.rowid_, old.terms);
    END
    """,
]

_POSTGRES_DDL = [
    """
    CREATE TABLE records (
        team_id VARCHAR(64) NOT NULL,
        id VARCHAR(64) NOT NULL,
        repo_id VARCHAR(64),
        text TEXT NOT NULL,
        terms TEXT NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL,
        tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', terms)) STORED,
        PRIMARY KEY (team_id, id)
    )
    """,
    "CREATE INDEX ix_records_team_created ON records (team_id, created_at DESC, id DESC)",
    "CREATE INDEX ix_records_expires ON records (expires_at)",
    # fastupdate off: no pending list that every search would scan linearly until the
    # next vacuum; saves are rare (one per finished task), searches are not.
    "CREATE INDEX ix_records_tsv ON records USING GIN (tsv) WITH (fastupdate = off)",
]


def _create_v1(conn: Connection) -> None:
    ddl = _SQLITE_DDL if conn.dialect.name == "sqlite" else _POSTGRES_DDL
    for statement in ddl:
        conn.exec_driver_sql(statement)
    record_settings.create(conn)
    records_meta.create(conn)
    conn.execute(records_meta.insert().values(name=CURSOR_KEY_NAME, value=secrets.token_hex(32)))


MIGRATIONS = [
    Migration("records", 1, "records, full-text index, per-team settings", _create_v1),
]
