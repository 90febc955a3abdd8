"""Every document search answer says how many chunks of the searched spaces wait for a
vector (``"pending"``): right before, during and after a backlog drains, through the API,
the HTTP client store (what ``Memory.connect`` and ``--server`` use), ``scope=readable``,
``/readyz`` and ``/metrics``. The indexer runs here in the test, one batch at a time, with
a stand-in embedder of the configured model's id (the counts are what is tested, not the
vectors)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pytest
from fastapi.testclient import TestClient

from keepstone.embed import MODEL_ID
from keepstone.service.access import remote_principal
from keepstone.service.indexer import Indexer, document_sources
from keepstone.service.spaces import SpaceService
from keepstone.spaces import SpaceRef
from keepstone.store.http import HttpMemoryStore
from keepstone.store.sql import SqlStore
from tests.api.world import World

SPACE = {"name": "backlog", "project": "p9"}
DOCS = 20  # two chunks each
BATCH = 4  # the first batch of an indexer is at most 4 rows: its speed is not known yet


class StandIn:
    """Vectors of the configured model's id and size, from each text's hash."""

    model_id = MODEL_ID
    dim = 384

    def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.stack(rows) if rows else np.zeros((0, self.dim), np.float32)


def pending(w: World, **params: str) -> int:
    r = w.client.get("/api/memory/search", params=params, headers=w.headers("api_key"))
    assert r.status_code == 200, r.text
    return int(r.json()["pending"])


def backlog_gauge(client: TestClient) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith('keepstone_index_backlog{kind="chunks"}'):
            return float(line.split()[-1])
    raise AssertionError("no backlog gauge in /metrics")


@pytest.fixture(scope="module")
def backlog(world: World) -> Indexer:
    """A space of ``DOCS`` documents written after everything else was chunked, so its
    chunks are the newest (the indexer claims newest first)."""
    store = world.store
    assert isinstance(store, SqlStore)
    store.backfill_chunks()
    ref = world.team_ref(**SPACE)
    for i in range(DOCS):
        store.write(ref, f"notes/{i}.md", f"# Note {i}\n\nquokka {i}\n\n## More\n\nwombat {i}\n")
    return Indexer(
        StandIn(),
        document_sources(store),
        backfill=store.backfill_chunks,
        batch_size=BATCH,
        fresh_seconds=0,
    )  # type: ignore[arg-type]


def test_pending_before_during_and_after_a_backlog(
    world: World, client: TestClient, backlog: Indexer
) -> None:
    from tests.conformance.helpers import AppTransport

    remote = HttpMemoryStore(
        str(client.base_url), world.keys["member"], transport=AppTransport(client)
    )
    service = SpaceService(remote)
    ref = SpaceRef.build("project", SPACE["name"], project=SPACE["project"])
    try:
        # Before: the search chunks the space (keyword-searchable at once), none embedded.
        assert pending(world, **SPACE, q="quokka") == 2 * DOCS
        assert service.search(remote_principal(), ref, "quokka").pending == 2 * DOCS
        ready = client.get("/readyz").json()
        assert ready["status"] == "ready"
        assert ready["backlog"]["model"] == MODEL_ID
        assert ready["backlog"]["chunks"] >= 2 * DOCS  # the seeds' chunks wait too
        before = backlog_gauge(client)
        assert before == ready["backlog"]["chunks"]

        # During: one batch of the newest chunks, which are this space's.
        assert backlog.run_once() == BATCH
        assert pending(world, **SPACE, q="quokka") == 2 * DOCS - BATCH
        assert service.search(remote_principal(), ref, "quokka").pending == 2 * DOCS - BATCH
        assert backlog_gauge(client) == before - BATCH

        # After: drained.
        backlog.drain()
        assert pending(world, **SPACE, q="quokka") == 0
        assert service.search(remote_principal(), ref, "quokka").pending == 0
        assert client.get("/readyz").json()["backlog"]["chunks"] == 0
        assert backlog_gauge(client) == 0
    finally:
        remote.close()


def test_a_readable_search_counts_every_space_it_searched(world: World, backlog: Indexer) -> None:
    backlog.drain()
    assert pending(world, scope="readable", q="quokka") == 0
    world.store.write(world.team_ref(**SPACE), "notes/new.md", "# New\n\nquokka again\n")
    assert pending(world, scope="readable", q="quokka") == 1
    assert pending(world, **SPACE, q="quokka") == 1
    assert pending(world, name="elsewhere", project="p9", q="quokka") == 0
