"""The search index as a declared capability of a store (``keepstone.store.index``): a store
that neither keeps an index nor answers searches is refused when the search is built, and
a new adapter that implements :class:`~keepstone.store.index.SearchIndex` — here a
minimal one in memory — is searched, embedded and reconciled like the stores we ship,
with no service knowing its class."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pytest

from keepstone.errors import InvalidRequest
from keepstone.search.chunking import chunk_markdown
from keepstone.search.claim import EmbeddingClaim
from keepstone.search.text import analyze
from keepstone.service.access import console_principal
from keepstone.service.indexer import Indexer, document_backfill, document_sources
from keepstone.service.search import DocumentSearch
from keepstone.service.spaces import SpaceService
from keepstone.spaces import SpaceRef
from keepstone.store.base import ChunkRow, MemoryStore, Progress
from keepstone.store.index import (
    ChunkBackfill,
    SearchIndex,
    VectorIndexed,
    search_capability,
    vector_index_of,
)
from tests.unit.test_document_search import RUNBOOK, FakeEmbedder, ref


class Unsearchable(MemoryStore):
    """A store that keeps no search index and answers no search (its document methods are
    never called here)."""


Unsearchable.__abstractmethods__ = frozenset()


def test_a_store_that_neither_indexes_nor_searches_is_refused_at_start() -> None:
    with pytest.raises(InvalidRequest, match="Unsearchable.*keeps no search index") as refused:
        SpaceService(Unsearchable())  # no search yet: refused as the service is built
    assert "keepstone.store.index.SearchIndex" in refused.value.message
    with pytest.raises(InvalidRequest, match="keeps no search index"):
        DocumentSearch(Unsearchable())
    with pytest.raises(InvalidRequest, match="keeps no search index"):
        search_capability(object())


@dataclass(frozen=True, slots=True)
class Pending:
    """A chunk the in-memory index has to embed."""

    space_id: str
    path: str
    seq: int
    search_text: str


class InMemoryIndex(Unsearchable):
    """The least an adapter implements to be searchable: documents by space, chunked by
    a reconcile, their vectors given through a claim. No vector index, no backfill."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, str]] = {}
        self.rows: dict[str, list[ChunkRow]] = {}
        self.versions: dict[str, int] = {}

    def put(self, ref: SpaceRef, path: str, content: str) -> None:
        self.docs.setdefault(ref.id, {})[path] = content

    def reconcile(self, ref: SpaceRef, *, progress: Progress | None = None) -> int:
        vectors = {(r.path, r.seq): (r.embedding, r.model) for r in self.rows.get(ref.id, [])}
        rows = []
        for path, content in sorted(self.docs.get(ref.id, {}).items()):
            for seq, chunk in enumerate(chunk_markdown(content)):
                blob, model = vectors.get((path, seq), (None, None))
                terms = " ".join(analyze(chunk.search_text))
                rows.append(ChunkRow(path, seq, chunk.heading, chunk.text, terms, blob, model))
        if rows == self.rows.get(ref.id):
            return 0
        self.rows[ref.id] = rows
        self.versions[ref.id] = self.versions.get(ref.id, 0) + 1
        return len(self.docs.get(ref.id, {}))

    def search_version(self, ref: SpaceRef) -> int:
        return self.versions.get(ref.id, 0)

    def reconciled_versions(self, refs: Sequence[SpaceRef]) -> dict[str, int]:
        for one in refs:
            self.reconcile(one)
        return {one.id: self.search_version(one) for one in refs}

    def chunk_rows(self, ref: SpaceRef) -> list[ChunkRow]:
        return list(self.rows.get(ref.id, []))

    @contextlib.contextmanager
    def claim_pending_chunks(self, limit: int, model: str) -> Iterator[EmbeddingClaim[Pending]]:
        pending = [
            Pending(space_id, row.path, row.seq, row.text)
            for space_id, rows in sorted(self.rows.items())
            for row in rows
            if row.model != model
        ][:limit]
        claim = EmbeddingClaim(pending, model, lambda p: (p.space_id, p.path, p.seq))
        yield claim
        for chunk, blob in claim.stored:
            rows = self.rows[chunk.space_id]
            at = next(i for i, r in enumerate(rows) if (r.path, r.seq) == (chunk.path, chunk.seq))
            r = rows[at]
            rows[at] = ChunkRow(r.path, r.seq, r.heading, r.text, r.terms, blob, model)
            self.versions[chunk.space_id] += 1


def test_a_new_adapter_that_keeps_an_index_is_searched_and_embedded() -> None:
    index = InMemoryIndex()
    index.put(ref(), "ops/runbook.md", RUNBOOK)
    index.put(ref(), "home/garden.md", "# Garden\nTomato beds by the fence.\n")
    assert isinstance(index, SearchIndex)
    assert not isinstance(index, ChunkBackfill | VectorIndexed)  # the optional capabilities
    assert document_backfill(index) is None  # it chunks a space as it reconciles it
    assert vector_index_of(index) is None  # its dense side is exact

    hits = DocumentSearch(index).search([ref()], "rollback")  # reconciled first
    assert [(h.path, h.heading, h.matched) for h in hits] == [
        ("ops/runbook.md", "Deploy runbook > Rollback", ("keyword",))
    ]

    embedder = FakeEmbedder()
    indexer = Indexer(embedder, document_sources(index), backfill=document_backfill(index))
    assert indexer.drain() == {"chunks": len(index.chunk_rows(ref()))}
    hits = DocumentSearch(index, embedder).search([ref()], "revert")
    assert hits[0].heading == "Deploy runbook > Rollback" and hits[0].matched == ("meaning",)

    found = SpaceService(index).search(console_principal("local"), ref(), "tomato")
    assert [h.path for h in found] == ["home/garden.md"]


def test_a_local_search_embeds_the_new_adapters_pending_chunks() -> None:
    index = InMemoryIndex()
    index.put(ref(), "ops/runbook.md", RUNBOOK)
    index.reconcile(ref())
    embedder = FakeEmbedder()
    hits = DocumentSearch(index, embedder, embed_budget=60.0).search([ref()], "undo")
    assert hits and hits[0].heading == "Deploy runbook > Rollback"
    assert hits[0].matched == ("meaning",)
