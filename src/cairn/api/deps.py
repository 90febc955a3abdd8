"""FastAPI dependencies: who is asking, and the app's shared services.

Route modules (this package's and ``routes/records.py``) build on these typed
aliases so signatures read like prose::

    @router.get("/api/teams/{team}/memory")
    def list_records(team: str, who: TeamPrincipal, request: Request) -> ...

Aliases:

* :data:`Principal` — any signed-in user credential or the admin token; ``401
  unauthenticated`` when none, ``403 forbidden`` for the service token (it may only
  save records). CSRF is *not* enforced here: ``principal.csrf_ok`` says whether a
  session's mutation carried its token, so a route can keep its own refusal order.
* :data:`MutatingPrincipal` — :data:`Principal` plus ``403 csrf_required`` for a
  session mutation without a valid ``X-CSRF-Token``.
* :data:`TeamPrincipal` — :data:`Principal` acting in the path parameter ``{team}``:
  ``404 team_not_found`` when the credential cannot act there (not a member, an API
  key of another team, the admin token, no such team). The role is read fresh.
* :data:`ServicePrincipal` — only ``CAIRN_SERVICE_TOKEN``; ``401`` without a
  credential, ``403 forbidden`` for every other credential.
* :data:`AnyPrincipal` — whatever credential was presented (service token included).

``request.app.state`` carries (set by :func:`cairn.api.app.create_app`):

* ``settings`` — :class:`cairn.api.settings.Settings`
* ``engine`` — the SQLAlchemy :class:`~sqlalchemy.engine.Engine` of the database
* ``store`` — the :class:`~cairn.store.base.MemoryStore` (a ``SqlStore``)
* ``spaces`` — the :class:`~cairn.service.SpaceService` (audits global mutations)
* ``identity`` — :class:`~cairn.identity.service.IdentityService`, or None in local mode
* ``metrics`` — :class:`cairn.api.metrics.Metrics` (per-app Prometheus registry)
* ``login_throttle`` — :class:`cairn.identity.throttle.LoginThrottle`

Use :func:`get_state` for a typed view of them.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request
from sqlalchemy.engine import Engine

from cairn.errors import CsrfRequired, Forbidden, TeamNotFound, Unauthenticated
from cairn.identity import principal as p
from cairn.identity.keys import API_KEY_PREFIX
from cairn.service import SpaceService
from cairn.store.base import MemoryStore

if TYPE_CHECKING:
    from cairn.api.metrics import Metrics
    from cairn.api.settings import Settings
    from cairn.identity.service import IdentityService
    from cairn.identity.throttle import LoginThrottle

SESSION_COOKIE = "cairn_session"
CSRF_HEADER = "X-CSRF-Token"
TEAM_HEADER = "X-Cairn-Team"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

#: The principal of ``cairn serve --local``: one implicit team and user, every write allowed.
LOCAL_PRINCIPAL = p.Principal(
    kind=p.CredentialKind.LOCAL,
    user_id="local",
    team_id="local",
    team_role=p.TeamRole.ADMIN,
)


@dataclass(frozen=True, slots=True)
class AppState:
    """A typed view of ``request.app.state``."""

    settings: Settings
    engine: Engine
    store: MemoryStore
    spaces: SpaceService
    identity: IdentityService | None
    metrics: Metrics
    login_throttle: LoginThrottle


async def get_state(request: Request) -> AppState:
    # async on purpose: it does no I/O, and a sync dependency costs a threadpool hop.
    s = request.app.state
    return AppState(
        settings=s.settings,
        engine=s.engine,
        store=s.store,
        spaces=s.spaces,
        identity=s.identity,
        metrics=s.metrics,
        login_throttle=s.login_throttle,
    )


def _same(a: str, b: str | None) -> bool:
    return b is not None and hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


def resolve_credential(request: Request) -> p.Principal:
    """Whoever the request's credential names; 401 when there is none or it is not valid.

    Order: local mode → ``Authorization: Bearer`` (admin token, service token, API key)
    → the ``cairn_session`` cookie. A bearer value that is present but wrong is a 401
    even when a cookie is also sent. Memberships are read fresh on every call.
    The result is kept on ``request.state.principal`` for logging and metrics.
    """
    cached = getattr(request.state, "principal", None)
    if isinstance(cached, p.Principal):
        return cached
    principal = _resolve(request)
    request.state.principal = principal
    return principal


def _resolve(request: Request) -> p.Principal:
    state = request.app.state
    settings: Settings = state.settings
    if settings.local:
        return LOCAL_PRINCIPAL
    identity: IdentityService = state.identity
    auth = request.headers.get("authorization")
    if auth is not None:
        scheme, _, token = auth.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("send the credential as 'Authorization: Bearer <token>'")
        if settings.admin_token and _same(settings.admin_token, token):
            return p.Principal(kind=p.CredentialKind.ADMIN_TOKEN)
        if settings.service_token and _same(settings.service_token, token):
            return p.Principal(kind=p.CredentialKind.SERVICE_TOKEN)
        if token.startswith(API_KEY_PREFIX):
            found = identity.principal_for_api_key(token)
            if found is not None:
                return found
        raise Unauthenticated("the bearer token is not a valid or live credential")
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        found = identity.principal_for_session(
            cookie,
            csrf_token=request.headers.get(CSRF_HEADER),
            mutating=request.method not in _SAFE_METHODS,
            team_header=request.headers.get(TEAM_HEADER) or None,
        )
        if found is not None:
            return found
        raise Unauthenticated("the session has expired or was signed out; sign in again")
    raise Unauthenticated(
        "sign in: send 'Authorization: Bearer <API key>' or a cairn_session cookie"
    )


def authenticate(request: Request) -> p.Principal:
    """A signed-in user credential or the admin token (not the service token)."""
    principal = resolve_credential(request)
    if principal.kind is p.CredentialKind.SERVICE_TOKEN:
        raise Forbidden("the service token may only save team memory records")
    return principal


def authenticate_mutation(request: Request) -> p.Principal:
    """:func:`authenticate`, refusing a session mutation without its CSRF token."""
    principal = authenticate(request)
    require_csrf(principal)
    return principal


def require_csrf(principal: p.Principal) -> None:
    if not principal.csrf_ok:
        raise CsrfRequired(
            f"a browser-session request that changes data must send the {CSRF_HEADER} header "
            "given at sign-in"
        )


def authenticate_team(team: str, request: Request) -> p.Principal:
    """:func:`authenticate`, acting in the path's ``{team}`` (404 team_not_found otherwise)."""
    principal = authenticate(request)
    if principal.kind is p.CredentialKind.LOCAL:
        if team != LOCAL_PRINCIPAL.team_id:
            raise TeamNotFound(f"no team {team!r}; local mode has one team, 'local'")
        return principal
    identity: IdentityService = request.app.state.identity
    return identity.principal_in_team(principal, team)


def authenticate_service(request: Request) -> p.Principal:
    principal = resolve_credential(request)
    if principal.kind is not p.CredentialKind.SERVICE_TOKEN:
        raise Forbidden("only the service token (CAIRN_SERVICE_TOKEN) may call this route")
    return principal


Principal = Annotated[p.Principal, Depends(authenticate)]
MutatingPrincipal = Annotated[p.Principal, Depends(authenticate_mutation)]
TeamPrincipal = Annotated[p.Principal, Depends(authenticate_team)]
ServicePrincipal = Annotated[p.Principal, Depends(authenticate_service)]
AnyPrincipal = Annotated[p.Principal, Depends(resolve_credential)]
State = Annotated[AppState, Depends(get_state)]


def identity_of(state: AppState) -> IdentityService:
    """The identity service; local mode has none (its routes answer 404)."""
    from cairn.errors import NotFound

    if state.identity is None:
        raise NotFound("local mode has no identity store")
    return state.identity
