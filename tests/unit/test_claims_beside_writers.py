"""The indexer's claims beside writers on PostgreSQL: nothing waits in a cycle.

A claim (``FOR UPDATE SKIP LOCKED``) holds the chunks it embeds until it stores their
vectors and bumps its space's counter; a writer of one of those documents waits for it.
So a writer must take the chunks before the counter (the store's lock order), and the
indexer, while its claim is open, must not wait for a document a writer holds: that writer
may be waiting for the claim, and the claim for the indexer's thread, a cycle PostgreSQL
cannot see. Seen as a whole server whose writes of one space all waited, forever, under
moves while the indexer embedded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import psycopg
import pytest
import sqlalchemy as sa

from keepstone.db.vectors import encode
from keepstone.errors import StoreUnavailable
from keepstone.service.indexer import Indexer, document_sources
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.sql import SqlStore
from tests.unit.conftest import Backend
from tests.unit.test_indexer import HashEmbedder

pytestmark = pytest.mark.postgres

MODEL = "all-MiniLM-L6-v2"
UNIT = encode([1.0] + [0.0] * 7)
#: How long a step may take before the test calls it stuck.
STUCK_SECONDS = 20.0


@pytest.fixture
def pg(postgres_url: str) -> Iterator[Backend]:
    yield from Backend.closing("postgres", postgres_url)


def space() -> SpaceRef:
    return SpaceRef.build(Visibility.PROJECT, "notes", tenant="team-a", project="p1")


def doc(name: str) -> str:
    return f"# {name}\n\nWhat we learned about {name}.\n\n## More\n\nAnd where we left off.\n"


def waiting_on_a_lock(url: str) -> int:
    """How many of the database's sessions wait for a lock now."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def until_waiting(url: str) -> None:
    deadline = time.monotonic() + STUCK_SECONDS
    while not waiting_on_a_lock(url):
        assert time.monotonic() < deadline, "the writer never came to wait for the claim"
        time.sleep(0.05)


def unwedge(url: str) -> None:
    """End every other session of the test's database, so that a failing test (a cycle
    of waits) ends instead of holding the suite."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


class Background:
    """A call on a thread of its own: its answer, or what it raised."""

    def __init__(self, call: Callable[[], object]) -> None:
        self.answer: object = None
        self.error: BaseException | None = None
        self._call = call
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.answer = self._call()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def finished(self, seconds: float = STUCK_SECONDS) -> bool:
        self._thread.join(seconds)
        return not self._thread.is_alive()


@pytest.fixture
def claim_held(pg: Backend) -> Iterator[Callable[[SqlStore], threading.Event]]:
    """``hold(store)``: a claim of every pending chunk, held on a thread until the event
    it returns is set (set at the latest when the test ends)."""
    releases: list[threading.Event] = []
    threads: list[threading.Thread] = []

    def hold(store: SqlStore) -> threading.Event:
        held, release = threading.Event(), threading.Event()

        def claim() -> None:
            with store.claim_pending_chunks(1000, MODEL) as c:
                held.set()
                release.wait(STUCK_SECONDS * 2)
                c.store_embeddings([UNIT] * len(c.rows))

        releases.append(release)
        threads.append(threading.Thread(target=claim, daemon=True))
        threads[-1].start()
        assert held.wait(STUCK_SECONDS)
        return release

    yield hold
    for release in releases:
        release.set()
    for thread in threads:
        thread.join(STUCK_SECONDS)


def chunked_then_written(pg: Backend, *later: str) -> SqlStore:
    """A store whose space holds a.md, chunked (its chunks pending a vector), and the
    documents ``later``, written after: still to chunk."""
    store = pg.open()
    store.write(space(), "a.md", doc("a"))
    store.backfill_chunks()
    for path in later:
        store.write(space(), path, doc(path.removesuffix(".md")))
    return store


def test_a_move_waiting_for_claimed_chunks_leaves_the_space_counter_free(
    pg: Backend, claim_held: Callable[[SqlStore], threading.Event]
) -> None:
    store = chunked_then_written(pg, "n.md")
    release = claim_held(store)  # a.md's chunks, as the indexer embeds them
    mover = Background(lambda: pg.open().move(space(), "a.md", "b.md"))
    try:
        until_waiting(pg.url)
        # The indexer's chunking meanwhile bumps the space's counter: the move, waiting
        # for a.md's chunks, must not be holding it.
        backfill = Background(lambda: store.backfill_chunks(skip_locked=True))
        assert backfill.finished(), "the backfill waited for the move"
        assert backfill.error is None and backfill.answer == 1
        release.set()
        assert mover.finished(), "the move never got a.md's chunks"
    finally:
        release.set()
        if not mover.finished(0.5):
            unwedge(pg.url)
    assert mover.error is None, mover.error
    assert {r.path for r in store.chunk_rows(space())} == {"b.md", "n.md"}


def test_the_backfill_beside_a_claim_passes_over_a_document_a_writer_holds(
    pg: Backend, claim_held: Callable[[SqlStore], threading.Event]
) -> None:
    store = chunked_then_written(pg, "x.md", "y.md")  # y.md held by nobody
    release = claim_held(store)
    # x.md over a.md: the move holds both documents and waits for a.md's claimed chunks.
    mover = Background(lambda: pg.open().move(space(), "x.md", "a.md", overwrite=True))
    try:
        until_waiting(pg.url)
        backfill = Background(lambda: store.backfill_chunks(skip_locked=True))
        assert backfill.finished(), "the backfill waited for the document the move holds"
        assert backfill.error is None and backfill.answer == 2  # x.md passed over, y.md chunked
        release.set()
        assert mover.finished()
    finally:
        release.set()
        if not mover.finished(0.5):
            unwedge(pg.url)
    assert mover.error is None, mover.error
    assert {r.path for r in store.chunk_rows(space())} == {"y.md"}
    store.backfill_chunks()  # the next pass chunks what the move left
    assert {r.path for r in store.chunk_rows(space())} == {"a.md", "y.md"}


def a_pass_beside(
    pg: Backend, store: SqlStore, meanwhile: Callable[[], object], pause: float
) -> tuple[Background, Background]:
    """One indexer pass over a backlog of two documents (4 chunks: its whole first batch).
    While the compute thread embeds it, ``meanwhile`` starts on a thread of its own and
    comes to wait for a lock; the compute thread then sleeps ``pause`` seconds, as the
    indexer's own thread works meanwhile. The pass and ``meanwhile``, once both ended; a
    failure (ending the database's other sessions) if either waited for good."""
    for i in range(2):
        store.write(space(), f"notes/{i}.md", doc(str(i)))
    store.backfill_chunks()
    time.sleep(0.6)  # the backlog is older than the fresh lane's window
    started: list[Background] = []

    class Meanwhile(HashEmbedder):
        def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
            if threading.current_thread().name.startswith("compute") and not started:
                started.append(Background(meanwhile))
                until_waiting(pg.url)
                time.sleep(pause)
            return super().embed(texts)

    with ThreadPoolExecutor(1, thread_name_prefix="compute") as compute:
        indexer = Indexer(
            Meanwhile(),
            document_sources(store),
            backfill=store.backfill_chunks,
            batch_size=16,
            compute=compute,
            fresh_seconds=0.5,
        )
        run = Background(indexer.run_once)
        try:
            assert run.finished(), "the indexer's pass waited for good"
            assert started and started[0].finished(), "the writer waited for good"
        finally:
            if not run.finished(0.5):
                unwedge(pg.url)
    return run, started[0]


def test_an_indexer_pass_and_a_move_of_its_batch_both_finish(pg: Backend) -> None:
    """The whole indexer: while its batch embeds, a new document is moved over one of
    the batch's (the move holds the new one, still to chunk, and waits for the claim),
    and the indexer's own thread serves the fresh lane and chunks what is new."""
    store, mover = pg.open(), pg.open()

    def write_then_move() -> None:
        mover.write(space(), "notes/x.md", doc("x"))
        mover.move(space(), "notes/x.md", "notes/0.md", overwrite=True)

    run, moved = a_pass_beside(pg, store, write_then_move, pause=1.0)
    assert run.error is None, run.error
    assert moved.error is None, moved.error
    assert store.read(space(), "notes/0.md").content == doc("x")


def test_the_indexer_outlasts_a_writer_that_takes_the_counter_before_the_chunks(
    pg: Backend,
) -> None:
    """A writer out of the store's lock order (its space's counter, then chunks the batch
    holds) while the indexer chunks a new document of that space meanwhile: the
    indexer's wait for the counter is bounded, so the batch ends and PostgreSQL settles
    what is left between the claim and the writer. Neither waits for good."""
    store, other = pg.open(), pg.open()
    addr = SqlStore._address(space())

    def counter_then_chunks() -> None:
        other.write(space(), "notes/y.md", doc("y"))  # new: the backfill's meanwhile
        with other.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE memory_space_usage SET search_version = search_version + 1"
                    " WHERE tenant_id = :t AND space_key = :k"
                ),
                addr,
            )
            conn.execute(
                sa.text(
                    "DELETE FROM memory_chunks WHERE tenant_id = :t AND space_key = :k"
                    " AND path = 'notes/0.md'"
                ),
                addr,
            )

    run, wrote = a_pass_beside(pg, store, counter_then_chunks, pause=2.5)
    # PostgreSQL ends the one cycle it sees (the claim's last bump against the writer):
    # one of the two may be refused, and is retried by its own.
    assert run.error is None or isinstance(run.error, StoreUnavailable), run.error
    assert wrote.error is None or isinstance(wrote.error, sa.exc.DBAPIError), wrote.error
