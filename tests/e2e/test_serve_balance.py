"""Balanced accepting of ``keepstone serve --workers N`` (:mod:`keepstone.cli.serve_balance`).

End to end: four keep-alive connections opened at once to two workers fall 2 and 2, in
every one of ten trials. Before the balancing, a worker's event loop accepted every
connection waiting when it woke, and 30 such trials fell 3+1 twelve times and 4+0 now
and then. A connection is told to its worker by the worker's end of it, as
``test_serve_workers`` tells scrapes apart. A worker killed with SIGKILL is replaced, the
replacement takes its share, and the supervisor warns; a worker that stalls past uvicorn's
own 5 s health check is waited for, not killed.

In process: a dead worker's slot frees itself and stops counting; a worker holding more
connections than a live sibling steps back, but accepts once the bound has passed, and
does not step back for a dead one; two accept loops on one socket share connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
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
from tests.e2e.workers import CONNECTIONS, serving_workers, trial, two_workers
from tests.serving import ServerProcess

#: Fresh sets of connections, each asserted to fall 2+2.
TRIALS = 10
#: Longer than uvicorn's default health check (5 s), well under the server's (30 s).
STALL_SECONDS = 7


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """``keepstone serve --workers 2`` on SQLite: the balancing does not depend on the
    database."""
    home = tmp_path_factory.mktemp("workers")
    with two_workers(f"sqlite:///{home}/keepstone.db", home) as server:
        yield server


@pytest.mark.slow
def test_keep_alive_connections_opened_together_fall_two_and_two(
    served: ServerProcess,
) -> None:
    workers = serving_workers(served)
    splits = [_split(workers, trial(workers, served.port)) for _ in range(TRIALS)]
    assert splits == ["2+2"] * TRIALS, splits


@pytest.mark.slow
def test_a_replaced_worker_takes_its_share(served: ServerProcess) -> None:
    """A worker killed with SIGKILL leaves its slot to the kernel's care; uvicorn starts
    a replacement, which claims a free slot, and the connections fall 2+2 again."""
    victim = serving_workers(served)[0]
    victim.kill()
    victim.wait(30)
    workers = serving_workers(served, gone=victim.pid)
    splits = [_split(workers, trial(workers, served.port)) for _ in range(TRIALS // 2)]
    assert splits == ["2+2"] * (TRIALS // 2), splits
    # The supervisor says so at the server's log level (uvicorn logs it only at INFO).
    assert f"worker {victim.pid} died (exit code -9)" in served.log_text()


@pytest.mark.slow
def test_a_worker_that_stalls_past_uvicorns_five_seconds_is_not_killed(
    served: ServerProcess,
) -> None:
    """A worker that answers nothing for a while (a loaded machine, a long call holding
    the interpreter) is waited for: uvicorn's own 5 s health check killed it, and every
    connection it held closed with no answer and no warning."""
    stalled = serving_workers(served)[0]
    stalled.suspend()
    try:
        time.sleep(STALL_SECONDS)
    finally:
        with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
            stalled.resume()  # gone if the supervisor killed it
    assert stalled.is_running() and stalled.status() != psutil.STATUS_ZOMBIE
    assert stalled.pid in {w.pid for w in serving_workers(served)}
    assert f"worker {stalled.pid}" not in served.log_text()


def _split(workers: list[psutil.Process], holders: list[int]) -> str:
    """How connections held by ``holders`` fall between ``workers``, most first (``3+1``)."""
    counts = Counter(holders)
    return "+".join(str(n) for n in sorted((counts[w.pid] for w in workers), reverse=True))


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
