"""The web UI face (docs/ui.md): server-rendered pages over the same services as the API.

:func:`install` adds the UI to an app made by :func:`keepstone.api.app.app_for`: its routes,
its static files, HTML error pages for its paths, and the security headers on its
answers. The JSON API's paths and answers are untouched.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from keepstone.web import activity, admin, history, keys, memory, pages
from keepstone.web.core import (
    STATIC,
    STATIC_PATH,
    SecurityHeadersMiddleware,
    error_page_of_scope,
    install_error_pages,
)

#: Route modules of the UI, each exposing ``router``.
ROUTER_MODULES = (pages, history, activity, memory, admin, keys)

__all__ = ["ROUTER_MODULES", "error_page_of_scope", "install"]


def install(app: FastAPI) -> None:
    for module in ROUTER_MODULES:
        app.include_router(module.router)
    app.mount(STATIC_PATH, StaticFiles(directory=str(STATIC)), name="ui-static")
    install_error_pages(app)
    app.add_middleware(SecurityHeadersMiddleware)
