"""Group commit: concurrent callers of one process share one write transaction.

A record save costs little next to its commit (SQLite's lock and fsync, PostgreSQL's
round trip and WAL flush), and concurrent saves of one team would queue on the team's
search-version row anyway. :class:`GroupCommit` lets every waiting save ride the same
commit, the classic leader/follower way (LevelDB's writer queue)::

    saves = GroupCommit(write_group)      # write_group(items) -> one outcome per item
    record = saves.submit(item)           # returns once the item's group has committed

A caller appends its item to the queue. If no group is being written, it becomes the
*leader*: it takes everything queued (up to ``max_group``), runs ``run`` on it in its own
thread, hands each follower its outcome, and passes the lead to the first item still
queued, whose caller runs the next group. While a group is written, new items queue: the
group grows with the load, with no timer and no extra thread, and a lone caller pays
nothing but a lock.

A coroutine submits with :meth:`GroupCommit.submit_async`: it waits on its event loop, not
in a thread of its own, and no thread is woken to hand it its outcome. If no group is being
written, a worker thread is started to lead; a thread that leads writes the next group
itself when the first item queued is a coroutine's, and hands the lead to the first caller
in a thread as before. So a process whose saves come from the event loop (the HTTP face)
costs one thread hop per group, not one per save.

``run`` returns one outcome per item, in order: the item's value, or the exception that
item alone must raise (a refusal such as ``409 memory_off``), so one item's refusal never
fails the others. If ``run`` itself raises for a group of several items, each item is run
again alone, so an error that belongs to one item fails only that one; the error of a
group of one is that item's error. Nobody is answered before ``run`` has returned, so a
value is never handed out before the transaction that stored it has committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeAlias, TypeVar, cast

ItemT = TypeVar("ItemT")
ValueT = TypeVar("ValueT")

#: What ``run`` answers for one item: its value, or the exception it raises.
Outcome: TypeAlias = ValueT | BaseException


class _Slot(Generic[ItemT, ValueT]):
    __slots__ = ("done", "error", "future", "item", "lead", "loop", "value")

    def __init__(
        self,
        item: ItemT,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.item = item
        #: Set for a caller in a thread; a coroutine's slot has a future instead.
        self.done = threading.Event()
        self.loop = loop
        self.future: asyncio.Future[ValueT] | None = None if loop is None else loop.create_future()
        self.lead = False
        self.value: ValueT | None = None
        self.error: BaseException | None = None

    def finish(self) -> None:
        """Hand the caller its outcome (settled, or the lead for a thread's slot)."""
        if self.loop is None:
            self.done.set()
            return
        # The loop may be gone (a server shutting down): nobody is left to answer.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._resolve)

    def _resolve(self) -> None:
        future = self.future
        if future is None or future.done():  # the waiting request was cancelled
            return
        if self.error is not None:
            future.set_exception(self.error)
        else:
            future.set_result(cast(ValueT, self.value))


class GroupCommit(Generic[ItemT, ValueT]):
    """Runs concurrent :meth:`submit` calls in groups through ``run`` (see the module doc).

    ``max_group`` bounds a group, so one transaction stays short however deep the queue.
    """

    def __init__(
        self, run: Callable[[list[ItemT]], Sequence[Outcome[ValueT]]], *, max_group: int = 256
    ) -> None:
        if max_group < 1:
            raise ValueError("max_group must be at least 1")
        self._run = run
        self._max = max_group
        self._lock = threading.Lock()
        self._queue: list[_Slot[ItemT, ValueT]] = []
        # True while some caller leads; the queue is never left non-empty without one.
        self._leading = False

    def submit(self, item: ItemT) -> ValueT:
        """Run ``item`` in the next group and return its value, or raise its error."""
        slot: _Slot[ItemT, ValueT] = _Slot(item)
        with self._lock:
            self._queue.append(slot)
            lead = not self._leading
            self._leading = True
        if not lead:
            slot.done.wait()
            lead = slot.lead  # handed the lead, its group not yet written
        if lead:
            # The leader's own slot heads the queue, so it is in the group it writes.
            self._lead()
        if slot.error is not None:
            raise slot.error
        return cast(ValueT, slot.value)  # settled without an error: the item's value

    async def submit_async(self, item: ItemT) -> ValueT:
        """:meth:`submit` for a coroutine: it waits on its event loop for the outcome of
        ``item``'s group, which a thread writes (see the module doc)."""
        loop = asyncio.get_running_loop()
        slot: _Slot[ItemT, ValueT] = _Slot(item, loop)
        with self._lock:
            self._queue.append(slot)
            lead = not self._leading
            self._leading = True
        if lead:
            # A thread of the loop's executor leads (kept between groups); what escapes
            # it (an interruption) has failed the queued coroutines already.
            leading = loop.run_in_executor(None, self._lead)
            leading.add_done_callback(lambda done: done.cancelled() or done.exception())
        assert slot.future is not None  # a coroutine's slot
        # Cancelled (the client went away), the item is still written with its group.
        return await slot.future

    def _lead(self) -> None:
        """Write groups while the first item queued is a coroutine's; hand the lead to
        a caller in a thread, or give it up when the queue is empty."""
        try:
            while self._lead_one():
                pass
        except BaseException as exc:  # interrupted: no queued coroutine may wait forever
            with self._lock:
                waiting = [slot for slot in self._queue if slot.loop is not None]
                self._queue = [slot for slot in self._queue if slot.loop is None]
                if self._queue:
                    self._queue[0].lead = True
                    self._queue[0].done.set()
                else:
                    self._leading = False
            for slot in waiting:
                slot.error = exc
                slot.finish()
            raise

    def _lead_one(self) -> bool:
        with self._lock:
            group = self._queue[: self._max]
            del self._queue[: self._max]
        more = False
        try:
            self._settle(group)
        finally:
            with self._lock:
                if not self._queue:
                    self._leading = False
                elif self._queue[0].loop is None:
                    follower = self._queue[0]
                    follower.lead = True
                    follower.done.set()
                else:
                    more = True  # a coroutine waits first: this thread writes its group
            for slot in group:
                slot.lead = False
                slot.finish()
        return more

    def _settle(self, group: list[_Slot[ItemT, ValueT]]) -> None:
        try:
            outcomes = list(self._run([slot.item for slot in group]))
            if len(outcomes) != len(group):
                raise RuntimeError(f"{len(outcomes)} outcomes for a group of {len(group)}")
        except Exception as exc:
            if len(group) == 1:
                group[0].error = exc
                return
            # One item may have failed the whole group: each alone, so it fails alone.
            for slot in group:
                self._settle([slot])
            return
        except BaseException as exc:  # interrupted: nobody in the group may wait forever
            for slot in group:
                slot.error = exc
            raise
        for slot, outcome in zip(group, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                slot.error = outcome
            else:
                slot.value = outcome
