"""FastAPI dependencies: who is asking, and the app's services.

Route modules build on these typed aliases so signatures read like prose::

    @router.get("/api/memory/doc")
    def read_doc(who: Principal, state: State, ...) -> ...

The credential of a request is turned into a :class:`~cairn.principal.Principal` once
(:meth:`cairn.service.access.Credentials.authenticate`) and kept on
``request.state.principal``; every decision about it is the service layer's.

Aliases:

* :data:`Principal` — any signed-in user credential or the admin token; ``401
  unauthenticated`` when none, ``403 forbidden`` for the service token (it may only
  save records). CSRF is *not* enforced here: ``principal.csrf_ok`` says whether a
  session's mutation carried its token, and the service refuses in the contract's order.
* :data:`AnyPrincipal` — whatever credential was presented (service token included).
* :data:`State` — the app's services (:class:`AppState`), set by
  :func:`cairn.api.app.create_app` on ``app.state``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from cairn import principal as p
from cairn.service.access import Credentials, require_user
from cairn.service.spaces import SpaceService

if TYPE_CHECKING:
    from cairn.api.metrics import Metrics
    from cairn.config import Config
    from cairn.runtime import Runtime

SESSION_COOKIE = "cairn_session"
CSRF_HEADER = "X-CSRF-Token"
TEAM_HEADER = "X-Cairn-Team"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True, slots=True)
class AppState:
    """A typed view of ``request.app.state``."""

    settings: Config
    runtime: Runtime
    spaces: SpaceService
    metrics: Metrics


async def get_state(request: Request) -> AppState:
    # async on purpose: it does no I/O, and a sync dependency costs a threadpool hop.
    s = request.app.state
    return AppState(s.settings, s.runtime, s.spaces, s.metrics)


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
    request.state.principal = principal
    return principal


def authenticate(request: Request) -> p.Principal:
    """A signed-in user credential or the admin token (not the service token)."""
    return require_user(resolve_credential(request))


Principal = Annotated[p.Principal, Depends(authenticate)]
AnyPrincipal = Annotated[p.Principal, Depends(resolve_credential)]
State = Annotated[AppState, Depends(get_state)]
