"""A bounded in-process cache of per-scope vector matrices (docs/search.md).

:class:`VectorCache` keeps an :class:`Entry` (ids, matrix) per scope — a team's records,
a space's chunks — LRU by bytes, each stamped with the scope's version: a per-team
counter every replica reads cheaply from the database and the caller hands in.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from keepstone.db.vectors import QuantizedMatrix, VectorFormatError, quantize
from keepstone.search.vectors import Matrix, check_float32_matrix, matrix_dim, matrix_rows

#: Default bound of the vector cache (``KEEPSTONE_VECTOR_CACHE_MB``).
DEFAULT_CACHE_MB: Final = 256
#: What an entry costs beyond its arrays' bytes (objects, dict slot), for the bound.
ENTRY_OVERHEAD_BYTES: Final = 512


@dataclass(frozen=True, eq=False)
class Entry:
    """A scope's vectors: ``ids[i]`` names row ``i`` of ``matrix``. The arrays are made
    read-only: an entry is shared by every thread that searches the scope.

    ``ids`` is any 1-D array: int64 row ids cost 8 bytes a vector, fixed-width bytes
    (``S36``) their width; an object array of str costs ~90 bytes a vector and is
    counted by walking it once."""

    ids: npt.NDArray[Any]
    matrix: Matrix
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", np.asarray(self.ids))
        if not isinstance(self.matrix, QuantizedMatrix):
            check_float32_matrix(self.matrix)
        if self.ids.ndim != 1 or len(self.ids) != matrix_rows(self.matrix):
            raise VectorFormatError("an entry needs one id per row")
        arrays: list[npt.NDArray[Any]] = (
            [self.matrix.codes, self.matrix.scales]
            if isinstance(self.matrix, QuantizedMatrix)
            else [self.matrix]
        )
        for array in [self.ids, *arrays]:
            array.flags.writeable = False
        size = self.ids.nbytes + sum(a.nbytes for a in arrays) + ENTRY_OVERHEAD_BYTES
        if self.ids.dtype == object:
            size += sum(sys.getsizeof(item) for item in self.ids)
        object.__setattr__(self, "nbytes", int(size))

    def __len__(self) -> int:
        return len(self.ids)

    def extended(self, delta: Entry, *, ids: npt.NDArray[Any] | None = None) -> Entry:
        """This entry with ``delta``'s rows appended (converted to this entry's format);
        ``ids``: this entry's rows renamed so (one id a row), as when some are retired."""
        own = self.ids if ids is None else np.asarray(ids)
        if len(own) != len(self):
            raise VectorFormatError("an entry needs one id per row")
        if not len(delta):
            return self if ids is None else Entry(own, self.matrix)
        rows = _converted(delta.matrix, quantized=isinstance(self.matrix, QuantizedMatrix))
        if not len(self):
            return Entry(delta.ids, rows)
        if matrix_dim(rows) != matrix_dim(self.matrix):
            raise VectorFormatError("an extension of another dimension")
        return Entry(np.concatenate([own, delta.ids]), _concatenated(self.matrix, rows))


def _converted(matrix: Matrix, *, quantized: bool) -> Matrix:
    if quantized and not isinstance(matrix, QuantizedMatrix):
        return quantize(matrix)
    if not quantized and isinstance(matrix, QuantizedMatrix):
        return matrix.dequantize()
    return matrix


def _concatenated(first: Matrix, second: Matrix) -> Matrix:
    if isinstance(first, QuantizedMatrix) and isinstance(second, QuantizedMatrix):
        codes = np.concatenate([first.codes, second.codes])
        return QuantizedMatrix(codes, np.concatenate([first.scales, second.scales]))
    if isinstance(first, np.ndarray) and isinstance(second, np.ndarray):
        return np.concatenate([first, second])
    raise VectorFormatError("matrices of different formats")


@dataclass(frozen=True)
class CacheStats:
    entries: int
    bytes: int
    max_bytes: int
    hits: int
    loads: int
    extends: int
    evictions: int
    oversize: int


@dataclass
class _Slot:
    entry: Entry
    version: int


@dataclass
class _Gate:
    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0


class VectorCache:
    """Per-scope :class:`Entry` objects in one process, at most ``max_bytes`` in all.

    ``get(scope, version, load)`` returns the cached entry while it is *fresh*, its
    version at least ``version`` (versions are per-scope counters that only grow; an
    entry loaded after the counter read ``v`` holds everything up to ``v``); else it
    calls ``load()`` and stamps the result with ``version``. For that to hold, a
    writer must bump the counter in the transaction that changes the vectors, and
    ``load`` must read after the caller read the counter.

    Concurrency: one loader per scope at a time. Others asking for the same scope wait
    for it and take its entry, rather than search an old one: a search right after a
    save is then answered with the saved record, and the wait is one load, which they
    would otherwise each pay. Loads of different scopes run in parallel; a hit takes one
    short lock. A failed load
    raises to its caller; a waiter then loads for itself.

    Incremental updates: with ``load_since(cached_version)`` given, a stale entry is
    extended by the rows it returns (an :class:`Entry` of the new rows only), or
    reloaded in full when it returns None (a row deleted or replaced). :meth:`extend`
    does the same for a caller that already holds the new rows. At 20k vectors an
    extension copies the matrix once (a few ms) instead of reading 20k rows. With
    ``patch(stale_entry)`` given, the caller makes the new entry from the stale one (a
    document search whose rows changed in a few documents: their old vectors left
    unmatched, the new appended), or None to load.

    Eviction is least-recently-used by :attr:`Entry.nbytes`; an entry larger than the
    whole bound is returned to its caller but not kept.
    """

    def __init__(self, max_bytes: int = DEFAULT_CACHE_MB * 2**20) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be at least 0")
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._slots: OrderedDict[Hashable, _Slot] = OrderedDict()
        self._gates: dict[Hashable, _Gate] = {}
        self._bytes = 0
        self._hits = self._loads = self._extends = self._evictions = self._oversize = 0

    def get(
        self,
        scope: Hashable,
        version: int,
        load: Callable[[], Entry],
        *,
        load_since: Callable[[int], Entry | None] | None = None,
        patch: Callable[[Entry], Entry | None] | None = None,
    ) -> Entry:
        """The scope's entry at ``version`` or newer, loading (or extending) it when the
        cached one is older or absent. ``patch(stale)``, when given, makes the new entry
        from the stale one itself (None: it cannot, and ``load()`` does)."""
        with self._lock:
            hit = self._fresh(scope, version)
        if hit is not None:
            return hit
        with self._gate(scope):
            with self._lock:
                hit = self._fresh(scope, version)  # loaded while we waited
                stale = self._slots.get(scope)
            if hit is not None:
                return hit
            entry = None
            if load_since is not None and stale is not None:
                delta = load_since(stale.version)
                if delta is not None:
                    entry = stale.entry.extended(delta)
            if patch is not None and stale is not None:
                entry = patch(stale.entry)
            extended = entry is not None
            if entry is None:
                entry = load()
            with self._lock:
                if extended:
                    self._extends += 1
                else:
                    self._loads += 1
                self._install(scope, version, entry)
            return entry

    def extend(self, scope: Hashable, base_version: int, new_version: int, delta: Entry) -> bool:
        """Append ``delta``'s rows to the scope's entry if it is cached at exactly
        ``base_version``, stamping it ``new_version``; False (nothing done) otherwise."""
        if new_version <= base_version:
            raise ValueError("new_version must be greater than base_version")
        with self._gate(scope):
            with self._lock:
                slot = self._slots.get(scope)
            if slot is None or slot.version != base_version:
                return False
            entry = slot.entry.extended(delta)
            with self._lock:
                self._extends += 1
                self._install(scope, new_version, entry)
            return True

    def version(self, scope: Hashable) -> int | None:
        """The cached entry's version (None when not cached); does not touch the LRU."""
        with self._lock:
            slot = self._slots.get(scope)
            return None if slot is None else slot.version

    def discard(self, scope: Hashable) -> None:
        """Forget the scope (a deleted team or space)."""
        with self._gate(scope), self._lock:
            self._drop(scope)

    def clear(self) -> None:
        with self._lock:
            self._slots.clear()
            self._bytes = 0

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                entries=len(self._slots),
                bytes=self._bytes,
                max_bytes=self.max_bytes,
                hits=self._hits,
                loads=self._loads,
                extends=self._extends,
                evictions=self._evictions,
                oversize=self._oversize,
            )

    def scopes(self) -> list[Hashable]:
        """Cached scopes, least recently used first."""
        with self._lock:
            return list(self._slots)

    # Everything below runs with self._lock held.

    def _fresh(self, scope: Hashable, version: int) -> Entry | None:
        slot = self._slots.get(scope)
        if slot is None or slot.version < version:
            return None
        self._slots.move_to_end(scope)
        self._hits += 1
        return slot.entry

    def _install(self, scope: Hashable, version: int, entry: Entry) -> None:
        old = self._slots.get(scope)
        if old is not None and old.version > version:
            return  # never replace a newer entry with an older stamp
        self._drop(scope)
        if entry.nbytes > self.max_bytes:
            self._oversize += 1
            return
        self._slots[scope] = _Slot(entry, version)
        self._bytes += entry.nbytes
        while self._bytes > self.max_bytes:
            _, evicted = self._slots.popitem(last=False)
            self._bytes -= evicted.entry.nbytes
            self._evictions += 1

    def _drop(self, scope: Hashable) -> None:
        slot = self._slots.pop(scope, None)
        if slot is not None:
            self._bytes -= slot.entry.nbytes

    @contextmanager
    def _gate(self, scope: Hashable) -> Iterator[None]:
        """Hold the scope's loader lock (a lock per scope, kept while anyone uses it)."""
        with self._lock:
            gate = self._gates.get(scope)
            if gate is None:
                gate = self._gates[scope] = _Gate()
            gate.users += 1
        try:
            with gate.lock:
                yield
        finally:
            with self._lock:
                gate.users -= 1
                if gate.users == 0:
                    del self._gates[scope]
