"""Rows claimed to embed, and the vectors given to them: one shape for every index.

A store's ``claim_pending_*`` (document chunks, team records) yields an
:class:`EmbeddingClaim`: its ``rows`` are what to embed, and
:meth:`~EmbeddingClaim.store_embeddings` hands back one vector blob per row, which the
store writes when the claim's block exits normally (docs/search.md, "How search is
wired"). The stores own the SQL that reads the rows to embed and writes their vectors;
:mod:`keepstone.search.embedding_table` is the transaction plumbing around it that every
SQL index shares. This module needs no SQL: the filesystem store's index claims the same
way without loading SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

R = TypeVar("R")


class EmbeddingClaim(Generic[R]):
    """Rows claimed to embed (``rows``), made by ``model``, and the vectors given to
    them so far (``stored``). ``key`` names a row (what makes two rows the same)."""

    def __init__(self, rows: list[R], model: str, key: Callable[[R], Hashable]) -> None:
        self.rows = rows
        self.model = model
        self.stored: list[tuple[R, bytes]] = []
        self._key = key

    def store_embeddings(self, blobs: Sequence[bytes], rows: Sequence[R] | None = None) -> None:
        """Give ``blobs[i]`` to ``rows[i]`` (default: every claimed row, in order); they
        are written when the claim's block exits without an exception."""
        rows = self.rows if rows is None else rows
        claimed = {self._key(r) for r in self.rows}
        if any(self._key(r) not in claimed for r in rows):
            raise ValueError("a row that this claim does not hold")
        self.stored.extend(paired(rows, blobs))


def paired(rows: Sequence[R], blobs: Sequence[bytes]) -> list[tuple[R, bytes]]:
    """``(rows[i], blobs[i])``; a ValueError when their numbers differ."""
    if len(rows) != len(blobs):
        raise ValueError(f"{len(rows)} rows but {len(blobs)} vectors")
    return [(row, bytes(blob)) for row, blob in zip(rows, blobs, strict=True)]
