"""``keepstone serve``'s lifecycle with real processes and real signals, one worker and two.

A stop signal (SIGTERM, SIGINT; SIGHUP with one worker) is a clean stop: new connections
are refused at once, the request in flight is answered, and the process exits 0, as a
process manager expects of a stop it asked for (one worker died of SIGTERM, status 143). A
second SIGINT forces the stop: the request in flight is not carried out (uvicorn answers it
500, or the connection closes) and the status is 1. A stop
while the server starts (its migrations waiting on a locked database) exits 0 at once. The
workers of ``--workers 2`` stop when their supervisor is killed (they served the port on),
answering the request they hold. A terminal's hangup (SIGHUP to the whole group) leaves the
request in flight answered and the indexer's process to the server.

The request in flight is a ``PUT`` whose body is sent in two parts: the server holds it
until the second part, sent once the stop has visibly begun (the port refuses connections).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import uvicorn

from keepstone.cli.serve_balance import StoppingServer
from tests.cli_runner import keepstone_env
from tests.serving import (
    READY_TIMEOUT_SECONDS,
    STOP_TIMEOUT_SECONDS,
    ServerProcess,
    free_port,
    keepstone_serve,
    serve_argv,
    started_server,
    worker_processes,
)

pytestmark = pytest.mark.slow

WORKERS = {"1 worker": (), "2 workers": ("--workers", "2")}


def _env(home: Path, **more: str) -> dict[str, str]:
    return keepstone_env(home, **{"KEEPSTONE_EMBEDDER": "none", **more})


@contextlib.contextmanager
def _local_server(
    tmp_path: Path, workers: str, *, new_session: bool = False, **env: str
) -> Iterator[ServerProcess]:
    """``keepstone serve --local`` (no credentials needed for a write), answering."""
    home = tmp_path / "home"
    args = ("--local", *WORKERS[workers])
    with keepstone_serve(
        *args, env=_env(home, **env), log=tmp_path / "serve.log", new_session=new_session
    ) as server:
        yield server


class InFlight:
    """A ``PUT`` of a document whose body has been half sent: the server holds it open."""

    def __init__(self, port: int) -> None:
        body = json.dumps({"content": "# In flight\n\nAnswered before the server stopped.\n"})
        head = (
            "PUT /api/memory/doc?name=notes&project=p&path=in-flight.md HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=STOP_TIMEOUT_SECONDS)
        self.rest = body.encode()[10:]
        self.sock.sendall(head.encode() + body.encode()[:10])
        # Sent is not yet read: a stop before the server has read the request's head finds
        # no request on the connection, and closes it. Wait until the server's end of the
        # connection holds nothing unread (uvicorn parses what it reads at once).
        client = self.sock.getsockname()[1]
        _until(lambda: _unread(port, client) == 0, "the server read the request's head")

    def finish(self) -> int:
        """Send the rest of the body; the answer's status."""
        self.sock.sendall(self.rest)
        return self.answer()

    def answer(self) -> int:
        response = http.client.HTTPResponse(self.sock)
        response.begin()
        response.read()
        return response.status

    def answer_if_any(self) -> int | None:
        """The answer's status; ``None`` if the connection closed without one."""
        try:
            return self.answer()
        except (http.client.RemoteDisconnected, ConnectionResetError):
            return None

    def close(self) -> None:
        self.sock.close()


@contextlib.contextmanager
def _in_flight(port: int) -> Iterator[InFlight]:
    request = InFlight(port)
    try:
        yield request
    finally:
        request.close()


def _unread(port: int, client: int) -> int | None:
    """The bytes the kernel holds unread on the server's end (local ``port``) of the
    loopback connection from ``client`` (``/proc/net/tcp``); None: no such connection."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, queues = fields[1], fields[2], fields[4]
        if int(local.split(":")[1], 16) == port and int(remote.split(":")[1], 16) == client:
            return int(queues.split(":")[1], 16)
    return None


def _refuses(port: int) -> bool:
    """Whether a new connection to ``port`` is refused: nothing listens any more."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def _has_open(pid: int, path: Path) -> bool:
    return str(path) in {f.path for f in psutil.Process(pid).open_files()}


def _until(condition: Callable[[], bool], what: str) -> None:
    """Until ``condition()`` holds, for a process the test cannot watch (not its child)."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def _exit_status(server: ServerProcess) -> int:
    try:
        return server.proc.wait(timeout=STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        server.fail("did not exit after the stop")
        raise


STOPS = [
    ("1 worker", signal.SIGTERM),
    ("1 worker", signal.SIGINT),
    ("1 worker", signal.SIGHUP),
    ("2 workers", signal.SIGTERM),
    ("2 workers", signal.SIGINT),
]


@pytest.mark.parametrize(("workers", "stop"), STOPS, ids=[f"{w}-{s.name}" for w, s in STOPS])
def test_a_stop_answers_the_request_in_flight_and_exits_0(
    tmp_path: Path, workers: str, stop: signal.Signals
) -> None:
    with _local_server(tmp_path, workers) as server, _in_flight(server.port) as request:
        server.proc.send_signal(stop)
        server.wait_until(lambda: _refuses(server.port), "new connections refused")
        assert request.finish() == 201
        assert _exit_status(server) == 0, server.log_text()
    assert "Traceback" not in server.log_text()


@pytest.mark.parametrize("workers", list(WORKERS))
def test_a_second_sigint_forces_the_stop_and_exits_1(tmp_path: Path, workers: str) -> None:
    with _local_server(tmp_path, workers) as server, _in_flight(server.port) as request:
        server.proc.send_signal(signal.SIGINT)
        server.wait_until(lambda: _refuses(server.port), "new connections refused")
        server.proc.send_signal(signal.SIGINT)
        assert _exit_status(server) == 1
        assert request.answer_if_any() in (500, None)  # not carried out: 201 it is not
    log = server.log_text()
    assert "the stop did not finish cleanly: forced by a second SIGINT" in log
    assert "Traceback" not in log


@pytest.mark.parametrize("workers", list(WORKERS))
def test_a_stop_while_the_migrations_wait_exits_0_at_once(tmp_path: Path, workers: str) -> None:
    """The database is locked by another process, so the start waits inside SQLite's busy
    handler (for up to 60 s) once it has opened the file, the port already bound; SIGTERM
    ends it there, although Python runs no signal handler until SQLite returns."""
    home = tmp_path / "home"
    home.mkdir()
    database = home / "keepstone.db"
    other = sqlite3.connect(database, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    port = free_port()
    argv = serve_argv(port, *WORKERS[workers])
    try:
        with started_server(argv, port=port, env=_env(home), log=tmp_path / "serve.log") as server:
            server.wait_until(lambda: _has_open(server.pid, database), "the database opened")
            server.proc.send_signal(signal.SIGTERM)
            assert _exit_status(server) == 0
    finally:
        other.close()
    log = server.log_text()
    assert "keepstone serve: stopped by SIGTERM while starting" in log
    assert "listening" not in log and "Traceback" not in log


def test_the_workers_stop_when_their_supervisor_is_killed(tmp_path: Path) -> None:
    with _local_server(tmp_path, "2 workers") as server, _in_flight(server.port) as request:
        workers = worker_processes(server.pid)
        assert len(workers) == 2
        server.proc.kill()
        server.proc.wait()
        _until(lambda: _refuses(server.port), "the workers stop listening")
        assert request.finish() == 201  # SIGTERM, not SIGKILL: the request is answered
        _, alive = psutil.wait_procs(workers, timeout=STOP_TIMEOUT_SECONDS)
        assert not alive, f"workers left serving: {alive}"


def test_a_hangup_of_the_group_leaves_the_indexer_to_the_server(tmp_path: Path) -> None:
    """A terminal that hangs up sends SIGHUP to every process of the server. The indexer's
    process ignores it; the server stops gracefully and stops that process with SIGTERM
    (one that had died of the hangup would be named in the server's log)."""
    with _local_server(
        tmp_path, "1 worker", new_session=True, KEEPSTONE_EMBEDDER="minilm"
    ) as server:
        server.wait_until(lambda: "indexer: embedding with" in server.log_text(), "the indexer")
        os.killpg(server.pid, signal.SIGHUP)
        assert _exit_status(server) == 0
    log = server.log_text()
    assert "indexer: its process had ended" not in log
    assert "Traceback" not in log


def test_a_hangup_of_the_group_restarts_the_workers_and_answers_in_flight(
    tmp_path: Path,
) -> None:
    """With ``--workers 2`` SIGHUP is the supervisor's: it replaces the workers one by one,
    each finishing its requests; the workers themselves ignore it."""
    with (
        _local_server(tmp_path, "2 workers", new_session=True) as server,
        _in_flight(server.port) as request,
    ):
        before = {w.pid for w in worker_processes(server.pid)}
        os.killpg(server.pid, signal.SIGHUP)
        server.wait_until(
            lambda: len({w.pid for w in worker_processes(server.pid)} - before) > 0,
            "a replacement worker",
        )
        assert request.finish() == 201
        server.wait_ready()
        server.proc.send_signal(signal.SIGTERM)
        assert _exit_status(server) == 0


def test_an_app_whose_shutdown_fails_makes_the_stop_unclean() -> None:
    """What makes ``keepstone serve`` exit 1 besides a forced stop: the app's shutdown (which
    closes the store) failed. uvicorn, in this process, on a thread: no signals involved."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "lifespan"
        await receive()
        await send({"type": "lifespan.startup.complete"})
        await receive()
        await send({"type": "lifespan.shutdown.failed", "message": "the store did not close"})

    server = StoppingServer(uvicorn.Config(app, log_level="critical"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
        thread.start()
        try:
            _until(lambda: server.started or not thread.is_alive(), "the server started")
            assert server.problems() == []
        finally:
            server.should_exit = True
            thread.join()
    assert server.problems() == ["the app's shutdown failed (logged above)"]
