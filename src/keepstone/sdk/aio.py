"""``AsyncMemory``: :class:`~keepstone.sdk.memory.Memory` for asyncio code (docs/python.md).

Each method runs the matching :class:`Memory` call in a worker thread
(:func:`asyncio.to_thread`), so the event loop never waits on a disk or a socket. The
stores are safe to use from several threads at once (see :mod:`keepstone.sdk.memory`), so
calls may be gathered.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from datetime import datetime
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar, overload

from keepstone.sdk.memory import Destination, Memory
from keepstone.sdk.tools import AsyncTool
from keepstone.spaces import SpaceRef

P = ParamSpec("P")
R = TypeVar("R")
# An alias: the class below defines a method called ``list``.
AsyncTools = list[AsyncTool]


def _constructor(make: Callable[P, Memory]) -> Callable[P, AsyncMemory]:
    """The :class:`AsyncMemory` over what the :class:`Memory` constructor ``make`` opens."""

    @functools.wraps(make)
    def build(*args: P.args, **kwargs: P.kwargs) -> AsyncMemory:
        return AsyncMemory(make(*args, **kwargs))

    return build


def _in_thread(
    method: Callable[Concatenate[Memory, P], R],
) -> Callable[Concatenate[AsyncMemory, P], Coroutine[Any, Any, R]]:
    """The async form of a :class:`Memory` method: the same call, in a worker thread, so
    each async method keeps its sync twin's signature and docstring without restating them."""

    @functools.wraps(method)
    async def run(self: AsyncMemory, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, self.sync, *args, **kwargs)

    return run


def _passed_on(
    method: Callable[Concatenate[Memory, P], R],
) -> Callable[Concatenate[AsyncMemory, P], R]:
    """A :class:`Memory` method that does no I/O, as is (not async), on the memory underneath."""

    @functools.wraps(method)
    def call(self: AsyncMemory, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(self.sync, *args, **kwargs)

    return call


class AsyncMemory:
    """:class:`~keepstone.sdk.memory.Memory` with ``async`` methods, for asyncio.

    Same constructors (plain functions, not async: they only open files or a client), same
    methods, same results and errors; ``async with`` closes it. Each call runs the
    synchronous one in a worker thread (:func:`asyncio.to_thread`). A call whose task is
    cancelled still finishes in its thread: a write may land after the cancellation.
    """

    def __init__(self, memory: Memory) -> None:
        self._memory = memory

    local = staticmethod(_constructor(Memory.local))
    connect = staticmethod(_constructor(Memory.connect))

    @property
    def space(self) -> SpaceRef:
        """The space this memory reads and writes."""
        return self._memory.space

    @property
    def sync(self) -> Memory:
        """The synchronous :class:`Memory` underneath (same store, same space)."""
        return self._memory

    read = _in_thread(Memory.read)
    write = _in_thread(Memory.write)
    edit = _in_thread(Memory.edit)
    move = _in_thread(Memory.move)
    delete = _in_thread(Memory.delete)
    list = _in_thread(Memory.list)
    versions = _in_thread(Memory.versions)
    diff = _in_thread(Memory.diff)
    restore = _in_thread(Memory.restore)
    recent = _in_thread(Memory.recent)
    search = _in_thread(Memory.search)
    spaces = _in_thread(Memory.spaces)
    usage = _in_thread(Memory.usage)

    @overload
    async def export(self, dest: None = None, *, as_of: datetime | None = None) -> bytes: ...
    @overload
    async def export(self, dest: Destination, *, as_of: datetime | None = None) -> int: ...
    async def export(
        self, dest: Destination | None = None, *, as_of: datetime | None = None
    ) -> bytes | int:
        return await asyncio.to_thread(self._memory.export, dest, as_of=as_of)

    import_ = _in_thread(Memory.import_)

    def tools(self, *, read_only: bool = False) -> AsyncTools:
        """:meth:`Memory.tools <keepstone.Memory.tools>` with async calls:
        ``await tool(path="MEMORY.md")``, each in a worker thread."""
        return [AsyncTool(tool) for tool in self._memory.tools(read_only=read_only)]

    anthropic_tools = _passed_on(Memory.anthropic_tools)
    openai_tools = _passed_on(Memory.openai_tools)
    run_tool = _in_thread(Memory.run_tool)
    close = _in_thread(Memory.close)

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return "<Async" + repr(self._memory)[1:]
