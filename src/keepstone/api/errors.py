"""One error model for the whole API (SPEC §7.4): ``{"error": {"code", "message"}}``.

Every :class:`keepstone.errors.KeepstoneError` renders with its class's status and code;
FastAPI's validation errors become ``400 invalid_request`` naming the field — except a
space's query parameters on the spaces routes, which answer the domain's own codes
(``400 invalid_space_ref`` for ``name``/``visibility``/``project``/``bot``, ``422
invalid_path`` for ``path``, SPEC §5, §7.4) as when the value is present but wrong; a
body FastAPI cannot parse at all (malformed, or nested too deep for the parser) is
``400 invalid_request`` naming the body; Starlette's 404/405 keep their status in the
same shape; anything unexpected is ``500 internal_error``, logged with its trace,
never shown.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from keepstone.api import deps
from keepstone.errors import (
    DocumentTooLarge,
    InsufficientStorage,
    InvalidPath,
    InvalidRequest,
    InvalidSpaceRef,
    KeepstoneError,
    QuotaExceeded,
    StoreUnavailable,
    retry_after,
)
from keepstone.web.core import allowed_methods

log = logging.getLogger("keepstone.api")

#: The JSON schema of every error answer, for OpenAPI.
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
}


def error_response(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, **extra}}, status_code=status)


def render_keepstone_error(request: Request, exc: KeepstoneError) -> JSONResponse:
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        if isinstance(exc, QuotaExceeded | DocumentTooLarge):  # the document cap is one too
            metrics.quota_refusals.labels(str(exc.details.get("limit", "unknown"))).inc()
        elif isinstance(exc, StoreUnavailable):
            metrics.store_errors.inc()
    response = JSONResponse(exc.to_dict(), status_code=exc.status)
    response.headers.update(retry_after(exc))
    if isinstance(exc, InsufficientStorage):  # one line per refusal, not a traceback
        log.warning("request refused: %s: %s", exc.code, exc.message)
    elif isinstance(exc, StoreUnavailable):
        # An outage fails every request alike: one line each, saying what is away (the
        # database, the rate limiter's Redis) and the driver's reason, rather than a
        # traceback each.
        if exc.operator_message:  # it gives the reason itself, with what to check
            log.error("request failed: %s: %s", exc.code, exc.operator_message)
        else:
            log.error("request failed: %s: %s (%s)", exc.code, exc.message, _root_cause(exc))
    elif exc.status >= 500:
        log.error("request failed: %s", exc.code, exc_info=exc)
    return response


def _root_cause(exc: BaseException) -> str:
    """The innermost cause of ``exc``, as its class and the first line of its message."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


_LOCATIONS = ("body", "query", "path", "header", "cookie")


def _field_of(error: dict[str, Any]) -> str:
    # Only the leading element is a location: a parameter may itself be called ``path``.
    loc = [str(x) for x in error.get("loc", ())]
    if loc and loc[0] in _LOCATIONS:
        loc = loc[1:]
    return ".".join(loc) or "body"


#: The spaces routes' query parameters whose errors are the domain's, not FastAPI's:
#: each maps to its error class and a hint on what to send.
_SPACE_QUERY_ERRORS: dict[str, tuple[type[KeepstoneError], str]] = {
    "name": (InvalidSpaceRef, "name the space, e.g. ?name=notes"),
    "visibility": (InvalidSpaceRef, "e.g. ?visibility=project"),
    "project": (InvalidSpaceRef, "give the project key, e.g. ?project=web"),
    "bot": (InvalidSpaceRef, "give the bot id, e.g. ?bot=whats-next"),
    "path": (InvalidPath, "give the document's path, e.g. ?path=MEMORY.md"),
}
_SPACES_ROUTES = "/api/memory"


def _space_query_error(request: Request, error: dict[str, Any]) -> KeepstoneError | None:
    """The domain error for a bad space query parameter of a spaces route, else None."""
    loc = error.get("loc", ())
    if len(loc) != 2 or loc[0] != "query" or loc[1] not in _SPACE_QUERY_ERRORS:
        return None
    route_path = str(getattr(request.scope.get("route"), "path", request.url.path))
    if not route_path.startswith(_SPACES_ROUTES):
        return None
    name = str(loc[1])
    cls, hint = _SPACE_QUERY_ERRORS[name]
    if error.get("type") == "missing":
        message = f"query parameter {name!r} is required; {hint}"
    else:
        reason = str(error.get("msg", "is not valid")).rstrip(".")
        message = f"query parameter {name!r}: {reason}; {hint}"
    return cls(message, field=name)


def _unparsable_body(exc: StarletteHTTPException) -> KeepstoneError | None:
    """FastAPI's own ``400`` for a body its JSON parser gave up on, as ours."""
    cause = exc.__cause__
    if exc.status_code != 400 or cause is None:
        return None
    if isinstance(cause, RecursionError):
        return InvalidRequest(
            "the body nests arrays/objects too deeply to parse; send a flat JSON object",
            field="body",
        )
    return InvalidRequest(
        "the body could not be parsed; send a JSON object with Content-Type: application/json",
        field="body",
    )


def install(app: FastAPI) -> None:
    async def keepstone_handler(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, KeepstoneError)
        return render_keepstone_error(request, exc)

    async def validation_handler(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        refused = await deps.refusal_of_deferred_credential(request)
        if refused is not None:  # 401/403 come before a bad parameter (docs/api.md)
            return render_keepstone_error(request, refused)
        errors = list(exc.errors())
        first = errors[0] if errors else {}
        domain = _space_query_error(request, first)
        if domain is not None:
            return render_keepstone_error(request, domain)
        field = _field_of(first)
        if field == "body" and first.get("type") in ("model_attributes_type", "dict_type"):
            message = "the body must be a JSON object sent with Content-Type: application/json"
        elif first.get("type") == "json_invalid":
            field, message = "body", "the body is not valid JSON"
        else:
            reason = str(first.get("msg", "is not valid")).rstrip(".")
            message = f"field {field!r}: {reason}; fix it and retry"
        return error_response(400, "invalid_request", message, field=field)

    async def http_handler(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        unparsable = _unparsable_body(exc)
        if unparsable is not None:
            return render_keepstone_error(request, unparsable)
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        message = {
            404: f"no route {request.url.path!r}; see /openapi.json for the routes",
            405: f"method {request.method} is not allowed on {request.url.path!r}",
        }.get(exc.status_code, str(exc.detail))
        response = error_response(exc.status_code, code, message)
        if exc.headers:
            response.headers.update(exc.headers)
        if exc.status_code == 405:
            response.headers["Allow"] = ", ".join(allowed_methods(request.app, request.url.path))
        return response

    async def unexpected_handler(request: Request, exc: Exception) -> JSONResponse:
        log.error("unexpected error", exc_info=exc)
        return error_response(500, "internal_error", "internal error; the server log has details")

    app.add_exception_handler(KeepstoneError, keepstone_handler)
    app.add_exception_handler(RequestValidationError, validation_handler)
    app.add_exception_handler(StarletteHTTPException, http_handler)
    app.add_exception_handler(Exception, unexpected_handler)
