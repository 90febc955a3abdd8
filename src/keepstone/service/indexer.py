"""The background indexer: writes never wait for the model (docs/search.md, "How search
is wired").

A write commits its document or record with no vector; :class:`Indexer` embeds later,
in batches. One pass (:meth:`Indexer.run_once`) chunks the documents that have no chunks
yet (the store's ``backfill_chunks``), then, for each source (the documents' chunks, the
team records), claims up to ``batch_size`` pending rows — no vector, or a vector of
another model, so changing the model re-embeds everything by itself — embeds their text
and hands the vectors back to the claim, which stores them when its block exits. A claim
that fails (the embedder is unreachable, the process dies) stores nothing: the rows stay
pending, never half-indexed. On PostgreSQL a claim is ``FOR UPDATE SKIP LOCKED``, so the
indexers of several replicas share the rows and embed each once.

:meth:`Indexer.run` is the loop — no pause while work remains; idle, a pass only once the
database changed (:class:`DatabaseChanges`, looked at every ``idle_seconds``); a doubling
back-off (one log line each) after a failure, which never ends it — run by ``keepstone
serve`` in a child process (:mod:`keepstone.api.indexer_process`), or on a daemon thread by
:meth:`Indexer.start`. :meth:`Indexer.drain` runs passes until nothing is pending
(``keepstone reindex``, ``keepstone memory reindex``). A lazy embedder
(:class:`keepstone.embed.base.LazyEmbedder`) loads its model when a claim first finds rows.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy.engine import Engine

from keepstone.db import lock_waits_at_most, on_pooled, sqlite_path, utcnow
from keepstone.db.vectors import encode_many
from keepstone.errors import KeepstoneError, StoreUnavailable
from keepstone.store.base import Progress
from keepstone.store.index import ChunkBackfill, SearchIndex
from keepstone.wire import Jsonable

if TYPE_CHECKING:
    from keepstone.embed.base import Embedder

log = logging.getLogger(__name__)

#: Rows embedded per claim at most: one forward pass of the default embedder.
BATCH_SIZE = 32
#: The time one batch should take: a write made while a backlog drains waits for the batch
#: in hand, then is claimed first (claims are newest first), so a batch's length bounds
#: how long a fresh write waits for its vector (docs/search.md, "Freshness").
BATCH_SECONDS = 0.4
#: The batch length of a bulk reindex, which no fresh write waits on: full batches.
BULK_BATCH_SECONDS = 3600.0
#: The fresh lane: rows written in the last ``FRESH_SECONDS`` are claimed, up to
#: ``FRESH_BATCH`` at a time, before each batch of the backlog, and embedded on the
#: indexer's own thread (normal priority) rather than its low-priority compute thread, so
#: a write made under a backlog, or on a busy machine, is found by meaning in seconds.
FRESH_SECONDS = 30.0
FRESH_BATCH = 8
#: While the compute thread embeds a backlog batch, the fresh lane is served this often.
FRESH_POLL_SECONDS = 0.2
#: The longest the work done meanwhile waits for a lock (see :meth:`Indexer._meanwhile`).
MEANWHILE_LOCK_WAIT_SECONDS = 1.0
#: Rows of a source's first batch, before its speed is known.
FIRST_BATCH = 4
#: Seconds between two looks for new work when nothing was pending: a write waits at most
#: this long to be seen (docs/search.md, "Freshness").
IDLE_SECONDS = 0.5
#: Idle, a pass runs at least this often even when the database reports no change.
IDLE_RECHECK_SECONDS = 30.0
#: The first and the longest pause after a failed pass (doubling in between).
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0
#: Niceness of the indexer's thread (Linux schedules threads, so it is the thread's own):
#: request handling wins the CPU when both want it.
NICENESS = 10


class Pending(Protocol):
    """A pending row: what the embedder reads."""

    @property
    def search_text(self) -> str: ...


class Claim(Protocol):
    """Rows claimed to embed (a search index's ``claim_pending_chunks``,
    ``SqlRecordStore.claim_pending_records``): ``store_embeddings(blobs)`` gives
    ``blobs[i]`` to ``rows[i]``, written when the claim's block exits normally."""

    @property
    def rows(self) -> Sequence[Pending]: ...

    def store_embeddings(self, blobs: Sequence[bytes]) -> None: ...


#: ``claim(limit, model)``: a context manager yielding a :class:`Claim`.
Claimer = Callable[[int, str], AbstractContextManager[Claim]]
#: ``claim(limit, model, since)``: the same, of the rows written at ``since`` or later.
FreshClaimer = Callable[[int, str, datetime], AbstractContextManager[Claim]]


@dataclass(frozen=True)
class Source:
    """One kind of row the indexer embeds: ``"chunks"`` or ``"records"``; ``fresh``
    claims only what was written lately (the fresh lane), when the store can."""

    name: str
    claim: Claimer
    fresh: FreshClaimer | None = None


def document_sources(store: object) -> list[Source]:
    """The pending chunks of ``store`` as a source, when it keeps a search index
    (:class:`keepstone.store.index.SearchIndex`); none for a store that keeps no index
    (a client of a server, whose server embeds)."""
    if isinstance(store, SearchIndex):
        return [Source("chunks", store.claim_pending_chunks, _fresh_claimer(store, "chunks"))]
    return []


class Backfill(Protocol):
    """What chunks the unindexed documents (a store's ``backfill_chunks``) and says how
    many it looked at; ``skip_locked``: leaves a document another transaction holds for a
    later pass rather than waiting for it."""

    def __call__(self, progress: Progress | None = None, *, skip_locked: bool = False) -> int:
        """Chunk the unindexed documents."""
        ...


def document_backfill(store: object) -> Backfill | None:
    """What chunks every unindexed document of ``store`` in one sweep, when its index
    can (:class:`keepstone.store.index.ChunkBackfill`); None when it chunks a space as
    it reconciles it."""
    return store.backfill_chunks if isinstance(store, ChunkBackfill) else None


def record_sources(records: object | None) -> list[Source]:
    """The pending team records of ``records`` as a source, when the record store can
    claim them (``claim_pending_records``); none otherwise."""
    claim = getattr(records, "claim_pending_records", None)
    if not callable(claim):
        return []
    return [Source("records", claim, _fresh_claimer(records, "records"))]


def _fresh_claimer(store: object, rows: str) -> FreshClaimer | None:
    """The store's ``claim_fresh_<rows>`` (the fresh lane), when it has one."""
    fresh = getattr(store, f"claim_fresh_{rows}", None)
    return fresh if callable(fresh) else None


class DatabaseChanges:
    """A token of a database's state that every commit moves, read in one trivial
    statement: equal looks mean nothing was committed between them, so an idle indexer
    has no new work (:meth:`Indexer.run`). SQLite: ``PRAGMA data_version`` on a connection
    of its own, which any other connection's commit (of any process) changes. PostgreSQL:
    ``pg_current_wal_lsn()``, which every commit moves (and every other write of the
    server: beside busy databases the indexer passes as often as without it)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._own: Any = None  # SQLite: the connection data_version is read on

    def __call__(self) -> object:
        if self.engine.dialect.name == "postgresql":
            wal = "SELECT pg_current_wal_lsn()"
            return on_pooled(self.engine, lambda driver: driver.execute(wal).fetchone()[0])
        if self._own is None:
            self._own = self.engine.raw_connection()
            self._own.detach()  # out of the pool: no other statement ever runs on it
        try:
            # Run to its end (fetchall), so the statement holds no snapshot afterwards.
            return self._own.dbapi_connection.execute("PRAGMA data_version").fetchall()[0][0]
        except Exception:
            self.close()  # a broken connection: the next look opens another
            raise

    def close(self) -> None:
        own, self._own = self._own, None
        if own is not None:
            own.close()


def _changes_of(sources: Sequence[Source], backfill: Backfill | None) -> list[DatabaseChanges]:
    """One :class:`DatabaseChanges` per database the claims of ``sources`` and ``backfill``
    read (methods of stores over a PostgreSQL or SQLite file engine); none when one is not
    (a test's function, the filesystem store), as its changes would go unseen."""
    steps: list[object] = [s.claim for s in sources]
    steps += [s.fresh for s in sources if s.fresh is not None]
    steps += [backfill] if backfill is not None else []
    found: dict[int, DatabaseChanges] = {}
    for step in steps:
        engine = getattr(getattr(step, "__self__", None), "engine", None)
        if not isinstance(engine, Engine):
            return []
        if engine.dialect.name != "postgresql" and sqlite_path(str(engine.url)) is None:
            return []  # another dialect, or a SQLite database in memory
        found.setdefault(id(engine), DatabaseChanges(engine))
    return list(found.values())


class Indexer:
    """Embeds what ``sources`` have pending with ``embedder``; ``backfill``
    (:func:`document_backfill`) chunks unindexed documents first on every pass.

    ``embedded`` counts the rows embedded per source name, ``documents`` the documents
    the backfill looked at, over this indexer's life.
    """

    def __init__(
        self,
        embedder: Embedder,
        sources: Sequence[Source],
        *,
        backfill: Backfill | None = None,
        batch_size: int = BATCH_SIZE,
        batch_seconds: float = BATCH_SECONDS,
        fresh_seconds: float = FRESH_SECONDS,
        idle_seconds: float = IDLE_SECONDS,
        recheck_seconds: float = IDLE_RECHECK_SECONDS,
        first_backoff: float = FIRST_BACKOFF_SECONDS,
        max_backoff: float = MAX_BACKOFF_SECONDS,
        niceness: int = NICENESS,
        compute: Executor | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.embedder = embedder
        self.sources = list(sources)
        self.backfill = backfill
        self.batch_size = batch_size
        self.batch_seconds = batch_seconds
        #: The fresh lane's window (0: no fresh lane, every row waits its turn).
        self.fresh_seconds = fresh_seconds
        #: The next claim's size per source: as many rows as embed in ``batch_seconds``.
        self._limits: dict[str, int] = {}
        self.idle_seconds = idle_seconds
        self.recheck_seconds = recheck_seconds
        #: What tells an idle :meth:`run` that a database changed (empty: it passes anyway).
        self.changes = _changes_of(self.sources, backfill)
        self.first_backoff = first_backoff
        self.max_backoff = max_backoff
        self.niceness = niceness
        #: Where the embedder runs (None: the calling thread). ``keepstone serve``'s indexer
        #: process embeds on a low-priority thread while its database work keeps the
        #: normal priority, so a lock it holds is never held by a starved thread.
        self.compute = compute
        self.embedded: dict[str, int] = {s.name: 0 for s in self.sources}
        self._last_claimed: dict[str, tuple[str, ...]] = {}
        self.documents = 0
        #: Failed passes so far, and the last failure's message (None after a good pass).
        self.failures = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def model(self) -> str:
        return self.embedder.model_id

    # --- One pass -------------------------------------------------------------------------

    def run_once(self) -> int:
        """Chunk unindexed documents, then embed one batch of each source; return how
        many rows were embedded (0: nothing was pending). Raises what a step raised; the
        claim of the failing batch stores nothing."""
        if self.backfill is not None:
            self.documents += self.backfill()
        done = 0
        for source in self.sources:
            if source.fresh is not None and self.fresh_seconds > 0:
                done += self._embed_fresh(source, source.fresh)
            done += self._embed_batch(source)
        return done

    def _meanwhile(self, batch: Future[Any]) -> Any:
        """The vectors of a backlog ``batch`` embedding on the compute thread; while it
        runs, this thread serves the fresh lane every :data:`FRESH_POLL_SECONDS` (a
        starved low-priority batch must not hold back a write made meanwhile).

        The batch's claim holds its rows until it stores their vectors, and a writer of
        one of them waits for it, holding its document: so the chunking done meanwhile
        skips the documents others hold. Waiting for one would wait for that writer,
        which waits for this claim, which waits for this thread: a cycle no database
        can see, which stopped every write of the space. Any other lock it would wait
        for longer than :data:`MEANWHILE_LOCK_WAIT_SECONDS` ends the work of that look
        instead; the next look tries again."""
        while True:
            try:
                return batch.result(timeout=FRESH_POLL_SECONDS)
            except FutureTimeout:
                pass
            if self.fresh_seconds > 0 and not self._stopping(None):
                try:
                    with lock_waits_at_most(MEANWHILE_LOCK_WAIT_SECONDS):
                        self._serve_fresh_lanes()
                except StoreUnavailable as exc:  # a lock held too long: after the batch
                    log.info("indexer: the fresh lane waits for the batch (%s)", exc)

    def _serve_fresh_lanes(self) -> None:
        """What :meth:`_meanwhile` does between two looks at the batch: chunk what is
        new, leaving the documents others hold, and embed each source's fresh lane."""
        if self.backfill is not None:
            self.documents += self.backfill(skip_locked=True)
        for source in self.sources:
            if source.fresh is not None:
                self._embed_fresh(source, source.fresh)

    def _embed_fresh(self, source: Source, fresh: FreshClaimer) -> int:
        """The fresh lane of ``source``: what was written lately, embedded here and now."""
        model = self.embedder.model_id
        since = utcnow() - timedelta(seconds=self.fresh_seconds)
        with fresh(FRESH_BATCH, model, since) as claim:
            rows = claim.rows
            if not rows:
                return 0
            claim.store_embeddings(encode_many(self.embedder.embed([r.search_text for r in rows])))
        self.embedded[source.name] = self.embedded.get(source.name, 0) + len(rows)
        return len(rows)

    def _embed_batch(self, source: Source) -> int:
        model = self.embedder.model_id
        limit = self._limits.get(source.name, min(FIRST_BATCH, self.batch_size))
        with source.claim(limit, model) as claim:
            rows = claim.rows
            if not rows:
                return 0
            texts = [row.search_text for row in rows]
            self._load_model()
            started = time.monotonic()
            if self.compute is None:
                vectors = self.embedder.embed(texts)
            else:
                vectors = self._meanwhile(self.compute.submit(self.embedder.embed, texts))
            took = time.monotonic() - started
            self._limits[source.name] = self._next_limit(limit, len(rows), took)
            claim.store_embeddings(encode_many(vectors))
        self.embedded[source.name] = self.embedded.get(source.name, 0) + len(rows)
        # The very rows of the last batch again: the store kept refusing their vectors
        # (a row changed under it and was not re-read). No progress: pause, do not spin.
        claimed = tuple(repr(row) for row in rows)
        if self._last_claimed.get(source.name) == claimed:
            log.warning("indexer: the same %d %s stayed pending; pausing", len(rows), source.name)
            return 0
        self._last_claimed[source.name] = claimed
        return len(rows)

    def _load_model(self) -> None:
        """The embedder's model loaded on this thread (its ``load``, where it loads on first
        use), not on the low-priority compute thread, where a starved load would hold up
        the fresh lane too; and before a batch is timed, so its speed is the embedding's."""
        load = getattr(self.embedder, "load", None)
        if callable(load):
            load()

    def _next_limit(self, limit: int, rows: int, seconds: float) -> int:
        """The rows the next claim takes: as many as embed in :attr:`batch_seconds` at the
        speed of the last batch of ``rows`` (claimed with ``limit``), from 1 to
        :attr:`batch_size`. It at most doubles, and only after a full batch, so a few
        short texts do not make the next batch of long ones long."""
        fit = int(self.batch_seconds * rows / seconds) if seconds > 0 else self.batch_size
        grown = 2 * limit if rows >= limit else limit
        return max(1, min(self.batch_size, fit, grown))

    def drain(self, progress: Callable[[int], None] | None = None) -> dict[str, int]:
        """Run passes until nothing is pending; ``progress(n)`` after each; return the
        rows embedded per source by this call."""
        before = dict(self.embedded)
        while True:
            done = self.run_once()
            if not done:
                return {name: n - before.get(name, 0) for name, n in self.embedded.items()}
            if progress is not None:
                progress(done)

    # --- The thread ---------------------------------------------------------------------

    def start(self) -> None:
        """Run passes on a daemon thread until :meth:`stop`."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="keepstone-indexer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the thread to stop and wait up to ``timeout`` seconds for its batch."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        self.run()

    def run(self, until: Callable[[], bool] | None = None) -> None:
        """Run passes in the calling thread (a thread's or a process's loop) until
        :meth:`stop` or ``until()`` (checked at least every :data:`IDLE_SECONDS`): no
        pause while work remains, :meth:`_rest` when there was none, a doubling back-off
        after a failure, logged in one line. It lowers the thread's priority."""
        lower_thread_priority(self.niceness)
        delay = 0.0
        try:
            while not self._stopping(until):
                # Looked at before the pass: a commit the pass may miss moves the next look.
                seen = self._look()
                try:
                    done = self.run_once()
                except Exception as exc:  # the loop outlives any failure: log, back off, retry
                    delay = min(self.max_backoff, max(self.first_backoff, delay * 2))
                    self.failures += 1
                    self.last_error = _describe(exc)
                    log.warning("indexer: %s; retrying in %.3g s", self.last_error, delay)
                    self._pause(delay, until)
                    continue
                if delay:
                    log.info("indexer: working again")
                delay = 0.0
                self.last_error = None
                if not done:
                    self._rest(seen, until)
        finally:
            for changes in self.changes:
                changes.close()

    def _look(self) -> tuple[object, ...] | None:
        """The databases' :class:`DatabaseChanges` tokens; None when they cannot tell (none,
        or a look failed: the pass after it says what is wrong)."""
        if not self.changes:
            return None
        try:
            return tuple(changes() for changes in self.changes)
        except Exception:
            return None

    def _rest(self, seen: tuple[object, ...] | None, until: Callable[[], bool] | None) -> None:
        """Idle after a pass that found nothing, looked at ``seen``: pause ``idle_seconds``
        at a time until a look differs (a commit since: maybe work), :attr:`recheck_seconds`
        have passed, or (``seen`` None) after one pause. A look is one trivial statement,
        a pass a transaction per claim."""
        resting = time.monotonic()
        while True:
            self._pause(self.idle_seconds, until)
            if seen is None or self._stopping(until):
                return
            if time.monotonic() - resting >= self.recheck_seconds or self._look() != seen:
                return

    def request_stop(self) -> None:
        """Make :meth:`run` return after the current batch (safe from a signal handler)."""
        self._stop.set()

    def _stopping(self, until: Callable[[], bool] | None) -> bool:
        return self._stop.is_set() or (until is not None and until())

    def _pause(self, seconds: float, until: Callable[[], bool] | None) -> None:
        deadline = time.monotonic() + seconds
        while not self._stopping(until):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._stop.wait(min(left, IDLE_SECONDS))


def _describe(exc: BaseException) -> str:
    """One line for the log: the error's own message, no traceback."""
    text = exc.message if isinstance(exc, KeepstoneError) else str(exc)
    first = (text.strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def lower_thread_priority(niceness: int) -> None:
    """Make the calling thread ``niceness`` nicer (Linux: niceness is per thread, and
    threads it starts inherit it). Best effort."""
    if niceness <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + niceness)
    except OSError:
        pass


# --- Reindexing a whole store (keepstone reindex, keepstone memory reindex) ---------------------


@dataclass(frozen=True)
class ReindexReport(Jsonable):
    """What a reindex did: documents looked at, rows embedded, the model (None: no
    embedder, chunked only)."""

    documents: int
    chunks_embedded: int
    records_embedded: int
    model: str | None


def embed_pending(
    embedder: Embedder | None,
    store: object,
    records: object | None = None,
    *,
    documents: int = 0,
    batch_size: int = BATCH_SIZE,
    progress: Callable[[int], None] | None = None,
    total: Callable[[int], None] | None = None,
) -> ReindexReport:
    """Embed everything ``store`` (and ``records``) have pending, after a reindex that
    looked at ``documents`` documents; with no embedder, only report those.
    ``progress(n)`` after each batch; ``total(n)`` first, with what is pending (as far as
    the stores count it: a progress bar's total)."""
    if embedder is None:
        return ReindexReport(documents, 0, 0, None)
    indexer = Indexer(
        embedder,
        document_sources(store) + record_sources(records),
        backfill=document_backfill(store),
        batch_size=batch_size,
        # Nobody waits for a fresh write here: full batches, the fastest drain.
        batch_seconds=BULK_BATCH_SECONDS,
        fresh_seconds=0.0,
    )
    if total is not None:
        if indexer.backfill is not None:
            indexer.documents += indexer.backfill()  # chunked first, so it is counted
        waiting = backlog(store, records, embedder.model_id)
        total((waiting.chunks or 0) + (waiting.records or 0))
    counts = indexer.drain(progress)
    return ReindexReport(
        documents + indexer.documents,
        counts.get("chunks", 0),
        counts.get("records", 0),
        embedder.model_id,
    )


@dataclass(frozen=True)
class Backlog:
    """What waits for a vector of ``model``: chunks of documents, team records (None: a
    store that cannot count them)."""

    model: str | None
    chunks: int | None
    records: int | None

    def as_json(self) -> dict[str, Any]:
        return {"model": self.model, "chunks": self.chunks, "records": self.records}


def backlog(store: object, records: object | None, model: str | None) -> Backlog:
    """The backlog of ``store`` and ``records`` for ``model`` (each counted when it can,
    ``count_backlog``); zeros with no model (keyword-only search embeds nothing)."""
    if model is None:
        return Backlog(None, 0, 0)

    def count(source: object | None) -> int | None:
        counter = getattr(source, "count_backlog", None)
        return int(counter(model)) if callable(counter) else None

    return Backlog(model, count(store), count(records))


def drop_record_vectors(records: object | None) -> None:
    """Drop every team record's vector (``keepstone reindex --rebuild``), when the record
    store can (``drop_embeddings``)."""
    drop = getattr(records, "drop_embeddings", None)
    if callable(drop):
        drop()


__all__ = [
    "BATCH_SIZE",
    "Backlog",
    "Claim",
    "Indexer",
    "ReindexReport",
    "Source",
    "backlog",
    "Backfill",
    "document_backfill",
    "document_sources",
    "drop_record_vectors",
    "embed_pending",
    "lower_thread_priority",
    "record_sources",
]
