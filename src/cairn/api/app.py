"""The FastAPI application of ``cairn serve`` (SPEC §5-§7).

:func:`create_app` builds one app over one database. Routes come from the modules
in :data:`ROUTER_MODULES`, each exposing ``router`` (an ``APIRouter``); a module that
does not exist yet is skipped, so ``routes/records.py`` plugs in by existing. A module
may also define ``setup(app: FastAPI) -> None``, called once after ``app.state`` is
filled (see :mod:`cairn.api.deps` for the names on ``app.state``), to attach its
own services.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import AsyncIterator
from typing import Any

from argon2 import PasswordHasher
from fastapi import FastAPI
from sqlalchemy.engine import Engine

from cairn.api import errors, openapi
from cairn.api.metrics import Metrics
from cairn.api.middleware import BodyLimitMiddleware, RequestContextMiddleware
from cairn.api.settings import Settings
from cairn.identity import audit
from cairn.identity.keys import load_key_hasher
from cairn.identity.service import IdentityService
from cairn.identity.throttle import LoginThrottle
from cairn.quota import Limits
from cairn.schema import upgrade_all
from cairn.service import SpaceService
from cairn.store.base import MemoryStore
from cairn.store.db import make_engine

#: Route modules, in the order their routes appear in /openapi.json.
ROUTER_MODULES = (
    "cairn.api.routes.ops",
    "cairn.api.routes.auth",
    "cairn.api.routes.spaces",
    "cairn.api.routes.orgs",
    "cairn.api.routes.admin",
    "cairn.api.routes.records",
)


def _import_optional(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            return None
        raise


def open_sql_store(engine: Engine, limits: Limits) -> MemoryStore:
    """The SQL document store over ``engine`` (SQLite or PostgreSQL)."""
    sql = importlib.import_module("cairn.store.sql")
    store: MemoryStore = sql.SqlStore(engine, limits)
    return store


def create_app(
    settings: Settings,
    *,
    engine: Engine | None = None,
    store: MemoryStore | None = None,
    migrate: bool = True,
) -> FastAPI:
    """An app over ``settings.database_url`` (or the given ``engine``).

    Migrations run first unless ``migrate`` is False. An engine created here is
    disposed when the app shuts down; one passed in belongs to the caller.
    """
    owns_engine = engine is None
    engine = engine or make_engine(settings.database_url)
    if migrate:
        upgrade_all(engine)
    store = store or open_sql_store(engine, Limits())
    identity = (
        None
        if settings.local
        else IdentityService(
            engine,
            load_key_hasher(engine, settings.key_hash_secret),
            session_ttl_seconds=settings.session_ttl_seconds,
            passwords=PasswordHasher(
                time_cost=settings.argon2_time_cost, memory_cost=settings.argon2_memory_kib
            ),
        )
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        if owns_engine:
            engine.dispose()

    app = FastAPI(
        title="Cairn",
        version="0.1.0",
        summary="Memory for AI agents: knowledge spaces, team memory records, admin.",
        lifespan=lifespan,
    )
    metrics = Metrics()
    app.state.settings = settings
    app.state.engine = engine
    app.state.store = store
    app.state.spaces = SpaceService(store, audit=audit.sink(engine))
    app.state.identity = identity
    app.state.metrics = metrics
    app.state.login_throttle = LoginThrottle(settings.login_failures_per_minute, 60.0)

    errors.install(app)
    openapi.install(app)
    # Added last = outermost: the request id and access log wrap the body limit too.
    app.add_middleware(
        BodyLimitMiddleware,
        max_json_bytes=settings.max_json_bytes,
        max_import_bytes=settings.max_import_bytes,
    )
    app.add_middleware(RequestContextMiddleware, metrics=metrics)

    for name in ROUTER_MODULES:
        module = _import_optional(name)
        if module is None:
            continue
        app.include_router(module.router)
        setup = getattr(module, "setup", None)
        if callable(setup):
            setup(app)
    return app
