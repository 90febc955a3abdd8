"""What a space's search index holds is reported (``Usage.index_bytes``) on every adapter:
nothing before the space is indexed, more for more text, less after a delete; the vectors
count too; it counts against no quota. A store that sums every space
(``stored_totals``) says exactly what its spaces' usages add up to."""

from __future__ import annotations

import pytest

from keepstone.db.vectors import encode
from keepstone.quota import Limits
from keepstone.service.search import DocumentSearch
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import MemoryStore, PlatformGrant
from keepstone.store.index import SearchIndex, StoredTotals, chunk_bytes
from tests.conformance.conftest import StoreFactory
from tests.conformance.helpers import OTHER_TEAM, ref_for

SHORT = "# Runbook\n\n## Rollback\n\nRun the quokka rollback.\n"
LONG = "# Garden\n\n" + "\n\n".join(
    f"## Bed {i}\n\nTomatoes and quokka beans want sun, water and patience.\n" for i in range(40)
)


def indexed_bytes(store: MemoryStore, ref: SpaceRef) -> int:
    """The space's index bytes once a search has brought its index up to date."""
    DocumentSearch(store).search([ref], "quokka")
    return store.usage(ref).index_bytes


def _reads_its_own_index(store: MemoryStore) -> bool:
    """A client of a server is told the index's bytes in the server's one answer."""
    return MemoryStore.KEEPS_ITS_OWN <= store.capabilities


def test_index_bytes_follow_the_indexed_text(store: MemoryStore) -> None:
    ref = ref_for(Visibility.PROJECT)
    assert store.usage(ref).index_bytes == 0
    store.write(ref, "ops/runbook.md", SHORT)
    one = indexed_bytes(store, ref)
    # At least the chunk's text (its terms and heading come on top).
    assert one > len("Run the quokka rollback.")
    store.write(ref, "home/garden.md", LONG)
    two = indexed_bytes(store, ref)
    assert two - one > len(LONG)
    store.delete(ref, "home/garden.md")
    assert indexed_bytes(store, ref) == one
    documents_only = store.usage(ref, index=False)  # a listing of many spaces asks so
    assert documents_only.index_bytes == 0 or not _reads_its_own_index(store)
    assert documents_only.used_bytes == store.usage(ref).used_bytes == len(SHORT)
    store.delete(ref, "ops/runbook.md")
    assert indexed_bytes(store, ref) == 0


def test_index_bytes_count_against_no_quota(store_factory: StoreFactory) -> None:
    store = store_factory(Limits().with_subcap(Visibility.PROJECT, 2 * len(SHORT)))
    ref = ref_for(Visibility.PROJECT)
    store.write(ref, "a.md", SHORT)
    assert indexed_bytes(store, ref) > 2 * len(SHORT)  # the index alone is over the cap
    store.write(ref, "b.md", SHORT)  # and the documents still fill it to the byte
    usage = store.usage(ref)
    assert (usage.used_bytes, usage.quota_bytes) == (2 * len(SHORT), 2 * len(SHORT))


@pytest.mark.requires("stored_totals")
def test_vectors_count_once_whichever_model_made_them(store: MemoryStore) -> None:
    assert isinstance(store, SearchIndex)
    ref = ref_for(Visibility.PROJECT)
    store.write(ref, "home/garden.md", LONG)
    text_only = indexed_bytes(store, ref)
    blob = encode([0.5] * 8)
    for model in ("model-a", "model-b"):  # the second replaces the first's vectors
        with store.claim_pending_chunks(1000, model) as claim:
            chunks = len(claim.rows)
            claim.store_embeddings([blob] * chunks)
        assert chunks == 41
        assert store.usage(ref).index_bytes == text_only + chunks * len(blob)


@pytest.mark.requires("stored_totals", "tenant_addressing")
def test_the_total_is_the_sum_over_spaces(store: MemoryStore) -> None:
    assert isinstance(store, StoredTotals)
    assert store.stored_totals().as_json() == {"document_bytes": 0, "index_bytes": 0}
    refs = [
        ref_for(Visibility.PROJECT),
        ref_for(Visibility.ORG, name="shared"),
        ref_for(Visibility.PROJECT, tenant=OTHER_TEAM),
        ref_for(Visibility.GLOBAL, name="catalogue"),
    ]
    for i, ref in enumerate(refs):
        grant = PlatformGrant("test") if ref.is_global else None
        store.write(ref, "a.md", SHORT * (i + 1), grant=grant)
        store.write(ref, "b.md", LONG, grant=grant)
        indexed_bytes(store, ref)
    usages = [store.usage(ref) for ref in refs]
    totals = store.stored_totals()
    assert totals.document_bytes == sum(u.used_bytes for u in usages)
    assert totals.index_bytes == sum(u.index_bytes for u in usages)
    assert all(u.index_bytes > u.used_bytes > 0 for u in usages)


def test_chunk_bytes_are_utf8_bytes() -> None:
    assert chunk_bytes("é", "", "ab", None, b"\x00\x01") == 2 + 2 + 2
