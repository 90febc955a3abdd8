"""FastAPI dependencies: who is asking, and the app's services.

Route modules build on these typed aliases so signatures read like prose::

    @router.get("/api/memory/doc")
    def read_doc(who: Principal, state: State, ...) -> ...

The credential of a request is turned into a :class:`~keepstone.principal.Principal` once
(:meth:`keepstone.service.access.Credentials.authenticate`) and kept on
``request.state.principal``; every decision about it is the service layer's.

Aliases:

* :data:`Principal` — any signed-in user credential or the admin token; ``401
  unauthenticated`` when none, ``403 forbidden`` for the service token (it may only
  save records). CSRF is *not* enforced here: ``principal.csrf_ok`` says whether a
  session's mutation carried its token, and the service refuses in the contract's order.
* :data:`AnyPrincipal` — whatever credential was presented (service token included).
* :data:`State` — the app's services (:class:`AppState`), set by
  :func:`keepstone.api.app.create_app` on ``app.state``.
* :data:`Caller` — what :data:`Principal` resolves, resolved in the thread that does the
  route's work: ``await caller.run(work)`` calls ``work(principal)`` in one thread-pool
  hop, where a sync dependency and a sync route would cost two (docs/performance.md).
* :data:`AnyCaller` — the same for what :data:`AnyPrincipal` resolves (the records
  routes: the service token saves records).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import anyio.to_thread
from fastapi import Depends, Request

from keepstone import principal as p
from keepstone.activity import AGENT_RUN_HEADER
from keepstone.errors import KeepstoneError
from keepstone.service.access import Credentials, require_user
from keepstone.service.spaces import SpaceService

if TYPE_CHECKING:
    from keepstone.api.metrics import Metrics
    from keepstone.config import Config
    from keepstone.runtime import Runtime, WalSync

SESSION_COOKIE = "keepstone_session"
CSRF_HEADER = "X-CSRF-Token"
TEAM_HEADER = "X-Keepstone-Team"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AppState:
    """A typed view of ``request.app.state``."""

    settings: Config
    runtime: Runtime
    spaces: SpaceService
    metrics: Metrics
    #: Whether a quick read runs on the event loop (:meth:`CallerCredential.read`).
    inline_reads: bool = False


def app_state(app_state: Any) -> AppState:
    """The typed view of an app's ``state`` (built once by the app, see create_app)."""
    return AppState(
        app_state.settings,
        app_state.runtime,
        app_state.spaces,
        app_state.metrics,
        inline_reads=app_state.runtime.engine.dialect.name == "sqlite",
    )


async def get_state(request: Request) -> AppState:
    # async on purpose: it does no I/O, and a sync dependency costs a threadpool hop.
    view: AppState = request.app.state.view
    return view


def resolve_credential(request: Request) -> p.Principal:
    """Whoever the request's credential names; 401 when there is none or it is not valid.

    Resolved once per request and kept on ``request.state.principal`` (for logging and
    metrics too).
    """
    cached = getattr(request.state, "principal", None)
    if isinstance(cached, p.Principal):
        return cached
    credentials: Credentials = request.app.state.credentials
    principal = credentials.authenticate(
        authorization=request.headers.get("authorization"),
        session=request.cookies.get(SESSION_COOKIE) or None,
        csrf_token=request.headers.get(CSRF_HEADER),
        mutating=request.method not in _SAFE_METHODS,
        team_header=request.headers.get(TEAM_HEADER) or None,
    )
    if request.headers.get(AGENT_RUN_HEADER) == "1":
        principal = replace(principal, agent_run=True)  # recorded: it decides nothing
    request.state.principal = principal
    return principal


def authenticate(request: Request) -> p.Principal:
    """A signed-in user credential or the admin token (not the service token)."""
    return require_user(resolve_credential(request))


class CallerCredential:
    """The credential of a request, resolved by :meth:`run` in the thread of the work.

    Built by an async dependency that refuses at once, with no I/O, a request that
    presents no credential at all or a malformed one (``401``, before any parameter
    is looked at, as :data:`Principal` does); a credential that needs the database (an
    API key, a session) is read in :meth:`run`'s thread, so a route costs one hop.
    """

    __slots__ = ("request", "resolve", "state")

    def __init__(
        self,
        request: Request,
        state: AppState,
        resolve: Callable[[Request], p.Principal] = authenticate,
    ) -> None:
        self.request = request
        self.state = state
        #: :func:`authenticate` (signed-in users only) or :func:`resolve_credential`.
        self.resolve = resolve

    async def run(self, work: Callable[[p.Principal], T]) -> T:
        """``work(principal)`` in a worker thread, the principal resolved there first
        (once per request, by :attr:`resolve`)."""
        request, resolve = self.request, self.resolve
        return await anyio.to_thread.run_sync(lambda: work(resolve(request)))

    def principal_now(self) -> p.Principal | None:
        """The request's principal when it can be had without I/O (it was resolved
        already, or it is the admin or the service token, or local mode) — resolved, and
        refused, as :meth:`run` would — else None: :meth:`run` resolves it then, in a
        worker thread."""
        request = self.request
        cached = getattr(request.state, "principal", None)
        if isinstance(cached, p.Principal):
            return cached
        credentials: Credentials = request.app.state.credentials
        if not credentials.resolves_without_io(authorization=request.headers.get("authorization")):
            return None
        return self.resolve(request)

    async def read(self, work: Callable[[p.Principal], T]) -> T:
        """As :meth:`run`, for a quick read: a point read of one row or document, never
        a scan, a search or a write.

        On SQLite it runs on the event loop itself. The database is a library in this
        process: the read is short and holds the GIL most of the time, so in
        a worker thread it would stop the loop all the same, and the hop there and back
        costs as much as the read (docs/performance.md). WAL readers wait for no writer.
        On PostgreSQL a read is a network round trip: it waits in a worker thread.
        """
        if self.state.inline_reads:
            return work(self.resolve(self.request))
        return await self.run(work)

    async def write(self, work: Callable[[p.Principal], T]) -> T:
        """As :meth:`run`, for a write of one document: on SQLite, on the event loop itself
        when the database's writer turn is free right now (taken without waiting, held
        for the write), else in a worker thread as :meth:`run`, where it may wait.

        Waking a worker thread and the loop again cost more CPU than the write's statements
        (docs/performance.md, "The request path"), and the write holds the GIL for most of
        its time anyway. Only a free turn is taken on the loop: a write waiting there for
        another process's or an import's turn would stop every request of the worker. The
        commit's fsync is left in ``syncs`` and awaited here once the turn is given back, so
        nobody is answered before their write is on disk: done on the loop while the disk is
        quick, by a thread while it is slow (:meth:`WalSync.synced`, docs/storage.md
        "Durability")."""
        if self.state.inline_reads:
            syncs: list[WalSync] = []
            try:
                with self.state.runtime.writer_turn_now(syncs) as mine:
                    if mine:
                        result = work(self.resolve(self.request))
            finally:
                for sync in dict.fromkeys(syncs):
                    await sync.synced()
            if mine:
                return result
        return await self.run(work)


def _deferred(request: Request, resolve: Callable[[Request], p.Principal]) -> CallerCredential:
    s = request.app.state
    credentials: Credentials = s.credentials
    credentials.require_presented(
        authorization=request.headers.get("authorization"),
        session=request.cookies.get(SESSION_COOKIE) or None,
    )
    # What the validation error's handler resolves (refusal_of_deferred_credential).
    request.state.credential_deferred = resolve
    return CallerCredential(request, s.view, resolve)


def caller_of(request: Request) -> CallerCredential:
    """What :data:`Caller` resolves, for a route that takes it by hand (the document
    routes: FastAPI's dependency solving costs them as much as their own work)."""
    return _deferred(request, authenticate)


async def caller(request: Request) -> CallerCredential:
    # async on purpose: checking that a credential is present costs no I/O, no hop.
    return caller_of(request)


def any_caller_of(request: Request) -> CallerCredential:
    """What :data:`AnyCaller` resolves, for a route that takes it by hand (a record save
    and a search, the records routes most requested)."""
    return _deferred(request, resolve_credential)


async def any_caller(request: Request) -> CallerCredential:
    # async on purpose, as caller.
    return any_caller_of(request)


async def refusal_of_deferred_credential(request: Request) -> KeepstoneError | None:
    """The 401/403 a :data:`Caller` route would answer for the request's credential, when
    its parameters failed validation before the credential was looked up; else None.

    The contract refuses a bad credential before a bad parameter (docs/api.md, "Order of
    refusals"); a Caller looks the credential up after FastAPI has parsed the parameters,
    so the error handler looks it up on this (rare) path instead."""
    resolve: Callable[[Request], p.Principal] | None = getattr(
        request.state, "credential_deferred", None
    )
    if resolve is None:
        return None
    if getattr(request.state, "principal", None) is not None:
        return None
    try:
        await anyio.to_thread.run_sync(resolve, request)
    except KeepstoneError as exc:
        return exc
    return None


Principal = Annotated[p.Principal, Depends(authenticate)]
Caller = Annotated[CallerCredential, Depends(caller)]
AnyCaller = Annotated[CallerCredential, Depends(any_caller)]
AnyPrincipal = Annotated[p.Principal, Depends(resolve_credential)]
State = Annotated[AppState, Depends(get_state)]
