"""The transaction plumbing every SQL index shares around an :class:`EmbeddingClaim`
(:mod:`keepstone.search.claim`): an :class:`EmbeddingTable` claims a store's rows to embed
(:func:`claim_embeddings`) and writes the vectors given to them (:func:`write_embeddings`),
then builds the table's HNSW index where pgvector is there. The stores own the SQL that
reads the rows and writes the vectors; this owns the transactions around it.
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
from keepstone.search.claim import EmbeddingClaim, paired

R = TypeVar("R")

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
