"""Vectors beside their record or chunk: blob codecs, exact top-k, a bounded per-scope cache.

Pure computation, no I/O: the caller reads the blobs and the per-team version counter
from the database and hands both in (docs/search.md). Figures: ``bench/bench_vectors.py``.

**Blobs** lead with a one-byte format tag, so one column holds either format::

    float32   0x01 | dim x float32 LE                    1 + 4*dim bytes, exact
    int8      0x02 | scale float32 LE | dim x int8       5 + dim bytes

int8 is symmetric per-vector quantisation, ``codes = round(v * 127 / max|v|)``, with the
stored scale ``|v| / |codes|`` rather than ``max|v| / 127``: a decoded vector keeps its
norm, so it errs only in direction. On tight clusters (top-10 cosines within 0.004)
that lifts int8's top-10 recall against float32 from 0.88 to 0.96; elsewhere ~0.99.

**Scoring** (dot products: rows and query are unit vectors) never lets BLAS start
threads: on a busy two-core machine OpenBLAS's threaded product took 15 ms for 2k x 384
rows that one thread does in 0.05 ms. BLAS gets blocks of :data:`BLAS_BLOCK_ELEMENTS`,
below its threading threshold (a block twice that size was threaded, 25x slower).

* float32 up to :data:`FLOAT32_BLAS_MAX_BYTES` (in the CPU's cache): BLAS by blocks,
  twice numpy's ``einsum`` (0.05 vs 0.11 ms at 2k). Larger: ``einsum``, numpy's own
  kernel, streams twice as fast as one BLAS thread (1.2 vs 2.3 ms at 20k, 6.3 vs 12.6
  at 100k).
* int8: each block converted to float32 in one reused buffer, never the whole matrix
  (3-4x slower). About float32's speed at a quarter of the bytes.

:func:`top_k` orders by score, then by row index: ties are deterministic. The cache of
per-scope matrices is :mod:`keepstone.search.cache`.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import numpy as np
import numpy.typing as npt

Float32Array: TypeAlias = npt.NDArray[np.float32]
Int8Array: TypeAlias = npt.NDArray[np.int8]
IndexArray: TypeAlias = npt.NDArray[np.int64]
Blob: TypeAlias = bytes | bytearray | memoryview

#: Values per BLAS product: 1,024 rows at dim 384, the best of 256-2,048 rows measured
#: for int8, and below OpenBLAS's threading threshold (see the module doc).
BLAS_BLOCK_ELEMENTS: Final = 1024 * 384
#: Up to this size a float32 matrix is scored by BLAS in blocks, above it by einsum
#: (measured crossover 5k-10k rows at dim 384: 7.5-15 MB).
FLOAT32_BLAS_MAX_BYTES: Final = 8 * 2**20
#: Score only the masked rows (a gathered copy) when they are at most this share of
#: all rows; above it, score every row and index (measured crossover ~10-20 %).
MASK_GATHER_SHARE: Final = 0.125
#: Rows quantised at a time (bounds the temporary float32 copies).
_QUANTIZE_BLOCK_ROWS: Final = 4096


class VectorFormatError(ValueError):
    """A blob that is no vector of a known format, vectors of unequal dimension, or
    values that cannot be stored (not finite)."""


class VectorFormat(enum.Enum):
    """How a vector is stored; the value is the setting's spelling."""

    FLOAT32 = "float32"
    INT8 = "int8"

    @property
    def tag(self) -> int:
        """The blob's first byte."""
        return _TAG_OF[self]


_TAG_OF: Final = {VectorFormat.FLOAT32: 0x01, VectorFormat.INT8: 0x02}
_FORMAT_OF_TAG: Final = {tag: fmt for fmt, tag in _TAG_OF.items()}


def blob_size(dim: int, fmt: VectorFormat | str) -> int:
    """Bytes of one encoded vector of ``dim`` dimensions."""
    return 1 + 4 * dim if VectorFormat(fmt) is VectorFormat.FLOAT32 else 5 + dim


def _record_dtype(fmt: VectorFormat, dim: int) -> np.dtype[Any]:
    # Packed (unaligned) records, byte for byte the blob layout.
    if fmt is VectorFormat.FLOAT32:
        return np.dtype([("tag", "u1"), ("vector", "<f4", (dim,))])
    return np.dtype([("tag", "u1"), ("scale", "<f4"), ("codes", "i1", (dim,))])


def _dim_of(fmt: VectorFormat, length: int) -> int:
    body = length - (1 if fmt is VectorFormat.FLOAT32 else 5)
    if fmt is VectorFormat.FLOAT32:
        if body <= 0 or body % 4:
            raise VectorFormatError(f"a float32 vector blob of {length} bytes")
        return body // 4
    if body <= 0:
        raise VectorFormatError(f"an int8 vector blob of {length} bytes")
    return body


# -- matrices ------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class QuantizedMatrix:
    """Rows of int8 codes, each with its float32 scale: row ``i`` is
    ``codes[i] * scales[i]``."""

    codes: Int8Array
    scales: Float32Array

    def __post_init__(self) -> None:
        if self.codes.dtype != np.int8 or self.codes.ndim != 2:
            raise VectorFormatError("codes must be a 2-D int8 array")
        if self.scales.dtype != np.float32 or self.scales.shape != self.codes.shape[:1]:
            raise VectorFormatError("scales must be float32, one per row")

    def __len__(self) -> int:
        return int(self.codes.shape[0])

    @property
    def dim(self) -> int:
        return int(self.codes.shape[1])

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + self.scales.nbytes)

    def dequantize(self) -> Float32Array:
        """The float32 rows (a new array of 4x the bytes)."""
        out = self.codes.astype(np.float32)
        out *= self.scales[:, None]
        return out

    def take(self, rows: IndexArray) -> QuantizedMatrix:
        return QuantizedMatrix(self.codes[rows], self.scales[rows])


#: What :func:`top_k` scores and an :class:`Entry` holds: float32 rows, or int8 rows.
Matrix: TypeAlias = Float32Array | QuantizedMatrix


def _rows(matrix: Matrix) -> int:
    return len(matrix) if isinstance(matrix, QuantizedMatrix) else int(matrix.shape[0])


def _dim(matrix: Matrix) -> int:
    return matrix.dim if isinstance(matrix, QuantizedMatrix) else int(matrix.shape[1])


def _check_float32_matrix(matrix: Float32Array) -> None:
    if matrix.dtype != np.float32 or matrix.ndim != 2:
        raise VectorFormatError("a matrix must be 2-D float32 or a QuantizedMatrix")


def _as_finite(values: npt.ArrayLike, ndim: int) -> Float32Array:
    array = np.asarray(values, dtype=np.float32)
    if array.ndim != ndim or array.shape[-1] == 0:
        raise VectorFormatError(f"expected a {ndim}-D array of at least one dimension")
    if not np.isfinite(array).all():
        raise VectorFormatError("a vector holds NaN or infinity")
    return array


def normalize_rows(matrix: npt.ArrayLike) -> Float32Array:
    """Float32 rows scaled to unit length (zero rows stay zero)."""
    m = _as_finite(matrix, 2)
    norms = np.sqrt(np.einsum("ij,ij->i", m, m, dtype=np.float64))
    inverse = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    out: Float32Array = (m * inverse[:, None]).astype(np.float32)
    return out


def quantize(matrix: npt.ArrayLike) -> QuantizedMatrix:
    """Float rows to int8 codes and norm-preserving scales (see the module doc)."""
    m = _as_finite(matrix, 2)
    n, dim = m.shape
    codes = np.empty((n, dim), dtype=np.int8)
    scales = np.empty(n, dtype=np.float32)
    for start in range(0, n, _QUANTIZE_BLOCK_ROWS):
        block = m[start : start + _QUANTIZE_BLOCK_ROWS]
        peak = np.abs(block).max(axis=1)
        # Divide by the peak first: every value lands in [-1, 1] (IEEE division is
        # correctly rounded), so nothing overflows or underflows, whatever the range.
        unit = block / np.where(peak > 0, peak, np.float32(1))[:, None]
        rounded = np.rint(unit * np.float32(127))
        unit_norm = np.sqrt(np.einsum("ij,ij->i", unit, unit).astype(np.float64))
        code_norm = np.sqrt(np.einsum("ij,ij->i", rounded, rounded).astype(np.float64))
        ratio = np.divide(unit_norm, code_norm, out=np.zeros_like(unit_norm), where=code_norm > 0)
        scale = (peak.astype(np.float64) * ratio).astype(np.float32)
        if (scale.astype(np.float64) * 127 > np.finfo(np.float32).max).any():
            raise VectorFormatError("a vector too large for the int8 format")
        codes[start : start + _QUANTIZE_BLOCK_ROWS] = rounded
        scales[start : start + _QUANTIZE_BLOCK_ROWS] = scale
    return QuantizedMatrix(codes, scales)


# -- codecs --------------------------------------------------------------------------


def encode(vector: npt.ArrayLike, fmt: VectorFormat | str = VectorFormat.FLOAT32) -> bytes:
    """One vector as a tagged blob."""
    return encode_many(_as_finite(vector, 1)[None, :], fmt)[0]


def encode_many(
    matrix: npt.ArrayLike, fmt: VectorFormat | str = VectorFormat.FLOAT32
) -> list[bytes]:
    """Each row as a tagged blob (one pass over the matrix, no loop per element)."""
    fmt = VectorFormat(fmt)
    m = _as_finite(matrix, 2)
    n, dim = m.shape
    records = np.empty(n, dtype=_record_dtype(fmt, dim))
    records["tag"] = fmt.tag
    if fmt is VectorFormat.FLOAT32:
        records["vector"] = m
    else:
        quantized = quantize(m)
        records["scale"] = quantized.scales
        records["codes"] = quantized.codes
    raw = records.tobytes()
    size = records.dtype.itemsize
    return [raw[i * size : (i + 1) * size] for i in range(n)]


def decode(blob: Blob) -> Float32Array:
    """One blob back to a float32 vector (exact for float32, dequantised for int8)."""
    vector: Float32Array = decode_many([blob])[0]
    return vector


def _groups(blobs: Sequence[Blob]) -> Iterator[tuple[IndexArray | None, VectorFormat, Any]]:
    """The blobs as packed record arrays, one per (format, length); the first item is
    the rows they fill (None: all of them, in order)."""
    lengths = set(map(len, blobs))
    if 0 in lengths:
        raise VectorFormatError("an empty vector blob")
    if len(lengths) == 1:
        tag = blobs[0][0]
        records = _parse(b"".join(blobs), tag, lengths.pop())
        if (records["tag"] == tag).all():
            yield None, _FORMAT_OF_TAG[tag], records
            return
    by_kind: dict[tuple[int, int], list[int]] = {}
    for row, blob in enumerate(blobs):
        by_kind.setdefault((blob[0], len(blob)), []).append(row)
    for (tag, length), rows in by_kind.items():
        records = _parse(b"".join(blobs[row] for row in rows), tag, length)
        yield np.asarray(rows, dtype=np.int64), _FORMAT_OF_TAG[tag], records


def _parse(raw: bytes, tag: int, length: int) -> Any:
    fmt = _FORMAT_OF_TAG.get(tag)
    if fmt is None:
        raise VectorFormatError(f"unknown vector format tag {tag:#04x}")
    return np.frombuffer(raw, dtype=_record_dtype(fmt, _dim_of(fmt, length)))


def _group_dim(fmt: VectorFormat, records: Any) -> int:
    field_name = "vector" if fmt is VectorFormat.FLOAT32 else "codes"
    return int(records.dtype[field_name].shape[0])


def _common_dim(groups: list[tuple[IndexArray | None, VectorFormat, Any]]) -> int:
    dims = {_group_dim(fmt, records) for _, fmt, records in groups}
    if len(dims) != 1:
        raise VectorFormatError(f"vectors of different dimensions {sorted(dims)}")
    return dims.pop()


def decode_many(blobs: Sequence[Blob], dim: int = 0) -> Float32Array:
    """Blobs (either format, mixed) to one float32 matrix, a row per blob; ``dim``
    shapes the empty matrix when there are no blobs."""
    if not blobs:
        return np.empty((0, dim), dtype=np.float32)
    groups = list(_groups(blobs))
    out = np.empty((len(blobs), _common_dim(groups)), dtype=np.float32)
    for rows, fmt, records in groups:
        where = slice(None) if rows is None else rows
        # Through a byte view of the records: 2-10x faster than the packed fields.
        raw = records.view(np.uint8).reshape(len(records), -1)
        if fmt is VectorFormat.INT8:
            vectors = raw[:, 5:].view(np.int8).astype(np.float32)
            vectors *= records["scale"][:, None]
            out[where] = vectors
        elif sys.byteorder == "little":
            out.view(np.uint8).reshape(len(out), -1)[where] = raw[:, 1:]
        else:
            out[where] = records["vector"]
    return out


def decode_quantized(blobs: Sequence[Blob], dim: int = 0) -> QuantizedMatrix:
    """Blobs to int8 rows for the cache: int8 blobs as stored, float32 blobs quantised."""
    if not blobs:
        return QuantizedMatrix(np.empty((0, dim), np.int8), np.empty(0, np.float32))
    groups = list(_groups(blobs))
    codes = np.empty((len(blobs), _common_dim(groups)), dtype=np.int8)
    scales = np.empty(len(blobs), dtype=np.float32)
    for rows, fmt, records in groups:
        where = slice(None) if rows is None else rows
        if fmt is VectorFormat.FLOAT32:
            quantized = quantize(records["vector"])
            codes[where], scales[where] = quantized.codes, quantized.scales
        else:
            codes[where], scales[where] = records["codes"], records["scale"]
    return QuantizedMatrix(codes, scales)


# -- exact top-k ---------------------------------------------------------------------


def scores(matrix: Matrix, query: npt.ArrayLike) -> Float32Array:
    """Every row's dot product with ``query`` (cosines, for unit rows and query)."""
    n, dim = _rows(matrix), _dim(matrix)
    q = _as_finite(query, 1)
    if isinstance(matrix, np.ndarray):
        _check_float32_matrix(matrix)
    if n == 0:
        return np.empty(0, dtype=np.float32)
    if q.shape[0] != dim:
        raise VectorFormatError(f"a query of {q.shape[0]} dimensions for rows of {dim}")
    if isinstance(matrix, QuantizedMatrix):
        return _int8_scores(matrix, q)
    if matrix.nbytes > FLOAT32_BLAS_MAX_BYTES:
        product: Float32Array = np.einsum("ij,j->i", matrix, q)
        return product
    out = np.empty(n, dtype=np.float32)
    block_rows = max(1, BLAS_BLOCK_ELEMENTS // dim)
    for start in range(0, n, block_rows):
        np.matmul(matrix[start : start + block_rows], q, out=out[start : start + block_rows])
    return out


def _int8_scores(matrix: QuantizedMatrix, q: Float32Array) -> Float32Array:
    n, dim = len(matrix), matrix.dim
    out = np.empty(n, dtype=np.float32)
    block_rows = max(1, BLAS_BLOCK_ELEMENTS // dim)
    buffer = np.empty((min(block_rows, n), dim), dtype=np.float32)
    for start in range(0, n, block_rows):
        block = matrix.codes[start : start + block_rows]
        converted = buffer[: len(block)]
        np.copyto(converted, block)
        np.matmul(converted, q, out=out[start : start + len(block)])
    out *= matrix.scales
    return out


def top_k(
    matrix: Matrix,
    query: npt.ArrayLike,
    k: int,
    *,
    mask: npt.ArrayLike | None = None,
) -> tuple[IndexArray, Float32Array]:
    """The ``k`` best rows for ``query``: (row indices, scores), best first; equal
    scores in row order. ``mask`` (a bool per row) limits the candidates to the rows
    it marks True; fewer than ``k`` candidates return them all."""
    if k < 0:
        raise ValueError("k must be at least 0")
    if mask is None:
        return _select(scores(matrix, query), k)
    eligible = np.asarray(mask, dtype=bool)
    if eligible.shape != (_rows(matrix),):
        raise ValueError("the mask must hold one bool per row")
    candidates = np.flatnonzero(eligible).astype(np.int64)
    if len(candidates) <= MASK_GATHER_SHARE * len(eligible):
        gathered = (
            matrix.take(candidates) if isinstance(matrix, QuantizedMatrix) else matrix[candidates]
        )
        candidate_scores = scores(gathered, query)
    else:
        candidate_scores = scores(matrix, query)[candidates]
    picked, best = _select(candidate_scores, k)
    return candidates[picked], best


def _select(values: Float32Array, k: int) -> tuple[IndexArray, Float32Array]:
    n = len(values)
    k = min(k, n)
    if k == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    if k < n:
        chosen = np.argpartition(values, n - k)[n - k :]
        kth = values[chosen].min()
        above = int(np.count_nonzero(values > kth))
        if int(np.count_nonzero(values == kth)) > k - above:
            # More rows tie with the k-th score than there are places: take the
            # lowest-numbered, so the answer does not depend on the partition.
            chosen = np.concatenate(
                [np.flatnonzero(values > kth), np.flatnonzero(values == kth)[: k - above]]
            )
    else:
        chosen = np.arange(n)
    order = np.lexsort((chosen, -values[chosen]))
    picked = chosen[order].astype(np.int64)
    return picked, values[picked]
