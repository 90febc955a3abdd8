"""Document search (``keepstone.service.search.DocumentSearch``) over the filesystem and SQLite
stores: keyword hits with their heading trail and snippet, hand edits, ``path_prefix``,
the limits, isolation between spaces and teams (with the caches warm), and search by
meaning with a deterministic stand-in embedder."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from keepstone.db.vectors import encode_many
from keepstone.errors import InvalidRequest, StoreUnavailable
from keepstone.quota import Limits
from keepstone.search.bm25 import BM25Index
from keepstone.service.search import DocumentHit, DocumentSearch
from keepstone.service.spaces import SpaceService
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import MemoryStore
from keepstone.store.fs import FilesystemStore
from keepstone.store.sql import SqlStore

RUNBOOK = """# Deploy runbook

How we ship the service to production.

## Known failures

### Image build runs out of memory

Raise the builder's memory limit to 4 GiB.

## Rollback

Run `keepstone rollback` and watch the dashboards.
"""

# A stand-in for a model: each concept is one axis; a word counts toward its concept's.
CONCEPTS = {
    "deploy": 0, "ship": 0, "production": 0,
    "rollback": 1, "revert": 1, "undo": 1,
    "memory": 2, "ram": 2,
    "gardening": 3, "tomato": 3,
}  # fmt: skip
DIM = 8


class FakeEmbedder:
    """Deterministic unit vectors from the concepts a text's words name."""

    model_id = "fake-concepts"
    dim = DIM

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
        self.calls.append(list(texts))
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                axis = CONCEPTS.get(word)
                if axis is not None:
                    out[i, axis] += 1.0
            if not out[i].any():
                out[i, DIM - 1] = 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


class DownEmbedder(FakeEmbedder):
    """The same model, with its server gone: every call fails as the HTTP embedder's do."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
        self.calls.append(list(texts))
        raise StoreUnavailable("the embeddings endpoint cannot be reached")


def ref(tenant: str = "local", name: str = "notes") -> SpaceRef:
    return SpaceRef.build(Visibility.PROJECT, name, tenant=tenant, project="p1")


@pytest.fixture(params=["fs", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    opened: MemoryStore
    if request.param == "fs":
        opened = FilesystemStore(tmp_path / "spaces", Limits())
    else:
        opened = SqlStore.open(f"sqlite:///{tmp_path / 'keepstone.db'}", Limits())
    try:
        yield opened
    finally:
        opened.close()


def embed_everything(store: MemoryStore, embedder: FakeEmbedder) -> int:
    assert isinstance(store, (SqlStore, FilesystemStore))
    for space in (ref(),):
        store.reconcile(space)
    if isinstance(store, SqlStore):
        sql_rows = store.pending_chunks(1000, embedder.model_id)
        blobs = encode_many(embedder.embed([r.search_text for r in sql_rows]))
        return store.store_embeddings(sql_rows, blobs, embedder.model_id)
    fs_rows = store.pending_chunks(1000, embedder.model_id)
    blobs = encode_many(embedder.embed([r.search_text for r in fs_rows]))
    return store.store_embeddings(fs_rows, blobs, embedder.model_id)


def test_a_keyword_hit_names_path_heading_trail_and_snippet(store: MemoryStore) -> None:
    store.write(ref(), "ops/runbook.md", RUNBOOK)
    store.write(ref(), "notes/garden.md", "# Garden\nTomatoes need sun.\n")
    hits = DocumentSearch(store).search([ref()], "builder memory limit")
    assert hits, "the runbook's section is found by its words"
    best = hits[0]
    assert best.path == "ops/runbook.md"
    assert best.heading == "Deploy runbook > Known failures > Image build runs out of memory"
    assert "memory limit to 4 GiB" in best.snippet
    assert best.matched == ("keyword",)
    assert best.space_id == ref().id
    assert 0.0 < best.score <= 1.0
    assert all(h.path != "notes/garden.md" for h in hits)


def test_one_hit_per_section_best_first(store: MemoryStore) -> None:
    long_section = "\n\n".join(f"rollback step {i} of many words here" for i in range(60))
    store.write(ref(), "a.md", "# Alpha\n" + long_section + "\n")
    store.write(ref(), "b.md", "# Beta\nsomething about rollback once, and many other words\n")
    hits = DocumentSearch(store).search([ref()], "rollback")
    keys = [(h.path, h.heading) for h in hits]
    assert len(keys) == len(set(keys))
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert keys.count(("a.md", "Alpha")) == 1  # a section of many chunks is one hit
    assert ("b.md", "Beta") in keys


def test_a_hand_edit_is_found_without_a_write(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path / "spaces", Limits())
    store.write(ref(), "notes.md", "# Notes\nnothing special\n")
    search = DocumentSearch(store)
    assert search.search([ref()], "zanzibar") == []  # the caches are warm now
    path = next((tmp_path / "spaces").rglob("notes.md"))
    path.write_text("# Notes\nthe zanzibar plan\n", encoding="utf-8")
    later = path.stat().st_mtime_ns + 5_000_000_000
    os.utime(path, ns=(later, later))
    hits = search.search([ref()], "zanzibar")
    assert [h.path for h in hits] == ["notes.md"]
    assert "zanzibar" in hits[0].snippet
    store.close()


def test_path_prefix_limits_the_documents(store: MemoryStore) -> None:
    for i in range(3):
        store.write(ref(), f"ops/run{i}.md", f"# Run {i}\nrollback steps {i}\n")
        store.write(ref(), f"dev/run{i}.md", f"# Dev {i}\nrollback rollback steps {i}\n")
    hits = DocumentSearch(store).search([ref()], "rollback", path_prefix="ops/")
    assert sorted(h.path for h in hits) == ["ops/run0.md", "ops/run1.md", "ops/run2.md"]


@pytest.mark.parametrize("limit", [0, 51, -1])
def test_limit_out_of_bounds_is_refused(store: MemoryStore, limit: int) -> None:
    with pytest.raises(InvalidRequest) as caught:
        DocumentSearch(store).search([ref()], "x", limit=limit)
    assert caught.value.details["field"] == "limit"


@pytest.mark.parametrize("q", ["", "   "])
def test_a_blank_query_is_refused(store: MemoryStore, q: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        DocumentSearch(store).search([ref()], q)
    assert caught.value.details["field"] == "query"


def test_limit_caps_the_hits(store: MemoryStore) -> None:
    for i in range(8):
        store.write(ref(), f"d{i}.md", f"# D{i}\nrollback {i}\n")
    assert len(DocumentSearch(store).search([ref()], "rollback", limit=3)) == 3
    assert len(DocumentSearch(store).search([ref()], "rollback", limit=50)) == 8


def test_no_other_space_is_searched(store: MemoryStore) -> None:
    store.write(ref(name="notes"), "a.md", "# A\nshared word kiwi\n")
    store.write(ref(name="other"), "b.md", "# B\nshared word kiwi\n")
    search = DocumentSearch(store)
    assert {h.path for h in search.search([ref(name="other")], "kiwi")} == {"b.md"}
    assert {h.path for h in search.search([ref(name="notes")], "kiwi")} == {"a.md"}


def test_two_teams_in_one_sql_store_never_meet(tmp_path: Path) -> None:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'keepstone.db'}", Limits())
    a, b = ref(tenant="team-a"), ref(tenant="team-b")
    store.write(a, "plan.md", "# Plan\nteam a kiwi secret plan\n")
    store.write(b, "plan.md", "# Plan\nteam b kiwi other plan\n")
    embedder = FakeEmbedder()
    pending = store.pending_chunks(100, embedder.model_id)
    assert pending == []  # nothing chunked before a search reconciles
    service_a = DocumentSearch(store, embedder)
    for _ in range(2):  # cold, then with the caches warm
        hits_b = service_a.search([b], "kiwi plan")
        hits_a = service_a.search([a], "kiwi plan")
        assert [h.space_id for h in hits_a] == [a.id]
        assert "team a" in hits_a[0].snippet
        assert [h.space_id for h in hits_b] == [b.id]
        assert "team b" in hits_b[0].snippet
    store.close()


def test_a_paraphrase_is_found_by_meaning(store: MemoryStore) -> None:
    store.write(ref(), "ops/runbook.md", RUNBOOK)
    store.write(ref(), "home/garden.md", "# Garden\nTomato beds by the fence.\n")
    embedder = FakeEmbedder()
    assert embed_everything(store, embedder) > 0
    keyword_only = DocumentSearch(store).search([ref()], "revert")
    assert keyword_only == []  # no document has the word
    hits = DocumentSearch(store, embedder).search([ref()], "revert")
    assert hits[0].path == "ops/runbook.md"
    assert hits[0].heading == "Deploy runbook > Rollback"
    assert hits[0].matched == ("meaning",)
    assert embedder.calls[-1] == ["revert"]  # the query is embedded once


def test_both_signals_when_both_match(store: MemoryStore) -> None:
    store.write(ref(), "ops/runbook.md", RUNBOOK)
    embedder = FakeEmbedder()
    embed_everything(store, embedder)
    hits = DocumentSearch(store, embedder).search([ref()], "rollback")
    assert hits[0].heading == "Deploy runbook > Rollback"
    assert hits[0].matched == ("keyword", "meaning")


def test_a_local_search_embeds_the_pending_chunks_first(store: MemoryStore) -> None:
    store.write(ref(), "ops/runbook.md", RUNBOOK)
    embedder = FakeEmbedder()
    search = DocumentSearch(store, embedder, embed_budget=60.0)
    hits = search.search([ref()], "undo")
    assert hits and hits[0].heading == "Deploy runbook > Rollback"
    assert hits[0].matched == ("meaning",)
    store.write(ref(), "ops/runbook.md", RUNBOOK.replace("dashboards", "graphs"))
    again = search.search([ref()], "undo")  # the rewritten chunks are embedded again
    assert again and again[0].heading == "Deploy runbook > Rollback"
    assert "graphs" in again[0].snippet


def test_an_embedder_that_fails_leaves_the_search_keyword_only(
    store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    store.write(ref(), "ops/runbook.md", RUNBOOK)
    store.write(ref(), "home/garden.md", "# Garden\nTomato beds by the fence; rollback never.\n")
    embed_everything(store, FakeEmbedder())
    down = DownEmbedder()
    for query in ("rollback", "revert", "memory limit"):
        found = DocumentSearch(store, down).search([ref()], query, limit=20)
        keyword = DocumentSearch(store).search([ref()], query, limit=20)
        assert found == keyword and found.pending == keyword.pending == 0, query
        assert all(h.matched == ("keyword",) for h in found)
    assert DocumentSearch(store, down).search([ref()], "rollback")  # not a 503
    assert len(down.calls) == 4  # the query, once a search: never once a space or a chunk
    assert "documents search by keyword only: the embedder failed" in caplog.text


def test_a_local_search_whose_embedder_fails_answers_by_keyword_and_keeps_the_backlog(
    store: MemoryStore,
) -> None:
    store.write(ref(), "ops/runbook.md", RUNBOOK)
    found = DocumentSearch(store, DownEmbedder(), embed_budget=60.0).search([ref()], "rollback")
    assert [h.heading for h in found][:1] == ["Deploy runbook > Rollback"]
    assert found.pending > 0  # nothing was embedded, and the claim gave every chunk back
    # The failed claim is released: a working embedder embeds the whole backlog at once.
    working = DocumentSearch(store, FakeEmbedder(), embed_budget=60.0)
    again = working.search([ref()], "undo")
    assert again.pending == 0 and again[0].matched == ("meaning",)


def test_the_space_service_searches_its_store(store: MemoryStore) -> None:
    from keepstone.service.access import console_principal

    store.write(ref(), "ops/runbook.md", RUNBOOK)
    service = SpaceService(store)
    hits = service.search(console_principal("local"), ref(), "rollback", limit=5)
    assert hits and isinstance(hits[0], DocumentHit)
    assert hits[0].as_json() == {
        "path": "ops/runbook.md",
        "heading": "Deploy runbook > Rollback",
        "snippet": hits[0].snippet,
        "score": hits[0].score,
        "matched": ["keyword"],
        "also_in": [],
    }


def test_a_write_costs_the_next_search_its_own_chunks_and_answers_as_a_fresh_one(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    words = ["rollback", "deploy", "memory", "builder", "dashboards", "limit", "garden", "sun"]
    for i in range(24):
        body = " ".join(words[(i + j) % len(words)] for j in range(i % 5 + 3))
        store.write(ref(), f"d{i:02}.md", f"# Doc {i}\n\n{body}\n\n## Same\n\nrollback twice\n")
    warm = DocumentSearch(store)
    warm.search([ref()], "rollback")
    store.write(ref(), "d03.md", "# Doc 3\n\nrollback memory rewritten\n")
    store.delete(ref(), "d07.md")
    store.write(ref(), "new.md", "# New\n\nbuilder limit rollback\n")
    builds: list[int] = []
    built = BM25Index.__init__

    def counted(self: BM25Index, documents: Sequence[Sequence[str]], **kw: float) -> None:
        builds.append(len(documents))
        built(self, documents, **kw)

    monkeypatch.setattr(BM25Index, "__init__", counted)
    for query in ("rollback", "memory limit", "garden sun deploy", "twice"):
        again = warm.search([ref()], query, limit=50)
        assert again == DocumentSearch(store).search([ref()], query, limit=50), query
    # Each fresh search built an index of the whole space; the warm one built none: it
    # dropped the changed chunks from its index and added the new ones.
    assert len(builds) == 4 and len(set(builds)) == 1 and builds[0] > 40


def test_a_store_without_an_index_is_refused() -> None:
    class Bare(MemoryStore):
        pass

    Bare.__abstractmethods__ = frozenset()  # a store with no index and no search of its own
    with pytest.raises(InvalidRequest, match="keeps no search index"):
        DocumentSearch(Bare()).search([ref()], "x")
