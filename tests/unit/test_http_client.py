"""Keepstone's own clients of a server and the keep-alive race (:mod:`keepstone.http_client`).

A request sent on a reused connection at the moment the server closes it for idleness
meets the close: the connection is reset or closed with no answer. Here the transport
under the client plays that server deterministically (the first request of a kind breaks
with httpx's own exceptions for it); ``tests/e2e/test_serve_keepalive.py`` makes a real
``keepstone serve --workers 2`` close the connection under the request.
"""

from __future__ import annotations

import io
import ssl
from collections.abc import Callable

import httpx
import pytest

from keepstone import http_client
from keepstone.cli.serve import server_config
from keepstone.config import Config
from keepstone.documents import Replace
from keepstone.embed.http import HttpEmbedder
from keepstone.errors import InvalidRequest, StoreUnavailable
from keepstone.http_client import IDLE_SECONDS
from keepstone.spaces import SpaceRef
from keepstone.store.http import HttpMemoryStore
from keepstone.tools.records import HttpRecordsSearcher

REF = SpaceRef("private", "notes")
WRITTEN = {"path": "a.md", "size_bytes": 2, "etag": "e1", "created": True}

#: What a request on a connection the server closed under it raises, by how it broke.
BREAKS: dict[str, Callable[[httpx.Request], Exception]] = {
    "closed": lambda r: httpx.RemoteProtocolError(
        "Server disconnected without sending a response.", request=r
    ),
    "reset": lambda r: httpx.ReadError("[Errno 104] Connection reset by peer", request=r),
    "write": lambda r: httpx.WriteError("[Errno 32] Broken pipe", request=r),
}


class RacingServer:
    """A server that closes the connection under the first ``breaks`` requests, then
    answers ``answer``; ``seen`` holds every request it was sent."""

    def __init__(self, answer: object, breaks: int = 1, how: str = "closed") -> None:
        self.answer = answer
        self.breaks = breaks
        self.how = how
        self.seen: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.seen.append(f"{request.method} {request.url.path}")
        if len(self.seen) <= self.breaks:
            raise BREAKS[self.how](request)
        return httpx.Response(200, json=self.answer)

    def store(self) -> HttpMemoryStore:
        return HttpMemoryStore("http://keepstone.test", "k", transport=httpx.MockTransport(self))


@pytest.mark.parametrize("how", sorted(BREAKS))
def test_a_read_whose_connection_broke_unanswered_is_sent_again(how: str) -> None:
    server = RacingServer({"documents": []}, how=how)
    assert server.store().list(REF) == []
    assert server.seen == ["GET /api/memory/docs"] * 2


def test_a_write_is_sent_again_with_its_whole_body() -> None:
    """PUT is idempotent: the document sent twice is the document written once."""
    bodies: list[bytes] = []
    server = RacingServer(WRITTEN)

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(request.read())
        return server(request)

    store = HttpMemoryStore("http://keepstone.test", "k", transport=httpx.MockTransport(handler))
    assert store.write(REF, "a.md", "hi").etag == "e1"
    assert bodies == [b"hi", b"hi"]


def test_a_post_is_never_sent_twice() -> None:
    """An edit (POST): the client cannot know the server did not apply the first one."""
    server = RacingServer(WRITTEN)
    with pytest.raises(StoreUnavailable):
        server.store().edit(REF, "a.md", Replace("a", "b"))
    assert server.seen == ["POST /api/memory/doc/edit"]


def test_an_import_is_never_sent_twice() -> None:
    """POST, and its archive streamed: spent by the first try."""
    server = RacingServer({"written": [], "skipped": [], "renamed": {}, "rejected": []})
    with pytest.raises(StoreUnavailable):
        server.store().import_archive(REF, io.BytesIO(b"\x1f\x8b not read"))
    assert server.seen == ["POST /api/memory/import"]


def test_a_second_break_is_the_callers() -> None:
    """Once only: a server that drops every request is unavailable, not raced."""
    server = RacingServer({"documents": []}, breaks=2)
    with pytest.raises(StoreUnavailable):
        server.store().list(REF)
    assert len(server.seen) == 2


def test_a_records_search_is_a_read_sent_as_post_and_sent_again() -> None:
    server = RacingServer({"results": []})
    client = httpx.Client(transport=http_client.transport(httpx.MockTransport(server)))
    searcher = HttpRecordsSearcher("http://keepstone.test", "k", team="t1", client=client)
    assert searcher.search("deploy", None, 5) == {"results": []}
    assert server.seen == ["POST /api/teams/t1/memory/search"] * 2


def test_the_server_keeps_an_idle_connection_longer_than_our_clients_do() -> None:
    """Then our clients close an idle connection first, and never send on one the server
    is closing; the server says how long in every answer."""
    config = Config()
    assert config.keep_alive_seconds > IDLE_SECONDS
    served = server_config(object(), keep_alive=config.keep_alive_seconds)
    assert served.timeout_keep_alive == config.keep_alive_seconds
    assert ("Keep-Alive", f"timeout={config.keep_alive_seconds}") in served.headers
    assert Config.from_env({"KEEPSTONE_KEEP_ALIVE_SECONDS": "9"}).keep_alive_seconds == 9
    with pytest.raises(InvalidRequest, match="KEEPSTONE_KEEP_ALIVE_SECONDS"):
        Config.from_env({"KEEPSTONE_KEEP_ALIVE_SECONDS": "0"})


def test_the_supervisor_waits_longer_than_uvicorns_health_check_before_replacing_a_worker() -> None:
    """uvicorn's 5 s kills a worker that is only slow, with the connections it holds."""
    config = Config()
    assert config.worker_healthcheck_seconds > 5
    served = server_config(object(), 2, healthcheck=config.worker_healthcheck_seconds)
    assert served.timeout_worker_healthcheck == config.worker_healthcheck_seconds
    env = {"KEEPSTONE_WORKER_HEALTHCHECK_SECONDS": "12"}
    assert Config.from_env(env).worker_healthcheck_seconds == 12
    with pytest.raises(InvalidRequest, match="KEEPSTONE_WORKER_HEALTHCHECK_SECONDS"):
        Config.from_env({"KEEPSTONE_WORKER_HEALTHCHECK_SECONDS": "0"})


def test_a_serving_process_takes_its_built_app_out_of_the_collectors_view() -> None:
    """A full collection walking the app's long-lived objects ran on a request's time."""
    import gc

    from keepstone.api.app import settle_heap

    gc.unfreeze()
    try:
        settle_heap()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


@pytest.mark.parametrize(
    ("url", "token", "team", "field"),
    [
        ("http://a\x00b", None, None, "server"),
        ("ftp://x", None, None, "server"),
        ("http://", None, None, "server"),
        ("http://x", "kéy", None, "token"),
        ("http://x", "two words", None, "token"),
        ("http://x", "key", "team\x1b", "team"),
    ],
)
def test_both_clients_refuse_what_no_request_can_carry(
    url: str, token: str | None, team: str | None, field: str
) -> None:
    """A URL or a value no request can carry is refused as the client is made, naming the
    setting, where httpx would fail on the first request with no word of which."""
    for make in (HttpMemoryStore, HttpRecordsSearcher):
        with pytest.raises(InvalidRequest) as refused:
            make(url, token, team=team)
        assert refused.value.details["field"] == field


def test_a_team_id_is_one_segment_of_the_search_path() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path.decode())
        return httpx.Response(200, json={"results": []})

    client = httpx.Client(transport=httpx.MockTransport(answer))
    HttpRecordsSearcher("http://x", "k", team="a/b?c", client=client).search("q", None, None)
    assert seen == ["/api/teams/a%2Fb%3Fc/memory/search"]


def test_every_client_verifies_servers_with_the_one_context_of_its_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading the CA bundle was most of what making a client cost, once per client: the
    stores, the records searcher and the HTTP embedder now share one context, made once,
    and it verifies (a certificate is required, and must name the host)."""
    context = http_client.tls()
    assert context is http_client.tls()
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0  # the CA bundle is loaded

    made: list[object] = []
    real = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context", lambda *a, **k: made.append(a) or real())
    clients = [
        HttpMemoryStore("https://keepstone.example", "key"),
        HttpMemoryStore("http://127.0.0.1:8420", "key"),
        HttpRecordsSearcher("https://keepstone.example", "key", team="team-a"),
        HttpEmbedder("https://embed.example", "a-model"),
    ]
    assert made == []
    for client in clients:
        client.close()
