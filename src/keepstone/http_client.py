"""The HTTP client of Keepstone's own callers of a Keepstone server (the HTTP store behind
``keepstone memory --server`` and the SDK, the records searcher): httpx, its pooled
connections dropped after :data:`IDLE_SECONDS` idle, one TLS context for every client of the
process (:func:`tls`), and one more try of a request whose connection broke before any
answer came, when sending it twice is safe; the checks of
what such a client is given (:func:`server_url`, :func:`visible_ascii`), so that a bad
``--server`` or key is refused by name before any request; and the reading of what comes
back (:func:`send`, :func:`answer`, :class:`Fields`), so that whatever answers (a proxy's
HTML page, a body cut short, another server's JSON) is a ``KeepstoneError`` that says so,
never a traceback.

Why: HTTP/1.1 keep-alive has a race no client can rule out. A server closes a connection
that stayed idle past its keep-alive timeout; a request the client sends on that
connection at the same moment meets the close, and the client sees the connection reset
or closed with no answer (httpx: ``ReadError`` "Connection reset by peer",
``RemoteProtocolError`` "Server disconnected without sending a response"). The server
never read that request, so it logged nothing. ``keepstone serve`` keeps an idle
connection far longer than :data:`IDLE_SECONDS` (``KEEPSTONE_KEEP_ALIVE_SECONDS``), so
these clients close first and the race cannot start from them; the retry covers a server
or proxy configured shorter, and a worker that closed its connections as it stopped.

A retry is safe only where a second delivery changes nothing a first one did not: the
idempotent methods (RFC 9110 §9.2.2), and a request marked :data:`REPEATABLE` (a search
sent as POST). A client cannot tell a request the server never read from one it read and
then lost the connection of, so an import, an edit or a move (POST, not marked) is never
sent twice; those rely on the idle times above. A body that was streamed (an import's
archive) cannot be sent again either.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import ssl
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx

from keepstone.errors import (
    InvalidRequest,
    KeepstoneError,
    StoreUnavailable,
    describe_body,
    error_from_wire,
    printable,
    what_to_check,
)

logger = logging.getLogger("keepstone.http")

#: Seconds a pooled connection may stay idle before the client drops it instead of
#: reusing it. The server's keep-alive timeout must be longer (``KEEPSTONE_KEEP_ALIVE_SECONDS``,
#: :data:`keepstone.config.DEFAULT_KEEP_ALIVE_SECONDS`): then the client always closes an
#: idle connection before the server does.
IDLE_SECONDS = 5.0

#: httpx's own pool bounds, with the idle time above.
LIMITS = httpx.Limits(
    max_connections=100, max_keepalive_connections=20, keepalive_expiry=IDLE_SECONDS
)

#: Methods whose repetition has the effect of one delivery (RFC 9110 §9.2.2).
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})

#: A request extension: ``extensions={REPEATABLE: True}`` lets a request whose method is
#: not idempotent be sent again (a read sent as POST).
REPEATABLE = "keepstone.repeatable"

#: The failures of a connection before a whole answer: the connection was reset or closed
#: under the request, or broke while it was being written.
_BROKEN = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


class RetryBroken(httpx.BaseTransport):
    """``inner``, sending a request once more (on another connection) when its connection
    broke before the answer's head arrived and the request is safe to repeat.

    Once only: a second break is no race but a server that drops requests. A timeout is
    no break (the server may still be working on it), nor is a refused connection.
    """

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return self._inner.handle_request(request)
        except _BROKEN as exc:
            if not repeatable(request):
                raise
            logger.debug(
                "%s %s: connection broke before an answer (%r); sending it again",
                request.method,
                request.url.path,
                exc,
            )
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


def repeatable(request: httpx.Request) -> bool:
    """Whether ``request`` may be sent a second time: an idempotent method or marked
    :data:`REPEATABLE`, and a body held whole (a streamed one is spent)."""
    safe = request.method in IDEMPOTENT or bool(request.extensions.get(REPEATABLE))
    return safe and isinstance(request.stream, httpx.ByteStream)


def transport(inner: httpx.BaseTransport | None = None) -> httpx.BaseTransport:
    """The transport of a client of a Keepstone server: ``inner`` (a test's, or a pool of
    real connections idle at most :data:`IDLE_SECONDS`, verifying TLS with :func:`tls`)
    with :class:`RetryBroken`."""
    if inner is None:
        inner = httpx.HTTPTransport(limits=LIMITS, verify=tls())
    return RetryBroken(inner)


@functools.cache
def tls() -> ssl.SSLContext:
    """How every client of this process verifies a server's certificate: httpx's own
    default (certifi's CA bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), made once.

    httpx makes a new context for every transport, and reading the CA bundle is most of
    what making a client costs: an SDK that opens several spaces, or a face that makes a
    client per request, paid it every time. A context is safe to share between
    connections and threads."""
    return httpx.create_ssl_context()


def server_url(url: str, what: str = "the server URL", field: str = "server") -> str:
    """``url`` as the base URL of a client (no trailing slash), or :class:`InvalidRequest`
    naming ``what``: an ``http://`` or ``https://`` URL with a host, in characters a URL
    can carry. Checked before a client is made: a URL holding a control character would
    otherwise fail in httpx's parser, with no word of which setting held it."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        problem = str(exc).rstrip(".")
    else:
        if parsed.scheme in ("http", "https") and parsed.host:
            return url.rstrip("/")
        problem = "it needs http:// or https:// and a host"
    raise InvalidRequest(
        f"{what} {url!r} cannot be used ({problem}); give one like http://127.0.0.1:8420",
        field=field,
    )


def visible_ascii(value: str, what: str, field: str) -> str:
    """``value`` as a request carries it in a header or a URL, or :class:`InvalidRequest`
    naming ``what``: visible ASCII only (an API key or a team id holds nothing else), where
    a character outside it would fail as the first request is encoded."""
    if value and all("!" <= c <= "~" for c in value):
        return value
    raise InvalidRequest(
        f"{what} holds a space, a control character or a letter outside ASCII, which an "
        "HTTP header cannot carry: copy it again from where it was made",
        field=field,
    )


def bearer(token: str | None, what: str = "the API key", field: str = "token") -> dict[str, str]:
    """The ``Authorization`` header of ``token`` (none without one), checked by
    :func:`visible_ascii`."""
    if not token:
        return {}
    return {"Authorization": f"Bearer {visible_ascii(token, what, field)}"}


# --- what comes back ------------------------------------------------------------------------
#
# The TypeScript client (clients/typescript/src/errors.ts) says the same of the same answers.


def send(
    client: httpx.Client, server: str, method: str, url: str, *, stream: bool = False, **kw: Any
) -> httpx.Response:
    """The 2xx answer of the Keepstone server at ``server`` (the client's base URL) to a
    request made of ``kw`` (httpx's ``params``, ``json``, ``content``, ``headers``,
    ``extensions``), its body read whole (``stream``: left to read inside :func:`reading`).

    Anything else is the :class:`KeepstoneError` that says what happened: an error answer
    (:func:`error_of`), a redirect (not followed: a write could come back as a read), no
    answer (the server unreachable, silent past the client's timeout, or the connection
    broken before an answer came), or an answer broken half-way."""
    try:
        request = client.build_request(method, url, **kw)
    except httpx.InvalidURL as exc:
        # Past what a URL may carry (httpx's 64 KiB): refused here as the server would
        # refuse what is in it, never sent.
        raise InvalidRequest(
            f"the request is too long to send ({exc}): shorten the path or the query"
        ) from None
    try:
        response = client.send(request, stream=True)
    except httpx.TimeoutException as exc:
        raise _timed_out(server, _limit(client.timeout, exc)) from exc
    except _BROKEN as exc:
        raise StoreUnavailable(
            f"the connection to the Keepstone server at {server} broke before an answer "
            f"came ({_why(exc)}): try again; if it goes on, check the server's log and that "
            "of any proxy in front of it"
        ) from exc
    except httpx.HTTPError as exc:
        raise StoreUnavailable(
            f"cannot reach the Keepstone server at {server}: {_why(exc)}; check that it is "
            "running and that the URL is its address"
        ) from exc
    if stream and response.is_success:
        return response
    try:
        with reading(response, server, client.timeout):
            response.read()
    finally:
        response.close()
    if 300 <= response.status_code < 400:
        raise _redirected(response, server)
    if not response.is_success:
        raise error_of(response, server)
    return response


@contextlib.contextmanager
def reading(response: httpx.Response, server: str, timeout: httpx.Timeout) -> Iterator[None]:
    """Reading ``response``'s body inside: a read that times out, or a connection that
    breaks before the body is whole, is :class:`StoreUnavailable` saying so."""
    status = response.status_code
    try:
        yield
    except httpx.TimeoutException as exc:
        raise _timed_out(server, _limit(timeout, exc), status) from exc
    except httpx.DecodingError as exc:
        raise StoreUnavailable(
            f"the server answered HTTP {status} with a body that cannot be decoded "
            f"({_why(exc)}): {what_to_check(status, server)}"
        ) from exc
    except httpx.HTTPError as exc:
        raise StoreUnavailable(
            f"the connection to the Keepstone server at {server} broke while its answer "
            f"(HTTP {status}) was being read: {_why(exc)}; try again"
        ) from exc


def error_of(response: httpx.Response, server: str = "") -> KeepstoneError:
    """The :mod:`keepstone.errors` instance an error answer (read whole) stands for."""
    return error_from_wire(
        response.status_code,
        response.content,
        response.headers.get("retry-after"),
        content_type=response.headers.get("content-type", ""),
        server=server,
    )


def answer(response: httpx.Response, server: str, what: str) -> Fields:
    """The JSON object of a 2xx ``response`` (read whole), to be read as ``what`` (e.g.
    "a document"): a body that is empty or not JSON, or JSON that is no object, is
    :class:`StoreUnavailable` naming the answer's status and what it held."""
    status, content = response.status_code, response.content
    try:
        body = json.loads(content) if content else _NO_JSON
    except (ValueError, RecursionError):
        body = _NO_JSON
    if body is _NO_JSON:
        held = describe_body(content, response.headers.get("content-type", ""))
        raise StoreUnavailable(
            f"the server answered HTTP {status} with {held} where JSON was expected: "
            f"{what_to_check(status, server)}"
        )
    return Fields(body, what, status, server)


class Fields:
    """A JSON object of an answer, read a field at a time in the kind the caller needs: a
    field that is missing or of another kind is :class:`StoreUnavailable` naming it (and
    where it is, ``"documents[2].etag"``), never a ``KeyError`` or a ``TypeError``."""

    def __init__(self, body: object, what: str, status: int, server: str, where: str = "") -> None:
        self._what, self._status, self._server, self._where = what, status, server, where
        if not isinstance(body, dict):
            it = f'"{where}"' if where else "it"
            raise self._wrong(f"{it} is {kind_of(body)}, not an object")
        #: The object as the server sent it.
        self.body: dict[str, Any] = body

    def text(self, name: str) -> str:
        value = self._get(name)
        if not isinstance(value, str):
            raise self._wrong_kind(name, value, "a string")
        return value

    def optional_text(self, name: str) -> str | None:
        """The string of ``name``; None when it is missing or null."""
        return None if self.body.get(name) is None else self.text(name)

    def integer(self, name: str, default: int | None = None) -> int:
        """The whole number of ``name`` (``default`` when given and it is missing: a field
        an older server does not send)."""
        if default is not None and name not in self.body:
            return default
        value = self._get(name)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self._wrong_kind(name, value, "a whole number")
        return value

    def optional_integer(self, name: str) -> int | None:
        """The whole number of ``name``; None when it is missing or null."""
        return None if self.body.get(name) is None else self.integer(name)

    def number(self, name: str) -> float:
        value = self._get(name)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise self._wrong_kind(name, value, "a number")
        return float(value)

    def flag(self, name: str) -> bool:
        value = self._get(name)
        if not isinstance(value, bool):
            raise self._wrong_kind(name, value, "a boolean")
        return value

    def when(self, name: str) -> datetime:
        """The instant of ``name``, an ISO 8601 string."""
        value = self.text(name)
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            raise self._wrong(
                f'"{self._path(name)}" is not an ISO 8601 time ({printable(value[:40])!r})'
            ) from None

    def strings(self, name: str) -> list[str]:
        items = self._list(name)
        if not all(isinstance(item, str) for item in items):
            raise self._wrong(f'"{self._path(name)}" holds something else than strings')
        return items

    def string_map(self, name: str) -> dict[str, str]:
        value = self.nested(name).body
        if not all(isinstance(v, str) for v in value.values()):
            raise self._wrong(f'"{self._path(name)}" holds something else than strings')
        return value

    def nested(self, name: str) -> Fields:
        value = self._get(name)
        return Fields(value, self._what, self._status, self._server, self._path(name))

    def objects(self, name: str, *, optional: bool = False) -> list[Fields]:
        """The objects of the list ``name`` (none when ``optional`` and it is missing)."""
        if optional and name not in self.body:
            return []
        path = self._path(name)
        return [
            Fields(item, self._what, self._status, self._server, f"{path}[{i}]")
            for i, item in enumerate(self._list(name))
        ]

    def _list(self, name: str) -> list[Any]:
        value = self._get(name)
        if not isinstance(value, list):
            raise self._wrong_kind(name, value, "a list")
        return value

    def _get(self, name: str) -> Any:
        if name not in self.body:
            raise self._wrong(f'"{self._path(name)}" is missing')
        return self.body[name]

    def _path(self, name: str) -> str:
        return f"{self._where}.{name}" if self._where else name

    def _wrong_kind(self, name: str, value: object, kind: str) -> StoreUnavailable:
        return self._wrong(f'"{self._path(name)}" is {kind_of(value)}, not {kind}')

    def _wrong(self, why: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"the server answered HTTP {self._status} with JSON that is not {self._what} "
            f"({why}): check that {self._server or 'the URL'} is the address of a Keepstone "
            "server (another server or a proxy may have answered)"
        )


def kind_of(value: object) -> str:
    """What a JSON value is, as a message names it."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number" if isinstance(value, int | float) else "a string"


#: What an answer's body parses to when it holds no JSON at all (JSON ``null`` is None).
_NO_JSON = object()


def _timed_out(server: str, seconds: float | None, status: int | None = None) -> StoreUnavailable:
    """No whole answer within the client's timeout (``status``: the answer had begun)."""
    what = "did not answer" if status is None else f"did not finish its answer (HTTP {status})"
    within = f" within {seconds:g} s" if seconds is not None else ""
    return StoreUnavailable(
        f"the Keepstone server at {server} {what}{within}: check that it is not overloaded "
        "(its log, and that of any proxy in front of it, say what it is doing), then try again"
    )


def _limit(timeout: httpx.Timeout, exc: httpx.TimeoutException) -> float | None:
    """The seconds of ``timeout`` that ran out for ``exc``."""
    if isinstance(exc, httpx.ConnectTimeout):
        return timeout.connect
    if isinstance(exc, httpx.WriteTimeout):
        return timeout.write
    if isinstance(exc, httpx.PoolTimeout):
        return timeout.pool
    return timeout.read


def _redirected(response: httpx.Response, server: str) -> StoreUnavailable:
    location = response.headers.get("location")
    where = f"a redirect to {printable(location)}" if location else "a redirect"
    return StoreUnavailable(
        f"the server at {server} answered HTTP {response.status_code}, {where}: give the "
        "address it redirects to as the server URL (redirects are not followed)"
    )


def _why(exc: Exception) -> str:
    """What an httpx error says (some say nothing: then their kind)."""
    return printable(str(exc)) or type(exc).__name__
