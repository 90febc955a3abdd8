"""Tables of team memory records (SPEC §6), component ``records``.

* ``records`` — one row per record, keyed ``(team_id, id)`` so it distributes by
  tenant. ``terms`` is the record's analysed text (:func:`keepstone.search.text.analyze`,
  space-joined: the terms documents' chunks store too); the keyword side ranks them in
  the process (BM25, :mod:`keepstone.search.bm25`), the same way on both dialects, so the
  database only finds and stores. ``embedding`` is a :mod:`keepstone.db.vectors` blob made
  by ``model`` (both NULL until the background indexer embeds the record, or when the
  configured model changed); ``vector_version`` is the team's ``vectors_version`` of the
  batch that stored it, so a cached matrix is extended by the newer rows alone. The
  ``model`` index serves the indexer's "not yet embedded by this model" scan.
  ``dup_key`` is the text's near-duplicate key (:func:`keepstone.search.floor.duplicate_key`,
  written with the record), read with the ranking rows: a search folds records of one
  text without reading the texts of the candidates it does not return.
* ``record_search_versions`` — per team, two counters every replica reads in one query:
  ``terms_version`` moves with every insert, delete and purge of the team's records (in
  the same transaction), ``vectors_version`` with every batch of vectors stored. A cached
  BM25 index is stamped with the first, a cached vector matrix with the second, so a
  batch of vectors does not throw away the team's BM25 index. ``vectors_reset`` is the
  last ``vectors_version`` that removed vectors too (dropping every vector; before records
  migration 6, a delete or purge too): a matrix cached before it is reloaded rather than
  extended by newer rows. A removed record's vector left in a cached matrix matches no
  cached row, so ranking skips it.
* ``record_removals`` — per team, each record removed (a delete, a purge) under the
  ``terms_version`` of its removal, with the version that stored it: what a search patches
  its cached rows by. Forgotten a while later (the team's ``terms_reset`` then moves).
* ``record_settings`` — the per-team on/off switch (off until turned on).
* ``records_meta`` — instance-wide values, e.g. the key that signs list page tokens,
  created once in the database so every replica shares it without configuration.

Migration 1 built a full-text index per dialect (FTS5 with triggers; a ``tsvector``
column with a GIN index) over team-prefixed tokens; migration 2 drops it, since ranking
moved into the process, and rewrites every record's ``terms``; migration 4 writes the
``dup_key`` of every record stored before it; migration 5 adds ``terms_version`` (each
record's: the team's ``terms_version`` of its insert) and ``terms_reset`` (the team's: the
last ``terms_version`` that removed records), so a team's cached rows are extended by the
records stored since, not read whole after every save; migration 6 adds
``record_removals`` (per team, the records removed under each ``terms_version``), so a
delete or purge patches them too: the removed records are dropped from the cached rows.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from keepstone.db import Steps
from keepstone.db.columns import TS as TS
from keepstone.db.columns import id_key, partial_index, timestamp
from keepstone.search.floor import duplicate_key
from keepstone.search.text import analyze

metadata = sa.MetaData()

records = sa.Table(
    "records",
    metadata,
    id_key("team_id"),
    id_key(),
    sa.Column("repo_id", sa.String(64), nullable=True),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("terms", sa.Text, nullable=False),
    timestamp("created_at"),
    timestamp("expires_at"),
    sa.Column("embedding", sa.LargeBinary, nullable=True),
    sa.Column("model", sa.String(128), nullable=True),
    sa.Column("vector_version", sa.BigInteger, nullable=True),
    # v4: :func:`~keepstone.search.floor.duplicate_key` of ``text`` (NULL only in a row
    # written around the product: it folds with nothing).
    sa.Column("dup_key", sa.BigInteger, nullable=True),
    # v5: the team's terms_version of the insert that stored the record (NULL: stored
    # before v5, read as 0), so a team's cached BM25 index is extended by newer rows alone.
    sa.Column("terms_version", sa.BigInteger, nullable=True),
)

record_search_versions = sa.Table(
    "record_search_versions",
    metadata,
    id_key("team_id"),
    sa.Column("terms_version", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("vectors_version", sa.BigInteger, nullable=False, server_default="0"),
    # The last vectors_version that also removed vectors (dropping every vector; before
    # v6, a delete or purge too): a cached matrix older than it is reloaded, not extended.
    sa.Column("vectors_reset", sa.BigInteger, nullable=False, server_default="0"),
    # v5: the last terms_version that removed records unlisted in record_removals (a
    # delete or purge by a replica of a release before v6, or removals forgotten since): a
    # team's rows cached before it are read again whole, not patched.
    sa.Column("terms_reset", sa.BigInteger, nullable=False, server_default="0"),
)

# v6: one row per record removed (a delete, a purge), under the team's terms_version of the
# removal: a team's cached rows are patched by the records removed since, as by those
# stored since, rather than read whole. Kept :data:`~keepstone.records.store.REMOVALS_KEPT`,
# then forgotten (the team's terms_reset moved past them) by the periodic purge.
record_removals = sa.Table(
    "record_removals",
    metadata,
    id_key("team_id"),
    sa.Column("terms_version", sa.BigInteger, primary_key=True),
    id_key(),
    # The terms_version of the save that stored the record (0: stored before v5).
    sa.Column("stored_version", sa.BigInteger, nullable=False),
    timestamp("removed_at", index=True),
)

record_settings = sa.Table(
    "record_settings",
    metadata,
    id_key("team_id"),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.false()),
    timestamp("updated_at"),
)

records_meta = sa.Table(
    "records_meta",
    metadata,
    id_key("name"),
    sa.Column("value", sa.String(256), nullable=False),
)

CURSOR_KEY_NAME = "cursor_signing_key"


def _v1_record_columns(time_type: str) -> str:
    """The columns migration 1's ``records`` had on both dialects, times as ``time_type``."""
    return f"""\
        team_id VARCHAR(64) NOT NULL,
        id VARCHAR(64) NOT NULL,
        repo_id VARCHAR(64),
        text TEXT NOT NULL,
        terms TEXT NOT NULL,
        created_at {time_type} NOT NULL,
        expires_at {time_type} NOT NULL,"""


_SQLITE_DDL = [
    f"""
    CREATE TABLE records (
        rowid_ INTEGER PRIMARY KEY AUTOINCREMENT,
{_v1_record_columns("DATETIME")}
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
    f"""
    CREATE TABLE records (
{_v1_record_columns("TIMESTAMPTZ")}
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


def _run_ddl(conn: Connection, sqlite: list[str], postgres: list[str]) -> None:
    for statement in sqlite if conn.dialect.name == "sqlite" else postgres:
        conn.exec_driver_sql(statement)


MIGRATIONS = Steps("records")


@MIGRATIONS.add(1, "records, full-text index, per-team settings")
def _create_v1(conn: Connection) -> None:
    _run_ddl(conn, _SQLITE_DDL, _POSTGRES_DDL)
    record_settings.create(conn)
    records_meta.create(conn)
    conn.execute(records_meta.insert().values(name=CURSOR_KEY_NAME, value=secrets.token_hex(32)))


#: Records whose ``terms`` migration 2 rewrites per statement batch.
REWRITE_BATCH = 1000

_V2_SQLITE = [
    "DROP TRIGGER IF EXISTS records_ai",
    "DROP TRIGGER IF EXISTS records_ad",
    "DROP TABLE IF EXISTS records_fts",
    "ALTER TABLE records ADD COLUMN embedding BLOB",
    "ALTER TABLE records ADD COLUMN model VARCHAR(128)",
    "ALTER TABLE records ADD COLUMN vector_version BIGINT",
]
_V2_POSTGRES = [
    "DROP INDEX IF EXISTS ix_records_tsv",
    "ALTER TABLE records DROP COLUMN IF EXISTS tsv",
    "ALTER TABLE records ADD COLUMN embedding BYTEA",
    "ALTER TABLE records ADD COLUMN model VARCHAR(128)",
    "ALTER TABLE records ADD COLUMN vector_version BIGINT",
]


@MIGRATIONS.add(2, "records ranked in the process: vectors, search versions, no full-text index")
def _create_v2(conn: Connection) -> None:
    _run_ddl(conn, _V2_SQLITE, _V2_POSTGRES)
    # The indexer's pending query ("no vector, or another model's") reads ``model``; a
    # search loads one team's vectors of one model, newer than what it caches, by the
    # second (without it SQLite's planner picks the model index: every team's rows).
    conn.exec_driver_sql("CREATE INDEX ix_records_model ON records (model)")
    conn.exec_driver_sql(
        "CREATE INDEX ix_records_team_vectors ON records (team_id, model, vector_version)"
    )
    record_search_versions.create(conn)
    _rewrite(conn, records.c.terms, lambda text: " ".join(analyze(text)))
    teams = sa.select(records.c.team_id).distinct()
    conn.execute(
        sa.insert(record_search_versions).from_select(
            ["team_id", "terms_version", "vectors_version", "vectors_reset"],
            sa.select(teams.subquery().c.team_id, sa.literal(1), sa.literal(0), sa.literal(0)),
        )
    )


def _rewrite(conn: Connection, column: sa.Column[Any], of_text: Callable[[str], Any]) -> None:
    """Every record's ``column`` set to ``of_text`` of its text, a batch of
    :data:`REWRITE_BATCH` at a time (in key order, so memory stays bounded)."""
    key = sa.tuple_(records.c.team_id, records.c.id)
    update = (
        records.update()
        .where(records.c.team_id == sa.bindparam("k_team"), records.c.id == sa.bindparam("k_id"))
        .values({column.name: sa.bindparam("new_value")})
    )
    after: tuple[str, str] | None = None
    while True:
        page = sa.select(records.c.team_id, records.c.id, records.c.text).order_by(
            records.c.team_id, records.c.id
        )
        if after is not None:
            page = page.where(key > sa.tuple_(sa.literal(after[0]), sa.literal(after[1])))
        rows = conn.execute(page.limit(REWRITE_BATCH)).all()
        if not rows:
            return
        params: list[dict[str, Any]] = [
            {"k_team": r.team_id, "k_id": r.id, "new_value": of_text(r.text)} for r in rows
        ]
        conn.execute(update, params)
        after = (rows[-1].team_id, rows[-1].id)


#: The records never embedded: what the indexer embeds first, and the predicate of the
#: partial index that holds them in its order (v3).
UNEMBEDDED = records.c.model.is_(None)

# v3: the indexer's scan of the records never embedded reads them from a partial index that
# holds them alone, in the scan's order: a batch costs its size, not a sort of every record
# (with no planner statistics, as after a bulk load, that sort read the whole table).
unembedded_records = partial_index(
    "ix_records_unembedded", records, ("created_at", "team_id", "id"), UNEMBEDDED
)


@MIGRATIONS.add(3, "ix_records_unembedded: the records to embed, in order")
def _create_v3(conn: Connection) -> None:
    unembedded_records.create(conn, checkfirst=True)


# v4: each record's near-duplicate key, stored with it. A search folds records of one text
# into the best hit and lists the others in its ``also_in``, which takes the keys of every
# candidate it ranks (twice the page): read from the team's cached rows, not computed
# from texts read for the candidates the page does not return. A record's text never
# changes, so its key is written once, with the record; this step writes the keys of
# the records stored before it.


@MIGRATIONS.add(4, "records.dup_key: each record's near-duplicate key, stored")
def _create_v4(conn: Connection) -> None:
    conn.exec_driver_sql("ALTER TABLE records ADD COLUMN dup_key BIGINT")
    _rewrite(conn, records.c.dup_key, duplicate_key)


# v5: a save no longer costs the next search a read of every record of its team. Each
# record carries the team's terms_version of the insert that stored it, and the team the
# last version that removed records: a team's cached rows and BM25 index are extended by
# the records stored since (read by the team's index on terms_version), and read whole only
# after a removal.


@MIGRATIONS.add(5, "records.terms_version, record_search_versions.terms_reset: rows extended")
def _create_v5(conn: Connection) -> None:
    conn.exec_driver_sql("ALTER TABLE records ADD COLUMN terms_version BIGINT")
    # Step 2 creates record_search_versions from this module's table, which has it now.
    held = {c["name"] for c in sa.inspect(conn).get_columns(record_search_versions.name)}
    if "terms_reset" not in held:
        conn.exec_driver_sql(
            "ALTER TABLE record_search_versions ADD COLUMN terms_reset BIGINT NOT NULL DEFAULT 0"
        )
    conn.exec_driver_sql("CREATE INDEX ix_records_team_terms ON records (team_id, terms_version)")


# v6: a delete or purge no longer costs the next search a read of every record of its team.
# Each removal lists the records it removed under its terms_version (with the version that
# stored each), and a search drops those from its cached rows and BM25 index, as it adds the
# records stored since.


@MIGRATIONS.add(6, "record_removals: cached rows patched by the records removed")
def _create_v6(conn: Connection) -> None:
    record_removals.create(conn)
