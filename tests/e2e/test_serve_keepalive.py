"""The keep-alive race against a real ``keepstone serve --workers 2``, made to happen.

A server closes a keep-alive connection that stayed idle past its keep-alive timeout
(``KEEPSTONE_KEEP_ALIVE_SECONDS``, here 1 s). A request the client sends on it at that
moment meets the close: the worker closes the socket with the request unread, the kernel
answers with a reset, and the client gets no answer while the server logs nothing.

To make the moment certain rather than lucky, the workers are stopped (SIGSTOP) after an
answer, left stopped past the timeout, and the next request is sent on the idle
connection; once its bytes wait in the worker's socket, the workers are continued.
uvloop's loop, woken past the deadline, runs the due keep-alive timer before it reads the
socket, so the worker closes the connection with the request in it, every time.

The HTTP store (what ``keepstone memory --server`` and the SDK use) must then answer the
read all the same, having sent it again on a new connection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from keepstone import http_client
from keepstone.spaces import SpaceRef
from keepstone.store.http import HttpMemoryStore
from tests.cli_runner import keepstone_env
from tests.serving import ServerProcess, keepstone_serve, worker_processes

REF = SpaceRef("private", "notes")
#: Races tried until one meets the close: a worker stopped while its loop was running,
#: rather than waiting for the socket, reads the request first (rarely).
ATTEMPTS = 3


class Counting(httpx.BaseTransport):
    """A real connection pool that records what became of every request it was given."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport(limits=http_client.LIMITS)
        self.outcomes: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = self._inner.handle_request(request)
        except httpx.HTTPError as exc:
            self.outcomes.append(type(exc).__name__)
            raise
        self.outcomes.append(str(response.status_code))
        return response

    def close(self) -> None:
        self._inner.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("keepalive")
    env = keepstone_env(
        home,
        KEEPSTONE_EMBEDDER="none",
        KEEPSTONE_INDEXER="off",
        KEEPSTONE_KEEP_ALIVE_SECONDS="1",
    )
    args = ("--local", "--database", f"sqlite:///{home}/keepstone.db", "--workers", "2")
    with keepstone_serve(*args, env=env, log=home / "serve.log") as served:
        served.wait_until(lambda: len(worker_processes(served.pid)) == 2, "two workers")
        yield served


@pytest.mark.slow
def test_a_read_that_meets_the_servers_idle_close_is_answered(server: ServerProcess) -> None:
    pool = Counting()
    store = HttpMemoryStore(server.url, transport=pool)
    try:
        for _ in range(ATTEMPTS):
            store.list(REF)  # an answer: the connection is idle, its timer running
            pool.outcomes.clear()
            assert _raced(server, lambda: store.list(REF)) == []
            if len(pool.outcomes) > 1:
                break
    finally:
        store.close()
    # The server closed the connection under the request (no answer on it), and the
    # store sent the read again, on a new connection, which answered.
    assert pool.outcomes[0] in ("ReadError", "RemoteProtocolError"), pool.outcomes
    assert pool.outcomes[1:] == ["200"], pool.outcomes


def _raced(server: ServerProcess, send: Callable[[], object]) -> object:
    """What ``send()`` returned, sent while the workers stood stopped past their
    keep-alive timeout, and continued once the request waits in a worker's socket."""
    workers = worker_processes(server.pid)
    for worker in workers:
        worker.suspend()
    result: list[object] = []
    try:
        # Past the 1 s timer armed when the last answer was written (uvicorn's supervisor
        # kills a worker that misses its 5 s health check: the stop stays well under it).
        time.sleep(1.5)
        sender = threading.Thread(target=lambda: result.append(_outcome(send)))
        sender.start()
        _wait_for_unread_bytes(server.port)
    finally:
        for worker in workers:
            _resume(worker)
    sender.join(timeout=60)
    assert result, "the request never ended"
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


def _outcome(send: Callable[[], object]) -> object:
    try:
        return send()
    except BaseException as exc:  # handed to the test's thread
        return exc


def _resume(worker: psutil.Process) -> None:
    try:
        worker.resume()
    except psutil.NoSuchProcess:
        pass


def _wait_for_unread_bytes(port: int) -> None:
    """Until a connection to ``port`` holds bytes its server has not read (the request)."""
    for _ in range(600):
        if any(local == port and unread for local, unread in _server_sockets()):
            return
        time.sleep(0.01)
    raise AssertionError("the request never reached the server's socket")


def _server_sockets() -> Iterator[tuple[int, int]]:
    """(local port, bytes unread) of every IPv4 TCP socket, from ``/proc/net/tcp``."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].rsplit(":", 1)[1], 16)
        unread = int(fields[4].split(":")[1], 16)
        yield local_port, unread
