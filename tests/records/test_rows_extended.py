"""A save does not cost the next search a read of every record of its team: the rows and
BM25 index a search cached are extended by the records stored since, and rank exactly as
rows read whole would; a delete patches them too (the records removed since are dropped);
a change a replica of a release before makes in a rolling upgrade (one that tags nothing,
or one that lists no removal) makes the next search read them whole again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from keepstone.db import write_transaction
from keepstone.principal import CredentialKind
from keepstone.records.ratelimit import LocalRateLimiter
from keepstone.records.schema import record_search_versions, records
from keepstone.records.store import RETENTION
from keepstone.search.text import analyze
from keepstone.service.records import RecordService
from tests.records.conftest import World, ranking_reads, records_of

NOTES = [
    "Rolled back the payments deploy after the canary failed",
    "Deploy of the search service moved to the night window",
    "Rotated the vault keys used by the payments workers",
    "The canary for the billing deploy now waits ten minutes",
]


@pytest.fixture
def reads(world: World) -> Iterator[list[str]]:
    """The reads of the team's ranking rows as they run (:func:`ranking_reads`)."""
    with ranking_reads(world.engine) as seen:
        yield seen


def _ranked(records: RecordService, world: World, query: str) -> list[tuple[str, float]]:
    answer = records.search(world.principal(world.member), world.team_id, query, limit=50)
    return [(hit.id, hit.score) for hit in answer.hits]


def _fresh(world: World) -> RecordService:
    """A records service of its own (its own caches), reading every row afresh."""
    return records_of(world.engine, LocalRateLimiter(rate=10**9, max_in_flight=10**9))


def test_saves_extend_the_cached_rows_which_rank_as_a_fresh_read(
    world: World, reads: list[str]
) -> None:
    save = world.records.save_as_server
    for note in NOTES:
        save(world.team_id, note)
    assert _ranked(world.records, world, "payments deploy canary")
    for n in range(3):
        save(world.team_id, f"Payments deploy number {n} went out behind a canary")
    save(world.team_id, "Deploy freeze for the payments team over the holidays")
    reads.clear()
    extended = _ranked(world.records, world, "payments deploy canary")
    assert reads == ["since"]
    assert extended == _ranked(_fresh(world), world, "payments deploy canary")
    assert len(extended) == len(NOTES) + 4  # every note holds a word of the query
    # Extended again, from the extended rows.
    save(world.team_id, "The canary of the payments deploy found the regression")
    reads.clear()
    again = _ranked(world.records, world, "payments regression")
    assert reads == ["since"] and again == _ranked(_fresh(world), world, "payments regression")


def test_a_delete_patches_the_cached_rows_which_rank_as_a_fresh_read(
    world: World, reads: list[str]
) -> None:
    kept = [world.records.save_as_server(world.team_id, note) for note in NOTES]
    assert _ranked(world.records, world, "deploy")
    owner = world.principal(world.owner, CredentialKind.SESSION)
    world.records.delete(owner, world.team_id, kept[1].id)
    reads.clear()
    found = _ranked(world.records, world, "deploy")
    assert reads == ["since", "removed"]  # the records changed since, never the team's
    assert kept[1].id not in {record_id for record_id, _ in found}
    assert found == _ranked(_fresh(world), world, "deploy")
    # A save and a delete of the record it stored, between two searches, then a save.
    gone = world.records.save_as_server(world.team_id, "Deploy of the canary to the edge")
    world.records.delete(owner, world.team_id, gone.id)
    world.records.delete(owner, world.team_id, kept[0].id)
    world.records.save_as_server(world.team_id, "The payments deploy is green again")
    reads.clear()
    again = _ranked(world.records, world, "payments deploy canary")
    assert reads == ["since", "removed"]
    assert {gone.id, kept[0].id}.isdisjoint(record_id for record_id, _ in again)
    assert again == _ranked(_fresh(world), world, "payments deploy canary")


def test_a_purge_patches_the_cached_rows_which_rank_as_a_fresh_read(
    world: World, reads: list[str]
) -> None:
    old = datetime.now(UTC) - RETENTION - timedelta(minutes=5)
    for note in NOTES:
        world.records.save_as_server(world.team_id, note)
    expired = [world.records.save_as_server(world.team_id, n, now=old) for n in NOTES[:2]]
    before = _ranked(world.records, world, "deploy payments")
    assert {e.id for e in expired}.isdisjoint(record_id for record_id, _ in before)
    assert world.records.purge_expired() >= len(expired)
    reads.clear()
    found = _ranked(world.records, world, "deploy payments")
    assert reads == ["since", "removed"]
    # The purged records no longer count in the index's statistics: as a fresh read.
    assert found == _ranked(_fresh(world), world, "deploy payments")


def _as_the_release_before(world: World, change: str) -> None:
    """A save (``change`` "save") or a delete of the team's newest record, written as a
    replica of the release before records migration 5 writes it in a rolling upgrade: no
    ``terms_version`` on the record, no ``terms_reset`` on the team; or (``change``
    "v5 delete") a delete as one of the release before migration 6 writes it: no removal
    listed, ``terms_reset`` moved to the delete's version."""
    r, v = records.c, record_search_versions.c
    now = datetime.now(UTC)
    with write_transaction(world.engine) as conn:
        if change == "save":
            text = "Deploy of the payments gateway by the release before"
            row = {"team_id": world.team_id, "id": "rec_" + uuid.uuid4().hex, "repo_id": None}
            row |= {"text": text, "terms": " ".join(analyze(text)), "created_at": now}
            conn.execute(records.insert().values(**row, expires_at=now + timedelta(days=1)))
        else:
            newest = sa.select(r.id).where(r.team_id == world.team_id)
            gone = conn.execute(newest.order_by(r.created_at.desc())).first()
            assert gone is not None
            conn.execute(records.delete().where(r.team_id == world.team_id, r.id == gone.id))
        moved = {"terms_version": v.terms_version + 1}
        if change == "v5 delete":
            moved["terms_reset"] = v.terms_version + 1
        conn.execute(
            record_search_versions.update().where(v.team_id == world.team_id).values(**moved)
        )


@pytest.mark.parametrize("change", ["save", "delete", "v5 delete"])
def test_a_change_by_the_release_before_makes_the_next_search_read_the_rows_whole(
    world: World, reads: list[str], change: str
) -> None:
    for note in NOTES:
        world.records.save_as_server(world.team_id, note)
    assert _ranked(world.records, world, "deploy payments")
    _as_the_release_before(world, change)
    world.records.save_as_server(world.team_id, "A second payments deploy after the fix")
    reads.clear()
    found = _ranked(world.records, world, "deploy payments")
    # A version since that tags nothing: read whole, after what the check read.
    assert reads == ([] if change == "v5 delete" else ["since", "removed"]) + ["whole"]
    assert found == _ranked(_fresh(world), world, "deploy payments")
