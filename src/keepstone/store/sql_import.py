"""The SQL store's import batch: the documents of one import written many to a transaction.

A single :meth:`~keepstone.store.sql.SqlStore.write` pays a transaction per document — on
PostgreSQL its round trips and a durable commit (an fsync), on SQLite a WAL commit. An
import of thousands of documents paid that thousands of times. The batch writes up to
:data:`BATCH_DOCUMENTS` documents (or about :data:`BATCH_BYTES`) per transaction, and
commits them once:

* each document (a :class:`~keepstone.store.prelude.CheckedWrite`: the archive ran the
  shared prelude, :meth:`~keepstone.store.base.MemoryStore.check_write`, once per member)
  goes through exactly the steps of a single write past that prelude (the store hands the
  batch its own write paths, :class:`DocumentWrites`), in the batch's transaction — the
  row lock and the create-only condition, then the one change statement
  (:mod:`keepstone.store.sql_write`: the document, its old chunks, the space and team
  counters' compare-and-swap, the new version and the history counter) and, for a global
  space, the audit row. So it is refused exactly as a write would
  refuse it, history is recorded and the search index is told as for a write; charging
  the counters per document costs nothing extra (they are steps of the statement that
  writes the document), and the database checks each charge against the counters as
  the batch has left them;
* each document runs inside a savepoint: a refusal rolls back that document only, and
  the batch goes on;
* on PostgreSQL a document without a grant is first sent as the one-statement write
  (:meth:`~keepstone.store.sql_write.ChangeStatements.put_in`), pipelined with its
  savepoint and the savepoint's release: one round trip per document, where the
  transaction path below takes four (savepoint, row lock, change, release). What that
  statement hands back (a counter refused, a history to trim, a concurrent writer: it
  wrote nothing, or undid itself) goes through the transaction path, which refuses or
  writes exactly as a single write's does;
* lock order: a single write locks its document, then the space and team counters. In a
  batch, the second document is locked while the batch holds the counters. On SQLite
  writers queue on the database lock, so this is moot; on PostgreSQL the batch waits for
  a document lock at most :data:`LOCK_WAIT` (``SET LOCAL lock_timeout``): a writer that
  holds the document and waits for the counters the batch holds is never waited on for
  long — the batch commits what it has, releasing the counters, and writes that document
  as a single write (which waits in the usual order), then starts a new batch. No cycle
  of waits lasts, so no deadlock;
* PostgreSQL's planner statistics of the tables an import fills are refreshed
  (:func:`keepstone.db.refresh_statistics`) as it grows them: after the batch that brings
  it to :data:`keepstone.db.statistics.BULK_ROWS` documents, then each time that count has
  doubled, and at its end. The batch's connection keeps its statements prepared, and
  PostgreSQL's generic plan of the write, made while the table was as small as the last
  statistics said, read more of it with every document (an import's time grew with the
  square of its size); an ``ANALYZE`` replans them. The searches that follow are not
  planned for the table as it was before either;
* what the batch wrote is durable when it commits: an import answers after its last
  batch has committed. An exception that escapes the import rolls back the batch in
  progress (the batches before it stay, as the documents of an interrupted import of
  single writes stayed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, RootTransaction

from keepstone.db import (
    begin_immediate,
    made_durable,
    refresh_statistics,
    sqlite_writers,
    translated_errors,
)
from keepstone.db.statistics import BULK_ROWS
from keepstone.documents import WriteResult
from keepstone.store.prelude import CheckedWrite, ImportWriter
from keepstone.store.sql_schema import memory_document_versions, memory_documents

#: Documents per transaction.
BATCH_DOCUMENTS: Final = 200
#: Bytes per transaction (about: the document that passes it ends the batch).
BATCH_BYTES: Final = 8 * 1024 * 1024
#: How long a batch waits for a document's row lock on PostgreSQL before it commits what
#: it has and writes that document alone.
LOCK_WAIT: Final = "200ms"
#: The tables an import changes in bulk (the counters change by one row per space).
_IMPORTED_TABLES: Final = (memory_documents.name, memory_document_versions.name)
#: PostgreSQL's SQLSTATE for ``lock_timeout``.
_LOCK_NOT_AVAILABLE: Final = "55P03"


@dataclass(frozen=True, slots=True)
class DocumentWrites:
    """The store's own ways to write one document of the space being imported, so a
    document of the batch is written, or refused, exactly as a single write."""

    #: The one-statement write in the batch's transaction (PostgreSQL; None where the
    #: dialect has none): None back when it wrote nothing and the transaction path must.
    at_once: Callable[[Connection, CheckedWrite], WriteResult | None] | None
    #: The transaction path (row lock, condition, change, audit row) in the batch's
    #: transaction.
    in_transaction: Callable[[Connection, CheckedWrite], WriteResult]
    #: A single write in a transaction of its own.
    alone: Callable[[CheckedWrite], WriteResult]


class _Batch:
    def __init__(self, engine: Engine, writes: DocumentWrites) -> None:
        self.engine = engine
        self.writes = writes
        self.postgres = engine.dialect.name == "postgresql"
        self.conn: Connection | None = None
        self.tx: RootTransaction | None = None
        self.turn: contextlib.ExitStack | None = None
        self.docs = 0
        self.bytes = 0
        #: Documents written by the whole import (every batch), and that count when the
        #: statistics were last refreshed, and when they will be next.
        self.written = 0
        self.analyzed = 0
        self.analyze_at = BULK_ROWS

    def write(self, w: CheckedWrite) -> WriteResult:
        with translated_errors():
            conn = self._open()
            try:
                result: WriteResult | None = None
                if self.writes.at_once is not None and w.grant is None:
                    # One round trip: the one-statement write in a savepoint of its own
                    # (nothing to attribute or audit: those are a grant's).
                    result = self.writes.at_once(conn, w)
                if result is None:
                    result = self._in_savepoint(conn, w)
            except sa.exc.OperationalError as exc:
                if getattr(exc.orig, "sqlstate", None) != _LOCK_NOT_AVAILABLE:
                    raise
                return self._alone(w)
            self.docs += 1
            self.written += 1
            self.bytes += len(w.data)
            if self.docs >= BATCH_DOCUMENTS or self.bytes >= BATCH_BYTES:
                self.commit()
            return result

    def _in_savepoint(self, conn: Connection, w: CheckedWrite) -> WriteResult:
        """``w`` on the transaction path, in a savepoint: a refusal rolls back this document
        only, and the batch goes on."""
        savepoint = conn.begin_nested()
        try:
            result = self.writes.in_transaction(conn, w)
        except BaseException:
            savepoint.rollback()
            raise
        savepoint.commit()
        return result

    def _alone(self, w: CheckedWrite) -> WriteResult:
        """``w`` as a single write, after committing the batch: another writer holds the
        document (and may wait for the counters this batch holds), so release them."""
        self.commit()
        return self.writes.alone(w)

    def _open(self) -> Connection:
        if self.conn is not None:
            return self.conn
        # On SQLite the batch's transaction takes its turn among the database's writers
        # as a single write does (write_transaction), given back in _end.
        turn = contextlib.ExitStack()
        if not self.postgres:
            turn.enter_context(sqlite_writers(self.engine))
        conn = self.engine.connect()
        try:
            self.tx = begin_immediate(conn)
            if self.postgres:
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{LOCK_WAIT}'")
        except BaseException:
            conn.close()
            turn.close()
            raise
        self.conn, self.turn = conn, turn
        return conn

    def commit(self) -> None:
        self._end(commit=True)

    def rollback(self) -> None:
        self._end(commit=False)

    def _end(self, *, commit: bool) -> None:
        conn, tx, turn = self.conn, self.tx, self.turn
        self.conn, self.tx, self.turn, self.docs, self.bytes = None, None, None, 0, 0
        if conn is None:
            return
        committed = False
        try:
            if tx is not None and tx.is_active:
                if commit:
                    tx.commit()
                    committed = True
                else:
                    tx.rollback()
        finally:
            conn.close()
            if turn is not None:
                turn.close()
        if committed:
            made_durable(self.engine)  # the batch's one sync, after the writers' turn
            if self.written >= self.analyze_at:
                self.refresh_statistics()
                self.analyze_at = 2 * self.written

    def refresh_statistics(self) -> None:
        """ANALYZE what the import has filled since it last did (PostgreSQL, when that is
        many documents)."""
        if refresh_statistics(self.engine, _IMPORTED_TABLES, self.written - self.analyzed):
            self.analyzed = self.written


@contextlib.contextmanager
def import_batch(engine: Engine, writes: DocumentWrites) -> Iterator[ImportWriter]:
    """The writer of one import into a space of ``engine``'s database, each document written
    by one of ``writes`` (see the module's docstring)."""
    batch = _Batch(engine, writes)
    try:
        yield batch.write
    except BaseException:
        with contextlib.suppress(Exception):
            batch.rollback()
        raise
    with translated_errors():
        batch.commit()
    batch.refresh_statistics()
