"""What Keepstone's Python clients of a server say when what answers is no Keepstone answer.

A proxy in front of a server (or another server at the address) may answer 200 with an HTML
page, an empty or a cut-off body, or JSON of another shape, and an error status with a page
of its own: each is a ``KeepstoneError`` naming the status and what came, with what to check,
through every method of the HTTP store, the records searcher and ``keepstone memory ls
--server`` (one line on stderr, exit status 1, no traceback). A server that does not answer
in time, or breaks off its answer, is named as such, never as one that "cannot be reached".
The TypeScript client (clients/typescript/src/errors.ts) says the same of the same answers.
"""

from __future__ import annotations

import io
import subprocess
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from keepstone import errors, http_client
from keepstone.activity import FeedQuery
from keepstone.document_pages import PageAsk
from keepstone.documents import Replace
from keepstone.spaces import SpaceRef
from keepstone.store.http import HttpMemoryStore
from keepstone.tools.records import HttpRecordsSearcher
from tests.cli_runner import keepstone_argv, keepstone_env, run_memory
from tests.serving import free_port

REF = SpaceRef.build("project", "default", project="p")
NGINX_502 = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n"
    b"</body>\r\n</html>\r\n"
)
WELCOME = b"<!DOCTYPE html><html><head><title>Welcome to nginx!</title></head></html>"
#: A whole document's metadata, as the server lists it.
INFO = {"path": "a.md", "size_bytes": 2, "updated_at": "2026-01-01T00:00:00+00:00", "etag": "e"}

Handler = Callable[[BaseHTTPRequestHandler], None]


class Answering:
    """A tiny HTTP server on 127.0.0.1 whose every answer is made by ``answer``; ``done``
    lets a handler that holds its answer back go when the test ends."""

    def __init__(self) -> None:
        self.answer: Handler = lambda h: None
        self.done = threading.Event()
        outer = self

        class Handle(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                outer.answer(self)
                self.close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handle)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # A short poll: shutdown() waits for the loop to see it.
        poll = {"poll_interval": 0.05}
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs=poll, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.done.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server() -> Iterator[Answering]:
    answering = Answering()
    yield answering
    answering.close()


def page(status: int, body: bytes, media: str = "", **headers: str) -> Handler:
    """An answer of ``status`` with ``body`` (of ``Content-Type`` ``media``) and ``headers``."""

    def answer(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        if media:
            h.send_header("Content-Type", media)
        for name, value in headers.items():
            h.send_header(name.replace("_", "-"), value)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return answer


def cut_off(h: BaseHTTPRequestHandler) -> None:
    """A 200 that promises 1000 bytes and closes the connection after 14."""
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", "1000")
    h.end_headers()
    h.wfile.write(b'{"documents": ')


def held(server: Answering, head: bool) -> Handler:
    """An answer held back until the test ends (after its head, when ``head``)."""

    def answer(h: BaseHTTPRequestHandler) -> None:
        if head:
            h.send_response(200)
            h.send_header("Content-Length", "1000")
            h.end_headers()
            h.wfile.write(b'{"documents": ')
            h.wfile.flush()
        server.done.wait(30)

    return answer


def store_of(url: str, timeout: float = 10.0) -> HttpMemoryStore:
    return HttpMemoryStore(url, "keepstone_k", timeout=timeout)


def refusal(url: str, timeout: float = 10.0) -> errors.KeepstoneError:
    """What ``list`` of the store of ``url`` raises."""
    store = store_of(url, timeout)
    try:
        with pytest.raises(errors.KeepstoneError) as raised:
            store.list(REF)
    finally:
        store.close()
    return raised.value


# --- a 2xx that is no Keepstone answer ------------------------------------------------------

BAD_2XX = [
    pytest.param(
        page(200, WELCOME, "text/html; charset=utf-8"),
        'a body that is not JSON (text/html, 73 bytes: "<!DOCTYPE html><html><head><title>'
        'Welcome to nginx!</title><...") where JSON was expected',
        id="html page",
    ),
    pytest.param(page(200, b""), "an empty body where JSON was expected", id="empty"),
    pytest.param(
        page(200, b'{"documents": [{"path": "a.md", "si', "application/json"),
        'a body that is not JSON (application/json, 35 bytes: "{\\"documents\\": '
        '[{\\"path\\": \\"a.md\\", \\"si")',
        id="truncated json",
    ),
    pytest.param(
        page(200, b'{"items": []}', "application/json"),
        'JSON that is not a listing of documents ("documents" is missing)',
        id="json without the field",
    ),
    pytest.param(
        page(200, b"[]", "application/json"),
        "JSON that is not a listing of documents (it is a list, not an object)",
        id="json list",
    ),
    pytest.param(
        page(200, b'{"documents": [{"path": "a.md", "size_bytes": "2"}]}', "application/json"),
        '("documents[0].size_bytes" is a string, not a whole number)',
        id="json field of another kind",
    ),
]


@pytest.mark.parametrize(("answer", "said"), BAD_2XX)
def test_a_2xx_that_is_no_keepstone_answer_is_store_unavailable_saying_what_came(
    server: Answering, answer: Handler, said: str
) -> None:
    server.answer = answer
    err = refusal(server.url)
    assert type(err) is errors.StoreUnavailable and err.code == "store_unavailable"
    assert err.message.startswith("the server answered HTTP 200 with ")
    assert said in err.message
    assert f"check that {server.url} is the " in err.message


def test_an_answer_cut_off_is_a_broken_answer_not_an_unreachable_server(
    server: Answering,
) -> None:
    server.answer = cut_off
    err = refusal(server.url)
    assert type(err) is errors.StoreUnavailable
    assert err.message.startswith(
        f"the connection to the Keepstone server at {server.url} broke while its answer "
        "(HTTP 200) was being read: "
    )
    assert "cannot reach" not in err.message


@pytest.mark.parametrize(
    ("head", "said"),
    [(False, "did not answer"), (True, "did not finish its answer (HTTP 200)")],
    ids=["no answer", "half an answer"],
)
def test_a_timeout_is_named_as_one(server: Answering, head: bool, said: str) -> None:
    server.answer = held(server, head)
    err = refusal(server.url, timeout=0.5)
    assert type(err) is errors.StoreUnavailable
    assert err.message.startswith(f"the Keepstone server at {server.url} {said} within 0.5 s: ")
    assert "cannot reach" not in err.message


def test_a_redirect_is_not_followed_and_says_where_it_points(server: Answering) -> None:
    server.answer = page(301, b"", Location="https://memory.example/api/memory/docs")
    err = refusal(server.url)
    assert type(err) is errors.StoreUnavailable
    assert err.message == (
        f"the server at {server.url} answered HTTP 301, a redirect to "
        "https://memory.example/api/memory/docs: give the address it redirects to as the "
        "server URL (redirects are not followed)"
    )


def test_a_server_that_is_not_there_still_cannot_be_reached() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    err = refusal(url)
    assert type(err) is errors.StoreUnavailable
    assert err.message.startswith(f"cannot reach the Keepstone server at {url}: ")
    assert err.message.endswith("check that it is running and that the URL is its address")


# --- an error status whose body is no Keepstone error ---------------------------------------


def test_a_proxys_502_page_names_the_status_the_page_and_what_to_check(
    server: Answering,
) -> None:
    server.answer = page(502, NGINX_502, "text/html")
    err = refusal(server.url)
    assert err.code == "internal_error"  # the code of the status, as before
    assert err.message == (
        "the server answered HTTP 502 with a body that is not JSON (text/html, "
        '150 bytes: "<html> <head><title>502 Bad Gateway</title></head> <body> <c..."): '
        "check that the Keepstone server behind "
        f"{server.url} is running, and the log of any proxy in front of it (which may have "
        "answered for it)"
    )


@pytest.mark.parametrize(
    ("answer", "cls", "said"),
    [
        (
            page(404, b'{"detail": "Not Found"}', "application/json"),
            errors.NotFound,
            "a JSON body that is no Keepstone error (no error.code in it): check that {url} "
            "is the Keepstone server's address",
        ),
        (
            page(503, b""),
            errors.StoreUnavailable,
            "an empty body: check that the Keepstone server behind {url} is running",
        ),
        (
            page(403, b'{"error": "forbidden"}', "application/json"),
            errors.Forbidden,
            "a JSON body that is no Keepstone error",
        ),
    ],
    ids=["404 of another server", "503 empty", "403 error of another shape"],
)
def test_an_error_status_of_another_server_keeps_the_code_of_its_status(
    server: Answering, answer: Handler, cls: type[errors.KeepstoneError], said: str
) -> None:
    server.answer = answer
    err = refusal(server.url)
    assert type(err) is cls
    status = cls.status
    assert err.message.startswith(f"the server answered HTTP {status} with ")
    assert said.format(url=server.url) in err.message


def test_a_429_page_keeps_its_retry_after(server: Answering) -> None:
    server.answer = page(429, b"<p>slow down</p>", "text/html", Retry_After="7")
    err = refusal(server.url)
    assert isinstance(err, errors.RateLimited) and err.retry_after == 7.0
    assert 'a body that is not JSON (text/html, 16 bytes: "<p>slow down</p>")' in err.message


def test_a_keepstone_error_body_is_still_the_servers_own_word() -> None:
    body = b'{"error": {"code": "invalid_path", "message": "no dots", "canonical": "a.md"}}'
    err = errors.error_from_wire(422, body, content_type="application/json", server="http://x")
    assert type(err) is errors.InvalidPath
    assert err.message == "no dots" and err.details == {"canonical": "a.md"}


def test_a_quoted_body_is_one_printable_line_of_its_first_words() -> None:
    """A page may hold escape sequences or a bidirectional override: quoted, they print as
    escapes, and the quote stops at 60 characters; the size counts the bytes sent."""
    body = ("<p>\x1b[2J\u202egnp.exe</p>\n" + "é" * 80).encode()
    said = errors.describe_body(body, "text/html; charset=utf-8")
    assert said.isprintable() and "\n" not in said
    assert said == (
        f'a body that is not JSON (text/html, {len(body)} bytes: "<p>\\u001b[2J\\u202egnp.exe'
        "</p> " + "é" * 40 + '...")'
    )
    assert errors.describe_body(b"x", "") == 'a body that is not JSON (no media type, 1 bytes: "x")'


# --- every method of the store reads its answer in the one place ----------------------------


#: Every method of the store that asks the server, called on a store.
METHODS: dict[str, Callable[[HttpMemoryStore], object]] = {
    "read": lambda s: s.read(REF, "a.md"),
    "write": lambda s: s.write(REF, "a.md", "hi"),
    "edit": lambda s: s.edit(REF, "a.md", Replace("h", "j")),
    "move": lambda s: s.move(REF, "a.md", "b.md"),
    "list": lambda s: s.list(REF),
    "list_page": lambda s: s.list_page(REF, PageAsk(10, "path", "")),
    "list_as_of": lambda s: s.list_as_of(REF, datetime(2026, 1, 1, tzinfo=UTC)),
    "search": lambda s: s.search(REF, "q", 5),
    "search_readable": lambda s: s.search_readable("q", 5),
    "list_readable_spaces": lambda s: s.list_readable_spaces(),
    "activity": lambda s: s.activity([REF], FeedQuery(None, None, 10, None)),
    "usage": lambda s: s.usage(REF),
    "versions": lambda s: s.versions(REF, "a.md"),
    "read_version": lambda s: s.read_version(REF, "a.md", 1),
    "read_as_of": lambda s: s.read_as_of(REF, "a.md", datetime(2026, 1, 1, tzinfo=UTC)),
    "restore_version": lambda s: s.restore_version(REF, "a.md", 1, None),
    "import_archive": lambda s: s.import_archive(REF, io.BytesIO(b"\x1f\x8b archive")),
    "export": lambda s: s.export(REF, io.BytesIO()),
}


def mock_store(answer: Callable[[httpx.Request], httpx.Response]) -> HttpMemoryStore:
    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        return answer(request)

    transport = httpx.MockTransport(handler)
    return HttpMemoryStore("http://keepstone.test", "k", transport=transport)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_says_what_came_of_an_html_200(method: str) -> None:
    store = mock_store(
        lambda r: httpx.Response(200, content=WELCOME, headers={"Content-Type": "text/html"})
    )
    with pytest.raises(errors.StoreUnavailable) as raised:
        METHODS[method](store)
    assert raised.value.message.startswith(
        "the server answered HTTP 200 with a body that is not JSON (text/html, "
    )


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_names_the_field_missing_from_json_of_another_shape(method: str) -> None:
    store = mock_store(lambda r: httpx.Response(200, json={"ok": True}))
    with pytest.raises(errors.StoreUnavailable) as raised:
        METHODS[method](store)
    said = raised.value.message
    assert said.startswith("the server answered HTTP 200 with JSON that is not ")
    assert " is missing): check that http://keepstone.test is the address of a Keepstone " in said


@pytest.mark.parametrize("method", [*sorted(METHODS), "delete"])
def test_every_method_says_what_came_of_a_502_page(method: str) -> None:
    call = METHODS.get(method, lambda s: s.delete(REF, "a.md"))
    store = mock_store(
        lambda r: httpx.Response(502, content=NGINX_502, headers={"Content-Type": "text/html"})
    )
    with pytest.raises(errors.KeepstoneError) as raised:
        call(store)
    assert raised.value.code == "internal_error"
    assert raised.value.message.startswith(
        "the server answered HTTP 502 with a body that is not JSON (text/html, "
    )


def test_an_export_broken_off_half_way_is_named_as_such() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/memory/docs":
            return httpx.Response(200, json={"documents": [INFO]})

        def chunks() -> Iterator[bytes]:
            yield b"\x1f\x8b half of an archive"
            raise httpx.RemoteProtocolError("peer closed connection", request=request)

        return httpx.Response(200, stream=_Broken(chunks))

    sink = io.BytesIO()
    with pytest.raises(errors.StoreUnavailable) as raised:
        mock_store(answer).export(REF, sink)
    assert raised.value.message == (
        "the connection to the Keepstone server at http://keepstone.test broke while its "
        "answer (HTTP 200) was being read: peer closed connection; try again"
    )


class _Broken(httpx.SyncByteStream):
    def __init__(self, chunks: Callable[[], Iterator[bytes]]) -> None:
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        return self._chunks()


def test_a_whole_answer_of_every_kind_still_reads() -> None:
    """The checks take what a Keepstone server sends (the conformance suite drives a real
    one): here the fields an older server leaves out, and a null size delta."""
    answers: dict[str, dict[str, Any]] = {
        "/api/memory/usage": {
            "space_id": "v1:project:t:p:default",
            "used_bytes": 1,
            "quota_bytes": 2,
            "team_used_bytes": 3,
            "team_quota_bytes": 4,
        },
        "/api/memory/activity": {
            "changes": [
                {
                    "at": "2026-01-01T00:00:00+00:00",
                    "space_id": "s",
                    "path": "a.md",
                    "action": "delete",
                    "actor": {"kind": "user", "name": "ann"},
                    "size_delta": None,
                    "version": 2,
                }
            ]
        },
        "/api/memory/search": {
            "results": [{"path": "a.md", "heading": "", "snippet": "s", "score": 1, "matched": []}]
        },
    }
    store = mock_store(lambda r: httpx.Response(200, json=answers[r.url.path]))
    usage = store.usage(REF)
    assert (usage.team_quota_bytes, usage.history_used_bytes, usage.index_bytes) == (4, 0, 0)
    change = store.activity([REF], FeedQuery(None, None, 10, None)).changes[0]
    assert change.size_delta is None and change.actor.name == "ann"
    found = store.search(REF, "q", 5)
    assert found[0].score == 1.0 and found[0].also_in == () and found.pending == 0


# --- the records searcher -------------------------------------------------------------------


def searcher_of(answer: Callable[[httpx.Request], httpx.Response]) -> HttpRecordsSearcher:
    client = httpx.Client(transport=http_client.transport(httpx.MockTransport(answer)))
    return HttpRecordsSearcher("http://keepstone.test", "k", team="t1", client=client)


@pytest.mark.parametrize(
    ("answer", "cls", "said"),
    [
        (
            httpx.Response(200, content=WELCOME, headers={"Content-Type": "text/html"}),
            errors.StoreUnavailable,
            "the server answered HTTP 200 with a body that is not JSON (text/html, ",
        ),
        (
            httpx.Response(200, json={"results": ["r1"]}),
            errors.StoreUnavailable,
            "the server answered HTTP 200 with JSON that is not a records search's answer "
            '("results[0]" is a string, not an object)',
        ),
        (
            httpx.Response(502, content=NGINX_502, headers={"Content-Type": "text/html"}),
            errors.KeepstoneError,
            "the server answered HTTP 502 with a body that is not JSON (text/html, ",
        ),
    ],
    ids=["html 200", "results of another shape", "502 page"],
)
def test_the_records_searcher_reads_answers_as_the_store_does(
    answer: httpx.Response, cls: type[errors.KeepstoneError], said: str
) -> None:
    searcher = searcher_of(lambda r: answer)
    with pytest.raises(errors.KeepstoneError) as raised:
        searcher.search("deploy", None, 5)
    assert type(raised.value) is cls and raised.value.message.startswith(said)


def test_the_records_searcher_names_a_usage_answer_without_the_space_id() -> None:
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, json={})))
    searcher = HttpRecordsSearcher("http://keepstone.test", "k", client=client)
    with pytest.raises(errors.StoreUnavailable, match='"space_id" is missing'):
        searcher.team()


# --- the CLI --------------------------------------------------------------------------------


@pytest.fixture
def cli_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KEEPSTONE_HOME", str(tmp_path / "home"))
    for name in ("KEEPSTONE_SERVER", "KEEPSTONE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


@pytest.mark.parametrize(
    ("answer", "line"),
    [
        (
            page(200, WELCOME, "text/html"),
            "keepstone: store_unavailable: the server answered HTTP 200 with a body that is "
            "not JSON (text/html, ",
        ),
        (
            page(200, b""),
            "keepstone: store_unavailable: the server answered HTTP 200 with an empty body ",
        ),
        (
            cut_off,
            "keepstone: store_unavailable: the connection to the Keepstone server at ",
        ),
        (
            page(200, b'{"files": []}', "application/json"),
            "keepstone: store_unavailable: the server answered HTTP 200 with JSON that is not "
            'a listing of documents ("documents" is missing)',
        ),
        (
            page(502, NGINX_502, "text/html"),
            "keepstone: internal_error: the server answered HTTP 502 with a body that is not "
            "JSON (text/html, ",
        ),
    ],
    ids=["html", "empty", "cut off", "another shape", "502 page"],
)
def test_memory_ls_says_what_came_in_one_line(
    server: Answering,
    cli_home: Path,
    capsys: pytest.CaptureFixture[str],
    answer: Handler,
    line: str,
) -> None:
    server.answer = answer
    argv = ["ls", "--server", server.url, "--visibility", "project", "--project", "p"]
    code, out, err = run_memory(capsys, *argv)
    assert (code, out) == (1, "")
    assert err.startswith(line) and err.count("\n") == 1, err


def test_the_keepstone_command_prints_no_traceback_for_a_page(
    server: Answering, tmp_path: Path
) -> None:
    server.answer = page(200, WELCOME, "text/html")
    argv = ["memory", "ls", "--server", server.url, "--visibility", "project", "--project", "p"]
    done = subprocess.run(
        [*keepstone_argv(), *argv],
        env=keepstone_env(tmp_path / "home"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(
        "keepstone: store_unavailable: the server answered HTTP 200 with a body that is not "
        "JSON (text/html, "
    )
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
