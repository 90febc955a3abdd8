"""PostgreSQL's one-statement write (``keepstone.store.sql_write.ChangeStatements.put``): a
plain write is one round trip, and it refuses, or hands over to the transaction path,
exactly as the transaction path would have refused or written.

Every test spies on what the statement answered, so each asserts the path it means to
take: the statement's own answer (written, or the condition refused), or None (nothing
written; the write ran in a transaction).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from keepstone.db import utcnow, write_transaction
from keepstone.documents import content_etag
from keepstone.errors import PreconditionFailed, QuotaExceeded
from keepstone.quota import Limits
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import PlatformGrant
from keepstone.store.sql import SqlStore
from keepstone.store.sql_index import _chunk_rows
from keepstone.store.sql_schema import memory_chunks, memory_document_versions, memory_documents
from tests.transactions import round_trips
from tests.unit.conftest import Backend

pytestmark = pytest.mark.postgres

TEAM = "team-a"
REF = SpaceRef.build(Visibility.PROJECT, "notes", tenant=TEAM, project="p1")


@pytest.fixture
def pg(postgres_url: str) -> Iterator[Backend]:
    yield from Backend.closing("postgres", postgres_url)


def spy(store: SqlStore) -> list[Any]:
    """What every one-statement write of ``store`` answers, in order."""
    answers: list[Any] = []
    put = store._change_sql.put

    def spied(*args: Any) -> Any:
        answers.append(put(*args))
        return answers[-1]

    store._change_sql.put = spied  # type: ignore[method-assign]
    return answers


def versions(store: SqlStore, path: str) -> list[int]:
    """The path's version numbers, oldest first: the table's (replaced versions) and the
    live document's."""
    V, D = memory_document_versions, memory_documents
    with store.engine.connect() as conn:
        kept = conn.execute(sa.select(V.c.version).where(V.c.path == path)).scalars().all()
        live = conn.execute(sa.select(D.c.version).where(D.c.path == path)).scalars().all()
        return sorted(int(v) for v in [*kept, *live])


def blocked_on_a_lock(store: SqlStore) -> None:
    """Wait until a session of this database waits for a lock (the writer thread's)."""
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND datname = current_database()"
    )
    for _ in range(2000):
        with store.engine.connect() as conn:
            if conn.execute(query).scalar():
                return
        time.sleep(0.005)
    raise AssertionError("the writer never waited for the lock")


def in_thread(work: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    got: list[object] = []

    def run() -> None:
        try:
            got.append(work())
        except Exception as exc:  # handed to the test
            got.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, got


def test_a_plain_write_is_one_round_trip(pg: Backend) -> None:
    store = pg.open()
    answers = spy(store)
    store.write(REF, "a.md", "one")
    # Create and replace, each ONE round trip: no BEGIN, no lock of its own, no COMMIT,
    # nothing at the pool's checkout or return.
    assert round_trips(store.engine, lambda: store.write(REF, "b.md", "new")) == 1
    assert round_trips(store.engine, lambda: store.write(REF, "a.md", "two")) == 1
    assert [a[0] for a in answers] == [True, True, True]
    assert store.read(REF, "a.md").content == "two"
    assert versions(store, "a.md") == [1, 2]
    usage = store.usage(REF)
    assert (usage.used_bytes, usage.team_used_bytes, usage.history_used_bytes) == (6, 6, 1 + 3)


def test_the_statement_leaves_its_pooled_connection_out_of_autocommit(pg: Backend) -> None:
    # The statement switches its pooled connection to autocommit itself (no SQLAlchemy
    # Connection to restore it): written, refused and undone, the connection goes back to
    # the pool as it came, so the next transaction on it is one.
    store = pg.open(Limits(team_quota=10))
    answers = spy(store)
    store.write(REF, "a.md", "one")
    with pytest.raises(PreconditionFailed):
        store.write(REF, "a.md", "x", if_none_match=True)
    with pytest.raises(QuotaExceeded):
        store.write(REF, "b.md", "x" * 20)
    assert [a if a is None else a[0] for a in answers] == [True, False, None]
    pooled = [store.engine.raw_connection() for _ in range(store.engine.pool.checkedin())]
    try:
        assert pooled and not any(p.driver_connection.autocommit for p in pooled)
    finally:
        for p in pooled:
            p.close()
    with pytest.raises(RuntimeError), write_transaction(store.engine) as conn:
        conn.execute(sa.text("DELETE FROM memory_documents"))
        raise RuntimeError("rolled back")
    assert [d.path for d in store.list(REF)] == ["a.md"]


def test_precondition_refusals_are_the_statements_own(pg: Backend) -> None:
    store = pg.open()
    etag = store.write(REF, "a.md", "first").etag
    answers = spy(store)
    with pytest.raises(PreconditionFailed) as changed:
        store.write(REF, "a.md", "x", if_match="0" * 32)
    assert changed.value.details == {"path": "a.md", "etag": etag}
    with pytest.raises(PreconditionFailed, match="does not exist"):
        store.write(REF, "absent.md", "x", if_match=etag)
    with pytest.raises(PreconditionFailed, match="already exists"):
        store.write(REF, "a.md", "x", if_none_match=True)
    # Answered by the statement itself (False, the etag it found), nothing written.
    assert answers == [(False, etag), (False, None), (False, etag)]
    assert store.read(REF, "a.md").content == "first"
    assert [d.path for d in store.list(REF)] == ["a.md"]
    assert versions(store, "a.md") == [1]
    assert store.usage(REF).used_bytes == 5
    # Conditions that hold write.
    assert not store.write(REF, "a.md", "second", if_match=etag).created
    assert store.write(REF, "new.md", "n", if_none_match=True).created
    assert [a[0] for a in answers[3:]] == [True, True]


def test_a_counter_refusal_undoes_the_statement_and_refuses_with_the_figures(
    pg: Backend,
) -> None:
    limits = Limits(team_quota=1000).with_subcap(Visibility.PROJECT, 100)
    store = pg.open(limits)
    store.write(REF, "a.md", "a" * 60)
    answers = spy(store)
    with pytest.raises(QuotaExceeded) as space:
        store.write(REF, "b.md", "b" * 50)
    assert space.value.details["limit"] == "space"
    assert (space.value.details["used_bytes"], space.value.details["quota_bytes"]) == (60, 100)
    assert space.value.details["needed_bytes"] == 50
    # A replace that grows past the sub-cap: the document had been updated by the time
    # the counter refused, and is as it was.
    with pytest.raises(QuotaExceeded):
        store.write(REF, "a.md", "a" * 101)
    store.set_team_quota(TEAM, 70)
    other = SpaceRef.build(Visibility.PROJECT, "other", tenant=TEAM, project="p1")
    with pytest.raises(QuotaExceeded) as team:
        store.write(other, "c.md", "c" * 20)
    assert team.value.details["limit"] == "team"
    assert (team.value.details["used_bytes"], team.value.details["quota_bytes"]) == (60, 70)
    # Each: undone by the statement (None), then refused by the transaction path.
    assert answers == [None, None, None]
    assert store.read(REF, "a.md").content == "a" * 60
    assert [d.path for d in store.list(REF)] == ["a.md"]
    assert store.list(other) == []
    assert versions(store, "a.md") == [1] and versions(store, "b.md") == []
    usage = store.usage(REF)
    assert (usage.used_bytes, usage.team_used_bytes, usage.history_used_bytes) == (60, 60, 0)
    assert store.usage(other).used_bytes == 0


def test_a_counter_the_write_would_create_over_its_quota_is_not_created(pg: Backend) -> None:
    store = pg.open(Limits(team_quota=10))
    answers = spy(store)
    with pytest.raises(QuotaExceeded) as exc:
        store.write(REF, "a.md", "x" * 20)
    assert exc.value.details["used_bytes"] == 0 and exc.value.details["quota_bytes"] == 10
    assert answers == [None]
    assert store.team_usage(TEAM) == (0, 10)
    assert store.list(REF) == []


def test_a_concurrent_creator_hands_the_write_to_the_transaction_path(pg: Backend) -> None:
    store = pg.open()
    answers = spy(store)
    with write_transaction(store.engine) as conn:
        # Another writer has inserted the row and not committed yet.
        store._write_in(conn, REF, store.check_write(REF, "a.md", "theirs"))
        thread, got = in_thread(lambda: store.write(REF, "a.md", "mine!"))
        blocked_on_a_lock(store)
    thread.join()
    assert not isinstance(got[0], Exception), got
    assert answers == [None]  # its insert met the creator: nothing written
    assert store.read(REF, "a.md").content == "mine!"
    assert versions(store, "a.md") == [1, 2]
    usage = store.usage(REF)
    # A replaced version is stored behind one byte (keepstone.store.version_pack).
    assert (usage.used_bytes, usage.team_used_bytes, usage.history_used_bytes) == (5, 5, 1 + 6)


def test_a_writer_that_committed_while_the_statement_waited_is_seen(pg: Backend) -> None:
    store = pg.open()
    store.write(REF, "a.md", "v1")
    answers = spy(store)
    with write_transaction(store.engine) as conn:
        store._write_in(conn, REF, store.check_write(REF, "a.md", "v2 v2"))
        thread, got = in_thread(lambda: store.write(REF, "a.md", "v3"))
        blocked_on_a_lock(store)
    thread.join()
    assert not isinstance(got[0], Exception), got
    # The statement's snapshot predates v2 (its versions, its counters' figures): it
    # wrote nothing, and the transaction path numbered v3 after v2.
    assert answers == [None]
    assert store.read(REF, "a.md").content == "v3"
    assert versions(store, "a.md") == [1, 2, 3]
    usage = store.usage(REF)
    assert (usage.used_bytes, usage.history_used_bytes) == (2, (1 + 2) + (1 + 5))


@pytest.mark.parametrize("grant", [None, PlatformGrant("test")], ids=["put", "transaction"])
def test_a_large_version_committed_while_a_writer_waited_is_kept_once(
    pg: Backend, grant: PlatformGrant | None
) -> None:
    # A large live version's packed row is written with it. A writer whose lock waited for
    # that writer returns its row, but the lock statement's subqueries read the snapshot
    # from before the wait, where the packed row does not exist yet: taking that for a
    # small version to copy would keep version 2 twice (a duplicate key).
    store = pg.open()
    large = "a line of notes\n" * 400  # 6.4 KB
    store.write(REF, "a.md", large)
    with write_transaction(store.engine) as conn:
        second = store.check_write(REF, "a.md", large + "v2")
        store._write_in(conn, REF, second)
        thread, got = in_thread(lambda: store.write(REF, "a.md", "v3", grant=grant))
        blocked_on_a_lock(store)
    thread.join()
    assert not isinstance(got[0], Exception), got
    assert versions(store, "a.md") == [1, 2, 3]
    assert store.read_version(REF, "a.md", 2).content == large + "v2"
    kept = [v for v in store.versions(REF, "a.md") if v.version < 3]
    usage = store.usage(REF)
    with store.engine.connect() as conn:
        V = memory_document_versions
        stored = conn.execute(sa.select(sa.func.sum(V.c.stored_bytes))).scalar_one()
    assert len(kept) == 2 and usage.history_used_bytes == stored


def test_chunks_the_indexer_committed_while_the_statement_waited_are_dropped(
    pg: Backend,
) -> None:
    store = pg.open()
    store.write(REF, "a.md", "# Old\n\nold words")
    answers = spy(store)
    key = {**store._address(REF), "p": "a.md"}
    with write_transaction(store.engine) as conn:
        # The indexer's backfill: the document locked, its chunks inserted.
        doc = conn.execute(store._sql.lock_content, key).one()
        bound = {**key, "vis": doc.visibility, "content": doc.content, "now": utcnow()}
        conn.execute(memory_chunks.insert(), _chunk_rows(bound))
        thread, got = in_thread(lambda: store.write(REF, "a.md", "# New\n\nnew words"))
        blocked_on_a_lock(store)
    thread.join()
    assert not isinstance(got[0], Exception), got
    assert answers == [None]
    # The old content's chunks went with the write; the next reconcile chunks the new.
    assert store.chunk_rows(REF) == []
    store.reconcile(REF)
    assert [c.text for c in store.chunk_rows(REF)] == ["# New\n\nnew words"]


def test_a_write_that_trims_the_history_runs_in_a_transaction(pg: Backend) -> None:
    store = pg.open(Limits(history_versions=2))
    answers = spy(store)
    for n in range(4):
        store.write(REF, "a.md", f"v{n}")
    # The third write would pass the per-document count: handed over before any lock.
    assert [a is not None for a in answers] == [True, True, False, False]
    assert versions(store, "a.md") == [3, 4]
    assert store.usage(REF).history_used_bytes == 1 + 2  # version 3 ("v2") only


def test_a_create_whose_lock_found_nothing_numbers_after_a_delete_it_waited_for(
    pg: Backend,
) -> None:
    # A write in a transaction locks the path and finds no document; before its change
    # statement runs, another writer creates the document and a third starts deleting it.
    # The change statement's snapshot has the created row but not the deletion's versions,
    # and its insert waits for the deleter: numbered from that snapshot, the new document
    # took a number the deletion had just kept, and the next change of the path failed on
    # a duplicate key. It must look again instead.
    store = pg.open()
    store.write(REF, "a.md", "v1")
    store.delete(REF, "a.md")  # 1 kept, 2 the marker
    # Writers in a transaction queue on the path's lock, which keeps this order out; an
    # import batch's document written on the transaction path takes none, so it is still
    # possible: the transactions here take none either.
    store._change_sql.path_locks = lambda *args: ()  # type: ignore[method-assign]
    real_lock = store._change_sql.lock
    found_nothing, go = threading.Event(), threading.Event()
    writer: list[threading.Thread] = []
    # The writer may reach its lock before in_thread has handed its thread back: it waits
    # until the thread is known (only the writer takes a lock before found_nothing is set).
    known = threading.Event()

    def lock(conn: Any, params: dict[str, Any], *path_locks: Any) -> Any:
        got = real_lock(conn, params, *path_locks)
        if (
            not found_nothing.is_set()
            and known.wait(30)
            and threading.current_thread() is writer[0]
        ):
            found_nothing.set()
            go.wait(30)
        return got

    store._change_sql.lock = lock  # type: ignore[method-assign]
    thread, got = in_thread(lambda: store.write(REF, "a.md", "y", grant=PlatformGrant("t")))
    writer.append(thread)
    known.set()
    assert found_nothing.wait(30)
    store.write(REF, "a.md", "w")  # version 3, committed
    key = {**store._address(REF), "p": "a.md"}
    with write_transaction(store.engine) as conn:
        current = real_lock(conn, key)
        assert current is not None and current.version == 3
        store._change(conn, REF, key, "delete", -1, True, current, True, utcnow(), None)
        go.set()
        blocked_on_a_lock(store)  # the writer waits for this deletion (3 kept, 4 the marker)
    thread.join()
    assert not isinstance(got[0], Exception), got
    assert versions(store, "a.md") == [1, 2, 3, 4, 5]
    assert store.read_version(REF, "a.md", 5).content == "y"
    store.delete(REF, "a.md")
    assert versions(store, "a.md") == [1, 2, 3, 4, 5, 6]


def stale_number(store: SqlStore, path: str, content: str) -> None:
    """The state the create race can leave (see ``Locked.newest_kept``): ``path`` was
    written and deleted (its version 1 kept, 2 the marker), and a document holds it again
    numbered 1, as a create numbered from a snapshot taken before another writer created
    the document and a third deleted it."""
    store.write(REF, path, "first")
    store.delete(REF, path)
    row = {**store._address(REF), "p": path}
    with write_transaction(store.engine) as conn:
        conn.execute(
            sa.insert(memory_documents).values(
                tenant_id=row["t"],
                space_key=row["k"],
                space_id=row["sid"],
                path=path,
                visibility=REF.visibility.value,
                content=content,
                size_bytes=len(content),
                etag=content_etag(content.encode()),
                updated_at=utcnow() - timedelta(seconds=1),
                version=1,
                actor="test",
            )
        )


def test_a_document_numbered_as_a_kept_version_is_renumbered_by_its_next_write(
    pg: Backend,
) -> None:
    # Its next change kept it as version 1 again: a duplicate key (a 500), at every change
    # of the document from then on.
    store = pg.open()
    stale_number(store, "a.md", "stale")
    answers = spy(store)
    store.write(REF, "a.md", "next")
    assert answers == [None]  # the statement met the duplicate; a transaction renumbered
    assert versions(store, "a.md") == [1, 2, 3, 4]
    assert [store.read_version(REF, "a.md", n).content for n in (1, 3, 4)] == [
        "first",
        "stale",
        "next",
    ]
    found = store.versions(REF, "a.md")
    assert [v.version for v in found] == [4, 3, 2, 1]
    assert [v.at for v in found] == sorted((v.at for v in found), reverse=True)
    store.write(REF, "a.md", "again")  # one statement again
    assert answers[-1] == (True, content_etag(b"next"))


def test_a_document_numbered_as_a_kept_version_is_renumbered_by_a_delete_or_move(
    pg: Backend,
) -> None:
    store = pg.open()
    stale_number(store, "a.md", "stale")
    store.delete(REF, "a.md")
    assert versions(store, "a.md") == [1, 2, 3, 4]
    assert store.read_version(REF, "a.md", 3).content == "stale"
    stale_number(store, "b.md", "stale b")
    store.move(REF, "b.md", "c.md")
    assert versions(store, "b.md") == [1, 2, 3, 4]
    assert store.read_version(REF, "b.md", 3).content == "stale b"
    assert store.read(REF, "c.md").content == "stale b"


class StepClock:
    """A clock that answers the same time until a test moves it (:meth:`at`, seconds from
    its start), and once, at the first reading by the thread ``hook_thread``, runs
    ``hook`` before it answers."""

    def __init__(self) -> None:
        self.start = self.now = utcnow()
        self.hook: Callable[[], None] | None = None
        self.hook_thread: threading.Thread | None = None

    def at(self, seconds: float) -> None:
        self.now = self.start + timedelta(seconds=seconds)

    def __call__(self) -> datetime:
        now = self.now
        if self.hook is not None and threading.current_thread() is self.hook_thread:
            hook, self.hook = self.hook, None
            hook()
        return now


def times(store: SqlStore, path: str) -> list[float]:
    """The times of the path's versions in the order of their numbers, in seconds from
    the clock's start."""
    clock = store.clock
    assert isinstance(clock, StepClock)
    found = sorted(store.versions(REF, path), key=lambda v: v.version)
    return [(v.at - clock.start).total_seconds() for v in found]


def contents(store: SqlStore, path: str, upto: int) -> list[str]:
    return [store.read_version(REF, path, n).content for n in range(1, upto + 1)]


@pytest.fixture
def stepped(pg: Backend) -> tuple[SqlStore, StepClock]:
    """A store on a :class:`StepClock` whose ``a.md`` holds version 1 ("v1") at its start."""
    store = pg.open()
    store.clock = clock = StepClock()
    store.write(REF, "a.md", "v1")
    return store, clock


def test_a_write_that_waited_for_the_lock_is_timed_after_the_version_it_replaces(
    stepped: tuple[SqlStore, StepClock],
) -> None:
    # A write in a transaction (a grant's) waits for the row lock while another writer,
    # who read the clock after it, commits. Its time must be read under the lock: read
    # before the wait, it preceded the version it replaced.
    store, clock = stepped
    key = {**store._address(REF), "p": "a.md"}
    with write_transaction(store.engine) as conn:
        store._change_sql.lock(conn, key)  # the other writer holds the row
        clock.at(1)
        thread, got = in_thread(lambda: store.write(REF, "a.md", "v3", grant=PlatformGrant("t")))
        blocked_on_a_lock(store)
        clock.at(2)
        store._write_in(conn, REF, store.check_write(REF, "a.md", "v2"))
    clock.at(3)
    thread.join()
    assert not isinstance(got[0], Exception), got
    assert contents(store, "a.md", 3) == ["v1", "v2", "v3"]
    first, second, third = times(store, "a.md")
    assert (first, second) == (0, 2)
    # Read under the lock, never 1 (before the wait): 2 when the lock came free while the
    # other writer was still syncing its commit, before the clock moved on; else 3.
    assert third in (2, 3)


def test_a_write_whose_time_precedes_the_live_version_runs_in_a_transaction(
    stepped: tuple[SqlStore, StepClock],
) -> None:
    # The one-statement write reads the clock before it sends the statement. A writer that
    # read the clock later and committed in between is in the statement's snapshot, with
    # no lock to wait for: the statement must not write a version timed before it.
    store, clock = stepped
    first = store.read(REF, "a.md").etag
    answers = spy(store)

    def the_other_writer() -> None:
        clock.at(2)
        store.write(REF, "a.md", "v2")
        clock.at(3)

    clock.at(1)
    got: list[object] = []

    def write() -> None:
        try:
            got.append(store.write(REF, "a.md", "v3"))
        except Exception as exc:  # handed to the test
            got.append(exc)

    thread = threading.Thread(target=write)
    clock.hook, clock.hook_thread = the_other_writer, thread
    thread.start()
    thread.join()
    assert not isinstance(got[0], Exception), got
    # The other writer's statement wrote v2; this one's wrote nothing (v2 is newer than
    # its time), and the transaction path timed v3 under the lock.
    assert answers == [(True, first), None]
    assert contents(store, "a.md", 3) == ["v1", "v2", "v3"]
    assert times(store, "a.md") == [0, 2, 3]
