"""SQLite's writers and durability: the writers' turn and the shared fsync of the WAL.

* :class:`SqliteWriters` (one per engine: :func:`sqlite_writers`): the turn a writer of a
  SQLite database takes before ``BEGIN IMMEDIATE``, so writers queue instead of sleeping
  in SQLite's busy handler.
* :class:`WalSync` (one per engine: :func:`wal_sync`): the fsync that makes commits made
  at ``synchronous=NORMAL`` durable, run after the commit, outside the writers' turn,
  and shared by the writers that wait for it at the same time.
* :func:`made_durable` syncs after a durable write (``keepstone.db.write_transaction``);
  :func:`syncs_deferred` hands the sync to a caller on an event loop instead.

PostgreSQL needs none of it: its commits are durable and its writers wait in its own
row locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import fcntl
import os
import queue
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from keepstone.errors import StoreUnavailable


class SqliteWriters:
    """The turn of a writer of one SQLite database, taken before ``BEGIN IMMEDIATE``.

    SQLite lets one writer in at a time, and a writer that finds the database locked waits
    in its busy handler by *sleeping* (1, 2, 5, 10 … 100 ms), not in a queue: with several
    request threads (or ``keepstone serve --workers``) writing, most writes paid a sleep
    long after the lock was free (docs/performance.md). Writers queue here instead: the
    threads of a process on a lock, and the processes on an ``flock`` of a file beside the
    database (``<database>-writer.lock``; the kernel drops it with a process that dies),
    so the database is taken in turn with no sleep.
    Reentrant in a thread, so a nested write keeps SQLite's own behaviour (its timeout)
    instead of deadlocking.

    The turn also keeps the connection its writers share (:meth:`shared_connection`):
    only one of the process's writers holds the turn at a time, so each of their
    transactions (but one nested in another of its thread) can take the same connection,
    kept open, instead of checking one out of the pool and back in and wrapping it anew,
    which cost an empty write transaction more CPU than its ``BEGIN`` and ``COMMIT``
    together.
    """

    def __init__(self, lock_path: str | None) -> None:
        self._threads = threading.RLock()
        self._lock_path = lock_path
        self._fd: int | None = None
        self._depth = 0  # changed only by the thread holding _threads
        self._shared: Connection | None = None  # used only in the turn
        self._shared_driver: Any = None  # its sqlite3.Connection
        self._shared_in_use = False
        # A parent's shared connection, in a forked child: closing SQLite's connection in
        # the child could checkpoint or remove the parent's WAL, so it is only kept.
        self._inherited: list[tuple[Connection, Any]] = []
        self._shared_pid = 0

    def __enter__(self) -> SqliteWriters:
        self._threads.acquire()
        try:
            self._lock_process(fcntl.LOCK_EX)
        except BaseException:
            self._threads.release()
            raise
        self._depth += 1
        return self

    def try_enter(self) -> bool:
        """Take the turn only if it is free right now, waiting for nothing: True when
        taken (leave it with ``__exit__``), False when a thread or a process has it."""
        if not self._threads.acquire(blocking=False):
            return False
        try:
            self._lock_process(fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another process writes
            self._threads.release()
            return False
        except BaseException:
            self._threads.release()
            raise
        self._depth += 1
        return True

    def __exit__(self, *_exc: object) -> None:
        self._depth -= 1
        try:
            if self._depth == 0 and self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def _lock_process(self, flags: int) -> None:
        """The other processes' side of the turn, taken by the outermost entry only: the
        lock file (opened on first use) locked with ``flags``."""
        if self._depth == 0 and self._lock_path is not None:
            if self._fd is None:
                self._fd = self._open_lock_file(self._lock_path)
            if self._fd is not None:
                fcntl.flock(self._fd, flags)

    def _open_lock_file(self, path: str) -> int | None:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            # A directory this process may not create files in (a read-only copy of the
            # database, say): writers of other processes then meet in SQLite's busy handler
            # as before, and a write there fails as SQLite decides.
            self._lock_path = None
            return None
        weakref.finalize(self, os.close, fd)  # kept open while the engine lives
        return fd

    def shared_connection(self, connect: Callable[[], Connection]) -> Connection | None:
        """In the turn: the connection the writers of this process share, made by
        ``connect`` on first use (again after :meth:`after_shared_use` closed it, or in a
        forked child); ``connect`` gives a connection out of the pool (detached), whose
        ``close`` closes it. In use until :meth:`after_shared_use`. None while a
        transaction of this thread uses it (a nested write), and for a database with no
        file of its own (in memory, or a URI), whose pool may hand each thread a
        different database."""
        if self._shared_in_use or self._lock_path is None:
            return None
        if self._shared is not None and self._shared_pid != os.getpid():
            self._close_shared()  # a forked child's: set aside, not closed
        if self._shared is None:
            shared = connect()
            self._shared, self._shared_pid = shared, os.getpid()
            self._shared_driver = shared.connection.dbapi_connection
        self._shared_in_use = True
        return self._shared

    def after_shared_use(self) -> None:
        """In the turn, after a transaction on :meth:`shared_connection`: one invalidated
        (a failure SQLAlchemy takes for a lost connection), closed, or left in a
        transaction (its rollback failed) is closed, not shared again."""
        self._shared_in_use = False
        shared = self._shared
        if shared is not None and (shared.invalidated or shared.closed or shared.in_transaction()):
            self._close_shared()

    def close_shared(self, _engine: object = None) -> None:
        """Close the shared connection (its engine is disposed, so the database's last
        connection closes, and SQLite checkpoints and removes the WAL): taken in the
        turn, so after any write using it. A child process leaves its parent's alone."""
        if self._shared is None:
            return
        with self:
            if not self._shared_in_use:  # else this thread disposes inside a write
                self._close_shared()

    def _close_shared(self) -> None:
        shared, driver = self._shared, self._shared_driver
        self._shared = self._shared_driver = None
        if shared is None:
            return
        if self._shared_pid != os.getpid():  # a forked child's: kept, never closed here
            self._inherited.append((shared, driver))
            return
        if not (shared.closed or shared.invalidated):
            shared.close()  # detached: closed, with the pool's close event
        # An invalidated one let go of its driver connection without closing it (there is
        # no pool record to close it), which would keep its transaction, and the
        # database's write lock, until collected: closing rolls it back now.
        driver.close()

    def held_elsewhere(self) -> bool:
        """Whether another thread of this process holds the turn (for tests)."""
        if not self._threads.acquire(blocking=False):
            return True
        self._threads.release()
        return False


#: Found by engine, held by it: the turn's shared connection holds its pool, and the
#: pool's listeners hold the engine, so the map holds the turn only weakly; the engine
#: holds it through its dispose listener, and goes with it when it is collected.
_WRITERS: weakref.WeakKeyDictionary[Engine, weakref.ref[SqliteWriters]] = (
    weakref.WeakKeyDictionary()
)
_WRITERS_GUARD = threading.Lock()


def sqlite_writers(engine: Engine) -> SqliteWriters:
    """The :class:`SqliteWriters` of ``engine``'s database (one per engine in a process)."""
    with _WRITERS_GUARD:
        known = _WRITERS.get(engine)
        writers = None if known is None else known()
        if writers is None:
            path = engine.url.database
            on_disk = bool(path) and path != ":memory:" and not str(path).startswith("file:")
            lock_path = f"{os.path.abspath(str(path))}-writer.lock" if on_disk else None
            writers = SqliteWriters(lock_path)
            event.listen(engine, "engine_disposed", writers.close_shared)
            _WRITERS[engine] = weakref.ref(writers)
        return writers


class WalSync:
    """The fsync that makes a SQLite database's commits durable, shared by the writers
    that wait for it at the same time (a group commit's fsync).

    Connections commit at ``synchronous=NORMAL``: the commit writes its frames to the WAL
    and syncs nothing, so it survives a killed process but not a power loss. A durable
    write then calls :meth:`sync` (or awaits :meth:`synced`) after its commit, once it has
    given back the writers' turn: the next writer commits while this one's fsync runs, and
    writers that arrive while an fsync runs share the next one. That is what
    ``synchronous=FULL`` would give, minus the fsync held inside the turn: FULL serialises
    every fsync behind the lock.

    The WAL is one sequential file, so an fsync of it makes every commit written before
    the call durable. A commit whose frames a checkpoint has since copied into the
    database is durable already (at NORMAL a checkpoint syncs the database file once it
    has copied), and with no WAL file at all (the journal is not a WAL) the database file
    is synced instead. The WAL's descriptor is kept open between syncs: SQLite removes
    the file only when the last connection to the database closes, so it is opened again
    after any of this engine's connections closed (:meth:`reopen`, a pool event).

    A coroutine's wait (:meth:`synced`) adapts to the disk: where an fsync costs the loop
    less than handing it to a thread and back (a fast disk), the loop syncs itself, once
    for the writes of a turn of the loop. When a sync the loop made took over
    :data:`SLOW_FSYNC_S`, or the running mean of those syncs rose over
    :data:`INLINE_FSYNC_S` (a disk slower than the hand-off; an fsync's rare spike moves
    it little), the thread syncs for every coroutine for the next :data:`SLOW_HOLD_S`;
    then the loop tries again, its mean forgotten. A slow disk so stops the loop for one
    fsync every SLOW_HOLD_S at most (docs/storage.md, "Durability"). Only the loop's own
    syncs are timed: the thread's would count its wait for the GIL after the fsync, which
    a busy loop makes long.
    """

    #: The running mean of the loop's fsyncs, in seconds, over which the thread syncs.
    INLINE_FSYNC_S = 0.0005
    #: A sync of the loop this slow sends every coroutine's wait to the thread at once.
    SLOW_FSYNC_S = 0.005
    #: How long the thread syncs for coroutines before the loop tries again.
    SLOW_HOLD_S = 2.0

    def __init__(self, database: str) -> None:
        self._paths = (f"{database}-wal", database)
        self._cond = threading.Condition()
        self._arrived = 0  # callers numbered as they arrive, after their commit
        self._synced = 0  # every caller numbered up to this one is durable
        self._syncing = False
        #: The running mean of the loop's fsyncs (weight 1/32 to the newest; None: none
        #: timed since the last hold), how many it counts (it decides from the eighth),
        #: and until when the thread syncs for coroutines.
        self._fsync_s: float | None = None
        self._timed_n = 0
        self._threaded_until = 0.0
        #: Per event loop, the coroutines whose fsync the loop makes two turns on.
        self._turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_Done]] = (
            weakref.WeakKeyDictionary()
        )
        #: The WAL's descriptor, used and replaced only by the caller that syncs.
        self._fd: list[int] = []
        self._reopen = False
        weakref.finalize(self, _close_all, self._fd)
        #: Coroutines awaiting :meth:`synced`, and the thread that syncs for them.
        self._awaiting: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, _Done]] = (
            queue.SimpleQueue()
        )
        self._syncer: threading.Thread | None = None
        self._syncer_guard = threading.Lock()

    def reopen(self) -> None:
        """The WAL may be another file from now on (a connection closed): open it again
        before the next sync."""
        self._reopen = True

    def sync(self, *, timed: bool = False) -> None:
        """Return once every commit made before this call is on disk. ``timed``: the
        caller is an event loop (:meth:`synced`), whose fsyncs are timed."""
        with self._cond:
            self._arrived += 1
            ticket = self._arrived
            while self._synced < ticket:
                if self._syncing:
                    self._cond.wait()
                    continue
                self._syncing, covers, synced = True, self._arrived, False
                self._cond.release()
                try:
                    started = time.monotonic()
                    self._fsync()
                    if timed:
                        self._timed(time.monotonic() - started)
                    synced = True
                finally:
                    self._cond.acquire()
                    self._syncing = False
                    if synced:
                        self._synced = max(self._synced, covers)
                    self._cond.notify_all()  # done, or failed: a waiter tries its own

    def syncs_inline(self) -> bool:
        """Whether :meth:`synced` syncs on the loop itself: no slow sync of the loop's
        holds the coroutines' waits on the thread now."""
        return time.monotonic() >= self._threaded_until

    async def synced(self) -> None:
        """:meth:`sync` for a coroutine, awaited on its event loop, which a slow fsync must
        not stop: a thread of this database's own syncs once for every coroutine waiting
        by then (sharing the fsync with callers in threads too) and wakes each loop once.
        What a coroutine costs the loop is a future and a queue entry; the thread's own
        turns with the GIL are few (one per fsync, besides the fsync), as every turn it
        takes from a busy loop may wait a switch interval for it. Where the disk's fsyncs
        are quicker than that hand-off (:meth:`syncs_inline`), the loop syncs itself two
        turns later, once for every coroutine that awaited in this turn or the next."""
        if self.syncs_inline():
            loop = asyncio.get_running_loop()
            turn = self._turns.get(loop)
            if turn is None:
                turn = self._turns[loop] = []
                # The writes of two turns share the fsync, scheduled from the next turn:
                # a request read while this turn runs starts its task in the next one,
                # after the callbacks this turn scheduled, so an fsync of the next turn
                # would run before its write, and fewer writes would share each fsync
                # (docs/performance.md, "Durable SQLite commits").
                loop.call_soon(loop.call_soon, self._sync_turn, loop, turn)
            mine: _Done = loop.create_future()
            turn.append(mine)
            await mine
            return
        loop = asyncio.get_running_loop()
        done: _Done = loop.create_future()
        self._awaiting.put((loop, done))
        if self._syncer is None:
            with self._syncer_guard:
                if self._syncer is None:
                    self._syncer = threading.Thread(
                        target=self._sync_awaiting, name="keepstone-wal-sync", daemon=True
                    )
                    self._syncer.start()
        await done

    def _sync_turn(self, loop: asyncio.AbstractEventLoop, turn: list[_Done]) -> None:
        """On the loop: one fsync for the coroutines that awaited :meth:`synced` in a
        turn of it (each its own future, so a cancelled one cancels no other)."""
        del self._turns[loop]
        error: Exception | None = None
        try:
            self.sync(timed=True)
        except Exception as exc:  # handed to every waiter of the turn
            error = exc
        _settle(turn, error)

    def _sync_awaiting(self) -> None:
        """The syncer thread: while coroutines wait, sync for all of them; gone after a
        second with none (started again by the next)."""
        waiting = self._awaiting
        while True:
            try:
                batch = [waiting.get(timeout=1.0)]
            except queue.Empty:
                with self._syncer_guard:
                    if waiting.empty():
                        self._syncer = None
                        return
                continue
            while not waiting.empty():
                batch.append(waiting.get_nowait())
            error: BaseException | None = None
            try:
                self.sync()  # each of the batch arrived after its commit
            except BaseException as exc:  # handed to every waiter; the thread goes on
                error = exc
            loops: dict[asyncio.AbstractEventLoop, list[_Done]] = {}
            for loop, done in batch:
                loops.setdefault(loop, []).append(done)
            for loop, futures in loops.items():
                with contextlib.suppress(RuntimeError):  # a loop closed meanwhile
                    loop.call_soon_threadsafe(_settle, futures, error)

    def _fsync(self) -> None:
        """One fsync, by the one caller that syncs at a time."""
        try:
            if self._reopen or not self._fd:
                self._reopen = False
                _close_all(self._fd)
                with contextlib.suppress(FileNotFoundError):  # no WAL: its database
                    self._fd.append(os.open(self._paths[0], os.O_RDONLY))
            if self._fd:
                _datasync(self._fd[0])
            else:
                fd = os.open(self._paths[1], os.O_RDONLY)
                try:
                    _datasync(fd)
                finally:
                    os.close(fd)
        except OSError as exc:
            self._reopen = True
            raise StoreUnavailable(
                f"the database's disk failed to sync a commit ({exc.strerror or exc}); "
                "check the disk, then read the document back before writing again"
            ) from exc

    def _timed(self, took: float) -> None:
        """Account the duration of a loop's fsync (by the one caller that syncs at a
        time): too slow, or too slow on average, and the thread syncs for a while."""
        mean = took if self._fsync_s is None else self._fsync_s + (took - self._fsync_s) / 32
        self._timed_n += 1
        if took > self.SLOW_FSYNC_S or (mean > self.INLINE_FSYNC_S and self._timed_n >= 8):
            self._threaded_until = time.monotonic() + self.SLOW_HOLD_S
            self._fsync_s, self._timed_n = None, 0
        else:
            self._fsync_s = mean


_Done: TypeAlias = "asyncio.Future[None]"


def _close_all(fds: list[int]) -> None:
    while fds:
        with contextlib.suppress(OSError):
            os.close(fds.pop())


def _settle(futures: list[_Done], error: BaseException | None) -> None:
    for done in futures:
        if done.done():  # its request was cancelled
            continue
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)


@contextlib.contextmanager
def syncs_deferred(syncs: list[WalSync]) -> Iterator[None]:
    """The durable writes of the block do not sync the WAL themselves: each appends its
    :class:`WalSync` to ``syncs`` instead, for the caller to await (:meth:`WalSync.synced`)
    before it answers. For writes run on an event loop (``Runtime.writer_turn_now``),
    where an fsync would stop every request of the process, and inside the writers'
    turn, which the sync would otherwise hold."""
    token = _DEFERRED.set(syncs)
    try:
        yield
    finally:
        _DEFERRED.reset(token)


_DEFERRED: contextvars.ContextVar[list[WalSync] | None] = contextvars.ContextVar(
    "keepstone_deferred_syncs", default=None
)
_datasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)
_SYNCS: weakref.WeakKeyDictionary[Engine, WalSync | None] = weakref.WeakKeyDictionary()
_UNKNOWN = object()


def wal_sync(engine: Engine) -> WalSync | None:
    """The :class:`WalSync` of ``engine``'s SQLite database (one per engine in a process);
    None for a database with no file (``:memory:``), which nothing makes durable."""
    known = _SYNCS.get(engine, _UNKNOWN)  # every durable write asks: no lock once made
    if known is not _UNKNOWN:
        return known  # type: ignore[return-value]
    with _WRITERS_GUARD:
        if engine not in _SYNCS:
            sync = _SYNCS[engine] = _sync_for(str(engine.url.database or ""))
            if sync is not None:
                # A connection that closes may have been the database's last, whose close
                # removes the WAL: the next one makes another file.
                for name in ("close", "close_detached", "invalidate"):
                    event.listen(engine, name, lambda *_: sync.reopen())
        return _SYNCS[engine]


def _sync_for(database: str) -> WalSync | None:
    if database.startswith("file:"):  # a URI: its path, unless it names memory
        uri = urllib.parse.urlsplit(database)
        if "mode=memory" in uri.query or not uri.path:
            return None
        database = urllib.parse.unquote(uri.path)
    if not database or database == ":memory:":
        return None
    return WalSync(os.path.abspath(database))


def made_durable(engine: Engine) -> None:
    """Make the SQLite commits this thread made on ``engine`` durable before going on: sync
    the WAL (shared, :class:`WalSync`), or leave the sync to the caller that deferred it
    (:func:`syncs_deferred`). Call it after the commit, once the writers' turn is given
    back. PostgreSQL's commits are durable already."""
    sync = wal_sync(engine) if engine.dialect.name == "sqlite" else None
    if sync is None:
        return
    deferred = _DEFERRED.get()
    if deferred is None:
        sync.sync()
    else:
        deferred.append(sync)
