"""Writers of the same two paths at once — moves each way, creates and replacements, deletes
— on SQLite and PostgreSQL: none is ever a deadlock's victim (on PostgreSQL they queue on
each path's lock, ``keepstone.store.sql_steps.path_lock``, before any row), every answer is a
write or the refusal the state of the moment calls for, and the counters end equal to what
the documents hold."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from keepstone.db import write_transaction
from keepstone.errors import Conflict, NotFound, PreconditionFailed
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store import sql_mutations
from keepstone.store.base import PlatformGrant
from keepstone.store.sql import SqlStore
from keepstone.store.sql_steps import path_lock
from tests.threads import run_beside
from tests.unit.conftest import Backend

REF = SpaceRef.build(Visibility.PROJECT, "contended", tenant="team-a", project="p1")
A, B = "d/a.md", "d/b.md"
#: Operations per thread: enough that the old lock order met a deadlock in most runs.
ROUNDS = 40


@pytest.fixture
def once_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deadlock's victim is not sent again: it reaches the test as the failure it is."""

    def once(work: Callable[[], object]) -> object:
        return work()

    monkeypatch.setattr(sql_mutations, "again_if_rolled_back", once)


@pytest.fixture
def contended(backend: Backend, once_only: None) -> Iterator[SqlStore]:
    yield backend.open()


def _refusals_only(op: Callable[[], object]) -> Callable[[], None]:
    """``op`` ``ROUNDS`` times, the refusals the moment's state calls for set aside (no
    document to move or delete, a target taken, a write's condition failed)."""

    def run() -> None:
        for _ in range(ROUNDS):
            try:
                op()
            except (NotFound, Conflict, PreconditionFailed):
                pass

    return run


def test_writers_of_the_same_paths_never_deadlock(contended: SqlStore) -> None:
    store = contended
    store.write(REF, A, "# a\n")
    rng = random.Random(7)

    def move(frm: str, to: str) -> Callable[[], object]:
        return lambda: store.move(REF, frm, to)

    def put() -> object:
        return store.write(REF, rng.choice((A, B)), f"# {rng.random()}\n")

    def put_as_platform() -> object:  # the transaction path, every time
        grant = PlatformGrant("bench", attribution_team="team-a")
        return store.write(REF, rng.choice((A, B)), f"# {rng.random()}\n", grant=grant)

    def delete() -> object:
        return store.delete(REF, rng.choice((A, B)))

    ops = [move(A, B), move(B, A), move(A, B), move(B, A), put, put, put_as_platform, delete]
    failures = run_beside([_refusals_only(op) for op in ops], [])
    assert failures == []
    held = sum(info.size_bytes for info in store.list(REF))
    assert store.usage(REF).used_bytes == held


def _waiting_on_path_locks(store: SqlStore) -> int:
    """How many sessions of the store's database wait for an advisory lock."""
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND wait_event = 'advisory' AND datname = current_database()"
    )
    with store.engine.connect() as conn:
        return int(conn.execute(query).scalar() or 0)


@pytest.fixture
def pg(postgres_url: str) -> Iterator[SqlStore]:
    backend = Backend.closing("postgres", postgres_url)
    yield next(backend).open()
    next(backend, None)  # closes the store


@pytest.mark.postgres
def test_every_writer_of_a_path_waits_while_another_holds_its_lock(pg: SqlStore) -> None:
    store = pg
    store.write(REF, A, "# a\n")
    store.write(REF, "d/other.md", "# other\n")
    writes: list[Callable[[], object]] = [
        lambda: store.write(REF, A, "# one statement\n"),
        lambda: store.write(REF, A, "# a transaction\n", grant=PlatformGrant("t")),
        lambda: store.move(REF, "d/other.md", A, overwrite=True),
        lambda: store.delete(REF, A),
    ]
    for write in writes:
        done = threading.Event()

        def run(write: Callable[[], object] = write, done: threading.Event = done) -> None:
            write()
            done.set()

        with write_transaction(store.engine) as conn:
            key = path_lock(store._address(REF), A)
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
            thread = threading.Thread(target=run)
            thread.start()
            for _ in range(2000):
                if _waiting_on_path_locks(store):
                    break
                time.sleep(0.005)
            assert _waiting_on_path_locks(store) == 1 and not done.is_set()
            store.write(REF, B, "# another path is not held up\n")
        thread.join(30)
        assert done.is_set()
