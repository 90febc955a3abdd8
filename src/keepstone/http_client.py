"""The HTTP client of Keepstone's own callers of a Keepstone server (the HTTP store behind
``keepstone memory --server`` and the SDK, the records searcher): httpx, its pooled
connections dropped after :data:`IDLE_SECONDS` idle, one TLS context for every client of the
process (:func:`tls`), and one more try of a request whose connection broke before any
answer came, when sending it twice is safe; and the checks of
what such a client is given (:func:`server_url`, :func:`visible_ascii`), so that a bad
``--server`` or key is refused by name before any request.

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

import functools
import logging
import ssl

import httpx

from keepstone.errors import InvalidRequest

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
