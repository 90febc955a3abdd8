"""One error model for the whole API (SPEC §7.4): ``{"error": {"code", "message"}}``.

Every :class:`cairn.errors.CairnError` renders with its class's status and code;
FastAPI's validation errors become ``400 invalid_request`` naming the field; Starlette's
404/405 keep their status in the same shape; anything unexpected is ``500
internal_error``, logged with its trace, never shown.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from cairn.errors import CairnError, QuotaExceeded, RateLimited, StoreUnavailable

log = logging.getLogger("cairn.api")

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
    body: dict[str, Any] = {"code": code, "message": message}
    body.update(extra)
    return JSONResponse({"error": body}, status_code=status)


def render_cairn_error(request: Request, exc: CairnError) -> JSONResponse:
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        if isinstance(exc, QuotaExceeded):
            metrics.quota_refusals.labels(str(exc.details.get("limit", "unknown"))).inc()
        elif isinstance(exc, StoreUnavailable):
            metrics.store_errors.inc()
    response = JSONResponse(exc.to_dict(), status_code=exc.status)
    if isinstance(exc, RateLimited):
        response.headers["Retry-After"] = str(max(1, int(exc.retry_after + 0.999)))
    if exc.status >= 500:
        log.error("request failed: %s", exc.code, exc_info=exc)
    return response


def _field_of(error: dict[str, Any]) -> str:
    loc = [str(x) for x in error.get("loc", ()) if x not in ("body", "query", "path", "header")]
    return ".".join(loc) or "body"


def install(app: FastAPI) -> None:
    async def cairn_handler(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, CairnError)
        return render_cairn_error(request, exc)

    async def validation_handler(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = list(exc.errors())
        first = errors[0] if errors else {}
        field = _field_of(first)
        if field == "body" and first.get("type") in ("model_attributes_type", "dict_type"):
            message = "the body must be a JSON object sent with Content-Type: application/json"
        elif first.get("type") == "json_invalid":
            message = "the body is not valid JSON"
        else:
            reason = str(first.get("msg", "is not valid")).rstrip(".")
            message = f"field {field!r}: {reason}; fix it and retry"
        return error_response(400, "invalid_request", message, field=field)

    async def http_handler(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        message = {
            404: f"no route {request.url.path!r}; see /openapi.json for the routes",
            405: f"method {request.method} is not allowed on {request.url.path!r}",
        }.get(exc.status_code, str(exc.detail))
        response = error_response(exc.status_code, code, message)
        if exc.headers:
            response.headers.update(exc.headers)
        return response

    async def unexpected_handler(request: Request, exc: Exception) -> JSONResponse:
        log.error("unexpected error", exc_info=exc)
        return error_response(500, "internal_error", "internal error; the server log has details")

    app.add_exception_handler(CairnError, cairn_handler)
    app.add_exception_handler(RequestValidationError, validation_handler)
    app.add_exception_handler(StarletteHTTPException, http_handler)
    app.add_exception_handler(Exception, unexpected_handler)
