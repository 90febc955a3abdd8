"""Browser sessions (SPEC §7.2): sign in with email and password, sign out."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from cairn.api.deps import SESSION_COOKIE, MutatingPrincipal, State, identity_of
from cairn.api.routes.common import error_responses
from cairn.errors import Unauthenticated
from cairn.identity.principal import CredentialKind

router = APIRouter(tags=["auth"])


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
    summary="Sign in: sets the cairn_session cookie, answers the CSRF token",
)
def login(body: LoginIn, request: Request, state: State) -> JSONResponse:
    identity = identity_of(state)
    client = request.client.host if request.client else "unknown"
    key = f"{body.email.strip().lower()}|{client}"
    state.login_throttle.check(key)
    try:
        session = identity.login(body.email, body.password)
    except Unauthenticated:
        state.login_throttle.failed(key)
        raise
    state.login_throttle.succeeded(key)
    payload: dict[str, Any] = {
        "csrf_token": session.csrf_token,
        "user": session.user,
        "teams": session.teams,
    }
    response = JSONResponse(payload)
    response.set_cookie(
        SESSION_COOKIE,
        session.token,
        max_age=state.settings.session_ttl_seconds,
        httponly=True,
        samesite="lax",
        secure=state.settings.cookie_secure,
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
def logout(request: Request, who: MutatingPrincipal, state: State) -> Response:
    token = request.cookies.get(SESSION_COOKIE)
    if who.kind is CredentialKind.SESSION and token and state.identity is not None:
        state.identity.logout(token)
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="lax")
    return response
