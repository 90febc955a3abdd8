"""The rows of a scope never keep a vector matrix alive that the vector cache dropped:
the cache's bound in bytes is the bound (docs/search.md, "Vectors: storage and the cache")."""

from __future__ import annotations

import gc
import weakref

import numpy as np

from keepstone.search.cache import Entry, VectorCache
from keepstone.search.hybrid import RowMap


def _entry(n: int, seed: int) -> Entry:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((n, 8)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return Entry(np.arange(n, dtype=np.int64), matrix)


def test_an_entry_the_cache_dropped_is_freed_though_its_rows_remember_it() -> None:
    cache = VectorCache(max_bytes=_entry(100, 0).nbytes + 1024)  # room for one entry
    row_maps = {scope: RowMap({i: i for i in range(100)}) for scope in ("a", "b")}
    first = cache.get("a", 1, lambda: _entry(100, 1))
    rows = row_maps["a"].rows_of(first)
    assert rows.tolist() == list(range(100))
    assert row_maps["a"].rows_of(first) is rows  # remembered while the entry lives
    gone = weakref.ref(first)
    del first
    cache.get("b", 1, lambda: _entry(100, 2))  # evicts "a"
    gc.collect()
    assert cache.version("a") is None
    assert gone() is None, "the rows kept a dropped matrix alive"
    again = cache.get("a", 1, lambda: _entry(100, 3))
    assert row_maps["a"].rows_of(again).tolist() == list(range(100))  # mapped afresh
