"""Every adapter is searchable: it keeps a search index of its own
(:class:`keepstone.store.index.SearchIndex`) or answers searches itself
(:class:`~keepstone.store.index.SearchingStore`), and what is written through it is found."""

from __future__ import annotations

from keepstone.service.search import DocumentSearch
from keepstone.spaces import Visibility
from keepstone.store.base import MemoryStore
from keepstone.store.index import SearchIndex, SearchingStore, search_capability
from tests.conformance.helpers import ref_for

RUNBOOK = "# Runbook\n\n## Rollback\n\nRun the quokka rollback and watch.\n"


def test_every_adapter_keeps_an_index_or_searches_itself(store: MemoryStore) -> None:
    assert isinstance(search_capability(store), SearchIndex | SearchingStore)
    ref = ref_for(Visibility.PROJECT)
    store.write(ref, "ops/runbook.md", RUNBOOK)
    store.write(ref, "home/garden.md", "# Garden\n\nTomatoes want sun.\n")
    hits = DocumentSearch(store).search([ref], "quokka")
    assert [(h.path, h.heading, h.matched) for h in hits] == [
        ("ops/runbook.md", "Runbook > Rollback", ("keyword",))
    ]
