"""Pure-ASGI middleware: request id, access log and metrics; ``Cache-Control: no-store``;
request body limits; control characters in query parameters refused.

Pure ASGI (not ``BaseHTTPMiddleware``) so streamed bodies stay streamed and the
route template that the router writes into ``scope["route"]`` is visible here.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from keepstone.api.logs import current_request_id, direct_handler
from keepstone.api.metrics import Metrics
from keepstone.errors import BodyTooLarge, ImportTooLarge, InvalidRequest, KeepstoneError
from keepstone.text import clean_text, is_whole_number
from keepstone.web import error_page_of_scope

access_log = logging.getLogger("keepstone.access")
log = logging.getLogger("keepstone.api")

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._\-]{1,128}$")
IMPORT_PATH = "/api/memory/import"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


#: Paths whose answers may be kept by a cache: static assets and the API's documentation.
#: Every other answer (a document, a search, a list, a page) is sent ``no-store``, so no
#: browser or proxy keeps memory content on disk.
_CACHEABLE_PREFIXES = ("/static/", "/docs", "/redoc", "/openapi.json")


def stores_nothing(path: str) -> bool:
    """Whether the answer to ``path`` goes out with ``Cache-Control: no-store``."""
    return not path.startswith(_CACHEABLE_PREFIXES)


class RequestContextMiddleware:
    """Gives each request an id (``X-Request-ID`` in and out), logs one JSON-able line,
    counts it in the metrics, and turns any unexpected exception into a plain 500."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = _header(scope, b"x-request-id")
        request_id = incoming if incoming and _REQUEST_ID.match(incoming) else secrets.token_hex(16)
        scope.setdefault("state", {})["request_id"] = request_id
        token = current_request_id.set(request_id)
        started = time.perf_counter()
        status = 500
        response_started = False

        async def send_wrapper(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                response_started = True
                status = int(message["status"])
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode("latin-1")))
                if stores_nothing(scope["path"]) and not any(
                    k.lower() == b"cache-control" for k, _ in headers
                ):
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except Exception as exc:
            log.error("unexpected error", exc_info=exc, extra={"request_id": request_id})
            if not response_started:
                await _send_json(
                    send_wrapper,
                    500,
                    {"error": {"code": "internal_error", "message": "internal error; see logs"}},
                )
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            elapsed = time.perf_counter() - started
            self.metrics.observe_request(scope["method"], template, status, elapsed)
            current_request_id.reset(token)
            if access_log.isEnabledFor(logging.INFO):
                principal = scope.get("state", {}).get("principal")
                fields = {
                    "request_id": request_id,
                    "method": scope["method"],
                    "route": template,
                    "status": status,
                    "duration_ms": round(elapsed * 1000, 2),
                    # Who, never with what: the actor names a user id, not a credential.
                    "actor": getattr(principal, "actor", None),
                    "team": getattr(principal, "team_id", None) or None,
                }
                direct = direct_handler(access_log)
                if direct is None:
                    access_log.info("request", extra=fields)
                else:
                    direct.write_fields(access_log.name, "request", fields)


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = orjson.dumps(body)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode("latin-1")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


class BodyLimitMiddleware:
    """Refuses a request body over its limit with 413 before it is read whole.

    ``Content-Length`` over the limit is refused before any byte is read; a body sent
    without one (chunked) is counted as it arrives, and the read fails with the same
    error the moment it passes the limit. Imports have their own, larger cap.
    ``page(scope, error)`` renders the refusal on the UI's paths, where a browser posted a
    form and must get a page (None: JSON), as :class:`QueryTextMiddleware` does.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_json_bytes: int,
        max_import_bytes: int,
        page: Callable[[Scope, KeepstoneError], Any] | None = error_page_of_scope,
    ) -> None:
        self.app = app
        self.max_json = max_json_bytes
        self.max_import = max_import_bytes
        self.page = page

    def _error(self, path: str, limit: int) -> KeepstoneError:
        if path == IMPORT_PATH:
            return ImportTooLarge(
                f"the import upload is over {limit} bytes (KEEPSTONE_MAX_IMPORT_BYTES); "
                "split the archive",
                quota_bytes=limit,
            )
        return BodyTooLarge(f"the request body is over {limit} bytes", quota_bytes=limit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        limit = self.max_import if path == IMPORT_PATH else self.max_json
        declared = _header(scope, b"content-length")
        if declared is not None:
            # A malformed length is the server's to refuse; this only reads a well-formed one.
            if is_whole_number(declared) and int(declared) > limit:
                await self._refuse(scope, receive, send, self._error(path, limit))
                return
        seen = 0
        refused: KeepstoneError | None = None
        answered = False

        async def counted_receive() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    refused = self._error(path, limit)
                    raise refused
            return message

        async def guarded_send(message: Message) -> None:
            # Whatever the app made of the failed read (FastAPI turns body errors into
            # its own 400), the answer is the one 413 naming the limit.
            nonlocal answered
            if refused is None:
                await send(message)
                return
            if not answered and message["type"] == "http.response.start":
                answered = True
                await self._refuse(scope, receive, send, refused)

        await self.app(scope, counted_receive, guarded_send)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, refused: KeepstoneError
    ) -> None:
        """Answer ``refused``: the UI's page on its paths, else the API's JSON."""
        response = self.page(scope, refused) if self.page is not None else None
        if response is None:
            await _send_json(send, refused.status, refused.to_dict())
        else:
            await response(scope, receive, send)


#: Query parameters that name a space or a path: their own checks refuse a control
#: character with the domain's code (400 invalid_space_ref, 422 invalid_path).
_DOMAIN_CHECKED = frozenset(
    {"name", "project", "visibility", "bot", "path", "dir", "to", "path_prefix"}
)
_MEMORY_PREFIXES = ("/api/memory", "/t/")
# What can decode to a control character (keepstone.text.CONTROL): a raw one (bytes are
# read as latin-1, so 0x80-0x9f too), or its percent-encoding in UTF-8 (%00-%1F, %7F,
# %C2%80-%C2%9F). A percent-encoded '/' or letter is not, so most queries are not parsed.
_CONTROL_BYTES = re.compile(
    rb"[\x00-\x1f\x7f-\x9f]|%(?:[01][0-9A-Fa-f]|7[Ff]|[Cc]2%[89][0-9A-Fa-f])"
)


def refusal_of_query(path: str, query: bytes) -> InvalidRequest | None:
    """``400 invalid_request`` naming the first query parameter (name or value) holding a
    control character, else None. A parameter a space's or path's own check reads is left
    to it (on the memory routes and pages)."""
    if not _CONTROL_BYTES.search(query):  # no control character, raw or encoded
        return None
    domain = _DOMAIN_CHECKED if path.startswith(_MEMORY_PREFIXES) else frozenset()
    text = query.decode("latin-1")
    for key, value in parse_qsl(text, keep_blank_values=True, errors="replace"):
        try:
            clean_text("query parameter name", key)
            if key not in domain:
                clean_text(key or "the query parameter with no name", value)
        except InvalidRequest as exc:
            return exc
    return None


class QueryTextMiddleware:
    """Refuses a request whose query string holds a control character (NUL included) with
    ``400 invalid_request`` naming the parameter, before any route reads it: a syntactic
    refusal of the request, as a body over its limit is, whoever sends it.
    ``page(scope, error)`` renders it on the UI's paths (None: JSON)."""

    def __init__(
        self, app: ASGIApp, page: Callable[[Scope, KeepstoneError], Any] | None = None
    ) -> None:
        self.app = app
        self.page = page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("query_string"):
            refused = refusal_of_query(scope.get("path", ""), scope["query_string"])
            if refused is not None:
                response = self.page(scope, refused) if self.page is not None else None
                if response is None:
                    await _send_json(send, refused.status, refused.to_dict())
                else:
                    await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
