"""Exact top-k over vectors: every row's score against a query, the ``k`` best.

Pure computation, no I/O: the caller reads the vectors' blobs from the database and
decodes them (:mod:`keepstone.db.vectors`, the codec) into the matrices scored here
(docs/search.md). Figures: ``bench/bench_vectors.py``.

**Scoring** (dot products: rows and query are unit vectors) never lets BLAS start
threads: on a busy machine OpenBLAS's threaded product of a few thousand rows is many
times slower than one thread's. BLAS gets blocks of :data:`BLAS_BLOCK_ELEMENTS`, below
its threading threshold.

* float32 up to :data:`FLOAT32_BLAS_MAX_BYTES` (in the CPU's cache): BLAS by blocks,
  faster than numpy's ``einsum``. Larger: ``einsum``, numpy's own kernel, streams faster
  than one BLAS thread.
* int8: each block converted to float32 in one reused buffer, never the whole matrix.
  About float32's speed at a quarter of the bytes.

:func:`top_k` orders by score, then by row index: ties are deterministic. The cache of
per-scope matrices is :mod:`keepstone.search.cache`.
"""

from __future__ import annotations

from typing import Final, TypeAlias

import numpy as np
import numpy.typing as npt

from keepstone.db.vectors import (
    Float32Array,
    IndexArray,
    QuantizedMatrix,
    VectorFormatError,
    as_finite,
)

#: Values per BLAS product: 1,024 rows at dim 384, the fastest block size tried for int8,
#: and below OpenBLAS's threading threshold (see the module doc).
BLAS_BLOCK_ELEMENTS: Final = 1024 * 384
#: Up to this size a float32 matrix is scored by BLAS in blocks, above it by einsum: about
#: where the two cross at dim 384.
FLOAT32_BLAS_MAX_BYTES: Final = 8 * 2**20
#: Score only the masked rows (a gathered copy) when they are at most this share of all
#: rows, a little below where the two ways cross; above it, score every row and index.
MASK_GATHER_SHARE: Final = 0.125


# -- matrices ------------------------------------------------------------------------


#: What :func:`top_k` scores and an :class:`Entry` holds: float32 rows, or int8 rows.
Matrix: TypeAlias = Float32Array | QuantizedMatrix


def matrix_rows(matrix: Matrix) -> int:
    """How many rows ``matrix`` holds, in either form."""
    return len(matrix) if isinstance(matrix, QuantizedMatrix) else int(matrix.shape[0])


def matrix_dim(matrix: Matrix) -> int:
    """The dimension of ``matrix``'s rows, in either form."""
    return matrix.dim if isinstance(matrix, QuantizedMatrix) else int(matrix.shape[1])


def check_float32_matrix(matrix: Float32Array) -> None:
    """Refuse (:class:`VectorFormatError`) an array that is no 2-D float32 matrix."""
    if matrix.dtype != np.float32 or matrix.ndim != 2:
        raise VectorFormatError("a matrix must be 2-D float32 or a QuantizedMatrix")


def normalize_rows(matrix: npt.ArrayLike) -> Float32Array:
    """Float32 rows scaled to unit length (zero rows stay zero)."""
    m = as_finite(matrix, 2)
    norms = np.sqrt(np.einsum("ij,ij->i", m, m, dtype=np.float64))
    inverse = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    out: Float32Array = (m * inverse[:, None]).astype(np.float32)
    return out


# -- exact top-k ---------------------------------------------------------------------


def scores(matrix: Matrix, query: npt.ArrayLike) -> Float32Array:
    """Every row's dot product with ``query`` (cosines, for unit rows and query)."""
    n, dim = matrix_rows(matrix), matrix_dim(matrix)
    q = as_finite(query, 1)
    if isinstance(matrix, np.ndarray):
        check_float32_matrix(matrix)
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
    if eligible.shape != (matrix_rows(matrix),):
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
