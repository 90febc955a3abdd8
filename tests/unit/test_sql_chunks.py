"""The SQL store's document index (``memory_chunks``) on SQLite and PostgreSQL.

A write of new content and a delete drop the path's chunk rows and bump the space's
``search_version`` in the write's own transaction (a refused write leaves the old rows);
``reconcile`` — what a search does first — chunks the documents that have none, so a
write is keyword-searchable as soon as it commits without ever waiting on analysis. The
indexer's side: pending rows, claims (``FOR UPDATE SKIP LOCKED`` on PostgreSQL) with
their vectors committed together, and the backfill of documents written before the index
existed.
"""

from __future__ import annotations

import io
import threading
import time

import pytest
import sqlalchemy as sa

from keepstone.db.vectors import decode, encode
from keepstone.errors import PreconditionFailed, QuotaExceeded
from keepstone.quota import Limits
from keepstone.search.chunking import chunk_markdown
from keepstone.search.text import analyze
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import ImportStrategy, PlatformGrant
from keepstone.store.sql import ChunkRow, PendingChunk, SqlStore
from keepstone.store.sql_schema import memory_chunks, memory_documents
from tests.unit.conftest import Backend

TEAM = "team-a"
MODEL = "all-MiniLM-L6-v2"

RUNBOOK = """Intro before any heading.

# Deploy runbook

How we ship.

## Known failures

### Image build runs out of memory

Raise the builder's memory limit to 4 GiB.

## Rollback

Run `keepstone rollback` and watch the dashboards.
"""


def project(name: str = "notes", tenant: str = TEAM) -> SpaceRef:
    return SpaceRef.build(Visibility.PROJECT, name, tenant=tenant, project="p1")


def vector(seed: int) -> bytes:
    values = [float((seed * 7 + i) % 13) + 1.0 for i in range(8)]
    norm = sum(v * v for v in values) ** 0.5
    return encode([v / norm for v in values])


def expected_rows(path: str, content: str) -> list[tuple[object, ...]]:
    return [
        (path, seq, c.heading, c.text, " ".join(analyze(c.search_text)), None, None)
        for seq, c in enumerate(chunk_markdown(content))
    ]


def as_tuples(rows: list[ChunkRow]) -> list[tuple[object, ...]]:
    return [(r.path, r.seq, r.heading, r.text, r.terms, r.embedding, r.model) for r in rows]


def embed_all(store: SqlStore, model: str = MODEL) -> list[PendingChunk]:
    store.backfill_chunks()  # the indexer chunks what is unindexed, then embeds
    with store.claim_pending_chunks(1000, model) as claim:
        claim.store_embeddings([vector(i) for i in range(len(claim.rows))])
    return claim.rows


def indexed(store: SqlStore, ref: SpaceRef) -> list[ChunkRow]:
    """The space's chunk rows as a search reads them: reconciled first."""
    store.reconcile(ref)
    return store.chunk_rows(ref)


def pending_of(store: SqlStore, limit: int, model: str) -> list[PendingChunk]:
    """What the indexer embeds: it chunks unindexed documents first."""
    store.backfill_chunks()
    return store.pending_chunks(limit, model)


# --- Writes, overwrites, deletes ------------------------------------------------------------


def test_a_write_indexes_its_chunks_with_their_trails(store: SqlStore) -> None:
    ref = project()
    store.write(ref, "runbook.md", RUNBOOK)

    rows = indexed(store, ref)
    assert as_tuples(rows) == expected_rows("runbook.md", RUNBOOK)
    assert [r.heading for r in rows] == [
        "",
        "Deploy runbook",
        "Deploy runbook > Known failures",
        "Deploy runbook > Known failures > Image build runs out of memory",
        "Deploy runbook > Rollback",
    ]
    # The terms are those of the search text: the headings above the chunk, then its text.
    oom = rows[3]
    assert oom.terms.split() == analyze("Deploy runbook > Known failures\n" + oom.text)
    assert "deploy" in oom.terms.split() and "deploy" not in analyze(oom.text)
    assert indexed(store, project("other")) == []


def test_long_sections_are_windows_in_order(store: SqlStore) -> None:
    ref = project()
    content = "# Notes\n\n" + "\n\n".join(f"Paragraph {i} about deploys." * 6 for i in range(20))
    store.write(ref, "long.md", content)
    rows = indexed(store, ref)
    assert len(rows) > 3
    assert [r.seq for r in rows] == list(range(len(rows)))
    assert as_tuples(rows) == expected_rows("long.md", content)


def test_an_overwrite_replaces_the_chunks(store: SqlStore) -> None:
    ref = project()
    store.write(ref, "runbook.md", RUNBOOK)
    store.write(ref, "other.md", "# Other\n\nkept")
    store.write(ref, "runbook.md", "# Short\n\nnow one chunk")

    rows = indexed(store, ref)
    assert as_tuples(rows) == expected_rows("other.md", "# Other\n\nkept") + expected_rows(
        "runbook.md", "# Short\n\nnow one chunk"
    )


def test_an_unchanged_rewrite_keeps_the_vectors(store: SqlStore) -> None:
    ref = project()
    store.write(ref, "runbook.md", RUNBOOK)
    embed_all(store)
    before = indexed(store, ref)
    assert all(r.embedding is not None and r.model == MODEL for r in before)

    store.write(ref, "runbook.md", RUNBOOK)
    assert indexed(store, ref) == before
    assert pending_of(store, 10, MODEL) == []

    store.write(ref, "runbook.md", RUNBOOK + "\nmore\n")
    after = indexed(store, ref)
    assert all(r.embedding is None and r.model is None for r in after)


def test_a_delete_removes_the_chunks(store: SqlStore) -> None:
    ref = project()
    store.write(ref, "runbook.md", RUNBOOK)
    store.write(ref, "keep.md", "# Keep\n\nme")
    store.delete(ref, "runbook.md")
    assert as_tuples(indexed(store, ref)) == expected_rows("keep.md", "# Keep\n\nme")
    store.delete(ref, "keep.md")
    assert indexed(store, ref) == []
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(memory_chunks)).scalar() == 0


def test_a_blank_document_has_no_chunks(store: SqlStore) -> None:
    ref = project()
    store.write(ref, "blank.md", "  \n\n")
    assert indexed(store, ref) == []
    # Looked at once (by the search above), a blank document is chunked: it needs none,
    # and no later reconcile reads it again.
    assert store.backfill_chunks() == 0
    assert indexed(store, ref) == []
    store.write(ref, "blank.md", "# Now with words\n\nText.")
    assert [r.heading for r in indexed(store, ref)] == ["Now with words"]


def test_a_refused_write_leaves_the_old_chunks(backend: Backend) -> None:
    store = backend.open(Limits(team_quota=len(RUNBOOK) + 10))
    ref = project()
    store.write(ref, "runbook.md", RUNBOOK)
    embed_all(store)
    before = indexed(store, ref)
    version = store.search_version(ref)

    with pytest.raises(QuotaExceeded):
        store.write(ref, "runbook.md", RUNBOOK + "x" * 100)
    with pytest.raises(QuotaExceeded):
        store.write(ref, "new.md", "# New\n\n" + "y" * 100)
    with pytest.raises(PreconditionFailed):
        store.write(ref, "runbook.md", "# Replaced", if_match="not-the-etag")
    with pytest.raises(PreconditionFailed):
        store.write(ref, "runbook.md", "# Replaced", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        store.delete(ref, "runbook.md", if_match="not-the-etag")

    assert indexed(store, ref) == before
    assert store.search_version(ref) == version


def test_every_write_and_delete_bumps_the_space_version(store: SqlStore) -> None:
    ref, other = project(), project("other")
    assert store.search_version(ref) == 0
    seen = [store.search_version(ref)]

    def step() -> None:
        seen.append(store.search_version(ref))
        assert seen[-1] > seen[-2]

    store.write(ref, "a.md", "# A\n\none")  # created
    step()
    store.write(ref, "a.md", "# A\n\ntwo")  # same size: no charge, still a bump
    step()
    store.write(ref, "a.md", "# A\n\nthree")  # resized
    step()
    store.write(ref, "a.md", "# A\n\nthree")  # unchanged: nothing changes, no bump
    assert store.search_version(ref) == seen[-1]
    store.write(ref, "empty.md", "")
    step()
    store.delete(ref, "empty.md")  # a zero-byte delete charges nothing
    step()
    store.delete(ref, "a.md")
    step()
    assert store.search_version(other) == 0


def test_a_global_write_is_indexed_and_versioned(store: SqlStore) -> None:
    ref = SpaceRef.build(Visibility.GLOBAL, "catalogue")
    store.write(ref, "g.md", "# Global\n\nshared", grant=PlatformGrant("test"))
    assert store.search_version(ref) == 1
    assert as_tuples(indexed(store, ref)) == expected_rows("g.md", "# Global\n\nshared")
    assert store.search_version(ref) == 2  # chunking it is a change of the space too


def test_an_import_indexes_every_document(store: SqlStore) -> None:
    source, target = project("source"), project("target")
    store.write(source, "runbook.md", RUNBOOK)
    store.write(source, "dir/b.md", "# B\n\nbee")
    archive = io.BytesIO()
    store.export(source, archive)
    archive.seek(0)
    store.write(target, "runbook.md", "# Old\n\nreplaced by the import")

    store.import_archive(target, archive, ImportStrategy.OVERWRITE)
    assert as_tuples(indexed(store, target)) == expected_rows(
        "dir/b.md", "# B\n\nbee"
    ) + expected_rows("runbook.md", RUNBOOK)
    assert store.search_version(target) >= 3


# --- The indexer's side ---------------------------------------------------------------------


def test_claim_and_store_round_trip(store: SqlStore) -> None:
    ref = project()
    store.write(ref, "b.md", "# B\n\nbee")
    assert store.count_pending([ref], MODEL) == 0  # not chunked yet: nothing to count
    store.backfill_chunks()
    time.sleep(0.01)  # the runbook is chunked strictly later
    store.write(ref, "runbook.md", RUNBOOK)
    pending = pending_of(store, 100, MODEL)
    # Newest chunks first (the runbook was chunked last), a document's in order.
    assert [(p.path, p.seq) for p in pending] == [("runbook.md", i) for i in range(5)] + [
        ("b.md", 0)
    ]
    assert store.count_pending([ref], MODEL) == store.count_backlog(MODEL) == 6
    assert store.count_pending([project("elsewhere")], MODEL) == 0
    # What the indexer embeds is the chunk's search text.
    texts = [c.search_text for c in chunk_markdown(RUNBOOK)]
    assert [p.search_text for p in pending[:5]] == texts
    assert all(p.space_id == ref.id and p.tenant_id == TEAM for p in pending)

    version = store.search_version(ref)
    claimed = [("runbook.md", 0), ("runbook.md", 1), ("runbook.md", 2)]
    with store.claim_pending_chunks(3, MODEL) as claim:
        assert [(p.path, p.seq) for p in claim.rows] == claimed
        claim.store_embeddings([vector(i) for i in range(3)])
    assert store.search_version(ref) > version

    rows = {(r.path, r.seq): r for r in indexed(store, ref)}
    for i, key in enumerate(claimed):
        blob = rows[key].embedding
        assert blob is not None and decode(blob).tolist() == decode(vector(i)).tolist()
        assert rows[key].model == MODEL
    assert rows[("runbook.md", 3)].embedding is None
    assert len(pending_of(store, 100, MODEL)) == 3
    assert store.count_pending([ref], MODEL) == 3

    # A failure inside the block stores nothing; the rows stay pending.
    with pytest.raises(RuntimeError), store.claim_pending_chunks(10, MODEL) as claim:
        claim.store_embeddings([vector(0)] * len(claim.rows))
        raise RuntimeError("the embedder failed")
    assert len(pending_of(store, 100, MODEL)) == 3

    embed_all(store)
    assert pending_of(store, 100, MODEL) == []
    assert store.count_pending([ref], MODEL) == store.count_backlog(MODEL) == 0
    # Another model re-embeds everything.
    assert len(pending_of(store, 100, "other-model")) == 6
    assert store.count_pending([ref], "other-model") == 6
    embed_all(store, "other-model")
    assert {r.model for r in indexed(store, ref)} == {"other-model"}
    assert len(pending_of(store, 100, MODEL)) == 6


def test_a_claim_refuses_mismatched_vectors(store: SqlStore) -> None:
    store.write(project(), "b.md", "# B\n\nbee")
    store.backfill_chunks()
    stranger = PendingChunk(TEAM, "k", "s", "x.md", 0, "", "x")
    with store.claim_pending_chunks(10, MODEL) as claim:
        with pytest.raises(ValueError):
            claim.store_embeddings([])
        with pytest.raises(ValueError):
            claim.store_embeddings([vector(0)], [stranger])
    with pytest.raises(ValueError):
        store.store_embeddings(claim.rows, [], MODEL)


def test_a_vector_of_a_rewritten_chunk_is_not_stored(store: SqlStore) -> None:
    ref = project()
    store.write(ref, "b.md", "# B\n\nold text")
    pending = pending_of(store, 10, MODEL)
    store.write(ref, "b.md", "# B\n\nnew text")  # rewritten while the model ran
    assert store.store_embeddings(pending, [vector(1)], MODEL) == 0
    [row] = indexed(store, ref)
    assert row.text == "# B\n\nnew text" and row.embedding is None
    assert store.store_embeddings(pending_of(store, 10, MODEL), [vector(1)], MODEL) == 1


# Generated for PostgreSQL only: its claims use SKIP LOCKED; SQLite's hold no lock.
@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_concurrent_claimers_never_share_a_row(backend: Backend) -> None:
    store = backend.open()
    ref = project()
    for i in range(6):
        store.write(
            ref, f"d{i}.md", f"# Doc {i}\n\n" + "\n\n".join(f"## S{j}\n\nt" for j in range(4))
        )
    total = len(pending_of(store, 1000, MODEL))
    assert total == 30

    held = threading.Event()
    release = threading.Event()
    claimed: dict[str, list[tuple[str, int]]] = {}

    def first() -> None:
        with store.claim_pending_chunks(12, MODEL) as claim:
            claimed["first"] = [(r.path, r.seq) for r in claim.rows]
            held.set()
            assert release.wait(10)
            claim.store_embeddings([vector(i) for i in range(len(claim.rows))])

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert held.wait(10)
        other = backend.open()  # another replica
        with other.claim_pending_chunks(100, MODEL) as claim:
            claimed["second"] = [(r.path, r.seq) for r in claim.rows]
            claim.store_embeddings([vector(i) for i in range(len(claim.rows))])
    finally:
        release.set()
        thread.join(10)
    assert len(claimed["first"]) == 12 and len(claimed["second"]) == total - 12
    assert not set(claimed["first"]) & set(claimed["second"])
    assert pending_of(store, 1000, MODEL) == []


# --- Backfill -------------------------------------------------------------------------------


def test_backfill_indexes_documents_written_before_the_index(store: SqlStore) -> None:
    refs = [project(f"s{i}") for i in range(3)]
    docs = {
        (ref.id, f"d{j}.md"): f"# Doc {j}\n\n## Part\n\ntext {j}" for ref in refs for j in range(50)
    }
    for ref in refs:
        for j in range(50):
            store.write(ref, f"d{j}.md", docs[(ref.id, f"d{j}.md")])
    store.write(refs[0], "d0.md", docs[(refs[0].id, "d0.md")])  # unchanged
    embed_all(store)
    kept = indexed(store, refs[0])
    # As a database written before migration 3 would be: no chunks for the other spaces
    # (and, as migration 6 leaves a document without chunks, not marked chunked).
    with store.engine.begin() as conn:
        conn.execute(sa.delete(memory_chunks).where(memory_chunks.c.space_id != refs[0].id))
        conn.execute(
            sa.update(memory_documents)
            .where(memory_documents.c.space_id != refs[0].id)
            .values(chunked=False)
        )
    versions = [store.search_version(ref) for ref in refs]

    progress: list[int] = []
    assert store.backfill_chunks(progress.append) == 100
    assert progress == [1] * 100
    assert indexed(store, refs[0]) == kept  # indexed documents are left alone
    for ref in refs[1:]:
        expected = sorted(
            row for j in range(50) for row in expected_rows(f"d{j}.md", docs[(ref.id, f"d{j}.md")])
        )
        assert sorted(as_tuples(indexed(store, ref))) == expected
    assert [store.search_version(ref) for ref in refs][1:] > versions[1:]
    assert store.search_version(refs[0]) == versions[0]
    assert len(pending_of(store, 1000, MODEL)) == 2 * 50 * 2
    assert store.backfill_chunks() == 0


def test_reindex_rebuild_starts_from_an_empty_index(store: SqlStore) -> None:
    ref = project()
    store.write(ref, "runbook.md", RUNBOOK)
    store.write(ref, "b.md", "# B\n\nbee")
    embed_all(store)
    version = store.search_version(ref)
    assert store.reindex() == 0  # everything is indexed already
    assert store.reindex(rebuild=True) == 2
    rows = indexed(store, ref)
    assert as_tuples(rows) == expected_rows("b.md", "# B\n\nbee") + expected_rows(
        "runbook.md", RUNBOOK
    )
    assert all(r.embedding is None for r in rows)  # re-embedded by the indexer, later
    assert store.search_version(ref) > version


def test_reconciled_versions_index_and_version_many_spaces_at_once(store: SqlStore) -> None:
    spaces = [project(f"s{i}") for i in range(5)]
    never = project("never-written")
    other_team = project("s0", tenant="team-other")
    for i, ref in enumerate(spaces):
        store.write(ref, "a.md", f"# Note {i}\n\nfalcon {i}")
    store.write(other_team, "a.md", "# Theirs\n\nfalcon")
    store.reconcile(spaces[0])  # one already indexed, the rest not yet
    versions = store.reconciled_versions([*spaces, never])
    # Every space indexed now, and each version what the space reads alone.
    assert versions == {ref.id: store.search_version(ref) for ref in [*spaces, never]}
    assert versions[never.id] == 0
    for i, ref in enumerate(spaces):  # read without reconciling: the batch indexed them
        assert [r.text for r in store.chunk_rows(ref)] == [f"# Note {i}\n\nfalcon {i}"]
    # Another team's space of the same name is neither read nor indexed.
    assert store.chunk_rows(other_team) == []
    assert store.reconciled_versions([]) == {}


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_backfill_and_a_write_of_one_space_never_deadlock(backend: Backend) -> None:
    """A write locks its document, then its space's counter; a backfill must not hold
    that counter while it waits for the next document's lock (the indexers of several
    replicas backfill while requests write)."""
    store = backend.open()
    ref = project()
    store.write(ref, "a.md", "# A\n\none")
    store.write(ref, "b.md", "# B\n\ntwo")
    writer = backend.open()  # the write, as another replica makes it
    addr = SqlStore._address(ref)
    done: dict[str, object] = {}

    def backfill_waits_for_a_lock() -> bool:
        with writer.engine.connect() as probe:
            waiting = probe.execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database()"
                )
            ).scalar()
        return bool(waiting)

    def backfill() -> None:
        try:
            done["backfill"] = store.backfill_chunks()
        except Exception as exc:  # reported below
            done["backfill"] = exc

    with writer.engine.begin() as conn:
        # The write of b.md, half done: its document locked ...
        conn.execute(
            sa.text(
                "SELECT 1 FROM memory_documents WHERE tenant_id = :t AND space_key = :k"
                " AND path = 'b.md' FOR UPDATE"
            ),
            addr,
        )
        thread = threading.Thread(target=backfill)
        thread.start()
        # The backfill has chunked a.md and now waits for b.md's lock.
        for _ in range(200):
            if backfill_waits_for_a_lock():
                break
            time.sleep(0.05)
        assert backfill_waits_for_a_lock()
        # ... then its space's counter, as every write does next.
        conn.execute(
            sa.text(
                "UPDATE memory_space_usage SET search_version = search_version + 1"
                " WHERE tenant_id = :t AND space_key = :k"
            ),
            addr,
        )
    thread.join(30)
    assert not thread.is_alive()
    assert done["backfill"] == 2, done["backfill"]
    assert [r.path for r in store.chunk_rows(ref)] == ["a.md", "b.md"]
