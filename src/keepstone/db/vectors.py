"""The vector blob: how a vector is stored beside its record or chunk, in every
``embedding`` column (docs/search.md).

Pure computation, no I/O. A blob leads with a one-byte format tag, so one column holds
either format::

    float32   0x01 | dim x float32 LE                    1 + 4*dim bytes, exact
    int8      0x02 | scale float32 LE | dim x int8       5 + dim bytes

int8 is symmetric per-vector quantisation, ``codes = round(v * 127 / max|v|)``, with the
stored scale ``|v| / |codes|`` rather than ``max|v| / 127``: a decoded vector keeps its
norm, so it errs only in direction; on tight clusters of vectors it keeps noticeably
more of the float32 ranking than the plain scale (bench/bench_vectors.py).

Scoring the decoded vectors is :mod:`keepstone.search.vectors`'s; pgvector's text form of
a vector is :mod:`keepstone.db.pgvector`'s.
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


def as_finite(values: npt.ArrayLike, ndim: int) -> Float32Array:
    """``values`` as a float32 array of ``ndim`` dimensions (the last one not empty), or
    :class:`VectorFormatError` when they hold NaN or infinity."""
    array = np.asarray(values, dtype=np.float32)
    if array.ndim != ndim or array.shape[-1] == 0:
        raise VectorFormatError(f"expected a {ndim}-D array of at least one dimension")
    if not np.isfinite(array).all():
        raise VectorFormatError("a vector holds NaN or infinity")
    return array


def quantize(matrix: npt.ArrayLike) -> QuantizedMatrix:
    """Float rows to int8 codes and norm-preserving scales (see the module doc)."""
    m = as_finite(matrix, 2)
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
    return encode_many(as_finite(vector, 1)[None, :], fmt)[0]


def encode_many(
    matrix: npt.ArrayLike, fmt: VectorFormat | str = VectorFormat.FLOAT32
) -> list[bytes]:
    """Each row as a tagged blob (one pass over the matrix, no loop per element)."""
    fmt = VectorFormat(fmt)
    m = as_finite(matrix, 2)
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
        # Through a byte view of the records: numpy copies bytes far faster than it
        # reads the packed fields.
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
