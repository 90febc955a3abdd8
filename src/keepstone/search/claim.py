"""Rows claimed to embed, and the vectors given to them: one shape for every index.

A store's ``claim_pending_*`` (document chunks, team records) yields an
:class:`EmbeddingClaim`: its ``rows`` are what to embed, and
:meth:`~EmbeddingClaim.store_embeddings` hands back one vector blob per row, which the
store writes when the claim's block exits normally (docs/search.md, "How search is
wired"). The stores own the SQL that reads the rows to embed and writes their vectors;
:class:`EmbeddingTable` (over :func:`claim_embeddings` and :func:`write_embeddings`) is the
transaction plumbing around it that every SQL index shares.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy.engine import Connection, Engine

from keepstone.db import claim_rows, write_transaction
from keepstone.db.pgvector import Pgvector, blob_values

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


C = TypeVar("C", bound=EmbeddingClaim[Any])

#: ``store(conn, pairs, model)``: a store's SQL writing ``(row, blob)`` pairs made by
#: ``model`` in the transaction ``conn``; returns how many it stored.
StoreVectors = Callable[[Connection, Sequence[tuple[Any, bytes]], str], int]


@contextlib.contextmanager
def claim_embeddings(
    engine: Engine,
    claim: Callable[[Connection, bool], C],
    store: StoreVectors,
    vectors: Pgvector | None,
    table: str,
) -> Iterator[C]:
    """A store's ``claim_pending_*``: the claim ``claim(conn, lock)`` reads, held as
    :func:`keepstone.db.claim_rows` holds it; the vectors the block gave it written by
    ``store`` when it exits normally, then ``table``'s HNSW index for them built if
    pgvector (``vectors``) is there and it is missing."""

    def finish(conn: Connection, claimed: C) -> int:
        return store(conn, claimed.stored, claimed.model)

    with claim_rows(engine, claim, finish, lambda c: bool(c.stored)) as claimed:
        yield claimed
    _index(vectors, table, claimed.model, claimed.stored)


def write_embeddings(
    engine: Engine,
    rows: Sequence[R],
    blobs: Sequence[bytes],
    model: str,
    store: StoreVectors,
    vectors: Pgvector | None,
    table: str,
) -> int:
    """Write ``blobs[i]`` as the vector of ``rows[i]`` with ``store`` in one transaction
    (not made durable: a lost vector is made again), then build ``table``'s index as
    :func:`claim_embeddings` does. Returns the number stored."""
    pairs = paired(rows, blobs)
    with write_transaction(engine, durable=False) as conn:
        stored = store(conn, pairs, model)
    _index(vectors, table, model, pairs)
    return stored


def _index(
    vectors: Pgvector | None, table: str, model: str, pairs: Sequence[tuple[Any, bytes]]
) -> None:
    """After vectors of ``model`` committed: ``table``'s HNSW index for them, if pgvector
    is there and it is missing (in a transaction of its own, see keepstone.db.pgvector)."""
    if vectors is not None and pairs:
        vectors.ensure_index(table, model, blob_values([pairs[0][1]])[0][1])


#: ``pending(conn, limit, model, lock, since)``: a store's SQL reading up to ``limit`` rows to
#: embed with ``model`` (``lock``: claimed ``FOR UPDATE SKIP LOCKED``; ``since``: only rows
#: fresh since then, the indexer's fresh lane).
PendingRows = Callable[[Connection, int, str, bool, datetime | None], list[R]]


@dataclass(frozen=True, slots=True)
class EmbeddingTable(Generic[R]):
    """One SQL index's rows to embed: its ``pending`` read, the ``key`` that names a row,
    its ``store`` of vectors, pgvector (``vectors``) where the database has it, and the
    ``table`` whose HNSW index pgvector builds."""

    engine: Engine
    pending: PendingRows[R]
    key: Callable[[R], Hashable]
    store: StoreVectors
    vectors: Pgvector | None
    table: str

    def claim(
        self, limit: int, model: str, since: datetime | None = None
    ) -> contextlib.AbstractContextManager[EmbeddingClaim[R]]:
        """Up to ``limit`` rows to embed with ``model`` (only those fresh ``since`` then,
        when given), claimed as :func:`claim_embeddings` claims them."""

        def read(conn: Connection, lock: bool) -> EmbeddingClaim[R]:
            return EmbeddingClaim(self.pending(conn, limit, model, lock, since), model, self.key)

        return claim_embeddings(self.engine, read, self.store, self.vectors, self.table)

    def write(self, rows: Sequence[R], blobs: Sequence[bytes], model: str) -> int:
        """:func:`write_embeddings` of ``blobs[i]`` as the vector of ``rows[i]``."""
        return write_embeddings(
            self.engine, rows, blobs, model, self.store, self.vectors, self.table
        )
