"""What every page shares: who is asking, CSRF, templates, HTML errors, security headers.

The UI is a face like the API: it turns the ``keepstone_session`` cookie into a
:class:`~keepstone.principal.Principal` with the same :class:`~keepstone.service.access.Credentials`
(the active team is the one in the URL, sent as the API's ``X-Keepstone-Team`` would be), and
every decision is the service's. Only the session cookie signs a page in: an API key or
a token in an ``Authorization`` header is for the JSON API, so a page asked with one
redirects to sign-in like any page asked with nothing.

CSRF: the session's token (shown once at sign-in) is kept in a second HttpOnly cookie
and written into every form as a hidden field; a POST is accepted only when the field
equals the cookie *and* the session's stored CSRF hash matches the field (identity's own
check, through ``Principal.csrf_ok``).
"""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlencode, urlparse

import jinja2
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from starlette.datastructures import FormData, UploadFile
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from keepstone.errors import (
    CsrfRequired,
    KeepstoneError,
    TeamNotFound,
    Unauthenticated,
    retry_after,
)
from keepstone.paths import shown
from keepstone.principal import Principal
from keepstone.service.access import Credentials, require_csrf

log = logging.getLogger("keepstone.web")

#: Errors that are about the request as a whole, never about a form's field: they answer
#: as a page of their own (a redirect to sign-in for 401).
WHOLE_REQUEST = (Unauthenticated, CsrfRequired, TeamNotFound)

#: The API's session cookie (keepstone.api.deps.SESSION_COOKIE): one session for both faces.
SESSION_COOKIE = "keepstone_session"
#: The session's CSRF token, for the server to compare with each form's hidden field.
CSRF_COOKIE = "keepstone_csrf"
CSRF_FIELD = "csrf"
#: The team of the last team page shown, which the main navigation of other pages uses.
LAST_TEAM_COOKIE = "keepstone_team"
_TEAM_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
STATIC_PATH = "/static"

SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    (
        "Content-Security-Policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "same-origin"),
)

#: Paths that are the JSON API's or the operations' (their errors stay JSON).
_NOT_UI_PREFIXES = ("/api/", "/docs", "/redoc", "/openapi.json")
_NOT_UI_PATHS = frozenset({"/api", "/healthz", "/readyz", "/metrics"})


def is_ui_path(path: str) -> bool:
    """Whether ``path`` is the UI's: everything that is not the API's or the operations'."""
    return path not in _NOT_UI_PATHS and not path.startswith(_NOT_UI_PREFIXES)


env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(TEMPLATES)),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)

env.filters["shown"] = shown  # an outside name (an archive member's) as what it is


def page(
    request: Request, template: str, http_status: int = 200, /, **context: Any
) -> HTMLResponse:
    """``template`` rendered with ``context`` (plus the request's CSRF token)."""
    context.setdefault("csrf", request.cookies.get(CSRF_COOKIE, ""))
    context.setdefault("who", getattr(request.state, "principal", None))
    # The team of the page's path (/t/{team_id}/...), which its links stay in.
    in_team = request.url.path.startswith("/t/")  # (/admin/teams/{team_id} is no team page)
    context.setdefault("team_id", request.path_params.get("team_id", "") if in_team else "")
    # The main navigation's team: the page's, else the last one visited (a page of no
    # team, such as the administration, keeps the navigation; the links check membership).
    remembered = request.cookies.get(LAST_TEAM_COOKIE, "")
    context.setdefault(
        "nav_team", context["team_id"] or (remembered if _TEAM_ID.fullmatch(remembered) else "")
    )
    html = env.get_template(template).render(request=request, **context)
    response = HTMLResponse(html, status_code=http_status)
    if context["team_id"] and http_status < 400 and context["team_id"] != remembered:
        settings = getattr(request.app.state, "settings", None)
        secure = bool(settings is not None and settings.cookie_secure)
        response.set_cookie(
            LAST_TEAM_COOKIE,
            context["team_id"],
            httponly=True,
            samesite="lax",
            secure=secure,
            path="/",
        )
    return response


def url(base: str, /, **query: str | None) -> str:
    """``base`` with the query parameters that are not None."""
    q = {k: v for k, v in query.items() if v is not None}
    return f"{base}?{urlencode(q)}" if q else base


def see_other(location: str) -> RedirectResponse:
    return RedirectResponse(location, status_code=303)


# --- who is asking ----------------------------------------------------------------------------


def _credentials(request: Request) -> Credentials:
    credentials: Credentials = request.app.state.credentials
    return credentials


def signed_in(request: Request, team_id: str | None = None) -> Principal:
    """The principal of the session cookie, in ``team_id`` when given (``404
    team_not_found`` when the user cannot act in it, as the API answers); ``401`` (a
    redirect to sign-in) without a live session."""
    session = request.cookies.get(SESSION_COOKIE)
    if not session:
        raise Unauthenticated("sign in to see this page")
    return _session_principal(request, session, None, team_id)


def signed_in_with(request: Request, session: str, team_id: str | None = None) -> Principal:
    """The principal of ``session``, a session the request itself just opened (its cookie
    is set on the answer, not sent with the request), in ``team_id`` as :func:`signed_in`."""
    return _session_principal(request, session, None, team_id)


def signed_in_with_cookie_token(request: Request, team_id: str) -> Principal | None:
    """The principal of the session cookie, in ``team_id``, when the CSRF cookie is that
    session's token; None without the cookies or when it is not. A form refused for
    carrying another token while this holds was opened under an earlier sign-in (the
    person signed in again since, in another tab): a form filled in with what it sent and
    this cookie's token can be sent again. ``401`` without a live session."""
    session = request.cookies.get(SESSION_COOKIE)
    cookie = request.cookies.get(CSRF_COOKIE, "")
    if not session or not cookie:
        return None
    who = _session_principal(request, session, cookie, team_id)
    return who if who.csrf_ok else None


def _session_principal(
    request: Request, session: str, csrf_token: str | None, team_id: str | None
) -> Principal:
    """The principal of ``session`` (a mutation when it comes with its ``csrf_token``),
    kept on the request for the error pages."""
    who = _credentials(request).authenticate(
        authorization=None,
        session=session,
        csrf_token=csrf_token,
        mutating=csrf_token is not None,
        team_header=team_id or None,
    )
    request.state.principal = who
    return who


async def posted(
    request: Request, team_id: str | None = None, *, max_part_size: int | None = None
) -> tuple[Principal, FormData]:
    """The principal of a form POST and its fields, once its CSRF token checks out.
    ``max_part_size``: the largest text field the form may carry (else Starlette's 1 MiB;
    an uploaded file is spooled, whatever its size, under the app's body limit)."""
    form = await (
        request.form() if max_part_size is None else request.form(max_part_size=max_part_size)
    )
    try:
        field = form.get(CSRF_FIELD)
        cookie = request.cookies.get(CSRF_COOKIE, "")
        session = request.cookies.get(SESSION_COOKIE)
        if not session:
            raise Unauthenticated("sign in again: the session is gone")
        if not (isinstance(field, str) and field and cookie and _same(field, cookie)):
            raise CsrfRequired(
                "this form did not carry the token of your sign-in; reload the page and send it "
                "again (or sign in again)"
            )
        who = _session_principal(request, session, field, team_id)
        try:
            require_csrf(who)
        except CsrfRequired:
            raise CsrfRequired(
                "this form's token is not the one of your sign-in; reload the page and send it "
                "again (or sign in again)"
            ) from None
    except BaseException:
        await form.close()  # an upload's spooled file, on any refusal
        raise
    return who, form


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


def text(form: FormData, name: str, default: str = "") -> str:
    """A text field of ``form`` ('' or ``default`` when absent or a file)."""
    value = form.get(name)
    return value if isinstance(value, str) else default


def upload(form: FormData, name: str) -> UploadFile | None:
    value = form.get(name)
    return value if isinstance(value, UploadFile) else None


def _routes(routes: Iterable[Any]) -> Iterator[Any]:
    """Every route of ``routes``, those of included routers too."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _routes(inner.routes)
        else:
            yield route


def allowed_methods(app: Any, path: str) -> list[str]:
    """Every method some route of ``app`` takes at ``path``, for a 405's ``Allow`` (API or
    page): the router names only the first route it matched, where a path has one route
    per method."""
    methods: set[str] = set()
    for route in _routes(app.routes):
        regex, taken = getattr(route, "path_regex", None), getattr(route, "methods", None)
        if regex is not None and taken and regex.match(path):
            methods.update(taken)
    return sorted(methods)


# --- errors as pages --------------------------------------------------------------------------

Handler = Callable[[Request, Exception], Awaitable[Response]]


def error_page(request: Request, status: int, code: str, message: str) -> Response:
    if status == 401:
        return see_other(url("/signin", next=_next_of(request)))
    return page(
        request, "error.html", status, status=status, code=code, message=message, team_id=""
    )


def error_page_of_scope(scope: Scope, exc: KeepstoneError) -> Response | None:
    """``exc`` as the UI's error page when ``scope`` is a UI path (for a refusal made by a
    middleware, before any route); None on the API's paths."""
    if not is_ui_path(scope.get("path", "")):
        return None
    return error_page(Request(scope), exc.status, exc.code, exc.message)


def _next_of(request: Request) -> str | None:
    if request.method != "GET":
        return None
    path = request.url.path
    return path + (f"?{request.url.query}" if request.url.query else "")


class LoginThrottleLike(Protocol):
    """The API's failed-login throttle on ``app.state.login_throttle`` (shared with the
    UI's sign-in, so both forms count against one limit): per email and per address."""

    def check(self, email: str, client: str) -> None: ...
    def failed(self, email: str, client: str) -> None: ...
    def succeeded(self, email: str, client: str) -> None: ...


#: ``Sec-Fetch-Site`` values of a request made by this site's own pages, or by the user
#: (typed, bookmarked): anything else (``same-site``, ``cross-site``) came from elsewhere.
_OWN_FETCH_SITES = frozenset({"same-origin", "none"})


def from_another_site(request: Request) -> bool:
    """Whether a form was posted by a page of another site (login CSRF). The browser says
    so in ``Sec-Fetch-Site`` when it sends it; an ``Origin`` that is ``null`` (a sandboxed
    frame, a page that sends no referrer) or names another host says so too. A request
    with neither (not a browser's) is not refused here."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site.lower() not in _OWN_FETCH_SITES:
        return True
    origin = request.headers.get("origin")
    if origin is None:
        return False
    return origin == "null" or urlparse(origin).netloc != request.url.netloc


def install_error_pages(app: FastAPI) -> None:
    """Errors of UI paths as HTML pages; the API's paths keep their JSON handlers."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    def wrap(kind: type[Exception], ui: Handler) -> None:
        original: Handler | None = app.exception_handlers.get(kind)  # type: ignore[assignment]

        async def handler(request: Request, exc: Exception) -> Response:
            if is_ui_path(request.url.path) or original is None:
                return await ui(request, exc)
            return await original(request, exc)

        app.add_exception_handler(kind, handler)

    async def keepstone_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, KeepstoneError)
        response = error_page(request, exc.status, exc.code, exc.message)
        response.headers.update(retry_after(exc))
        return response

    async def validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        first: Mapping[str, Any] = next(iter(exc.errors()), {})
        name = ".".join(str(x) for x in first.get("loc", ())[1:]) or "the request"
        reason = str(first.get("msg", "is not valid")).rstrip(".")
        message = f"{name}: {reason}; go back and fix it"
        return error_page(request, 400, "invalid_request", message)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            message = f"there is no page {request.url.path!r}; start from the home page"
            return error_page(request, 404, "not_found", message)
        if exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path!r}"
            response = error_page(request, 405, "method_not_allowed", message)
            response.headers["Allow"] = ", ".join(allowed_methods(request.app, request.url.path))
            return response
        return error_page(request, exc.status_code, "http_error", str(exc.detail))

    wrap(KeepstoneError, keepstone_error)
    wrap(RequestValidationError, validation)
    wrap(HTTPException, http_error)


class UiRoute(APIRoute):
    """A UI route: an unexpected exception is an HTML 500 page (logged with its trace,
    never shown), where the app's own last resort would answer JSON."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            from fastapi.exceptions import RequestValidationError
            from starlette.exceptions import HTTPException

            try:
                return await handler(request)
            except (KeepstoneError, HTTPException, RequestValidationError):
                raise
            except Exception as exc:
                log.error("unexpected error", exc_info=exc)
                message = "internal error; the server log has details"
                return error_page(request, 500, "internal_error", message)

        return guarded


class SecurityHeadersMiddleware:
    """Puts :data:`SECURITY_HEADERS` on every answer of a UI path (pure ASGI)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_ui_path(scope.get("path", "")):
            await self.app(scope, receive, send)
            return

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.decode("latin-1").lower()
                    not in {name.lower() for name, _ in SECURITY_HEADERS}
                ]
                headers.extend(
                    (name.lower().encode("latin-1"), value.encode("latin-1"))
                    for name, value in SECURITY_HEADERS
                )
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_wrapper)
