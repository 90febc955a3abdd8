"""The :class:`Embedder` interface every embedder implements, and what they share."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from keepstone.errors import KeepstoneError, StoreUnavailable

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


class LazyEmbedder:
    """An embedder made by ``load()`` on its first :meth:`embed` (or :meth:`load`), then
    kept for the life of the process: a process that never embeds — a server whose rows
    all have vectors, a keyword-only search — never pays for the model's memory and load
    time. ``model_id`` and ``dim`` are known without loading.

    Thread-safe: threads that embed while it loads wait for the one load. A load that
    fails raises its error, and every later call raises it again without loading again
    (a model that cannot load stays so until the process restarts, as an embedder that
    failed to open does); ``loads`` counts the loads tried (0 or 1).
    """

    def __init__(self, model_id: str, dim: int, load: Callable[[], Embedder]) -> None:
        self._model_id = model_id
        self._dim = dim
        self._load = load
        self._lock = threading.Lock()
        self._embedder: Embedder | None = None
        self._failure: str | None = None
        self.loads = 0

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def loaded(self) -> bool:
        """Whether the model is loaded (in memory)."""
        return self._embedder is not None

    def load(self) -> Embedder:
        """The loaded embedder, loaded now if it is not yet."""
        embedder = self._embedder
        if embedder is not None:
            return embedder
        with self._lock:
            if self._embedder is None:
                if self._failure is not None:
                    raise StoreUnavailable(self._failure)
                self.loads += 1
                try:
                    self._embedder = self._load()
                except KeepstoneError as exc:
                    self._failure = exc.message
                    raise
            return self._embedder

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Unit vectors of ``texts`` (see :class:`Embedder`); nothing to embed loads nothing."""
        if not texts:
            return np.empty((0, self._dim), dtype=np.float32)
        return self.load().embed(texts)


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
