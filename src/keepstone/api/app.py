"""The FastAPI application of ``keepstone serve`` (SPEC §5-§7).

:func:`create_app` builds one app over one :class:`~keepstone.runtime.Runtime` (the
database, the store, the identity service, the records search limiter). Routes come
from the modules in :data:`ROUTER_MODULES`, each exposing ``router`` (an
``APIRouter``); the services they call are the runtime's, on ``app.state`` (see
:mod:`keepstone.api.deps`).
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import IO

from fastapi import FastAPI
from sqlalchemy.engine import Engine
from starlette.types import Receive, Scope, Send

from keepstone import __version__, web
from keepstone.api import errors, openapi
from keepstone.api.deps import app_state
from keepstone.api.indexer_process import IndexerProcess
from keepstone.api.metrics import Metrics
from keepstone.api.middleware import (
    BodyLimitMiddleware,
    QueryTextMiddleware,
    RequestContextMiddleware,
)
from keepstone.api.routes import (
    activity,
    admin,
    auth,
    edit,
    history,
    me,
    ops,
    orgs,
    records,
    search,
    spaces,
)
from keepstone.api.throttle import LoginThrottle
from keepstone.config import Config
from keepstone.runtime import Runtime, open_runtime

#: Route modules, in the order their routes appear in /openapi.json.
#: Most requested first: FastAPI tries a request's path against each router's routes in this
#: order (twice: to pick the router, then the route), and no two routers' paths overlap,
#: so the order changes what a request costs, not where it goes (docs/performance.md).
ROUTER_MODULES = (spaces, search, records, history, activity, edit, ops, auth, orgs, admin, me)


def create_app(
    config: Config,
    *,
    engine: Engine | None = None,
    migrate: bool = True,
    indexer: bool = False,
) -> FastAPI:
    """An app over the runtime :func:`~keepstone.runtime.open_runtime` opens for ``config``
    (on ``engine`` when given; migrated unless ``migrate`` is False). ``indexer``: run
    the background indexer while the app runs (``keepstone serve`` does; in-process apps of
    tests leave it to them)."""
    return app_for(open_runtime(config, engine=engine, migrate=migrate), indexer=indexer)


def app_for(runtime: Runtime, *, indexer: bool = False) -> FastAPI:
    """An app over ``runtime``'s pieces. The app closes the runtime when it shuts down:
    an engine the runtime made is disposed, one passed to it belongs to the caller.
    ``indexer``: run the background indexer's process while the app runs
    (:mod:`keepstone.api.indexer_process`; ``KEEPSTONE_INDEXER`` may still keep it off)."""
    config = runtime.config
    app = FastAPI(
        title="Keepstone",
        version=__version__,
        summary="Memory for AI agents: knowledge spaces, team memory records, admin.",
        lifespan=_lifespan(runtime, IndexerProcess(config) if indexer else None),
        # /docs and /redoc are openapi.install's: with their assets served offline.
        docs_url=None,
        redoc_url=None,
    )
    _put_state(app, runtime)
    errors.install(app)
    openapi.install(app)
    # Added last = outermost: the request id and access log wrap the body limit too.
    app.add_middleware(QueryTextMiddleware, page=web.error_page_of_scope)
    app.add_middleware(
        BodyLimitMiddleware,
        max_json_bytes=config.max_json_bytes,
        max_import_bytes=config.max_import_bytes,
    )
    app.add_middleware(RequestContextMiddleware, metrics=app.state.metrics)
    _add_routes(app)
    # The web UI (docs/ui.md): its pages, static files, HTML errors and security headers
    # on its own paths only; the JSON API's answers are unchanged.
    web.install(app)
    return app


def _lifespan(
    runtime: Runtime, background: IndexerProcess | None
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: the indexer's process (when ``background``) and the records'
    purge while it runs; the runtime closed when it stops."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if background is not None:
            background.start()
        try:
            async with records.purging(app):
                yield
        finally:
            if background is not None:
                background.stop()
            runtime.close()

    return lifespan


def _put_state(app: FastAPI, runtime: Runtime) -> None:
    """What the routes read off ``app.state`` (see :mod:`keepstone.api.deps`)."""
    config = runtime.config
    app.state.runtime = runtime
    app.state.settings = config
    app.state.credentials = runtime.credentials
    app.state.spaces = runtime.spaces
    app.state.records = runtime.records
    app.state.admin = runtime.admin
    app.state.audit = runtime.audit
    app.state.own_keys = runtime.own_keys
    app.state.metrics = Metrics()
    app.state.login_throttle = LoginThrottle(config.login_failures_per_minute, 60.0)
    app.state.view = app_state(app.state)


def _add_routes(app: FastAPI) -> None:
    for module in ROUTER_MODULES:
        if module in (spaces, search, records):
            # The document, search and record routes, the most requested, become the app's
            # own routes rather than an included router's: FastAPI matches a request
            # against an included router's routes twice (to pick the router, then the
            # route), the app's own once (docs/performance.md). None of these routers takes
            # a prefix, dependency or lifespan (the records' purge is the app's lifespan's),
            # so the routes and /openapi.json are the same either way.
            app.router.routes.extend(module.router.routes)
        else:
            app.include_router(module.router)


class WorkerApp:
    """The app of one ``keepstone serve --workers N`` process, built in that process.

    uvicorn hands each worker a pickled copy of this object (a built app, with its engine
    and pool, cannot cross a process boundary), and the worker builds its own app on
    the first ASGI call (the lifespan's startup): no migrations, which the supervisor ran,
    and no indexer, which the supervisor runs once for all workers.

    The periodic purge of expired records and old history (``KEEPSTONE_RECORDS_PURGE_INTERVAL``)
    runs in one worker only: the one that takes the ``flock`` of ``purge_lock`` (a file
    the supervisor made) and holds it until it exits; a worker that replaces a dead one
    takes the lock over. N purges at once would be harmless but would be N times the
    work, and on SQLite N write transactions queued on the one writer lock.
    """

    def __init__(self, config: Config, purge_lock: str) -> None:
        self.config = config
        self.purge_lock = purge_lock
        self._app: FastAPI | None = None
        self._lock_file: IO[bytes] | None = None

    def __getstate__(self) -> dict[str, object]:
        return {"config": self.config, "purge_lock": self.purge_lock}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["config"], state["purge_lock"])  # type: ignore[misc]

    def _build(self) -> FastAPI:
        from keepstone.api import logs

        logs.configure()
        update: dict[str, object] = {"indexer": False}
        if not self._take_purge_lock():
            update["records_purge_interval"] = 0.0
        return create_app(self.config.model_copy(update=update), migrate=False)

    def _take_purge_lock(self) -> bool:
        lock_file = open(self.purge_lock, "ab")  # held for the process's life
        try:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock_file.close()
            return False
        self._lock_file = lock_file
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            self._app = self._build()
            settle_heap()
        await self._app(scope, receive, send)


def settle_heap() -> None:
    """Take what a serving process holds once its app is built (modules, the app, the
    vocabulary's tables, the compiled patterns) out of the cyclic collector's view: it lives
    as long as the process, and a full collection walking it ran on some request's time —
    the slowest answers' (docs/performance.md, "The request path")."""
    gc.collect()
    gc.freeze()
