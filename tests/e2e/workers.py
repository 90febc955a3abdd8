"""``keepstone serve --workers 2`` for the end-to-end tests of its workers, and telling
which worker holds a connection: by the worker's end of it, found with psutil in the
worker's ``/proc/PID/fd``."""

from __future__ import annotations

import contextlib
import errno
import http.client
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from tests.cli_runner import keepstone_env
from tests.deploy.cluster import ADMIN_TOKEN
from tests.serving import ServerProcess, keepstone_serve, worker_processes

#: Connections opened together in a trial.
CONNECTIONS = 4
#: How long the workers may take to start serving (a loaded machine starts them slowly).
START_SECONDS = 120.0


@contextlib.contextmanager
def two_workers(database: str, home: Path) -> Iterator[ServerProcess]:
    """``keepstone serve --workers 2`` on ``database``, once both workers answer
    connections (the admin token is :data:`tests.deploy.cluster.ADMIN_TOKEN`)."""
    env = keepstone_env(
        home,
        KEEPSTONE_ADMIN_TOKEN=ADMIN_TOKEN,
        KEEPSTONE_EMBEDDER="none",
        KEEPSTONE_ARGON2_TIME_COST="1",
        KEEPSTONE_ARGON2_MEMORY_KIB="8192",
    )
    args = ("--database", database, "--workers", "2")
    with keepstone_serve(*args, env=env, log=home / "serve.log") as server:
        serving_workers(server)
        yield server


def serving_workers(server: ServerProcess, gone: int | None = None) -> list[psutil.Process]:
    """The server's two workers (``gone`` not among them) once both answer connections.

    A worker still starting accepts nothing; and uvicorn's supervisor kills a worker that
    misses its health check while it starts (a loaded machine starts them slowly), and
    starts another. So the pair is listed again whenever one of it has exited, until both
    workers of one pair have answered a trial's connections."""

    def both_answer() -> bool:
        workers = worker_processes(server.pid)
        if len(workers) != 2 or gone in {w.pid for w in workers}:
            return False
        try:
            return len(set(trial(workers, server.port))) == 2
        except (WorkerExited, OSError, http.client.HTTPException, AssertionError):
            if all(_alive(w) for w in workers):
                raise
            return False  # one of this pair exited meanwhile: list the workers again

    server.wait_until(both_answer, "connections answered by both workers", START_SECONDS)
    return worker_processes(server.pid)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class WorkerExited(Exception):
    """A worker listed a moment ago is gone."""


def connections(worker: psutil.Process) -> list[Any]:
    """``worker``'s TCP connections (psutil reads its ``/proc/PID/fd``)."""
    try:
        return list(worker.net_connections(kind="tcp"))
    except (psutil.NoSuchProcess, psutil.AccessDenied) as exc:
        raise WorkerExited(f"worker {worker.pid} exited") from exc


def trial(workers: list[psutil.Process], port: int) -> list[int]:
    """The worker (process id) that held each of :data:`CONNECTIONS` keep-alive
    connections opened at once, each answering a request, once the workers hold no earlier
    connection."""
    wait_until_no_connections(workers, port)
    conns = open_together(port, CONNECTIONS)
    try:
        for conn in conns:  # each one answered: each one accepted by a worker
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            response.read()
            assert response.status == 200
        return holders(workers, port, [local_port(conn) for conn in conns])
    finally:
        for conn in conns:
            conn.close()


def open_together(port: int, count: int) -> list[http.client.HTTPConnection]:
    """``count`` connections to ``port`` whose SYNs leave together (non-blocking
    connects, then one wait), each ready for keep-alive requests."""
    socks = [socket.socket() for _ in range(count)]
    for sock in socks:
        sock.setblocking(False)
        assert sock.connect_ex(("127.0.0.1", port)) in (0, errno.EINPROGRESS)
    pending = list(socks)
    while pending:
        _, writable, _ = select.select([], pending, [], 30)
        assert writable, "connections never completed"
        pending = [s for s in pending if s not in writable]
    conns = []
    for sock in socks:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        sock.settimeout(30)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.sock = sock
        conns.append(conn)
    return conns


def local_port(conn: http.client.HTTPConnection) -> int:
    """The client's port of ``conn``: the far end the worker holding it sees."""
    assert conn.sock is not None
    return int(conn.sock.getsockname()[1])


def holders(workers: list[psutil.Process], port: int, client_ports: list[int]) -> list[int]:
    """The process id of the worker holding each of ``client_ports``' connections."""
    held = {
        c.raddr.port: worker.pid
        for worker in workers
        for c in connections(worker)
        if c.laddr.port == port and c.raddr
    }
    missing = [p for p in client_ports if p not in held]
    assert not missing, f"no worker holds the connections from ports {missing}"
    return [held[p] for p in client_ports]


def wait_until_no_connections(workers: list[psutil.Process], port: int) -> None:
    """Until the workers have closed every earlier connection (each worker's count is
    lowered as it closes one, so a trial starts from 0 and 0)."""
    for _ in range(300):
        if not any(
            c.laddr.port == port and c.raddr for worker in workers for c in connections(worker)
        ):
            return
        time.sleep(0.05)
    raise AssertionError("the workers never closed the earlier connections")
