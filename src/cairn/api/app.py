"""The FastAPI application of ``cairn serve`` (SPEC §5-§7).

:func:`create_app` builds one app over one :class:`~cairn.runtime.Runtime` (the
database, the store, the identity service, the records search limiter). Routes come
from the modules in :data:`ROUTER_MODULES`, each exposing ``router`` (an
``APIRouter``); the services they call are the runtime's, on ``app.state`` (see
:mod:`cairn.api.deps`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI
from sqlalchemy.engine import Engine

from cairn import __version__, web
from cairn.api import errors, openapi
from cairn.api.deps import app_state
from cairn.api.indexer_process import IndexerProcess
from cairn.api.metrics import Metrics
from cairn.api.middleware import BodyLimitMiddleware, RequestContextMiddleware
from cairn.api.routes import admin, auth, history, ops, orgs, records, spaces
from cairn.api.throttle import LoginThrottle
from cairn.config import Config
from cairn.runtime import Runtime, open_runtime

#: Route modules, in the order their routes appear in /openapi.json.
ROUTER_MODULES = (ops, auth, spaces, history, orgs, admin, records)


def create_app(
    config: Config,
    *,
    engine: Engine | None = None,
    migrate: bool = True,
    indexer: bool = False,
) -> FastAPI:
    """An app over the runtime :func:`~cairn.runtime.open_runtime` opens for ``config``
    (on ``engine`` when given; migrated unless ``migrate`` is False). ``indexer``: run
    the background indexer while the app runs (``cairn serve`` does; in-process apps of
    tests leave it to them)."""
    return app_for(open_runtime(config, engine=engine, migrate=migrate), indexer=indexer)


def app_for(runtime: Runtime, *, indexer: bool = False) -> FastAPI:
    """An app over ``runtime``'s pieces. The app closes the runtime when it shuts down:
    an engine the runtime made is disposed, one passed to it belongs to the caller.
    ``indexer``: run the background indexer's process while the app runs
    (:mod:`cairn.api.indexer_process`; ``CAIRN_INDEXER`` may still keep it off)."""
    config = runtime.config

    background = IndexerProcess(config) if indexer else None

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if background is not None:
            background.start()
        try:
            yield
        finally:
            if background is not None:
                background.stop()
            runtime.close()

    app = FastAPI(
        title="Cairn",
        version=__version__,
        summary="Memory for AI agents: knowledge spaces, team memory records, admin.",
        lifespan=lifespan,
        # /docs and /redoc are openapi.install's: with their assets served offline.
        docs_url=None,
        redoc_url=None,
    )
    metrics = Metrics()
    app.state.runtime = runtime
    app.state.settings = config
    app.state.credentials = runtime.credentials
    app.state.spaces = runtime.spaces
    app.state.records = runtime.records
    app.state.admin = runtime.admin
    app.state.audit = runtime.audit
    app.state.metrics = metrics
    app.state.login_throttle = LoginThrottle(config.login_failures_per_minute, 60.0)
    app.state.view = app_state(app.state)

    errors.install(app)
    openapi.install(app)
    # Added last = outermost: the request id and access log wrap the body limit too.
    app.add_middleware(
        BodyLimitMiddleware,
        max_json_bytes=config.max_json_bytes,
        max_import_bytes=config.max_import_bytes,
    )
    app.add_middleware(RequestContextMiddleware, metrics=metrics)

    for module in ROUTER_MODULES:
        app.include_router(module.router)
    # The web UI (docs/ui.md): its pages, static files, HTML errors and security headers
    # on its own paths only; the JSON API's answers are unchanged.
    web.install(app)
    return app
