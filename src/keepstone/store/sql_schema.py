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

import hashlib

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from keepstone.db import Steps
from keepstone.db.columns import id_key, partial_index, timestamp

#: The width of a document change's ``actor`` column (who made it).
ACTOR_WIDTH = 256

COMPONENT = "documents"

metadata = sa.MetaData()

#: Columns later migrations add to the version-1 tables (left out when v1 creates them).
_ADDED_LATER = frozenset(
    {
        "search_version",
        "history_used_bytes",
        "history_quota_bytes",
        "history_versions",
        "history_days",
        "version",
        "actor",
        "chunked",
        "action",
        "actor_kind",
    }
)

#: Text compared and sorted by code point on both dialects.
BinaryText = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def space_key(space_id: str) -> str:
    """The ``space_key`` column's value for the space ``space_id`` (see the module docstring)."""
    return hashlib.sha256(space_id.encode("utf-8")).hexdigest()


def _tenant_key() -> sa.Column[str]:
    """The team, leading every table's primary key (the tables distribute by it)."""
    return sa.Column("tenant_id", BinaryText, primary_key=True)


def _document_key() -> tuple[sa.Column[str], ...]:
    """The lead of a per-document table's primary key: team, space, path."""
    return (_tenant_key(), id_key("space_key"), sa.Column("path", BinaryText, primary_key=True))


def _space_id() -> sa.Column[str]:
    return sa.Column("space_id", BinaryText, nullable=False)


def _recent_indexes(table: str, at: str, *tail: str, team: bool = False) -> tuple[sa.Index, ...]:
    """v8: a space's changes newest first, in the activity feed's whole order (time, path[,
    version]), so a page reads its own rows and sorts nothing (a team's feed merges its
    spaces' pages); ``team``: the team's too, in the same order (the versions' retention
    reads it by time)."""
    # Partial (v10) on a condition every row meets but only a reader by time states (``at``
    # IS NOT NULL, or any comparison of ``at``): a lookup of one document or version by its
    # key cannot take them. Taken whole, the planner of a prepared write, planning while the
    # tables were small, found them as cheap as the primary key and kept a plan that read
    # a whole space's rows for one document as the space grew.
    where = sa.text(f"{at} IS NOT NULL")
    space = _by_time(f"ix_{table}_space_recent", ("space_key", at, "path", *tail), where)
    if not team:
        return (space,)
    return (
        _by_time(f"ix_{table}_recent", ("tenant_id", at, "space_key", "path", *tail), where),
        space,
    )


def _by_time(name: str, columns: tuple[str, ...], where: sa.TextClause) -> sa.Index:
    return sa.Index(name, *columns, postgresql_where=where, sqlite_where=where)


def _change_columns() -> tuple[sa.Column[str], ...]:
    """A change's action and actor kind (v8), '' where written before they were recorded."""
    return (
        sa.Column("action", sa.String(16), nullable=False, server_default=""),
        sa.Column("actor_kind", sa.String(16), nullable=False, server_default=""),
    )


memory_documents = sa.Table(
    "memory_documents",
    metadata,
    *_document_key(),
    _space_id(),
    sa.Column("visibility", sa.String(32), nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("etag", sa.String(64), nullable=False),
    timestamp("updated_at"),
    # v5: the live document is the newest version of its path: its number and who wrote
    # it (``updated_at`` is when).
    sa.Column("version", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("actor", sa.String(ACTOR_WIDTH), nullable=False, server_default=""),
    # v6: whether the document's chunks are in ``memory_chunks`` (a blank one needs none).
    # Every write of new content clears it in the write's own statement; the indexer sets
    # it in the transaction that inserts the chunks.
    sa.Column("chunked", sa.Boolean, nullable=False, server_default=sa.false()),
    # v8: what the change made the live version (an activity.ACTIONS) and who made it
    # (an activity.ACTOR_KINDS); '' on rows written before.
    *_change_columns(),
    *_recent_indexes("memory_documents", "updated_at"),
)

#: The documents whose chunks are not in ``memory_chunks`` yet: the condition a reconcile
#: and the backfill ask, and the predicate of the partial index that answers it.
UNCHUNKED = memory_documents.c.chunked == sa.false()

memory_space_usage = sa.Table(
    "memory_space_usage",
    metadata,
    _tenant_key(),
    id_key("space_key"),
    _space_id(),
    sa.Column("used_bytes", sa.BigInteger, nullable=False),
    # v3: bumped by every write and delete of the space (and every stored embedding) in
    # the same transaction: the per-space version the search caches check.
    sa.Column("search_version", sa.BigInteger, nullable=False, server_default="0"),
)

memory_tenant_usage = sa.Table(
    "memory_tenant_usage",
    metadata,
    _tenant_key(),
    sa.Column("used_bytes", sa.BigInteger, nullable=False),
    sa.Column("quota_bytes", sa.BigInteger, nullable=False),
    # v4: the team's history (compressed bytes of its versions that are not live) and its
    # history limits, NULL for the store's defaults (Limits.history_*).
    sa.Column("history_used_bytes", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("history_quota_bytes", sa.BigInteger, nullable=True),
    sa.Column("history_versions", sa.Integer, nullable=True),
    sa.Column("history_days", sa.Integer, nullable=True),
)


MIGRATIONS = Steps(COMPONENT)


@MIGRATIONS.add(1, "memory_documents, memory_space_usage and memory_tenant_usage")
def _v1_create_tables(conn: Connection) -> None:
    # Create the tables as they stood at version 1; later migrations alter them.
    v1 = sa.MetaData()
    for table in (memory_documents, memory_space_usage, memory_tenant_usage):
        columns = [c._copy() for c in table.columns if c.name not in _ADDED_LATER]
        sa.Table(table.name, v1, *columns)
    v1.create_all(conn, checkfirst=True)


# --- v2: the platform audit log -------------------------------------------------------------
#
# Every mutation of a global space writes one row here in the same transaction as the
# mutation (SPEC §5 "Global"). The table was first created by identity's migration 1; it
# belongs to the document store, which writes it, so this creates it where it is missing.

audit_events = sa.Table(
    "audit_events",
    sa.MetaData(),
    id_key(),
    timestamp("at", index=True),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("actor", sa.String(128), nullable=False),
    sa.Column("space_id", sa.String(1024), nullable=False, server_default=""),
    sa.Column("path", sa.String(1024), nullable=False, server_default=""),
)


@MIGRATIONS.add(2, "audit_events (the platform audit log)")
def _v2_audit_events(conn: Connection) -> None:
    audit_events.create(conn, checkfirst=True)


# --- v3: the document index ------------------------------------------------------------------
#
# Each document's search chunks (keepstone.search.chunking.chunk_markdown), written and removed
# in the document write's own transaction, so a document is keyword-searchable the moment
# its write commits. ``terms`` are the space-joined ``keepstone.search.text.analyze`` terms of
# the chunk's search text (``context`` on a line, then ``text``); ``embedding`` is a
# ``keepstone.db.vectors`` blob made by ``model``, both NULL until the background indexer
# embeds the chunk (or when the configured model changed). The primary key leads with the
# space, so it serves "every chunk of a space"; the ``model`` index serves the indexer's
# "not yet embedded by this model" scan.

#: What a reader of a whole space's chunks states (its pending count, its index bytes): true
#: of every chunk, the condition of the partial indexes led by the space alone (v10). A
#: lookup of one document's chunks does not state it, so cannot take them (see
#: _recent_indexes: the same trap for documents and versions).
SPACE_WIDE = sa.text("seq >= 0")

memory_chunks = sa.Table(
    "memory_chunks",
    metadata,
    *_document_key(),
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    _space_id(),
    sa.Column("visibility", sa.String(32), nullable=False),
    sa.Column("heading", sa.Text, nullable=False),
    # The headings above the chunk that its text does not show (Chunk.context, " > "-joined).
    sa.Column("context", sa.Text, nullable=False),
    sa.Column("start_offset", sa.Integer, nullable=False),
    sa.Column("end_offset", sa.Integer, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("terms", sa.Text, nullable=False),
    sa.Column("embedding", sa.LargeBinary, nullable=True),
    sa.Column("model", sa.String(64), nullable=True),
    timestamp("updated_at"),
    # v9: the bytes the row holds for search (keepstone.store.index.chunk_bytes).
    sa.Column("stored_bytes", sa.BigInteger, nullable=False, server_default="0"),
    # v11: new (random) whenever the row is chunked or given a vector (see chunk_stamps).
    sa.Column("stamp", sa.BigInteger, nullable=False, server_default="0"),
    sa.Index("ix_memory_chunks_model", "model"),
    # v7: a space's chunks by model, so a search counts what its space has pending.
    sa.Index(
        "ix_memory_chunks_space_model",
        "tenant_id",
        "space_key",
        "model",
        postgresql_where=SPACE_WIDE,
        sqlite_where=SPACE_WIDE,
    ),
    # v9: a space's index bytes summed from this index alone.
    sa.Index(
        "ix_memory_chunks_space_bytes",
        "tenant_id",
        "space_key",
        "stored_bytes",
        postgresql_where=SPACE_WIDE,
        sqlite_where=SPACE_WIDE,
    ),
)

#: The chunks never embedded: what the indexer embeds first, and the predicate of the partial
#: index that holds them in its order (v6).
UNEMBEDDED = memory_chunks.c.model.is_(None)


@MIGRATIONS.add(3, "memory_chunks (the document index) and memory_space_usage.search_version")
def _v3_document_index(conn: Connection) -> None:
    memory_chunks.create(conn, checkfirst=True)
    columns = {c["name"] for c in sa.inspect(conn).get_columns("memory_space_usage")}
    if "search_version" not in columns:
        conn.exec_driver_sql(
            "ALTER TABLE memory_space_usage ADD COLUMN search_version BIGINT NOT NULL DEFAULT 0"
        )


# --- v4: document history ---------------------------------------------------------------------
#
# Every version of every document, the live one included, appended in the transaction of the
# write, delete or move that made it: ``content`` is the version's UTF-8 text packed by
# keepstone.store.version_pack (NULL for a deletion marker: under 4 KB as it is after a zero byte,
# from 4 KB a zstd frame; rows written before either are zlib streams, still read),
# ``stored_bytes`` its packed length (what the history quota counts). ``version`` counts from 1
# per path and is taken under the document row's lock, so concurrent writers of one document
# number their versions in commit order.
# ``memory_tenant_usage`` gains the team's history counter and its history limits (NULL: the
# store's defaults). Documents that exist when this runs get version 1, stamped with their
# ``updated_at`` and the actor ``before-history``.

memory_document_versions = sa.Table(
    "memory_document_versions",
    metadata,
    *_document_key(),
    sa.Column("version", sa.BigInteger, primary_key=True, autoincrement=False),
    _space_id(),
    sa.Column("etag", sa.String(64), nullable=False),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("stored_bytes", sa.BigInteger, nullable=False),
    sa.Column("content", sa.LargeBinary, nullable=True),
    timestamp("at"),
    sa.Column("actor", sa.String(ACTOR_WIDTH), nullable=False),
    sa.Column("deleted", sa.Boolean, nullable=False),
    *_change_columns(),
    # The oldest versions of a team go first when its history is over quota or too old (v8:
    # the team's index by time is the activity's, below; it was (tenant_id, at) before).
    *_recent_indexes("memory_document_versions", "at", "version", team=True),
)

_HISTORY_COLUMNS = {
    "history_used_bytes": "BIGINT NOT NULL DEFAULT 0",
    "history_quota_bytes": "BIGINT",
    "history_versions": "INTEGER",
    "history_days": "INTEGER",
}


@MIGRATIONS.add(4, "memory_document_versions (document history) and the teams' history counters")
def _v4_document_history(conn: Connection) -> None:
    from keepstone.store.version_pack import pack_version

    # The table as it stood at v4 (v8 adds its change columns and indexes).
    v4 = sa.MetaData()
    later = {"action", "actor_kind"}
    columns = [c._copy() for c in memory_document_versions.columns if c.name not in later]
    old = sa.Table(memory_document_versions.name, v4, *columns)
    sa.Index("ix_memory_document_versions_at", old.c.tenant_id, old.c.at)
    v4.create_all(conn, checkfirst=True)
    have = {c["name"] for c in sa.inspect(conn).get_columns("memory_tenant_usage")}
    for name, ddl in _HISTORY_COLUMNS.items():
        if name not in have:
            conn.exec_driver_sql(f"ALTER TABLE memory_tenant_usage ADD COLUMN {name} {ddl}")
    d, v = memory_documents, memory_document_versions
    rows = conn.execute(
        sa.select(
            d.c.tenant_id,
            d.c.space_key,
            d.c.path,
            d.c.space_id,
            d.c.etag,
            d.c.size_bytes,
            d.c.content,
            d.c.updated_at,
        ).where(
            ~sa.exists().where(
                v.c.tenant_id == d.c.tenant_id,
                v.c.space_key == d.c.space_key,
                v.c.path == d.c.path,
            )
        )
    )
    batch: list[dict[str, object]] = []
    for row in rows:
        packed = pack_version(row.content.encode("utf-8"))
        batch.append(
            {
                "tenant_id": row.tenant_id,
                "space_key": row.space_key,
                "path": row.path,
                "version": 1,
                "space_id": row.space_id,
                "etag": row.etag,
                "size_bytes": row.size_bytes,
                "stored_bytes": len(packed),
                "content": packed,
                "at": row.updated_at,
                "actor": "before-history",
                "deleted": False,
            }
        )
        if len(batch) >= 500:
            conn.execute(v.insert(), batch)
            batch = []
    if batch:
        conn.execute(v.insert(), batch)


# --- v5: the live version on the document row -------------------------------------------------
#
# Until v5 the table of versions held every version, the live one included, so every document
# was stored twice and every create wrote a version row (three b-trees on SQLite: its table,
# primary key and ``at`` index) beside the document. From v5 the table holds only versions that
# were replaced (and deletion markers): the live version is the document row itself — its
# number, its actor and ``updated_at`` — and a change that replaces it first copies it into the
# table (keepstone.store.sql_write). A write of a new small document writes no history at all.
#
# A large live version (from version_pack.COMPRESS_FROM bytes) keeps its row: it is packed
# when written, while its bytes are at hand, so replacing it copies nothing. (PostgreSQL
# still packs on write; SQLite stores since pack when a change replaces the version, from the
# content its lock reads, and keep such an earlier row as it is.)
#
# For every document: its number is that of its newest version row with its etag (else the
# path's next number), its actor that row's (else ``before-history``); then the rows of small
# live documents go. The history counter counted only replaced versions: it stays as it is.


@MIGRATIONS.add(5, "the live version on the document row: memory_documents.version and actor")
def _v5_live_version_on_document(conn: Connection) -> None:
    from keepstone.store.version_pack import COMPRESS_FROM

    have = {c["name"] for c in sa.inspect(conn).get_columns("memory_documents")}
    for name, ddl in (
        ("version", "BIGINT NOT NULL DEFAULT 0"),
        ("actor", "VARCHAR(256) NOT NULL DEFAULT ''"),
    ):
        if name not in have:
            conn.exec_driver_sql(f"ALTER TABLE memory_documents ADD COLUMN {name} {ddl}")
    same_path = (
        "v.tenant_id = d.tenant_id AND v.space_key = d.space_key AND v.space_id = d.space_id "
        "AND v.path = d.path"
    )
    live = f"{same_path} AND v.etag = d.etag AND NOT v.deleted"
    row_of_live = f"{same_path} AND v.version = d.version"
    conn.exec_driver_sql(
        "UPDATE memory_documents AS d SET version = coalesce("
        f"(SELECT max(v.version) FROM memory_document_versions AS v WHERE {live}), "
        f"(SELECT max(v.version) + 1 FROM memory_document_versions AS v WHERE {same_path}), 1)"
    )
    conn.exec_driver_sql(
        "UPDATE memory_documents AS d SET actor = coalesce((SELECT v.actor FROM "
        f"memory_document_versions AS v WHERE {row_of_live}), 'before-history')"
    )
    conn.exec_driver_sql(
        "DELETE FROM memory_document_versions AS v WHERE EXISTS (SELECT 1 FROM "
        f"memory_documents AS d WHERE {row_of_live} AND d.size_bytes < {COMPRESS_FROM})"
    )


# --- v6: the documents to chunk and the chunks to embed, by partial indexes ----------------------
#
# Every search asks first whether its space has documents without chunks (reconcile). Asked as
# an anti-join of the space's documents against its chunks, the answer cost a probe per
# document, and on PostgreSQL with no statistics yet (a bulk import before any ANALYZE) a
# nested loop that compared every document with every chunk of the space. ``chunked`` on the
# document row answers it from a partial index that holds only the documents still to chunk,
# so a reconcile costs what is pending, whatever the planner knows (docs/performance.md,
# "Query plans"). Documents that have chunks are marked once here; the others (blank ones
# among them) are looked at by the next reconcile, which marks them.
#
# The indexer's scan of the chunks never embedded reads a second partial index, of those
# chunks alone in the scan's order: a batch costs its size, not a sort of every chunk.

unchunked_documents = partial_index(
    "ix_memory_documents_unchunked",
    memory_documents,
    ("tenant_id", "space_key", "path"),
    UNCHUNKED,
)
unembedded_chunks = partial_index(
    "ix_memory_chunks_unembedded",
    memory_chunks,
    ("updated_at", "tenant_id", "space_key", "path", "seq"),
    UNEMBEDDED,
)
chunk_stamps = partial_index(  # v11: a space's chunks' stamps, read from this index alone
    "ix_memory_chunks_space_stamps",
    memory_chunks,
    ("tenant_id", "space_key", "path", "seq", "stamp"),
    SPACE_WIDE,
)


@MIGRATIONS.add(
    6,
    "memory_documents.chunked and partial indexes of the documents to chunk and the "
    "chunks to embed",
)
def _v6_index_driven_plans(conn: Connection) -> None:
    postgres = conn.dialect.name == "postgresql"
    have = {c["name"] for c in sa.inspect(conn).get_columns("memory_documents")}
    if "chunked" not in have:
        false = "false" if postgres else "0"
        conn.exec_driver_sql(
            f"ALTER TABLE memory_documents ADD COLUMN chunked BOOLEAN NOT NULL DEFAULT {false}"
        )
    if postgres and _holds_rows(conn, "memory_documents"):
        # The marking below joins every document with its chunks: with statistics, not
        # as a nested loop over tables the planner believes empty. Not on empty tables:
        # statistics saying "empty" would stay until the next ANALYZE, and a prepared write
        # planned on them reads by the wrong index as the tables grow.
        conn.exec_driver_sql("ANALYZE memory_documents, memory_chunks")
    d, c = memory_documents, memory_chunks
    has_chunks = sa.exists().where(
        c.c.tenant_id == d.c.tenant_id, c.c.space_key == d.c.space_key, c.c.path == d.c.path
    )
    conn.execute(sa.update(d).where(has_chunks).values(chunked=True))
    unchunked_documents.create(conn, checkfirst=True)
    unembedded_chunks.create(conn, checkfirst=True)


# --- v7: pending chunks counted per space ----------------------------------------------------
#
# Every search answer says how many chunks of the searched spaces wait for a vector of the
# embedder's model (docs/search.md, "Freshness"): a range of this index per space, the three
# ``model`` conditions of the indexer's scan, so the count costs what is pending, not what
# the space holds. (The newest-first claims read v6's partial index of the chunks never
# embedded, backwards.)


@MIGRATIONS.add(7, "ix_memory_chunks_space_model: pending counted per space")
def _v7_pending_per_space(conn: Connection) -> None:
    conn.exec_driver_sql(
        "CREATE INDEX IF NOT EXISTS ix_memory_chunks_space_model "
        "ON memory_chunks (tenant_id, space_key, model)"
    )


# --- v8: activity: each change's action and actor kind, read newest first --------------------
#
# Every change records what it did (``action``: write, delete, move, import, restore) and the
# kind of who made it (``actor_kind``: user, api_key, service, agent_run, platform), on the
# document row (the live version) and on each row of the table (copied with the version when
# a change replaces it). Rows written before keep '' in both, which the feed reads as a
# write or a deletion (by ``deleted``) by an ``unknown`` actor: adding a column with a constant
# default rewrites no row (PostgreSQL 11+, SQLite), and nothing here reads statistics.
#
# The feed (docs/history.md, "Activity") reads both tables newest first, each space along an
# index in the feed's whole order (``*_space_recent``), a team's feed merging its spaces'
# pages; the versions' index by team and time in that order (``*_recent``) replaces v4's
# ``(tenant_id, at)``, which the retention jobs read, as its prefix.


@MIGRATIONS.add(8, "activity: each change's action and actor kind, and indexes read newest first")
def _v8_activity(conn: Connection) -> None:
    for table in ("memory_documents", "memory_document_versions"):
        have = {c["name"] for c in sa.inspect(conn).get_columns(table)}
        for name in ("action", "actor_kind"):
            if name not in have:
                conn.exec_driver_sql(
                    f"ALTER TABLE {table} ADD COLUMN {name} VARCHAR(16) NOT NULL DEFAULT ''"
                )
    for changed in (memory_documents, memory_document_versions):
        for index in changed.indexes:
            if index.name and index.name.endswith("recent"):
                index.create(conn, checkfirst=True)
    # The team's versions by time: the feed's index above leads with the same columns.
    conn.exec_driver_sql("DROP INDEX IF EXISTS ix_memory_document_versions_at")


# --- v9: the index's bytes, per chunk ----------------------------------------------------------
#
# ``keepstone memory du`` reports what a space's search index holds (``index_bytes``), and
# ``keepstone doctor`` the total of every space. Each chunk row keeps its own byte count
# (heading, context, text and terms in UTF-8, and the vector blob), set where the row is
# inserted and where its vector is stored; an index led by the space ends with it, so a
# space's sum reads that index alone, not the chunks' text. Rows written before are
# counted here once.


@MIGRATIONS.add(9, "memory_chunks.stored_bytes: index bytes per space")
def _v9_index_bytes(conn: Connection) -> None:
    have = {c["name"] for c in sa.inspect(conn).get_columns("memory_chunks")}
    if "stored_bytes" not in have:
        conn.exec_driver_sql(
            "ALTER TABLE memory_chunks ADD COLUMN stored_bytes BIGINT NOT NULL DEFAULT 0"
        )
    if conn.dialect.name == "postgresql":
        size = "octet_length({})".format
    else:  # SQLite's length() of text counts characters; of a blob, bytes.
        size = "length(CAST({} AS BLOB))".format
    parts = " + ".join(size(c) for c in ("heading", "context", "text", "terms"))
    conn.exec_driver_sql(
        f"UPDATE memory_chunks SET stored_bytes = {parts} + coalesce(length(embedding), 0)"
    )
    # Its index (ix_memory_chunks_space_bytes) is made once, partial, by v10.


def _holds_rows(conn: Connection, table: str) -> bool:
    return conn.exec_driver_sql(f"SELECT 1 FROM {table} LIMIT 1").first() is not None


# --- v10: indexes by time that no lookup by key can take -------------------------------------
#
# The activity feed's indexes (v8) and the chunks' indexes led by the space (v7, and the one
# by bytes for v9's column) become partial, on a condition every row meets (``at``/``updated_at``
# IS NOT NULL, ``seq >= 0``) that only the statements reading them by time or over a whole space
# state. Whole, they were as cheap as the primary key to the planner of a prepared write planning
# on small tables, and the plan it kept read a whole space's rows for one document as it grew.


@MIGRATIONS.add(10, "indexes by time and space-wide ones partial: no lookup by key takes them")
def _v10_partial_by_time(conn: Connection) -> None:
    for table in (memory_documents, memory_document_versions, memory_chunks):
        for index in table.indexes:
            if index.name and index.name.endswith(("recent", "space_bytes", "space_model")):
                conn.exec_driver_sql(f"DROP INDEX IF EXISTS {index.name}")
                index.create(conn)


@MIGRATIONS.add(11, "memory_chunks.stamp: a search reads again only the chunks that changed")
def _v11_chunk_stamps(conn: Connection) -> None:
    # Rows written before share stamp 0: a first search reads a space whole anyway.
    if "stamp" not in {c["name"] for c in sa.inspect(conn).get_columns("memory_chunks")}:
        conn.exec_driver_sql("ALTER TABLE memory_chunks ADD COLUMN stamp BIGINT NOT NULL DEFAULT 0")
    chunk_stamps.create(conn, checkfirst=True)


#: Every table that holds a team's rows under ``tenant_id``: what deleting a team deletes
#: (a table added later that carries a tenant's rows belongs here too).
TENANT_TABLES = (
    memory_chunks,
    memory_document_versions,
    memory_documents,
    memory_space_usage,
    memory_tenant_usage,
)
