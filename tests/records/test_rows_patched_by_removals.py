"""A delete or purge costs the next search the records it removed, as a save costs it the
records saved: each removal is listed under the team's ``terms_version`` of it, and every
worker's cached rows and BM25 index are patched by the records removed and stored since —
ranking exactly as rows read whole would, whatever the order of saves, deletes, purges and
searches, and however far behind a worker's cache is. A listing forgotten (after
``REMOVALS_KEPT``, by the periodic purge) sends the next search back to a whole read, even
one that read the team's counters before it went."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Engine

from keepstone.db import read_transaction
from keepstone.principal import CredentialKind
from keepstone.records.ratelimit import LocalRateLimiter
from keepstone.records.schema import record_removals
from keepstone.records.sql import SqlRecordStore
from keepstone.records.store import REMOVALS_KEPT, RETENTION, Scope
from keepstone.service.records import RecordService
from tests.records.conftest import World, make_world, ranking_reads, records_of
from tests.threads import run_beside

WORDS = ["deploy", "canary", "payments", "vault", "billing", "rollback", "ledger", "gateway"]
QUERIES = ["deploy canary", "payments ledger vault", "rollback gateway billing"]


def _worker(engine: Engine) -> RecordService:
    """The records service of one server worker: caches of its own."""
    return records_of(engine, LocalRateLimiter(rate=10**9, max_in_flight=10**9))


def _ranked(service: RecordService, world: World, query: str) -> list[tuple[str, float]]:
    answer = service.search(world.principal(world.member), world.team_id, query, limit=50)
    return [(hit.id, hit.score) for hit in answer.hits]


def _rankings(service: RecordService, world: World) -> dict[str, list[tuple[str, float]]]:
    return {query: _ranked(service, world, query) for query in QUERIES}


def _owner(world: World) -> Any:
    return world.principal(world.owner, CredentialKind.SESSION)


_texts = st.lists(
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join), max_size=3
)
_steps = st.lists(
    st.fixed_dictionaries(
        {
            "saved": _texts,
            "expired": _texts,  # saved already expired: masked until purged
            "deleted": st.lists(st.integers(min_value=0, max_value=10**6), max_size=3),
            "purge": st.booleans(),
            "second": st.booleans(),  # the second worker searches after this step too
        }
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=20)
@given(steps=_steps)
def test_patched_rows_rank_as_a_fresh_read(engine: Engine, steps: list[dict[str, Any]]) -> None:
    world = make_world(engine)
    save = world.records.save_many
    live = save(world.team_id, [("deploy canary payments", None)])
    expired: list[str] = []
    workers = [_worker(engine), _worker(engine)]
    for worker in workers:
        _rankings(worker, world)  # each worker's rows cached
    old = datetime.now(UTC) - RETENTION - timedelta(minutes=1)
    with ranking_reads(engine) as reads:
        for step in steps:
            live += save(world.team_id, [(text, None) for text in step["saved"]])
            expired += save(world.team_id, [(text, None) for text in step["expired"]], now=old)
            for n in step["deleted"]:
                if live:
                    world.records.delete(_owner(world), world.team_id, live.pop(n % len(live)))
            if step["purge"]:
                assert world.records.purge_expired() >= len(expired)
                expired.clear()
            for worker in workers if step["second"] else workers[:1]:
                reads.clear()
                patched = _rankings(worker, world)
                assert "whole" not in reads  # patched by what changed since, never read whole
                assert patched == _rankings(_worker(engine), world)
    assert {i for q in QUERIES for i, _ in _ranked(workers[0], world, q)} <= set(live)


def _listed(engine: Engine, team: str) -> list[tuple[str, int, int]]:
    g = record_removals.c
    with read_transaction(engine) as conn:
        rows = conn.execute(
            sa.select(g.id, g.terms_version, g.stored_version).where(g.team_id == team)
        )
        return [(str(r.id), int(r.terms_version), int(r.stored_version)) for r in rows]


def test_a_removal_is_listed_under_its_version_until_forgotten(world: World) -> None:
    store = SqlRecordStore(world.engine)
    first = world.records.save_as_server(world.team_id, "Deploy of the payments gateway")
    second = world.records.save_as_server(world.team_id, "Rollback of the billing deploy")
    world.records.delete(_owner(world), world.team_id, first.id)
    with store.reading() as tx:
        versions = tx.search_versions(world.team_id)
    assert (versions.terms, versions.terms_reset) == (3, 0)
    assert _listed(world.engine, world.team_id) == [(first.id, 3, 1)]
    _ranked(world.records, world, "deploy")  # cached at version 3
    # Kept REMOVALS_KEPT: the purge then forgets it, and moves terms_reset past it.
    world.records.purge_expired(now=datetime.now(UTC) + REMOVALS_KEPT - timedelta(minutes=1))
    assert _listed(world.engine, world.team_id) == [(first.id, 3, 1)]
    world.records.purge_expired(now=datetime.now(UTC) + REMOVALS_KEPT + timedelta(minutes=1))
    assert _listed(world.engine, world.team_id) == []
    with store.reading() as tx:
        assert tx.search_versions(world.team_id).terms_reset == 3
    # A cache at the version forgotten needs nothing; one older is read whole.
    world.records.delete(_owner(world), world.team_id, second.id)
    with ranking_reads(world.engine) as reads:
        assert _ranked(world.records, world, "deploy") == []
        assert reads == ["since", "removed"]
    store.drop_team(world.team_id)
    assert _listed(world.engine, world.team_id) == []


def test_a_listing_forgotten_after_the_counters_were_read_means_a_whole_read(
    world: World,
) -> None:
    # On PostgreSQL each statement of a search reads its own snapshot: the purge may forget
    # a listing between the search's read of the counters and its read of the listings.
    # The version it lists is then accounted for by nothing, and the rows are read whole.
    store = SqlRecordStore(world.engine)
    kept = [world.records.save_as_server(world.team_id, f"Deploy number {n}") for n in range(3)]
    ranking = world.records.record_search()
    assert len(_ranked(world.records, world, "deploy")) == 3
    world.records.delete(_owner(world), world.team_id, kept[0].id)
    with store.reading() as tx:
        versions = tx.search_versions(world.team_id)
    world.records.purge_expired(now=datetime.now(UTC) + REMOVALS_KEPT + timedelta(minutes=1))
    scope = Scope(world.team_id, None, None, datetime.now(UTC))
    with ranking_reads(world.engine) as reads, store.reading() as tx:
        found = ranking.rank(tx, scope, "deploy", 10, versions)
    assert reads == ["since", "removed", "whole"]
    fresh = _ranked(_worker(world.engine), world, "deploy")
    assert [hit.record.id for hit in found] == [record_id for record_id, _ in fresh]
    assert kept[0].id not in {record_id for record_id, _ in fresh}


def test_workers_patched_under_concurrent_saves_and_deletes_rank_as_a_fresh_read(
    world: World,
) -> None:
    # Two workers search while three writers save and delete: whatever each cache was
    # patched from meanwhile, once the writes stop each worker ranks as a fresh read.
    workers = [_worker(world.engine), _worker(world.engine)]

    def write(n: int) -> None:
        for i in range(15):
            words = " ".join(WORDS[(n + i + j) % len(WORDS)] for j in range(3))
            rec = world.records.save_as_server(world.team_id, f"{words} {n} {i}")
            if i % 2:
                world.records.delete(_owner(world), world.team_id, rec.id)

    failures = run_beside(
        [functools.partial(write, n) for n in range(3)],
        [functools.partial(_rankings, worker, world) for worker in workers],
    )
    assert not failures
    fresh = _rankings(_worker(world.engine), world)
    assert sum(len(hits) for hits in fresh.values()) > 0
    for worker in workers:
        assert _rankings(worker, world) == fresh
