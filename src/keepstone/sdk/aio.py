"""``AsyncMemory``: :class:`~keepstone.sdk.memory.Memory` for asyncio code (docs/python.md).

Each method runs the matching :class:`Memory` call in a worker thread
(:func:`asyncio.to_thread`), so the event loop never waits on a disk or a socket. The
stores are safe to use from several threads at once (see :mod:`keepstone.sdk.memory`), so
calls may be gathered.
"""

from __future__ import annotations

import asyncio
import os
from datetime import datetime
from types import TracebackType
from typing import overload

from keepstone.documents import Document, ImportReport, ImportStrategy, Usage, WriteResult
from keepstone.sdk.memory import Destination, Hits, Infos, Memory, Source, Versions
from keepstone.spaces import SpaceRef


class AsyncMemory:
    """:class:`~keepstone.sdk.memory.Memory` with ``async`` methods, for asyncio.

    Same constructors (plain class methods: they only open files or a client), same
    methods, same results and errors; ``async with`` closes it. Each call runs the
    synchronous one in a worker thread (:func:`asyncio.to_thread`). A call whose task is
    cancelled still finishes in its thread: a write may land after the cancellation.
    """

    def __init__(self, memory: Memory) -> None:
        self._memory = memory

    @classmethod
    def local(
        cls,
        bot: str | None = None,
        project: str | None = None,
        *,
        name: str = "default",
        visibility: str | None = None,
        user: str | None = None,
        home: str | os.PathLike[str] | None = None,
    ) -> AsyncMemory:
        """:meth:`Memory.local <keepstone.sdk.memory.Memory.local>`, async."""
        return cls(
            Memory.local(bot, project, name=name, visibility=visibility, user=user, home=home)
        )

    @classmethod
    def connect(
        cls,
        url: str,
        token: str | None = None,
        *,
        bot: str | None = None,
        project: str | None = None,
        name: str = "default",
        visibility: str | None = None,
    ) -> AsyncMemory:
        """:meth:`Memory.connect <keepstone.sdk.memory.Memory.connect>`, async."""
        return cls(
            Memory.connect(url, token, bot=bot, project=project, name=name, visibility=visibility)
        )

    @property
    def space(self) -> SpaceRef:
        """The space this memory reads and writes."""
        return self._memory.space

    @property
    def sync(self) -> Memory:
        """The synchronous :class:`Memory` underneath (same store, same space)."""
        return self._memory

    async def read(
        self, path: str, *, version: int | None = None, as_of: datetime | None = None
    ) -> Document:
        return await asyncio.to_thread(self._memory.read, path, version=version, as_of=as_of)

    async def write(self, path: str, content: str, *, if_match: str | None = None) -> WriteResult:
        return await asyncio.to_thread(self._memory.write, path, content, if_match=if_match)

    async def edit(
        self,
        path: str,
        old: str | None = None,
        new: str | None = None,
        *,
        insert_line: int | None = None,
        text: str | None = None,
        if_match: str | None = None,
    ) -> WriteResult:
        return await asyncio.to_thread(
            self._memory.edit, path, old, new, insert_line=insert_line, text=text, if_match=if_match
        )

    async def move(
        self, path: str, to: str, *, overwrite: bool = False, if_match: str | None = None
    ) -> WriteResult:
        return await asyncio.to_thread(
            self._memory.move, path, to, overwrite=overwrite, if_match=if_match
        )

    async def delete(self, path: str, *, if_match: str | None = None) -> None:
        await asyncio.to_thread(self._memory.delete, path, if_match=if_match)

    async def list(self, dir: str = "", *, as_of: datetime | None = None) -> Infos:
        return await asyncio.to_thread(self._memory.list, dir, as_of=as_of)

    async def versions(self, path: str) -> Versions:
        return await asyncio.to_thread(self._memory.versions, path)

    async def diff(self, path: str, from_: int, to: int | None = None) -> str:
        return await asyncio.to_thread(self._memory.diff, path, from_, to)

    async def restore(self, path: str, version: int, *, if_match: str | None = None) -> WriteResult:
        return await asyncio.to_thread(self._memory.restore, path, version, if_match=if_match)

    async def search(self, query: str, *, limit: int = 10, path_prefix: str = "") -> Hits:
        return await asyncio.to_thread(
            self._memory.search, query, limit=limit, path_prefix=path_prefix
        )

    async def usage(self) -> Usage:
        return await asyncio.to_thread(self._memory.usage)

    @overload
    async def export(self, dest: None = None, *, as_of: datetime | None = None) -> bytes: ...
    @overload
    async def export(self, dest: Destination, *, as_of: datetime | None = None) -> int: ...
    async def export(
        self, dest: Destination | None = None, *, as_of: datetime | None = None
    ) -> bytes | int:
        return await asyncio.to_thread(self._memory.export, dest, as_of=as_of)

    async def import_(
        self, source: Source, strategy: str = ImportStrategy.SKIP.value
    ) -> ImportReport:
        return await asyncio.to_thread(self._memory.import_, source, strategy)

    async def close(self) -> None:
        await asyncio.to_thread(self._memory.close)

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
