"""Balanced accepting of ``keepstone serve --workers N`` (:mod:`keepstone.cli.serve_balance`).

End to end: four keep-alive connections opened at once to two workers fall 2 and 2, in
every one of ten trials. Before the balancing, a worker's event loop accepted every
connection waiting when it woke, and 30 such trials fell 3+1 twelve times and 4+0 now
and then. A connection is told to its worker by the worker's end of it, as
``test_serve_workers`` tells scrapes apart. A worker killed with SIGKILL is replaced, and
the replacement takes its share.

In process: a dead worker's slot frees itself and stops counting; a worker holding more
connections than a live sibling steps back, but accepts once the bound has passed, and
does not step back for a dead one; two accept loops on one socket share connections.
"""

from __future__ import annotations

import asyncio
import errno
import http.client
import os
import select
import socket
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import uvloop

from keepstone.cli.serve_balance import ABSENT, BalancedAcceptor, ConnectionSlots
from tests.e2e import test_serve_workers as workers_e2e

#: Fresh sets of connections, each asserted to fall 2+2.
TRIALS = 10
CONNECTIONS = 4

#: ``keepstone serve --workers 2`` as test_serve_workers starts it, on the SQLite of
#: ``database`` below: the balancing does not depend on the database.
served = workers_e2e.served


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('db')}/keepstone.db"


@pytest.mark.slow
def test_keep_alive_connections_opened_together_fall_two_and_two(
    served: tuple[str, int],
) -> None:
    url, pid = served
    port = int(url.rsplit(":", 1)[1])
    workers = workers_e2e._workers(pid)
    assert len(workers) == 2
    _until_both_answer(workers, port)
    splits = [_split(workers, _trial(workers, port)) for _ in range(TRIALS)]
    assert splits == ["2+2"] * TRIALS, splits


@pytest.mark.slow
def test_a_replaced_worker_takes_its_share(served: tuple[str, int]) -> None:
    """A worker killed with SIGKILL leaves its slot to the kernel's care; uvicorn starts
    a replacement, which claims a free slot, and the connections fall 2+2 again."""
    url, pid = served
    port = int(url.rsplit(":", 1)[1])
    victim = workers_e2e._workers(pid)[0]
    victim.kill()
    victim.wait(30)
    for _ in range(600):
        workers = workers_e2e._workers(pid)
        if len(workers) == 2 and victim.pid not in {w.pid for w in workers}:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the killed worker was never replaced")
    _until_both_answer(workers, port)
    splits = [_split(workers, _trial(workers, port)) for _ in range(TRIALS // 2)]
    assert splits == ["2+2"] * (TRIALS // 2), splits


def _until_both_answer(workers: list[psutil.Process], port: int) -> None:
    """Until both workers have answered: one still building its app (the fixture waits
    for an answer from either) accepts nothing yet."""
    for _ in range(100):
        if len(set(_trial(workers, port))) == 2:
            return
    raise AssertionError("one worker answered every connection")


def _split(workers: list[psutil.Process], holders: list[int]) -> str:
    """How connections held by ``holders`` fall between ``workers``, most first (``3+1``)."""
    counts = Counter(holders)
    return "+".join(str(n) for n in sorted((counts[w.pid] for w in workers), reverse=True))


def _trial(workers: list[psutil.Process], port: int) -> list[int]:
    """The worker (process id) that held each of four keep-alive connections opened at
    once, each answering a request, once the workers hold no earlier connection."""
    _wait_until_no_connections(workers, port)
    conns = _open_together(port, CONNECTIONS)
    try:
        for conn in conns:  # each one answered: each one accepted by a worker
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            response.read()
            assert response.status == 200
        return _holders(workers, port, [_local_port(conn) for conn in conns])
    finally:
        for conn in conns:
            conn.close()


def _open_together(port: int, count: int) -> list[http.client.HTTPConnection]:
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


def _local_port(conn: http.client.HTTPConnection) -> int:
    assert conn.sock is not None
    return int(conn.sock.getsockname()[1])


def _holders(workers: list[psutil.Process], port: int, client_ports: list[int]) -> list[int]:
    """The process id of the worker holding each of ``client_ports``' connections."""
    held = {
        c.raddr.port: worker.pid
        for worker in workers
        for c in worker.net_connections(kind="tcp")
        if c.laddr.port == port and c.raddr
    }
    missing = [p for p in client_ports if p not in held]
    assert not missing, f"no worker holds the connections from ports {missing}"
    return [held[p] for p in client_ports]


def _wait_until_no_connections(workers: list[psutil.Process], port: int) -> None:
    """Until the workers have closed every earlier connection (each worker's count is
    lowered as it closes one, so a trial starts from 0 and 0)."""
    for _ in range(300):
        if not any(
            c.laddr.port == port and c.raddr
            for worker in workers
            for c in worker.net_connections(kind="tcp")
        ):
            return
        time.sleep(0.05)
    raise AssertionError("the workers never closed the earlier connections")


# In process: the slots, and accept loops on a real socket.


@pytest.fixture
def slots_directory(tmp_path: Path) -> str:
    ConnectionSlots.create(str(tmp_path), 3)
    return str(tmp_path)


def test_a_dead_workers_slot_frees_itself_and_stops_counting(slots_directory: str) -> None:
    first, second = ConnectionSlots(slots_directory), ConnectionSlots(slots_directory)
    assert (first.claim(), second.claim()) == (0, 1)
    second.publish(5)
    assert second.others_hold_fewer(5)  # first holds 0
    assert not first.others_hold_fewer(5)  # a fewer count, never a larger, holds one back

    _die(first)  # its slot still says 0
    assert not second.others_hold_fewer(5)  # absent, not 0 forever
    assert second.values()[0] == ABSENT

    replacement = ConnectionSlots(slots_directory)
    assert replacement.claim() == 0  # the replacement takes the freed slot
    assert second.others_hold_fewer(5)
    for slots in (first, second, replacement):
        slots.close()
    after = ConnectionSlots(slots_directory)
    assert after.values() == (ABSENT,) * 3
    after.close()


def _die(slots: ConnectionSlots) -> None:
    """What the kernel does for a worker that dies: its lock goes, its numbers stay."""
    assert slots._lock is not None
    os.close(slots._lock)
    slots._lock = slots.index = None


def test_more_workers_than_slots_claim_none(slots_directory: str) -> None:
    held = [ConnectionSlots(slots_directory) for _ in range(3)]
    assert [s.claim() for s in held] == [0, 1, 2]
    extra = ConnectionSlots(slots_directory)
    assert extra.claim() is None
    extra.publish(7)  # unseen by the others, who still balance among themselves
    assert extra.values() == (0, 0, 0)
    for slots in [*held, extra]:
        slots.close()


class _Listener:
    """A listening socket on loopback and clients connecting to it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.clients: list[socket.socket] = []

    def connect(self) -> None:
        self.clients.append(socket.create_connection(("127.0.0.1", self.port)))

    def close(self) -> None:
        for client in self.clients:
            client.close()
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[_Listener]:
    listening = _Listener()
    yield listening
    listening.close()


def _run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``main`` on uvloop, as a worker does (30 s at most: a hang fails, not waits)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(asyncio.wait_for(main(), 30))


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.001)


def test_a_worker_steps_back_for_a_live_sibling_until_the_bound(
    slots_directory: str, listener: _Listener
) -> None:
    sibling = ConnectionSlots(slots_directory)  # live, 0 connections, never accepts
    sibling.claim()
    slots = ConnectionSlots(slots_directory)
    index = slots.claim()
    assert index is not None

    async def main() -> None:
        acceptor = BalancedAcceptor(listener.sock, asyncio.Protocol, slots, max_defer=0.05)
        listener.connect()
        await _until(lambda: acceptor.connections == 1)
        assert acceptor.deferrals == 0  # 0 is as few as the sibling's 0

        listener.connect()  # now it holds 1 and the sibling 0: it steps back, then takes it
        await _until(lambda: acceptor.connections == 2)
        assert acceptor.deferrals >= 1
        deferrals = acceptor.deferrals

        _die(sibling)  # nobody to step back for
        listener.connect()
        await _until(lambda: acceptor.connections == 3)
        assert acceptor.deferrals == deferrals
        assert slots.values()[index] == 3

        for client in listener.clients:
            client.close()
        await _until(lambda: acceptor.connections == 0)
        assert slots.values()[index] == 0
        acceptor.close()
        await acceptor.wait_closed()

    _run(main)
    sibling.close()


def test_two_accept_loops_on_one_socket_share_connections(
    slots_directory: str, listener: _Listener
) -> None:
    # Two workers in one loop: the socket's descriptor twice (one reader a descriptor),
    # each with a slot of its own; flock tells the two apart as it tells processes apart.
    twin = socket.socket(fileno=os.dup(listener.sock.fileno()))
    slots = [ConnectionSlots(slots_directory), ConnectionSlots(slots_directory)]
    for s in slots:
        s.claim()

    async def main() -> None:
        acceptors = [
            BalancedAcceptor(sock, asyncio.Protocol, s)
            for sock, s in zip([listener.sock, twin], slots, strict=True)
        ]
        for _ in range(CONNECTIONS):
            listener.connect()
        await _until(lambda: sum(a.connections for a in acceptors) == CONNECTIONS)
        assert [a.connections for a in acceptors] == [2, 2]
        for client in listener.clients:
            client.close()
        await _until(lambda: sum(a.connections for a in acceptors) == 0)
        for acceptor in acceptors:
            acceptor.close()

    _run(main)
    twin.close()
