"""The SQL document store: SQLite (embedded default, WAL) and PostgreSQL (psycopg 3).

One code path over SQLAlchemy Core for both databases; the only dialect-specific
parts are the ``INSERT ... ON CONFLICT`` construct (each dialect has its own) and
``SELECT ... FOR UPDATE``, which SQLite does not need (its write transactions are
``BEGIN IMMEDIATE``, serialised on the database lock) and SQLAlchemy leaves out there.

Tenancy (SPEC §10): every row carries its tenant (``tenant_id``; ``''`` for global,
"carries none"), every document statement addresses the tenant, the space key and the
full space id, and a non-global ref without a tenant is refused before any I/O.

Writes (:mod:`keepstone.store.sql_mutations`): a write, delete or move runs in ONE write
transaction that locks the document row, changes it, charges the counters with a
compare-and-swap and keeps the history; on PostgreSQL a plain write is ONE statement.

The document index (``memory_chunks``, see :mod:`keepstone.store.sql_schema`): a write of new
content and a delete remove the path's chunk rows and bump the space's
``search_version``, in the write's one transaction (a refused write leaves the old ones);
a write never chunks or analyses text, so it commits at the speed it had before the
index. :meth:`SqlStore.reconcile` — called by a search before it reads the space —
chunks the documents that have no chunks (``chunk_markdown``, analysed terms, no
vector), so a document is keyword-searchable as soon as its write commits. A write that
leaves the content unchanged (same etag) keeps the chunks and their vectors. The
background indexer embeds chunks later (:meth:`SqlStore.claim_pending_chunks`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from keepstone.db import (
    make_engine,
    pgvector,
    read_statements,
    read_transaction,
    sqlite_path,
    upgrade,
    utc,
    utcnow,
    validate_schema_name,
    write_transaction,
)
from keepstone.document_pages import PageAsk
from keepstone.errors import InvalidRequest, StoreUnavailable, no_document
from keepstone.paging import Page
from keepstone.paths import validate_dir_prefix, validate_doc_path
from keepstone.quota import Limits
from keepstone.spaces import SpaceRef, validate_segment
from keepstone.store.base import (
    ChunkRow,
    Document,
    DocumentInfo,
    MemoryStore,
    SpaceRefs,
    StoredBytes,
    Usage,
    space_of_id,
)
from keepstone.store.reserve import DEFAULT_RESERVE_BYTES, DiskReserve
from keepstone.store.sql_activity import DocumentActivity
from keepstone.store.sql_history import DocumentHistory, HistoryStatements
from keepstone.store.sql_index import (
    NO_TENANT,
    ChunkClaim,
    DocumentIndex,
    PendingChunk,
)
from keepstone.store.sql_mutations import DocumentMutations
from keepstone.store.sql_schema import (
    MIGRATIONS,
    TENANT_TABLES,
    audit_events,
    memory_documents,
)
from keepstone.store.sql_statements import C, S, Statements
from keepstone.store.sql_write import ChangeStatements

#: iter_documents holds at most this many documents, and about this many bytes, at once.
ITER_BATCH_DOCS = 64
ITER_BATCH_BYTES = 4 * 1024 * 1024

#: Rows of the audit log (an alias: the class below defines a method called ``list``).
AuditRows = list[dict[str, Any]]


def _check_quota_value(quota_bytes: object) -> int:
    if isinstance(quota_bytes, bool) or not isinstance(quota_bytes, int) or quota_bytes < 0:
        raise InvalidRequest(
            f"memory_quota_bytes {quota_bytes!r} is not a byte count; give a whole number >= 0"
        )
    return quota_bytes


class SqlStore(DocumentMutations, DocumentIndex, DocumentHistory, DocumentActivity, MemoryStore):
    """The :class:`MemoryStore` over SQLite or PostgreSQL.

    ``limits`` gives the document cap, the sub-caps per visibility, and the quotas a
    team counter and the instance counter start at when first created; after that the
    quota on the counter row (``set_team_quota`` / ``set_instance_quota``) is the one
    enforced. The store is safe to share between threads and to run in many processes
    (and, on PostgreSQL, many replicas) over one database.
    """

    capabilities = MemoryStore.KEEPS_ITS_OWN | {"private", "team_aggregate"}
    limits: Limits
    #: Whether changes append versions (the history benchmark turns it off to measure the
    #: cost of history; the store itself always keeps it).
    keeps_history = True

    def __init__(
        self,
        engine: Engine,
        limits: Limits = Limits(),  # noqa: B008 - frozen
        *,
        vectors: pgvector.Pgvector | None = None,
        reserve_bytes: int = DEFAULT_RESERVE_BYTES,
    ) -> None:
        self.engine = engine
        self.limits = limits
        # A SQLite file keeps its reserve beside it; PostgreSQL's disk is the server's.
        database = sqlite_path(str(engine.url))
        if database is not None:
            self.reserve = DiskReserve(Path(f"{database}-reserve"), "the database", reserve_bytes)
        #: pgvector in this database (:func:`keepstone.db.pgvector.setup`; None: none).
        self.pgvector = vectors
        vec = vectors if vectors is not None and C.name in vectors.tables else None
        self._vec = vec
        self._sql = Statements(engine.dialect.name, vec)
        self._hist = HistoryStatements()
        self._change_sql = ChangeStatements(engine.dialect, history=self.keeps_history)
        #: Whether a large version is packed when it is written (PostgreSQL) rather than when
        #: a change replaces it (SQLite): ``ChangeStatements``' docstring says why.
        self._packs_on_write = self.keeps_history and self._change_sql.postgres
        self.clock: Callable[[], datetime] = utcnow

    @classmethod
    def open(
        cls,
        url: str,
        limits: Limits = Limits(),  # noqa: B008 - frozen, so one shared default is safe
        *,
        schema: str | None = None,
        pgvector_mode: str = "auto",
    ) -> SqlStore:
        """Connect to ``url`` (``sqlite:///path`` or ``postgresql://...``) and migrate.

        ``schema`` (PostgreSQL) keeps every table in that schema, creating it if
        missing; SQLite has no schemas and ignores it. ``pgvector_mode`` is
        ``KEEPSTONE_PGVECTOR`` (:func:`keepstone.db.pgvector.setup`).
        """
        try:
            engine = make_engine(url, schema=schema)
        except OSError as exc:
            # Only the SQLite branch touches the filesystem; the URL is not echoed, as a
            # database URL may carry a password.
            raise StoreUnavailable(
                f"cannot create the directory of the SQLite database ({exc.strerror or exc}); "
                "check the path and its permissions"
            ) from exc
        try:
            if schema is not None and engine.dialect.name == "postgresql":
                with write_transaction(engine) as conn:
                    # Serialise with other processes opening the same schema right now:
                    # IF NOT EXISTS alone can still collide on the catalog's unique index.
                    conn.exec_driver_sql("SELECT pg_advisory_xact_lock(872362)")
                    conn.exec_driver_sql(
                        f'CREATE SCHEMA IF NOT EXISTS "{validate_schema_name(schema)}"'
                    )
            upgrade(engine, MIGRATIONS)
            return cls(engine, limits, vectors=pgvector.setup(engine, pgvector_mode))
        except BaseException:
            engine.dispose()
            raise

    def close(self) -> None:
        self.engine.dispose()

    # --- Addressing ---------------------------------------------------------------------

    @staticmethod
    def _dir_range(prefix: str) -> dict[str, str]:
        # Every path under "a/b" sorts in ["a/b/", "a/b0"): '0' follows '/' in code points.
        return {"lo": prefix + "/", "hi": prefix + "0"}

    # --- Reads --------------------------------------------------------------------------

    def read(self, ref: SpaceRef, path: str) -> Document:
        addr = self._address(ref)
        path = validate_doc_path(path)
        row = self._sql.read_point.first(self.engine, {**addr, "p": path})
        if row is None:
            raise no_document(path, addr["sid"])
        return Document(path, row.content, row.size_bytes, utc(row.updated_at), row.etag)

    def list(self, ref: SpaceRef, dir: str = "") -> list[DocumentInfo]:
        addr = self._address(ref)
        prefix = validate_dir_prefix(dir)
        if prefix:
            rows = self._sql.list_dir.all(self.engine, {**addr, **self._dir_range(prefix)})
        else:
            rows = self._sql.list_all.all(self.engine, addr)
        return _infos(rows)

    def list_json(self, ref: SpaceRef, dir: str = "", at_most: int | None = None) -> str | None:
        params: dict[str, Any] = self._address(ref)
        prefix = validate_dir_prefix(dir)
        if prefix:
            params.update(self._dir_range(prefix))
        whole = -1 if self.engine.dialect.name == "sqlite" else None  # no LIMIT
        params["n"] = whole if at_most is None else at_most + 1
        read = self._sql.list_json_dir if prefix else self._sql.list_json_all
        row = read.first(self.engine, params)
        if row is None:  # an aggregate always has its row
            return "[]"
        return None if at_most is not None and row.count > at_most else str(row.documents)

    def list_page(self, ref: SpaceRef, ask: PageAsk) -> Page[DocumentInfo]:
        params: dict[str, Any] = {**self._address(ref), "n": ask.limit + 1}
        prefix = validate_dir_prefix(ask.dir)
        if prefix:
            params.update(self._dir_range(prefix))
        after = ask.after_path is not None
        if after:
            params["after_path"] = ask.after_path
            if ask.sort == "updated":
                params["after_updated"] = ask.after_updated
        rows = self._sql.list_pages[bool(prefix), ask.sort, after].all(self.engine, params)
        return ask.page(_infos(rows))

    def iter_documents(self, ref: SpaceRef, dir: str = "") -> Iterator[Document]:
        """Stream documents in path order, a bounded batch at a time.

        Each batch is read in its own short transaction (so a slow consumer holds no
        connection or lock); a document removed between batches is skipped, one
        added behind the cursor is not seen.
        """
        addr = self._address(ref)
        prefix = validate_dir_prefix(dir)
        return self._iter(addr, prefix)

    def _iter(self, addr: dict[str, str], prefix: str) -> Iterator[Document]:
        page_stmt = self._sql.page_dir if prefix else self._sql.page_all
        params: dict[str, Any] = {**addr, **(self._dir_range(prefix) if prefix else {})}
        after = ""
        while True:
            with read_transaction(self.engine) as conn:
                meta = conn.execute(page_stmt, {**params, "after": after}).all()
            if not meta:
                return
            for batch in _batches([(m.path, m.size_bytes) for m in meta]):
                with read_transaction(self.engine) as conn:
                    rows = conn.execute(self._sql.fetch_docs, {**addr, "paths": batch}).all()
                for r in rows:
                    yield Document(r.path, r.content, r.size_bytes, utc(r.updated_at), r.etag)
                del rows
            if len(meta) < self._sql.meta_page:
                return
            after = meta[-1].path

    def usage(self, ref: SpaceRef, *, index: bool = True) -> Usage:
        addr = self._address(ref)
        aggregate, default = self._aggregate(ref)
        with read_statements(self.engine) as conn:
            used = conn.execute(self._sql.space_used, addr).scalar()
            team = conn.execute(self._sql.tenant_used, {"t": aggregate}).first()
            history = self._history_usage_in(conn, aggregate, default)
            index_bytes = conn.execute(self._sql.index_used, addr).scalar_one() if index else 0
        team_used, team_quota = (team.used_bytes, team.quota_bytes) if team else (0, default)
        subcap = self.limits.subcap(ref.visibility)
        return Usage(ref.id, used or 0, subcap, team_used, team_quota, *history, int(index_bytes))

    def stored_totals(self) -> StoredBytes:
        """Document and index bytes of every team and global space (the usage rows' and
        the chunks' byte counts summed: :class:`keepstone.store.index.StoredTotals`)."""
        with read_statements(self.engine) as conn:
            documents = conn.execute(self._sql.all_used).scalar_one()
            index = conn.execute(self._sql.all_index_used).scalar_one()
        return StoredBytes(int(documents), int(index))

    def list_spaces(self, tenant: str) -> SpaceRefs:
        """The spaces of ``tenant`` and the global spaces holding bytes: one row per space
        in the usage table, read by the primary key's leading column."""
        used = sa.select(S.c.space_id).where(S.c.tenant_id.in_([tenant, NO_TENANT]))
        with read_transaction(self.engine) as conn:
            ids = conn.execute(used.where(S.c.used_bytes > 0)).scalars().all()
        refs = [ref for ref in map(space_of_id, ids) if ref is not None]
        return sorted(refs, key=lambda r: r.id)

    # --- Admin --------------------------------------------------------------------------

    def set_team_quota(self, tenant: str, quota_bytes: int) -> None:
        """Re-cap a team's counter (creating it, empty, if the team never wrote)."""
        self._set_quota(validate_segment("tenant", tenant), _check_quota_value(quota_bytes))

    def set_instance_quota(self, quota_bytes: int) -> None:
        """Re-cap the tenant-less instance counter that global writes answer to."""
        self._set_quota(NO_TENANT, _check_quota_value(quota_bytes))

    def team_usage(self, tenant: str) -> tuple[int, int]:
        """(bytes used, quota) of a team's counter; a team that never wrote has the default."""
        return self._tenant_usage(validate_segment("tenant", tenant), self.limits.team_quota)

    def instance_usage(self) -> tuple[int, int]:
        """(bytes used, quota) of the instance counter."""
        return self._tenant_usage(NO_TENANT, self.limits.instance_quota)

    def audit_log(self, limit: int = 100) -> AuditRows:
        """The newest ``limit`` audit rows of global mutations, newest first."""
        A = audit_events
        with read_transaction(self.engine) as conn:
            rows = conn.execute(
                sa.select(A.c.id, A.c.at, A.c.action, A.c.actor, A.c.space_id, A.c.path)
                .order_by(A.c.at.desc(), A.c.id.desc())
                .limit(limit)
            ).mappings()
            return [{**r, "at": utc(r["at"])} for r in rows]

    def record_audit(self, action: str, actor: str, subject: str) -> None:
        """Write one audit row for an administration action (``subject``: what it acted
        on, in words), in a transaction of its own, after the action committed."""
        with write_transaction(self.engine) as conn:
            conn.execute(
                audit_events.insert().values(
                    id="evt_" + uuid.uuid4().hex,
                    at=utcnow(),
                    action=action[:64],
                    actor=actor[:128],
                    space_id="",
                    path=subject[:1024],
                )
            )

    def drop_team(self, team_id: str) -> int:
        """Delete every document, version, chunk and counter of the team (its tenant), in
        one transaction; returns how many documents went. The global spaces and the audit
        log are the platform's and stay."""
        tenant = validate_segment("tenant", team_id)
        with write_transaction(self.engine) as conn:
            gone = 0
            for table in TENANT_TABLES:
                done = conn.execute(table.delete().where(table.c.tenant_id == tenant)).rowcount
                gone += done if table is memory_documents else 0
        return gone

    def _set_quota(self, tenant: str, quota_bytes: int) -> None:
        with write_transaction(self.engine) as conn:
            conn.execute(self._sql.set_quota, {"t": tenant, "q": quota_bytes})

    def _tenant_usage(self, tenant: str, default: int) -> tuple[int, int]:
        with read_transaction(self.engine) as conn:
            row = conn.execute(self._sql.tenant_used, {"t": tenant}).first()
        return (int(row.used_bytes), int(row.quota_bytes)) if row else (0, default)


def _batches(items: Sequence[tuple[str, int]]) -> Iterator[list[str]]:
    """Group paths into batches of at most ITER_BATCH_DOCS documents and about
    ITER_BATCH_BYTES bytes (a document larger than that is a batch of its own)."""
    batch: list[str] = []
    total = 0
    for path, size in items:
        if batch and (len(batch) >= ITER_BATCH_DOCS or total + size > ITER_BATCH_BYTES):
            yield batch
            batch, total = [], 0
        batch.append(path)
        total += size
    if batch:
        yield batch


__all__ = ["NO_TENANT", "ChunkClaim", "ChunkRow", "PendingChunk", "SqlStore"]


def _infos(rows: Sequence[Any]) -> list[DocumentInfo]:
    """What a listing says of each document of ``rows`` (path, size, change, etag)."""
    return [DocumentInfo(r.path, r.size_bytes, utc(r.updated_at), r.etag) for r in rows]
