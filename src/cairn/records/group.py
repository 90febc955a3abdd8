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

``run`` returns one outcome per item, in order: the item's value, or the exception that
item alone must raise (a refusal such as ``409 memory_off``), so one item's refusal never
fails the others. If ``run`` itself raises for a group of several items, each item is run
again alone, so an error that belongs to one item fails only that one; the error of a
group of one is that item's error. Nobody is answered before ``run`` has returned, so a
value is never handed out before the transaction that stored it has committed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeAlias, TypeVar, cast

ItemT = TypeVar("ItemT")
ValueT = TypeVar("ValueT")

#: What ``run`` answers for one item: its value, or the exception it raises.
Outcome: TypeAlias = ValueT | BaseException


class _Slot(Generic[ItemT, ValueT]):
    __slots__ = ("done", "error", "item", "lead", "value")

    def __init__(self, item: ItemT) -> None:
        self.item = item
        self.done = threading.Event()
        self.lead = False
        self.value: ValueT | None = None
        self.error: BaseException | None = None


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

    def _lead(self) -> None:
        with self._lock:
            group = self._queue[: self._max]
            del self._queue[: self._max]
        try:
            self._settle(group)
        finally:
            with self._lock:
                if self._queue:
                    follower = self._queue[0]
                    follower.lead = True
                    follower.done.set()
                else:
                    self._leading = False
            for slot in group:
                slot.lead = False
                slot.done.set()

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
