"""The vector blob codec (keepstone.db.vectors), exact top-k (keepstone.search.vectors) and the
bounded per-scope cache (keepstone.search.cache)."""

from __future__ import annotations

import functools
import math
import struct
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from keepstone.db.vectors import (
    QuantizedMatrix,
    VectorFormat,
    VectorFormatError,
    blob_size,
    decode,
    decode_many,
    decode_quantized,
    encode,
    encode_many,
    quantize,
)
from keepstone.search.cache import Entry, VectorCache
from keepstone.search.vectors import (
    BLAS_BLOCK_ELEMENTS,
    FLOAT32_BLAS_MAX_BYTES,
    MASK_GATHER_SHARE,
    normalize_rows,
    scores,
    top_k,
)

FLOAT32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
#: Components int8 holds: up to ~3.3e38 (its scale times 127 must stay finite); 2**123 ~ 1e37.
STORABLE = st.floats(-(2.0**123), 2.0**123, width=32)
FORMATS = st.sampled_from(list(VectorFormat))


def vectors(elements: st.SearchStrategy[float] = FLOAT32) -> st.SearchStrategy[np.ndarray]:
    return hnp.arrays(np.float32, st.integers(1, 48), elements=elements)


def unit_rows(n: int, dim: int = 384, seed: int = 0) -> np.ndarray:
    return normalize_rows(np.random.default_rng(seed).standard_normal((n, dim)))


def clustered_rows(n: int, spread: float, seed: int = 0, dim: int = 384) -> np.ndarray:
    """Unit vectors around 50 centres, each at noise ``spread`` from its centre."""
    rng = np.random.default_rng(seed)
    centres = unit_rows(50, dim, seed + 1)
    noise = unit_rows(n, dim, seed + 2)
    return normalize_rows(centres[rng.integers(0, 50, n)] + spread * noise)


def bits(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)


# -- codecs --------------------------------------------------------------------------


@settings(deadline=None)  # numpy's first calls are slow on a busy machine
@given(vectors())
def test_float32_round_trip_is_exact_to_the_bit(vector: np.ndarray) -> None:
    blob = encode(vector, VectorFormat.FLOAT32)
    assert len(blob) == blob_size(len(vector), "float32")
    assert np.array_equal(bits(decode(blob)), bits(vector))  # -0.0 and subnormals too


def test_blob_layout_is_a_tag_then_little_endian_values() -> None:
    assert encode([1.0, -2.0], "float32") == b"\x01" + struct.pack("<2f", 1.0, -2.0)
    blob = encode([0.6, -0.8, 0.0], "int8")
    assert blob[0] == 0x02 and len(blob) == 5 + 3 == blob_size(3, VectorFormat.INT8)
    (scale,) = struct.unpack("<f", blob[1:5])
    assert list(blob[5:]) == [95, 256 - 127, 0]  # round(0.6 * 127 / 0.8), -127, 0
    assert scale == pytest.approx(1.0 / math.hypot(95, 127))  # keeps the norm of 1


@settings(max_examples=300, deadline=None)
@given(vectors(STORABLE))
def test_int8_error_is_within_its_bound_and_the_norm_is_kept(vector: np.ndarray) -> None:
    peak = float(np.abs(vector).max())
    assume(peak == 0 or peak > 1e-30)  # below that the scale underflows to zero
    decoded = decode(encode(vector, "int8")).astype(np.float64)
    exact = vector.astype(np.float64)
    dim = len(vector)
    # |v - codes * s| <= sqrt(dim) * s / 2 with s = peak / 127, and moving the scale to
    # keep the norm costs at most as much again.
    bound = math.sqrt(dim) * peak / 127
    assert np.linalg.norm(decoded - exact) <= bound * 1.001 + 1e-37
    norm = np.linalg.norm(exact)
    assert abs(np.linalg.norm(decoded) - norm) <= 1e-5 * norm + 1e-37


def test_int8_cosines_on_unit_vectors_are_close() -> None:
    rows = unit_rows(2000)
    queries = unit_rows(20, seed=7)
    exact = rows @ queries.T
    approx = decode_many(encode_many(rows, "int8")) @ queries.T
    error = np.abs(approx - exact)
    assert error.max() < 0.01 and error.mean() < 0.002
    assert np.abs(np.linalg.norm(decode_many(encode_many(rows, "int8")), axis=1) - 1).max() < 1e-5


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 24), st.lists(FORMATS, min_size=1, max_size=12), st.data())
def test_decode_many_equals_decoding_one_by_one_in_any_mix(
    dim: int, formats: list[VectorFormat], data: st.DataObject
) -> None:
    rows = [data.draw(hnp.arrays(np.float32, dim, elements=STORABLE)) for _ in formats]
    blobs = [encode(row, fmt) for row, fmt in zip(rows, formats, strict=True)]
    matrix = decode_many(blobs)
    assert matrix.dtype == np.float32 and matrix.shape == (len(blobs), dim)
    assert np.array_equal(bits(matrix), bits(np.stack([decode(blob) for blob in blobs])))
    # memoryview and bytearray blobs (what drivers may hand back) decode alike
    assert np.array_equal(bits(decode_many([memoryview(b) for b in blobs])), bits(matrix))
    assert np.array_equal(bits(decode_many([bytearray(b) for b in blobs])), bits(matrix))


def test_decode_quantized_keeps_int8_blobs_as_stored_and_quantises_float32_ones() -> None:
    rows = unit_rows(10, dim=16)
    blobs = encode_many(rows[:5], "int8") + encode_many(rows[5:], "float32")
    quantized = decode_quantized(blobs)
    expected = quantize(rows)
    assert np.array_equal(quantized.codes, expected.codes)
    assert np.array_equal(quantized.scales, expected.scales)
    assert np.allclose(quantized.dequantize(), decode_many(encode_many(rows, "int8")))


def test_empty_inputs() -> None:
    assert decode_many([], dim=384).shape == (0, 384)
    assert decode_quantized([], dim=8).codes.shape == (0, 8)
    assert encode_many(np.empty((0, 4), np.float32)) == []
    assert len(quantize(np.empty((0, 4), np.float32))) == 0


@pytest.mark.parametrize(
    ("blobs", "message"),
    [
        ([b""], "empty"),
        ([b"\x07\x00\x00\x80\x3f"], "unknown vector format tag 0x07"),
        ([b"\x01\x00\x00\x80"], "float32 vector blob of 4 bytes"),
        ([b"\x01"], "float32 vector blob of 1 bytes"),
        ([b"\x02\x00\x00\x80\x3f"], "int8 vector blob of 5 bytes"),
        ([encode([1.0, 2.0]), encode([1.0, 2.0, 3.0])], "different dimensions"),
        ([encode([1.0, 2.0]), encode([1.0, 2.0, 3.0], "int8")], "different dimensions"),
        ([encode([1.0, 2.0]), b"\x09" + bytes(8)], "unknown vector format tag 0x09"),
    ],
)
def test_malformed_blobs_are_refused(blobs: list[bytes], message: str) -> None:
    with pytest.raises(VectorFormatError, match=message):
        decode_many(blobs)


@pytest.mark.parametrize(
    "vector", [[float("nan"), 1.0], [float("inf")], [], [[1.0, 2.0]], np.zeros((0,))]
)
@pytest.mark.parametrize("fmt", ["float32", "int8"])
def test_encode_refuses_what_cannot_be_stored(vector: object, fmt: str) -> None:
    with pytest.raises(VectorFormatError):
        encode(vector, fmt)  # type: ignore[arg-type]


def test_unknown_format_name_is_refused() -> None:
    with pytest.raises(ValueError, match="float16"):
        encode([1.0], "float16")


def test_zero_vector_encodes_to_zero() -> None:
    assert np.array_equal(decode(encode([0.0, 0.0], "int8")), [0.0, 0.0])
    assert np.allclose(normalize_rows([[0.0, 0.0], [3.0, 4.0]]), [[0, 0], [0.6, 0.8]])


def test_int8_refuses_a_vector_whose_decoding_would_overflow() -> None:
    largest = float(np.finfo(np.float32).max)
    with pytest.raises(VectorFormatError, match="too large"):
        encode([largest, 0.0], "int8")
    assert np.isfinite(decode(encode([1e38, -3e38], "int8"))).all()


# -- top-k ---------------------------------------------------------------------------


def brute_force(exact: list[int], k: int, mask: list[bool] | None) -> list[int]:
    rows = [i for i in range(len(exact)) if mask is None or mask[i]]
    return sorted(rows, key=lambda i: (-exact[i], i))[:k]


@st.composite
def integer_problems(
    draw: st.DrawFn,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, list[bool] | None]:
    """Small integer codes, power-of-two scales and an integer query: every dot product
    is exact in float32, so ties are real ties whatever the order of summation."""
    n = draw(st.integers(0, 40))
    dim = draw(st.integers(1, 6))
    codes = draw(hnp.arrays(np.int8, (n, dim), elements=st.integers(-2, 2)))
    scales = draw(hnp.arrays(np.float32, n, elements=st.sampled_from([0.5, 1.0, 2.0])))
    query = draw(hnp.arrays(np.float32, dim, elements=st.integers(-2, 2).map(float)))
    k = draw(st.integers(0, n + 2))
    mask = draw(st.none() | st.lists(st.booleans(), min_size=n, max_size=n))
    return codes, scales, query, k, mask


@settings(max_examples=400, deadline=None)
@given(integer_problems())
def test_top_k_equals_a_brute_force_sort_ties_by_row(
    problem: tuple[np.ndarray, np.ndarray, np.ndarray, int, list[bool] | None],
) -> None:
    codes, scales, query, k, mask = problem
    exact = [
        int(round(float(scales[i]) * 2))
        * sum(int(c) * int(q) for c, q in zip(codes[i], query, strict=True))
        for i in range(len(codes))
    ]  # twice the score, as an int
    expected = brute_force(exact, k, mask)
    as_float = codes.astype(np.float32) * scales[:, None]
    for matrix in (as_float, QuantizedMatrix(codes, scales)):
        indices, best = top_k(matrix, query, k, mask=mask)
        assert indices.dtype == np.int64 and best.dtype == np.float32
        assert indices.tolist() == expected
        assert [2 * s for s in best.tolist()] == [exact[i] for i in expected]


def test_ties_at_the_boundary_take_the_lowest_rows() -> None:
    matrix = np.ones((10_000, 4), np.float32)
    matrix[7777] = 2.0
    indices, best = top_k(matrix, np.ones(4, np.float32), 4)
    assert indices.tolist() == [7777, 0, 1, 2]
    assert best.tolist() == [8.0, 4.0, 4.0, 4.0]


@pytest.mark.parametrize("share", [0.01, MASK_GATHER_SHARE, 0.5, 1.0])
@pytest.mark.parametrize("quantized", [False, True])
def test_mask_on_both_paths_equals_top_k_over_the_masked_rows(
    share: float, quantized: bool
) -> None:
    rows = unit_rows(5000, dim=32)
    matrix = quantize(rows) if quantized else rows
    query = rows[123]
    mask = np.random.default_rng(3).random(5000) < share
    indices, best = top_k(matrix, query, 10, mask=mask)
    full = scores(matrix, query)
    allowed = np.flatnonzero(mask)
    expected = allowed[np.argsort(-full[allowed], kind="stable")[:10]]
    assert indices.tolist() == expected.tolist()
    assert np.allclose(best, full[expected], atol=1e-6)
    assert mask[indices].all()


def test_top_k_edges() -> None:
    rows = unit_rows(5, dim=8)
    assert top_k(rows, rows[0], 0)[0].tolist() == []
    assert sorted(top_k(rows, rows[0], 50)[0].tolist()) == [0, 1, 2, 3, 4]
    assert top_k(rows, rows[0], 3, mask=[False] * 5)[0].tolist() == []
    empty = np.empty((0, 8), np.float32)
    assert top_k(empty, rows[0], 3)[0].tolist() == []
    assert top_k(decode_quantized([], dim=8), rows[0], 3)[0].tolist() == []
    assert top_k(decode_many([]), rows[0], 3)[0].tolist() == []  # no rows, no dimension
    with pytest.raises(ValueError, match="k must"):
        top_k(rows, rows[0], -1)
    with pytest.raises(ValueError, match="one bool per row"):
        top_k(rows, rows[0], 3, mask=[True] * 4)
    with pytest.raises(VectorFormatError, match="query of 7 dimensions"):
        top_k(rows, rows[0][:7], 3)
    with pytest.raises(VectorFormatError, match="NaN"):
        top_k(rows, [float("nan")] * 8, 3)
    with pytest.raises(VectorFormatError, match="2-D float32"):
        top_k(rows.astype(np.float64), rows[0], 3)  # type: ignore[arg-type]


@pytest.mark.parametrize("rows", [1, 2000, FLOAT32_BLAS_MAX_BYTES // (4 * 384) + 1])
def test_float32_scores_by_blocks_or_einsum_equal_the_product(rows: int) -> None:
    matrix = unit_rows(rows)
    query = unit_rows(1, seed=3)[0]
    expected = matrix.astype(np.float64) @ query.astype(np.float64)
    assert np.allclose(scores(matrix, query), expected, atol=1e-6)


def test_int8_scores_in_blocks_equal_the_dequantised_product() -> None:
    rows = unit_rows(BLAS_BLOCK_ELEMENTS // 64 * 2 + 17, dim=64)
    quantized = quantize(rows)
    query = rows[5]
    assert np.allclose(scores(quantized, query), quantized.dequantize() @ query, atol=1e-6)


@pytest.mark.parametrize(("spread", "floor"), [(None, 0.95), (1.0, 0.95), (0.2, 0.9)])
def test_int8_top_10_recall_against_float32(spread: float | None, floor: float) -> None:
    rows = unit_rows(5000) if spread is None else clustered_rows(5000, spread)
    queries = rows[:50] + 0.3 * unit_rows(50, seed=9)
    quantized = quantize(rows)
    found = [
        len(set(top_k(rows, q, 10)[0].tolist()) & set(top_k(quantized, q, 10)[0].tolist()))
        for q in normalize_rows(queries)
    ]
    assert sum(found) / (10 * len(found)) >= floor


# -- the cache -----------------------------------------------------------------------


def entry(n: int, dim: int = 8, start: int = 0, seed: int = 0) -> Entry:
    return Entry(np.arange(start, start + n, dtype=np.int64), unit_rows(n, dim, seed))


class Loader:
    """A load callable that counts its calls."""

    def __init__(self, make: Callable[[], Entry], delay: float = 0.0) -> None:
        self.make, self.delay, self.calls = make, delay, 0
        self._lock = threading.Lock()

    def __call__(self) -> Entry:
        with self._lock:
            self.calls += 1
        time.sleep(self.delay)
        return self.make()


def test_entry_is_read_only_and_counts_its_bytes() -> None:
    e = entry(10)
    assert e.nbytes >= 10 * 8 + 10 * 8 * 4
    with pytest.raises(ValueError, match="read-only"):
        e.matrix[0, 0] = 1.0  # type: ignore[index]
    with pytest.raises(ValueError, match="read-only"):
        e.ids[0] = 5
    strings = Entry(np.array([f"rec_{i:032x}" for i in range(10)], dtype=object), unit_rows(10, 8))
    assert strings.nbytes > e.nbytes + 10 * 36  # the str objects are counted
    with pytest.raises(VectorFormatError, match="one id per row"):
        Entry(np.arange(3), unit_rows(4, 8))


def test_a_cached_entry_is_served_while_its_version_holds() -> None:
    cache = VectorCache(max_bytes=10**6)
    load = Loader(lambda: entry(4))
    first = cache.get("team-a", 1, load)
    assert cache.get("team-a", 1, load) is first and load.calls == 1
    # a caller that read the counter before the last bump: the newer entry serves it
    assert cache.get("team-a", 0, load) is first and load.calls == 1
    second = cache.get("team-a", 2, load)
    assert second is not first and load.calls == 2 and cache.version("team-a") == 2
    stats = cache.stats()
    assert (stats.hits, stats.loads, stats.entries) == (2, 2, 1)


def test_lru_evicts_the_least_recently_used_within_the_byte_bound() -> None:
    size = entry(10).nbytes
    cache = VectorCache(max_bytes=2 * size + size // 2)
    for scope in ("a", "b"):
        cache.get(scope, 1, lambda: entry(10))
    cache.get("a", 1, Loader(lambda: entry(10)))  # touch a: b is now the oldest
    cache.get("c", 1, lambda: entry(10))
    assert cache.scopes() == ["a", "c"]
    assert cache.stats().evictions == 1


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 60)), min_size=1, max_size=40))
def test_the_byte_bound_always_holds(gets: list[tuple[int, int]]) -> None:
    cache = VectorCache(max_bytes=8_000)
    for version, (scope, rows) in enumerate(gets):
        served = cache.get(scope, version, functools.partial(entry, rows))
        assert len(served) == rows
        stats = cache.stats()
        assert stats.bytes <= stats.max_bytes
        assert stats.bytes == sum(
            cache.get(s, 0, Loader(lambda: entry(0))).nbytes for s in cache.scopes()
        )


def test_an_entry_over_the_bound_is_served_but_not_kept() -> None:
    small, large = entry(2), entry(500)
    cache = VectorCache(max_bytes=small.nbytes * 3)
    assert cache.get("team", 1, lambda: small) is small
    load = Loader(lambda: large)
    assert cache.get("team", 2, load) is large  # served...
    assert cache.scopes() == [] and cache.stats().bytes == 0  # ...not kept, the stale one gone
    cache.get("team", 2, load)
    assert load.calls == 2 and cache.stats().oversize == 2


def test_concurrent_gets_of_one_scope_load_once() -> None:
    cache = VectorCache(max_bytes=10**6)
    load = Loader(lambda: entry(100), delay=0.1)
    served: list[Entry] = []

    def search() -> None:
        served.append(cache.get("team", 3, load))

    threads = [threading.Thread(target=search) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert load.calls == 1
    assert len(served) == 8 and all(e is served[0] for e in served)


def test_loads_of_different_scopes_run_in_parallel() -> None:
    cache = VectorCache(max_bytes=10**6)
    both_loading = threading.Barrier(2, timeout=5)

    def load() -> Entry:
        both_loading.wait()  # breaks (raises) if the other scope's load cannot start
        return entry(4)

    errors: list[BaseException] = []

    def search(scope: str) -> None:
        try:
            cache.get(scope, 1, load)
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=search, args=(s,)) for s in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and sorted(map(str, cache.scopes())) == ["a", "b"]


def test_a_failed_load_raises_and_the_next_caller_loads_again() -> None:
    cache = VectorCache(max_bytes=10**6)

    def broken() -> Entry:
        raise RuntimeError("database went away")

    with pytest.raises(RuntimeError, match="went away"):
        cache.get("team", 1, broken)
    assert cache.scopes() == []
    load = Loader(lambda: entry(3))
    cache.get("team", 1, load)
    assert load.calls == 1


def test_a_waiter_loads_for_itself_when_the_loader_it_waited_for_fails() -> None:
    cache = VectorCache(max_bytes=10**6)
    started = threading.Event()

    def failing() -> Entry:
        started.set()
        time.sleep(0.1)
        raise RuntimeError("timeout")

    errors: list[BaseException] = []

    def first() -> None:
        try:
            cache.get("team", 1, failing)
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=first)
    thread.start()
    started.wait(5)
    load = Loader(lambda: entry(3))
    served = cache.get("team", 1, load)  # waits for the failing load, then loads
    thread.join()
    assert len(errors) == 1 and load.calls == 1 and len(served) == 3


def test_extend_appends_only_onto_the_expected_version() -> None:
    cache = VectorCache(max_bytes=10**6)
    base = cache.get("team", 5, lambda: entry(3))
    delta = entry(2, start=100, seed=4)
    assert not cache.extend("team", 4, 6, delta)  # cached at 5, not 4
    assert not cache.extend("other", 5, 6, delta)  # not cached at all
    assert cache.extend("team", 5, 6, delta)
    load = Loader(lambda: entry(0))
    extended = cache.get("team", 6, load)
    assert load.calls == 0
    assert extended.ids.tolist() == [0, 1, 2, 100, 101]
    assert np.array_equal(extended.matrix, np.concatenate([base.matrix, delta.matrix]))  # type: ignore[list-item]
    with pytest.raises(ValueError, match="greater"):
        cache.extend("team", 6, 6, delta)


def test_extend_converts_the_new_rows_to_the_entry_format() -> None:
    rows = unit_rows(6, dim=8)
    quantized = Entry(np.arange(4), quantize(rows[:4]))
    grown = quantized.extended(Entry(np.arange(4, 6), rows[4:]))
    assert isinstance(grown.matrix, QuantizedMatrix)
    assert np.array_equal(grown.matrix.codes, quantize(rows).codes)
    plain = Entry(np.arange(4), rows[:4]).extended(Entry(np.arange(4, 6), quantize(rows[4:])))
    assert np.allclose(plain.matrix, rows, atol=0.01)  # type: ignore[arg-type]
    with pytest.raises(VectorFormatError, match="dimension"):
        quantized.extended(entry(1, dim=9))
    # a scope with no vectors yet (loaded from no blobs) grows from its first rows
    empty = Entry(np.empty(0, np.int64), decode_many([]))
    assert empty.extended(entry(2, dim=8)).matrix.shape == (2, 8)  # type: ignore[union-attr]
    assert quantized.extended(Entry(np.empty(0, np.int64), decode_many([]))) is quantized
    assert Entry(["a", "b"], rows[:2]).ids.tolist() == ["a", "b"]  # type: ignore[arg-type]


def test_load_since_extends_a_stale_entry_or_falls_back_to_a_full_load() -> None:
    cache = VectorCache(max_bytes=10**6)
    load = Loader(lambda: entry(3))
    asked: list[int] = []

    def since(version: int) -> Entry | None:
        asked.append(version)
        return entry(1, start=50) if version == 1 else None

    cache.get("team", 1, load, load_since=since)  # nothing cached: a full load
    assert asked == [] and load.calls == 1
    grown = cache.get("team", 2, load, load_since=since)
    assert asked == [1] and load.calls == 1 and grown.ids.tolist() == [0, 1, 2, 50]
    cache.get("team", 3, load, load_since=since)  # a delete since 2: reload
    assert asked == [1, 2] and load.calls == 2
    assert cache.stats().extends == 1


def test_discard_and_clear() -> None:
    cache = VectorCache(max_bytes=10**6)
    for scope in ("a", "b", ("space", 7)):
        cache.get(scope, 1, lambda: entry(2))
    cache.discard("a")
    assert cache.scopes() == ["b", ("space", 7)] and cache.version("a") is None
    cache.clear()
    assert cache.scopes() == [] and cache.stats().bytes == 0
