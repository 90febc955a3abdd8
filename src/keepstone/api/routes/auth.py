"""Browser sessions (SPEC §7.2): sign in with email and password, sign out.

Thin over :meth:`keepstone.service.access.Credentials.sign_in` / ``sign_out``; failed
sign-ins are throttled here (:class:`keepstone.api.throttle.LoginThrottle`), per email
and per client address.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from keepstone.api.deps import SESSION_COOKIE, Principal
from keepstone.api.routes.common import error_responses
from keepstone.api.throttle import LoginThrottle
from keepstone.config import Config
from keepstone.errors import Unauthenticated
from keepstone.service.access import Credentials

router = APIRouter(tags=["auth"])


@dataclass(frozen=True, slots=True)
class SessionFace:
    """What these routes take from ``app.state``: ``credentials``, ``login_throttle``,
    ``settings``."""

    credentials: Credentials
    throttle: LoginThrottle
    settings: Config


async def _session_face(request: Request) -> SessionFace:
    # async on purpose: it does no I/O, and a sync dependency costs a threadpool hop.
    state = request.app.state
    return SessionFace(state.credentials, state.login_throttle, state.settings)


Face = Annotated[SessionFace, Depends(_session_face)]


class LoginIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    email: str = Field(max_length=320)
    password: str = Field(max_length=1024)


class UserOut(BaseModel):
    id: str
    email: str
    name: str
    super_admin: bool


class TeamOut(BaseModel):
    id: str
    name: str
    org_id: str
    role: str


class LoginOut(BaseModel):
    csrf_token: str
    user: UserOut
    teams: list[TeamOut]


@router.post(
    "/api/auth/login",
    response_model=LoginOut,
    responses=error_responses(400, 401, 404, 429, 500, 503),
    summary="Sign in: sets the keepstone_session cookie, answers the CSRF token",
)
def login(body: LoginIn, request: Request, face: Face) -> JSONResponse:
    client = request.client.host if request.client else "unknown"
    face.throttle.check(body.email, client)
    try:
        session = face.credentials.sign_in(body.email, body.password)
    except Unauthenticated:
        face.throttle.failed(body.email, client)
        raise
    face.throttle.succeeded(body.email, client)
    payload: dict[str, Any] = {
        "csrf_token": session.csrf_token,
        "user": asdict(session.user),
        "teams": [asdict(team) for team in session.teams],
    }
    response = JSONResponse(payload)
    response.set_cookie(
        SESSION_COOKIE,
        session.token,
        max_age=face.settings.session_ttl_seconds,
        httponly=True,
        samesite="lax",
        secure=face.settings.cookie_secure,
        path="/",
    )
    return response


@router.post(
    "/api/auth/logout",
    status_code=204,
    response_class=Response,
    responses=error_responses(401, 403, 500, 503),
    summary="Sign out: ends the session and clears its cookie",
)
def logout(request: Request, who: Principal, face: Face) -> Response:
    face.credentials.sign_out(who, request.cookies.get(SESSION_COOKIE))
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="lax")
    return response
