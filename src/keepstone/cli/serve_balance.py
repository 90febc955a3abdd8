"""Balanced accepting for ``keepstone serve --workers N``: a new connection goes to the least
loaded worker.

The N workers accept from one listening socket, and a worker's event loop (uvloop's
libuv, like asyncio's) accepts every connection that is waiting when it wakes. A few
keep-alive connections that arrive together, such as wrk's four or the upstream pool of a
proxy, then often all land on one worker, which serves them for their whole life while
the others idle: two workers then serve no more than one, where an even split serves
about twice as much (docs/performance.md). The kernel cannot help; it hands a connection
to whichever process calls ``accept()`` first.

So each worker publishes how many connections it holds open, and takes a new one only
while it holds no more than the least loaded live worker (nginx's ``accept_disabled``,
gunicorn's "accept only when free"). A worker that holds more steps back for
:data:`RETRY` at a time so that a less loaded one can take the connection, but never for
longer than :data:`MAX_DEFER` in all: a busy or stuck sibling must not keep clients
waiting. A worker accepts one connection at a time, so the counts are fresh before the
next: four connections over two workers fall 2+2.

The counts live in :class:`ConnectionSlots`, a small array in a file the supervisor makes
before the workers start, which each worker maps into memory. A worker claims a slot by
holding an ``flock`` on the slot's lock file for as long as it serves, so the slot of a
worker that dies (uvicorn starts a replacement, which claims a free slot) frees itself
when the kernel drops the lock; a slot whose lock nobody holds counts as no worker at
all, whatever number it last held.

One worker (``--workers 1``) has uvicorn's own accept loop; it and every worker here are a
:class:`StoppingServer`, which stops on a signal without dying of it (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import mmap
import multiprocessing
import os
import pickle
import select
import shutil
import signal
import socket
import ssl
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import multiprocess

from keepstone.api.indexer_process import die_with_parent

logger = logging.getLogger("keepstone.serve")

#: How long a worker holding more connections than a sibling steps back before it looks
#: again; the sibling's loop wakes for the same connection, usually well within this.
RETRY = 0.001
#: The longest a worker steps back from a waiting connection: past it, it accepts
#: whatever the others hold (a sibling may be busy with a long request, or stuck).
MAX_DEFER = 0.02
#: How often connections that closed without their protocol's ``connection_lost`` (a
#: websocket upgrade hands the transport to another protocol) leave the count.
SWEEP = 1.0
#: After running out of file descriptors or memory, how long to stop accepting (asyncio's
#: accept loop waits as long).
ACCEPT_PAUSE = 1.0

#: Why a stop did not finish, when a second SIGINT forced it.
FORCED = "forced by a second SIGINT: requests in flight and the app's shutdown were cut short"
#: The value of a slot no worker holds.
ABSENT = -1
#: Seconds between the supervisor's looks at a worker it awaits the health check of.
PING_SLICE = 0.25
#: One slot: a native signed 64-bit count. Aligned 8-byte stores are whole on the
#: platforms Keepstone runs on; a torn read could at worst delay one accept by MAX_DEFER.
_SLOT = struct.Struct("q")
_ARRAY = "connections"


class ConnectionSlots:
    """The shared array of the workers' open-connection counts, as one worker sees it.

    ``directory`` holds the array (``connections``, 8 bytes a slot) and one lock file a
    slot (``slot-<i>.lock``), made by :meth:`create`. :meth:`claim` takes the first slot
    whose ``flock`` is free; the lock is held until :meth:`release` or the process's end.
    Locks of ``flock`` belong to an open file, not to a process, so two instances in one
    process exclude each other as two workers do (the tests rely on it).
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        with open(os.path.join(directory, _ARRAY), "r+b") as array_file:
            # MAP_SHARED (the default): every worker's stores are the others' reads. The
            # map keeps its own descriptor; no lock is ever taken on this file.
            self._array = mmap.mmap(array_file.fileno(), 0)
        self.size = len(self._array) // _SLOT.size
        self._all = struct.Struct(f"{self.size}q")
        self.index: int | None = None
        self._lock: int | None = None

    @staticmethod
    def create(directory: str, size: int) -> None:
        """An array of ``size`` absent slots and their lock files, in ``directory``."""
        with open(os.path.join(directory, _ARRAY), "wb") as array_file:
            array_file.write(_SLOT.pack(ABSENT) * size)
        for index in range(size):
            open(_lock_path(directory, index), "wb").close()

    def claim(self) -> int | None:
        """Take the first free slot and publish 0 in it; ``None`` if every slot is held
        (more workers than slots: this one then balances against the others unseen)."""
        for index in range(self.size):
            fd = os.open(_lock_path(self.directory, index), os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._lock, self.index = fd, index
            self.publish(0)
            return index
        return None

    def publish(self, connections: int) -> None:
        """This worker's count of open connections, for the others to read."""
        if self.index is not None:
            _SLOT.pack_into(self._array, self.index * _SLOT.size, connections)

    def values(self) -> tuple[int, ...]:
        """Every slot's last published value; :data:`ABSENT` for a slot never claimed,
        released, or found with no worker holding it."""
        return self._all.unpack_from(self._array)

    def others_hold_fewer(self, connections: int) -> bool:
        """Whether another live worker holds fewer than ``connections`` connections.

        Only a slot whose number is lower is checked for a live holder, so a worker with
        none open, or as few as every other, pays no system call.
        """
        for index, value in enumerate(self.values()):
            if index != self.index and 0 <= value < connections and self._is_held(index):
                return True
        return False

    def _is_held(self, index: int) -> bool:
        """Whether a worker holds slot ``index``; a slot nobody holds is marked absent.

        The mark is written under the slot's lock, so it cannot overwrite the 0 of a
        worker claiming the slot at the same moment (that one then takes another slot).
        """
        fd = os.open(_lock_path(self.directory, index), os.O_RDWR)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            _SLOT.pack_into(self._array, index * _SLOT.size, ABSENT)
            return False
        finally:
            os.close(fd)  # drops the lock, if this took it

    def release(self) -> None:
        """Give the slot up: this worker takes no more connections."""
        if self._lock is not None:
            self.publish(ABSENT)
            os.close(self._lock)
            self._lock = self.index = None

    def close(self) -> None:
        self.release()
        self._array.close()


def _lock_path(directory: str, index: int) -> str:
    return os.path.join(directory, f"slot-{index}.lock")


class _Connection:
    """One accepted connection of this worker, counted from ``accept()`` to its close."""

    __slots__ = ("transport",)

    def __init__(self) -> None:
        self.transport: asyncio.BaseTransport | None = None


class _Counted(asyncio.Protocol):
    """uvicorn's protocol for one connection, handed every event; when the connection
    is lost, it leaves the worker's count.

    A wrapper rather than a patched ``connection_lost``: a protocol class may have no
    instance dictionary to patch (``asyncio.Protocol`` itself has none).
    """

    __slots__ = ("_protocol", "_lost")

    def __init__(self, protocol: asyncio.Protocol, lost: Callable[[], None]) -> None:
        self._protocol = protocol
        self._lost = lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._protocol.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._protocol.data_received(data)

    def eof_received(self) -> bool | None:
        return self._protocol.eof_received()

    def pause_writing(self) -> None:
        self._protocol.pause_writing()

    def resume_writing(self) -> None:
        self._protocol.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._lost()


class BalancedAcceptor:
    """A worker's accept loop on the shared listening socket ``sock``.

    It stands where uvicorn's ``loop.create_server(sock=...)`` would: each connection it
    accepts gets a protocol from ``protocol_factory`` through the loop's
    ``connect_accepted_socket``, and uvicorn's shutdown calls :meth:`close` and
    :meth:`wait_closed` as it would on an ``asyncio.Server``. ``deferrals`` counts the
    times it stepped back for a less loaded worker.
    """

    def __init__(
        self,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.Protocol],
        slots: ConnectionSlots,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_defer: float = MAX_DEFER,
        retry: float = RETRY,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol_factory = protocol_factory
        self._slots = slots
        self._ssl = ssl_context
        self._max_defer = max_defer
        self._retry = retry
        self._open: set[_Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._deferred_since: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._serving = True
        self._reading = False
        self.deferrals = 0
        # After a step back: whether a connection still waits, without accepting it.
        self._waiting = select.poll()
        self._waiting.register(self._fd, select.POLLIN)
        sock.setblocking(False)
        self._read()
        self._sweeper = self._loop.call_later(SWEEP, self._sweep)

    @property
    def connections(self) -> int:
        """This worker's open connections (accepted, not yet closed)."""
        return len(self._open)

    def _on_readable(self) -> None:
        if self._should_defer():
            self.deferrals += 1
            self._pause(self._retry)
            return
        # The wait, if there was one, ends here whoever gets the connection: a clock left
        # running would cut short the step back for the next one.
        self._deferred_since = None
        self._read()
        try:
            conn, _ = self._sock.accept()
        except (BlockingIOError, InterruptedError):
            return  # another worker took it
        except OSError as exc:
            if isinstance(exc, ConnectionAbortedError):
                return  # the client gave up before it was accepted
            # Out of descriptors or memory: stop accepting for a while, as asyncio does,
            # rather than spin on a socket that stays readable.
            logger.error("accept failed, pausing %ss: %s", ACCEPT_PAUSE, exc)
            self._pause(ACCEPT_PAUSE)
            return
        connection = _Connection()
        self._open.add(connection)
        self._slots.publish(len(self._open))
        task = self._loop.create_task(self._connect(conn, connection))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _should_defer(self) -> bool:
        if not self._slots.others_hold_fewer(len(self._open)):
            return False
        now = self._loop.time()
        if self._deferred_since is None:
            self._deferred_since = now
        return now - self._deferred_since < self._max_defer

    def _pause(self, delay: float) -> None:
        """Stop reading the socket (it stays readable: the loop would call back at once)
        and look again after ``delay``."""
        if self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False
        self._timer = self._loop.call_later(delay, self._resume)

    def _resume(self) -> None:
        self._timer = None
        if not self._serving:
            return
        if self._waiting.poll(0):
            self._on_readable()  # decides again, on the counts as they are now
        else:
            self._deferred_since = None  # another worker took it
            self._read()

    def _read(self) -> None:
        if not self._reading:
            self._loop.add_reader(self._fd, self._on_readable)
            self._reading = True

    async def _connect(self, conn: socket.socket, connection: _Connection) -> None:
        try:
            conn.setblocking(False)
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            transport, _ = await self._loop.connect_accepted_socket(
                lambda: _Counted(self._protocol_factory(), lambda: self._closed(connection)),
                conn,
                ssl=self._ssl,
            )
        except BaseException as exc:
            conn.close()
            self._closed(connection)
            if not isinstance(exc, OSError):
                raise
            logger.debug("connection dropped before it was served: %r", exc)  # client gone
            return
        if connection in self._open:
            connection.transport = transport

    def _closed(self, connection: _Connection) -> None:
        if connection in self._open:
            self._open.discard(connection)
            self._slots.publish(len(self._open))

    def _sweep(self) -> None:
        for connection in list(self._open):
            if connection.transport is not None and connection.transport.is_closing():
                self._closed(connection)
        self._sweeper = self._loop.call_later(SWEEP, self._sweep)

    def close(self) -> None:
        """Stop accepting, and give up the slot: the other workers stop counting this one
        as a place for new connections. Open connections are uvicorn's to finish."""
        if not self._serving:
            return
        self._serving = False
        if self._reading:
            self._loop.remove_reader(self._fd)
        if self._timer is not None:
            self._timer.cancel()
        self._sweeper.cancel()
        self._slots.close()

    async def wait_closed(self) -> None:
        """Nothing to wait for: uvicorn's shutdown waits for the connections itself."""


class StoppingServer(uvicorn.Server):
    """uvicorn's server, stopped by a signal without dying of it: uvicorn raises the signal
    again once stopped, and a process manager reads 143 for a stop it asked for as a failure.
    :meth:`problems` says what kept the stop from finishing. ``stop_signals`` stop it (a
    SIGHUP ignored already, as under ``nohup``, stays so); ``ignored_signals`` are ignored.
    A second SIGINT forces, as in uvicorn: requests in flight and the app's shutdown are
    dropped, and the tracebacks of the tasks cancelled for it are not logged."""

    stop_signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    ignored_signals: tuple[int, ...] = ()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in self.ignored_signals}
        for sig in self.stop_signals:
            if sig != signal.SIGHUP or signal.getsignal(sig) != signal.SIG_IGN:  # nohup
                previous[sig] = signal.signal(sig, self.handle_exit)
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: object) -> None:
        super().handle_exit(sig, frame)  # type: ignore[arg-type]
        if self.force_exit:
            logging.getLogger("uvicorn.error").disabled = True

    def problems(self) -> list[str]:
        """Why the stop did not finish cleanly; empty when every request was answered and
        the app's shutdown (which closes the store) ran and succeeded."""
        if self.force_exit:
            return [FORCED]
        lifespan = getattr(self, "lifespan", None)
        failed = getattr(lifespan, "shutdown_failed", False)
        return ["the app's shutdown failed (logged above)"] if failed else []


class BalancedServer(StoppingServer):
    """A uvicorn worker whose connections come from a :class:`BalancedAcceptor`.

    ``startup`` is uvicorn's for a list of sockets (the app's lifespan first, then one
    protocol per connection sharing the server's state, so uvicorn's connection tracking
    and graceful shutdown work unchanged), with the accept loop in place of
    ``loop.create_server``. The worker claims its slot once the app has started: until
    then the others take every connection. SIGHUP is the supervisor's (a terminal hanging
    up sends it to every process of the group): the worker ignores it.
    """

    stop_signals = (signal.SIGINT, signal.SIGTERM)
    ignored_signals = (signal.SIGHUP,)

    def __init__(self, config: uvicorn.Config, slots_directory: str) -> None:
        super().__init__(config)
        self.slots_directory = slots_directory

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if sockets is None or len(sockets) != 1:
            raise ValueError("a balanced worker serves the one socket its supervisor bound")
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            sys.exit(STARTUP_FAILURE)
        config = self.config

        def create_protocol() -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state
            )

        slots = ConnectionSlots(self.slots_directory)
        slots.claim()
        acceptor = BalancedAcceptor(sockets[0], create_protocol, slots, ssl_context=config.ssl)
        # uvicorn's shutdown only calls close() and wait_closed() on what it finds here.
        self.servers = [acceptor]  # type: ignore[list-item]
        self.started = True


class BalancedProcess(multiprocess.Process):
    """uvicorn's worker process, running a :class:`BalancedServer`."""

    def __init__(
        self, config: uvicorn.Config, sockets: list[socket.socket], slots_directory: str
    ) -> None:
        self.slots_directory = slots_directory  # pickled with the process's target
        self.hung = False
        super().__init__(config, sockets)

    @property
    def server(self) -> BalancedServer:
        if self._server is None:
            self._server = BalancedServer(self.config, self.slots_directory)
        return self._server  # type: ignore[return-value]

    def target(self, sockets: list[socket.socket] | None = None) -> None:
        """The worker's body: it stops when the supervisor dies (SIGTERM: its requests in
        flight are answered; otherwise it would serve the port on, an orphan), and exits 1
        when its stop did not finish cleanly."""
        die_with_parent(signal.SIGTERM)
        parent = multiprocessing.parent_process()
        if parent is not None and os.getppid() != parent.pid:
            return  # the supervisor died before the signal was asked for
        super().target(sockets)
        if self.server.problems():
            sys.exit(1)

    def ping(self, timeout: float = 5) -> bool:
        """uvicorn's health check (one ping, its answer awaited up to ``timeout``), awaited
        in slices of :data:`PING_SLICE` so that a worker dying meanwhile is seen at once:
        uvicorn's single wait runs out the whole timeout for it (the supervisor's end of
        the pipe stays open), its replacement that much later. ``hung``: the last check
        ran out on a live worker."""
        self.hung = False
        deadline = time.monotonic() + timeout
        try:
            self.parent_conn.send(b"ping")
            while not self.parent_conn.poll(max(0.0, min(PING_SLICE, deadline - time.monotonic()))):
                if not self.process.is_alive():
                    return False  # died while asked: no answer is coming
                if time.monotonic() >= deadline:
                    self.hung = True
                    return False
            self.parent_conn.recv()
            return True
        except (OSError, EOFError, pickle.UnpicklingError):
            return False


class BalancedMultiprocess(multiprocess.Multiprocess):
    """uvicorn's supervisor (start N workers, replace one that dies, stop them all on
    SIGTERM or SIGINT), its workers :class:`BalancedProcess`."""

    def __init__(
        self, config: uvicorn.Config, sockets: list[socket.socket], slots_directory: str
    ) -> None:
        super().__init__(config, sockets)
        self.slots_directory = slots_directory
        self.forced = False

    def run(self) -> None:
        # Multiprocess makes every worker, the first N and each replacement, by calling
        # its module's `Process`; uvicorn has no other way to choose the worker's Server.
        def make_worker(config: uvicorn.Config, sockets: list[socket.socket]) -> BalancedProcess:
            return BalancedProcess(config, sockets, self.slots_directory)

        original = multiprocess.Process
        multiprocess.Process = make_worker  # type: ignore[misc,assignment]
        try:
            super().run()
        finally:
            multiprocess.Process = original  # type: ignore[misc]

    def keep_subprocess_alive(self) -> None:
        """uvicorn's check (a worker that died, or missed its health check, is killed and
        replaced), saying so as a warning: every connection the worker held was closed
        without an answer, and uvicorn logs the replacement only at INFO."""
        before = list(self.processes)
        super().keep_subprocess_alive()
        for old, new in zip(before, self.processes, strict=True):
            if old is not new:
                how = (
                    f"left the health check unanswered for {self.config.timeout_worker_healthcheck}"
                    " s and was killed"
                    if getattr(old, "hung", False)
                    else f"died (exit code {old.process.exitcode})"
                )
                logger.warning(
                    "worker %s %s; the connections it held were closed; worker %s replaces it",
                    old.pid,
                    how,
                    new.pid,
                )

    def terminate_all(self) -> None:
        """Close the supervisor's copy of the socket, then SIGTERM every worker (each closes
        its own): a new connection is refused, not left waiting for an accept that never comes."""
        for sock in self.sockets:
            sock.close()
        super().terminate_all()

    def join_all(self) -> None:
        """Wait for every worker to finish; a SIGINT meanwhile (the second: the first
        began the stop) is passed on to the workers, which then stop at once."""
        for process in self.processes:
            while process.process.is_alive():
                process.process.join(PING_SLICE)
                if signal.SIGINT in self.signal_queue:
                    self.signal_queue.clear()
                    self.forced = True
                    for other in self.processes:
                        if other.process.is_alive() and other.pid is not None:
                            os.kill(other.pid, signal.SIGINT)

    def problems(self) -> list[str]:
        """Why the stop did not finish cleanly; empty when every worker finished its own
        (exit 0, or SIGTERM before it had begun to serve)."""
        found = [FORCED] if self.forced else []
        ended = [p for p in self.processes if p.exitcode not in (0, -signal.SIGTERM)]
        return found + [f"worker {p.pid} exited with status {p.exitcode}" for p in ended]


def serve_balanced(config: uvicorn.Config, sock: socket.socket) -> list[str]:
    """Run ``config.workers`` balanced workers on the listening socket ``sock`` until
    SIGTERM or SIGINT; what kept the stop from finishing cleanly, if anything. The slots
    are twice the workers: room for a replacement started before the worker it replaces
    has gone (uvicorn's SIGHUP restart) and for SIGTTIN."""
    directory = tempfile.mkdtemp(prefix="keepstone-serve-")
    try:
        ConnectionSlots.create(directory, 2 * config.workers)
        supervisor = BalancedMultiprocess(config, [sock], directory)
        supervisor.run()
        return supervisor.problems()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
