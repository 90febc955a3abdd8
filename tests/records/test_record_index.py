"""Records' vectors on SQLite and PostgreSQL: the indexer's claim API, the per-team search
versions, and search by meaning through ``RecordService`` once vectors are stored."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from keepstone.db import read_transaction
from keepstone.db.vectors import encode_many
from keepstone.errors import StoreUnavailable
from keepstone.principal import CredentialKind
from keepstone.records.ratelimit import LocalRateLimiter
from keepstone.records.schema import records
from keepstone.records.sql import SqlRecordStore
from keepstone.records.store import SearchVersions
from keepstone.search.cache import VectorCache
from keepstone.service.record_search import RecordSearch
from keepstone.service.records import RecordService, build_record_service
from tests.records.conftest import World, identity_of

CONCEPTS = {
    "database": 0, "postgres": 0, "sql": 0,
    "login": 1, "password": 1, "signin": 1, "credentials": 1,
    "deploy": 2, "release": 2, "rollout": 2,
}  # fmt: skip
DIM = 8


class ConceptEmbedder:
    """Deterministic unit vectors from the concepts a text's words name."""

    dim = DIM

    def __init__(self, model_id: str = "concepts-1") -> None:
        self.model_id = model_id
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
        self.calls += 1
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                if word in CONCEPTS:
                    out[i, CONCEPTS[word]] += 1.0
            if not out[i].any():
                out[i, DIM - 1] = 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def _model() -> str:
    return f"concepts-{uuid.uuid4().hex[:8]}"


def _hybrid(engine: Engine, embedder: ConceptEmbedder) -> RecordService:
    unlimited = LocalRateLimiter(rate=10**9, max_in_flight=10**9)
    search = RecordSearch(embedder, VectorCache())
    return build_record_service(engine, identity_of(engine), unlimited, search)


def _embed_all(store: SqlRecordStore, embedder: ConceptEmbedder, limit: int = 10_000) -> int:
    with store.claim_pending_records(limit, embedder.model_id) as claim:
        claim.store_embeddings(encode_many(embedder.embed([r.search_text for r in claim.rows])))
        return len(claim.rows)


def _versions(store: SqlRecordStore, team: str) -> SearchVersions:
    with store.reading() as tx:
        return tx.search_versions(team)


def _ids(service: RecordService, world: World, query: str, user: str | None = None) -> list[str]:
    who = world.principal(user or world.member)
    return [h.id for h in service.search(who, world.team_id, query).hits]


def test_versions_move_with_saves_deletes_and_vectors(world: World) -> None:
    store = SqlRecordStore(world.engine)
    assert _versions(store, world.team_id) == SearchVersions(0, 0, 0)
    rec = world.records.save_as_server(world.team_id, "moved the login page")
    world.records.save_many(world.team_id, [("a", None), ("b", None)])
    assert _versions(store, world.team_id).terms == 2
    other = _versions(store, world.other_team)
    embedder = ConceptEmbedder(_model())
    _embed_all(store, embedder)
    after = _versions(store, world.team_id)
    assert after.terms == 2 and after.vectors > 0 and after.vectors_reset == 0
    world.records.delete(
        world.principal(world.owner, CredentialKind.SESSION), world.team_id, rec.id
    )
    # A delete moves the terms alone: the removed record's vector left in a cached matrix
    # matches no row, so the matrix stands (extended, not reloaded).
    assert _versions(store, world.team_id) == SearchVersions(3, after.vectors, 0)
    assert _versions(store, world.other_team).terms == other.terms  # never another team's


def test_search_by_meaning_once_embedded(world: World) -> None:
    embedder = ConceptEmbedder(_model())
    hybrid = _hybrid(world.engine, embedder)
    login = world.records.save_as_server(world.team_id, "Fixed the signin form for SSO users")
    world.records.save_as_server(world.team_id, "Tuned the postgres autovacuum settings")
    # Before the indexer ran: keyword only, and no term is shared.
    assert _ids(hybrid, world, "password problems") == []
    assert embedder.calls == 0  # no vector yet: the query is not even embedded
    assert _embed_all(SqlRecordStore(world.engine), embedder) >= 2
    answer = hybrid.search(world.principal(world.member), world.team_id, "password problems")
    assert answer.hits[0].id == login.id
    assert answer.hits[0].matched == ("meaning",)
    assert embedder.calls == 2  # the records, then the query once
    # A save after the vectors: keyword-searchable at once, before it has a vector.
    fresh = world.records.save_as_server(world.team_id, "password rotation for the bots")
    hits = hybrid.search(world.principal(world.member), world.team_id, "password problems").hits
    assert [(h.id, h.matched) for h in hits[:2]] == [
        (login.id, ("meaning",)),
        (fresh.id, ("keyword",)),
    ]


def test_an_embedder_that_fails_leaves_the_search_keyword_only(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = ConceptEmbedder(_model())
    world.records.save_as_server(world.team_id, "Fixed the signin form for SSO users")
    rotation = world.records.save_as_server(world.team_id, "password rotation for the bots")
    _embed_all(SqlRecordStore(world.engine), embedder)

    def down(texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
        raise StoreUnavailable("the embeddings endpoint cannot be reached")

    embedder.embed = down  # type: ignore[method-assign]
    hits = (
        _hybrid(world.engine, embedder)
        .search(world.principal(world.member), world.team_id, "password problems")
        .hits
    )
    assert [(h.id, h.matched) for h in hits] == [(rotation.id, ("keyword",))]
    assert "records search by keyword only: the embedder failed" in caplog.text


def test_cached_vectors_extend_and_never_cross_teams(world: World) -> None:
    embedder = ConceptEmbedder(_model())
    hybrid = _hybrid(world.engine, embedder)
    store = SqlRecordStore(world.engine)
    mine = world.records.save_as_server(world.team_id, "released the billing rollout")
    theirs = world.records.save_as_server(world.other_team, "deploy of the billing service")
    _embed_all(store, embedder)
    assert _ids(hybrid, world, "release") == [mine.id]  # both teams' caches now warm
    outsider = world.principal(world.outsider)
    assert [h.id for h in hybrid.search(outsider, world.other_team, "release").hits] == [theirs.id]
    second = world.records.save_as_server(world.team_id, "rollout of the search cluster")
    _embed_all(store, embedder)  # the cached matrix is extended by the new vector
    assert sorted(_ids(hybrid, world, "release")) == sorted([mine.id, second.id])
    assert hybrid.record_search().cache.stats().extends >= 1


def _hits(service: RecordService, world: World, query: str) -> list[tuple[str, float]]:
    answer = service.search(world.principal(world.member), world.team_id, query, limit=50)
    return [(h.id, h.score) for h in answer.hits]


def _as_fresh(service: RecordService, world: World, embedder: ConceptEmbedder, query: str) -> None:
    """``service`` ranks ``query`` as a service with caches of its own, loaded afresh."""
    found, fresh = (
        _hits(service, world, query),
        _hits(_hybrid(world.engine, embedder), world, query),
    )
    assert [i for i, _ in found] == [i for i, _ in fresh]
    assert [s for _, s in found] == pytest.approx([s for _, s in fresh], abs=2e-6)


def test_a_delete_keeps_the_cached_vectors_until_most_are_removed(world: World) -> None:
    embedder = ConceptEmbedder(_model())
    hybrid = _hybrid(world.engine, embedder)
    store = SqlRecordStore(world.engine)
    texts = ["database failover", "password reset", "release train", "sql tuning"]
    saved = [
        world.records.save_as_server(world.team_id, f"{t} number {n}")
        for n in range(3)
        for t in texts
    ]
    _embed_all(store, embedder)
    assert _hits(hybrid, world, "postgres outage")
    stats = hybrid.record_search().cache.stats
    loads = stats().loads
    owner = world.principal(world.owner, CredentialKind.SESSION)
    world.records.delete(owner, world.team_id, saved[0].id)
    # The removed record's vector stays in the matrix, matched to no row: no reload.
    assert saved[0].id not in dict(_hits(hybrid, world, "postgres outage"))
    assert stats().loads == loads
    _as_fresh(hybrid, world, embedder, "postgres outage")
    for rec in saved[1:7]:
        world.records.delete(owner, world.team_id, rec.id)
    # Most of the matrix is of records removed: reloaded once, with the team's vectors alone.
    _as_fresh(hybrid, world, embedder, "credentials rollout")
    assert stats().loads == loads + 1
    assert (
        len(
            hybrid.record_search().cache.get(
                ("records", world.team_id, embedder.model_id), 0, lambda: pytest.fail("loaded")
            )
        )
        == len(saved) - 7
    )


def test_a_limited_member_never_sees_other_projects_by_meaning(world: World) -> None:
    embedder = ConceptEmbedder(_model())
    hybrid = _hybrid(world.engine, embedder)
    save = world.records.save_as_server
    a = save(world.team_id, "postgres failover drill", repo_id=world.repo_a)
    save(world.team_id, "sql migration replayed", repo_id=world.repo_b)
    save(world.team_id, "database restored from backup")
    _embed_all(SqlRecordStore(world.engine), embedder)
    assert len(_ids(hybrid, world, "database")) == 3
    assert _ids(hybrid, world, "database", world.limited) == [a.id]
    by_repo = hybrid.search(
        world.principal(world.member), world.team_id, "database", repo_id=world.repo_b
    )
    assert len(by_repo.hits) == 1 and by_repo.hits[0].repo_id == world.repo_b


def test_a_model_change_makes_every_record_pending(world: World) -> None:
    store = SqlRecordStore(world.engine)
    rec = world.records.save_as_server(world.team_id, "wrote the release notes")
    first = _model()
    _embed_all(store, ConceptEmbedder(first))
    assert rec.id not in {p.id for p in store.pending_records(10_000, first)}
    assert rec.id in {p.id for p in store.pending_records(10_000, _model())}
    with read_transaction(world.engine) as conn:
        model = conn.execute(sa.select(records.c.model).where(records.c.id == rec.id)).scalar_one()
    assert model == first


def test_expired_records_are_not_claimed(world: World) -> None:
    store = SqlRecordStore(world.engine)
    old = world.records.save_as_server(
        world.team_id, "an old note", now=datetime.now(UTC) - timedelta(days=400)
    )
    assert old.id not in {p.id for p in store.pending_records(10_000, _model())}


def test_a_deleted_record_is_not_resurrected(world: World) -> None:
    store = SqlRecordStore(world.engine)
    rec = world.records.save_as_server(world.team_id, "a record about to go")
    model = _model()
    pending = [p for p in store.pending_records(10_000, model) if p.id == rec.id]
    assert pending
    world.records.delete(
        world.principal(world.owner, CredentialKind.SESSION), world.team_id, rec.id
    )
    assert store.store_record_embeddings(pending, encode_many(np.eye(1, DIM)), model) == 0
    with read_transaction(world.engine) as conn:
        left = conn.execute(sa.select(records.c.id).where(records.c.id == rec.id)).first()
    assert left is None


def test_a_claim_leaves_a_record_deleted_meanwhile(world: World) -> None:
    # PostgreSQL: the delete waits for the claim's row lock, then removes the record;
    # SQLite: the claim holds no lock, the delete goes first, the vector finds no row.
    store = SqlRecordStore(world.engine)
    rec = world.records.save_as_server(world.team_id, "deleted while the model runs")
    owner = world.principal(world.owner, CredentialKind.SESSION)
    model = _model()
    with store.claim_pending_records(10_000, model) as claim:
        assert rec.id in {r.id for r in claim.rows}
        deleting = threading.Thread(
            target=world.records.delete, args=(owner, world.team_id, rec.id)
        )
        deleting.start()
        if world.engine.dialect.name == "sqlite":
            deleting.join()
        claim.store_embeddings(encode_many(np.tile(np.eye(1, DIM), (len(claim.rows), 1))))
    deleting.join()
    with read_transaction(world.engine) as conn:
        assert conn.execute(sa.select(records.c.id).where(records.c.id == rec.id)).first() is None


def test_concurrent_claims_embed_each_record_once(world: World) -> None:
    store = SqlRecordStore(world.engine)
    world.records.save_many(world.team_id, [(f"note {i}", None) for i in range(12)])
    model = _model()
    pending_before = len(store.pending_records(100_000, model))
    with (
        store.claim_pending_records(6, model) as first,
        store.claim_pending_records(6, model) as second,
    ):
        a = {(r.team_id, r.id) for r in first.rows}
        b = {(r.team_id, r.id) for r in second.rows}
        if world.engine.dialect.name == "postgresql":
            assert len(a) == 6 and len(b) == 6 and not a & b  # FOR UPDATE SKIP LOCKED
        else:
            assert a == b and len(a) == 6  # no lock: both read the same oldest rows
        for claim in (first, second):
            claim.store_embeddings(encode_many(np.tile(np.eye(1, DIM), (6, 1))))
    left = {(p.team_id, p.id) for p in store.pending_records(100_000, model)}
    assert not (a | b) & left and len(left) == pending_before - len(a | b)
    with read_transaction(world.engine) as conn:
        stamps = conn.execute(
            sa.select(records.c.vector_version).where(records.c.model == model)
        ).scalars()
        # SQLite: the second claim's vectors found the rows already embedded and left
        # them (one vector per row, whichever claim stored first).
        assert len(list(stamps)) == len(a | b)


def test_a_claim_refuses_rows_it_does_not_hold(world: World) -> None:
    store = SqlRecordStore(world.engine)
    world.records.save_as_server(world.team_id, "one record")
    model = _model()
    stranger = store.pending_records(1, model)
    with pytest.raises(ValueError, match="does not hold"):
        with store.claim_pending_records(0, model) as claim:
            claim.store_embeddings(encode_many(np.eye(1, DIM)), stranger)
    with pytest.raises(ValueError, match="1 rows but 2 vectors"):
        store.store_record_embeddings(stranger, encode_many(np.eye(2, DIM)), model)


def test_drop_embeddings_makes_every_record_pending(world: World) -> None:
    store = SqlRecordStore(world.engine)
    rec = world.records.save_as_server(world.team_id, "the last note")
    model = _model()
    _embed_all(store, ConceptEmbedder(model))
    before = _versions(store, world.team_id)
    assert store.drop_embeddings() >= 1
    assert rec.id in {p.id for p in store.pending_records(10_000, model)}
    after = _versions(store, world.team_id)
    assert after.vectors_reset == after.vectors > before.vectors
