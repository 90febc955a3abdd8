"""The OpenAPI document, made truthful about what every route can answer, and the
pages that render it, served offline.

FastAPI documents a ``422`` validation error in its own shape, but Keepstone answers
validation errors ``400 invalid_request`` in the one error shape (SPEC §7.4); and
errors that any route may answer (auth, body limits, an unreachable store) are
added here once for every route, including routes of modules that did not declare
them.

``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) load their JavaScript, CSS and icon from
Keepstone itself, under :data:`DOCS_ASSETS`: the files ship in the pinned ``fastapi-offline``
package (FastAPI's "self-hosting JavaScript and CSS for docs" recipe). FastAPI's own
pages would load them from a CDN (and ReDoc's fonts from Google): blank offline.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

from keepstone.api.routes.common import error_responses

_METHODS = ("get", "put", "post", "delete", "patch")
#: What any /api route may answer, whatever it declares itself.
_API_ERRORS = (400, 401, 403, 404, 429, 500, 503)


#: Where the pages' assets are served (a mount: no route of the policy table).
DOCS_ASSETS = "/docs/assets"
_OAUTH2_REDIRECT = "/docs/oauth2-redirect"


def docs_assets_dir() -> Path:
    """The directory of Swagger UI's and ReDoc's files, in the installed ``fastapi-offline``
    package (located without importing it: only its files are used)."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the fastapi-offline package is missing; reinstall keepstone")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def install(app: FastAPI) -> None:
    """The amended OpenAPI document, and ``/docs`` and ``/redoc`` with their assets served
    by the app itself (the app is made with ``docs_url=None, redoc_url=None``)."""
    _install_schema(app)
    _install_docs(app)


def _install_docs(app: FastAPI) -> None:
    openapi_url = app.openapi_url or "/openapi.json"
    app.mount(DOCS_ASSETS, StaticFiles(directory=docs_assets_dir()), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=_OAUTH2_REDIRECT,
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
        )

    @app.get(_OAUTH2_REDIRECT, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{DOCS_ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{DOCS_ASSETS}/favicon.png",
            with_google_fonts=False,
        )


def _install_schema(app: FastAPI) -> None:
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
            "session": {"type": "apiKey", "in": "cookie", "name": "keepstone_session"},
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
        # Keepstone answers request validation errors 400 invalid_request, never this 422.
        del responses["422"]
        responses.setdefault("400", error_responses(400)[400])
