"""The :class:`Embedder` interface every embedder implements, and what they share."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt

#: Rows of unit vectors, one per text.
Vectors = npt.NDArray[np.float32]

#: Texts embedded per forward pass or request: large enough to amortise the per-call
#: cost, small enough to keep the padded batch in cache.
DEFAULT_BATCH_SIZE = 32

T = TypeVar("T")


class Embedder(Protocol):
    """Text to unit vectors: what the indexer and search call.

    ``model_id`` names the model (``"all-MiniLM-L6-v2"``); it is stored beside each
    vector, so a vector made by another model is never compared with a query's, and
    changing the model re-embeds. ``dim`` is the length of every vector.

    :meth:`embed` returns a float32 array of shape ``(len(texts), dim)`` whose rows have
    L2 norm 1 (a dot product is the cosine), in the order of ``texts``; it batches
    internally, so callers pass as many texts as they have. Failures are
    :class:`~keepstone.errors.StoreUnavailable`, as for any backing service.
    """

    @property
    def model_id(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Vectors: ...


def normalise_rows(matrix: npt.NDArray[np.float32]) -> Vectors:
    """``matrix`` with each row scaled to L2 norm 1, in place (a zero row stays zero)."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.maximum(norms, np.float32(1e-12), out=norms)
    matrix /= norms
    return matrix


def batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """``items`` in consecutive slices of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def padded_batches(
    token_ids: Sequence[Sequence[int]], size: int
) -> Iterator[tuple[list[int], npt.NDArray[np.int64], npt.NDArray[np.int64]]]:
    """``token_ids`` (one list per text) as padded batches of at most ``size`` texts:
    (the texts' positions, ids, mask), each (texts, width) with padding 0 in both. Longest
    first, so each batch pads only to its own longest text."""
    order = sorted(range(len(token_ids)), key=lambda i: len(token_ids[i]), reverse=True)
    for start in range(0, len(order), size):
        chosen = order[start : start + size]
        width = len(token_ids[chosen[0]])
        ids = np.zeros((len(chosen), width), dtype=np.int64)
        mask = np.zeros((len(chosen), width), dtype=np.int64)
        for row, i in enumerate(chosen):
            ids[row, : len(token_ids[i])] = token_ids[i]
            mask[row, : len(token_ids[i])] = 1
        yield chosen, ids, mask
