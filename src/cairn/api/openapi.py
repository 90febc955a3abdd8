"""The OpenAPI document, made truthful about what every route can answer.

FastAPI documents a ``422`` validation error in its own shape, but Cairn answers
validation errors ``400 invalid_request`` in the one error shape (SPEC §7.4); and
errors that any route may answer (auth, body limits, an unreachable store) are
added here once for every route, including routes of modules that did not declare
them.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from cairn.api.routes.common import error_responses

_METHODS = ("get", "put", "post", "delete", "patch")
#: What any /api route may answer, whatever it declares itself.
_API_ERRORS = (400, 401, 403, 404, 429, 500, 503)


def install(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            description=app.description,
            routes=app.routes,
        )
        _amend(schema)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _amend(schema: dict[str, Any]) -> None:
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {}).update(
        {
            "bearer": {"type": "http", "scheme": "bearer", "description": "API key or token"},
            "session": {"type": "apiKey", "in": "cookie", "name": "cairn_session"},
        }
    )
    schemas = components.get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    for path, item in schema.get("paths", {}).items():
        for method in _METHODS:
            op = item.get(method)
            if op is None:
                continue
            responses: dict[str, Any] = op.setdefault("responses", {})
            _fix_validation_error(responses)
            extra: list[int] = [500]
            if path.startswith("/api/"):
                extra = list(_API_ERRORS)
                if path != "/api/auth/login":
                    op.setdefault("security", [{"bearer": []}, {"session": []}])
            if "requestBody" in op:
                extra += [400, 413]
            for status, spec in error_responses(*sorted(set(extra))).items():
                responses.setdefault(str(status), spec)
    if not schemas:
        components.pop("schemas", None)


def _fix_validation_error(responses: dict[str, Any]) -> None:
    spec = responses.get("422")
    if spec is None:
        return
    ref = str(spec.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref", ""))
    if ref.endswith("/HTTPValidationError"):
        # Cairn answers request validation errors 400 invalid_request, never this 422.
        del responses["422"]
        responses.setdefault("400", error_responses(400)[400])
