"""Bridges between the async HTTP layer and the store's blocking, file-like export/import.

Both keep memory flat: a bounded queue of chunks for export, one chunk at a time for
import. Neither touches the filesystem.
"""

from __future__ import annotations

import io
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import BinaryIO, cast

import anyio.from_thread

from keepstone.errors import ImportTooLarge

_DONE = object()
_CHUNK_QUEUE = 8


class _Cancelled(Exception):
    """The client went away: stop producing."""


class _QueueSink(io.RawIOBase):
    def __init__(self, q: queue.Queue[object], stop: threading.Event) -> None:
        self._q = q
        self._stop = stop

    def writable(self) -> bool:
        return True

    def write(self, b: object) -> int:
        data = bytes(cast(bytes, b))
        while True:
            if self._stop.is_set():
                raise _Cancelled()
            try:
                self._q.put(data, timeout=0.5)
                return len(data)
            except queue.Full:
                continue


def iter_export(export: Callable[[BinaryIO], object]) -> Iterator[bytes]:
    """Run ``export(sink)`` in a thread and yield what it writes, as it writes it.

    The consumer (Starlette iterates a sync iterator in its thread pool) and the
    producer meet on a queue of a few chunks. Closing the iterator (client gone)
    stops the producer at its next write.
    """
    q: queue.Queue[object] = queue.Queue(maxsize=_CHUNK_QUEUE)
    stop = threading.Event()
    failure: list[BaseException] = []

    def produce() -> None:
        sink = _QueueSink(q, stop)
        try:
            export(cast(BinaryIO, io.BufferedWriter(sink, buffer_size=64 * 1024)))
        except _Cancelled:
            return
        except BaseException as exc:  # handed to the consumer, which logs it
            failure.append(exc)
        while not stop.is_set():
            try:
                q.put(_DONE, timeout=0.5)
                return
            except queue.Full:
                continue

    worker = threading.Thread(target=produce, name="keepstone-export", daemon=True)
    worker.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                break
            yield cast(bytes, item)
        if failure:
            raise failure[0]
    finally:
        stop.set()


class AsyncBodyReader(io.RawIOBase):
    """A blocking, read-only file over an async request body, for a worker thread.

    Each ``readinto`` that runs dry fetches the next chunk from the event loop
    (``anyio.from_thread.run``). More than ``limit`` bytes raise ImportTooLarge, kept
    in ``refused`` (so the caller can report it even if a parser wrapped it).
    """

    def __init__(self, chunks: AsyncIterator[bytes], limit: int) -> None:
        self._chunks = chunks
        self._buf = b""
        self._eof = False
        self.limit = limit
        self.seen = 0
        self.refused: ImportTooLarge | None = None

    def readable(self) -> bool:
        return True

    async def _next(self) -> bytes:
        try:
            return await self._chunks.__anext__()
        except StopAsyncIteration:
            return b""

    def readinto(self, b: object) -> int:
        view = memoryview(cast(bytearray, b))
        while not self._buf and not self._eof:
            chunk = anyio.from_thread.run(self._next)
            if not chunk:
                self._eof = True
                break
            self.seen += len(chunk)
            if self.seen > self.limit:
                self.refused = ImportTooLarge(
                    f"the import upload is over {self.limit} bytes (KEEPSTONE_MAX_IMPORT_BYTES)",
                    quota_bytes=self.limit,
                )
                raise self.refused
            self._buf = chunk
        n = min(len(view), len(self._buf))
        view[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n
