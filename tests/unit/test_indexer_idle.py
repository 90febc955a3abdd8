"""An idle indexer and the embedding model: the model loads only when a row waits for it
(and stays loaded), search loads it only for a query by meaning, and an idle indexer
runs no claim until the database changes (``keepstone.service.indexer``,
``keepstone.embed.LazyEmbedder``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from keepstone import embed
from keepstone.config import Config
from keepstone.db.vectors import decode
from keepstone.embed import LazyEmbedder, MiniLMEmbedder
from keepstone.errors import StoreUnavailable
from keepstone.runtime import open_indexer, open_runtime
from keepstone.service.indexer import DatabaseChanges, Indexer, Source, document_sources
from keepstone.store.sql import SqlStore
from tests.unit.test_indexer import DIM, HashEmbedder, chunks, doc, space

RUNBOOK = "# Rollback\n\nRun the rollback script when a deploy fails, then page the on-call.\n"


def counted_minilm_loads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every MiniLM model the factory (``keepstone.embed.open_embedder``) loads, from now on."""
    loads: list[Path] = []

    class Counted(MiniLMEmbedder):
        def __init__(self, directory: Path, **settings: Any) -> None:
            loads.append(directory)
            super().__init__(directory, **settings)

    monkeypatch.setattr(embed, "MiniLMEmbedder", Counted)
    return loads


def sqlite_config(tmp_path: Path) -> Config:
    return Config.from_env(
        {
            "KEEPSTONE_DATABASE_URL": f"sqlite:///{tmp_path / 'k.db'}",
            "KEEPSTONE_HOME": str(tmp_path),
        }
    )


# --- The model loads with the first pending row, once ------------------------------------


def test_the_servers_indexer_loads_the_model_with_the_first_pending_row_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = counted_minilm_loads(monkeypatch)
    runtime = open_runtime(sqlite_config(tmp_path))
    try:
        indexer = open_indexer(runtime)  # as keepstone serve's indexer process builds it
        assert indexer is not None and indexer.model == "all-MiniLM-L6-v2"
        for _ in range(3):
            assert indexer.run_once() == 0  # an empty store: chunks and records alike
        assert loads == []
        runtime.store.write(space(), "runbook.md", RUNBOOK)
        assert indexer.run_once() == 1
        assert len(loads) == 1
        (row,) = chunks(runtime.store)
        assert row.embedding is not None and len(decode(row.embedding)) == 384
        for i in range(3):  # later batches use the model already loaded
            runtime.store.write(space(), f"notes/{i}.md", doc(i))
            assert indexer.drain()["chunks"] == 2
        assert len(loads) == 1
    finally:
        runtime.close()


def test_a_lazy_embedders_model_loads_on_the_first_claim_with_rows(store: SqlStore) -> None:
    made: list[HashEmbedder] = []

    def factory() -> HashEmbedder:
        made.append(HashEmbedder())
        return made[-1]

    lazy = LazyEmbedder("hash-a", DIM, factory)
    indexer = Indexer(lazy, document_sources(store), backfill=store.backfill_chunks, batch_size=2)
    assert (indexer.model, lazy.dim) == ("hash-a", DIM)
    assert indexer.drain() == {"chunks": 0}
    assert (len(made), lazy.loaded) == (0, False)
    for i in range(3):
        store.write(space(), f"notes/{i}.md", doc(i))
    assert indexer.drain() == {"chunks": 6}  # several batches and the fresh lane
    assert (len(made), lazy.loads, lazy.loaded) == (1, 1, True)
    assert len(made[0].texts) == 6
    assert all(r.model == "hash-a" and r.embedding is not None for r in chunks(store))


def test_a_model_that_fails_to_load_is_not_loaded_again() -> None:
    tries: list[int] = []

    def broken() -> HashEmbedder:
        tries.append(1)
        raise StoreUnavailable("could not read model.safetensors: cut short")

    lazy = LazyEmbedder("hash-a", DIM, broken)
    assert lazy.embed([]).shape == (0, DIM)  # nothing to embed loads nothing
    for _ in range(3):
        with pytest.raises(StoreUnavailable, match="cut short"):
            lazy.embed(["text"])
    assert (len(tries), lazy.loaded) == (1, False)


def test_search_loads_the_model_for_its_first_query_by_meaning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = counted_minilm_loads(monkeypatch)
    config = sqlite_config(tmp_path)
    writer = open_runtime(config)  # the indexer's process has a runtime of its own
    server = open_runtime(config, migrate=False)
    try:
        writer.store.write(space(), "runbook.md", RUNBOOK)
        search = server.spaces.document_search()
        found = search.search([space()], "rollback script")
        assert [h.path for h in found] == ["runbook.md"]
        assert found.pending == 1  # searched by keyword only: no vector of the model yet
        assert loads == []
        indexer = open_indexer(writer)
        assert indexer is not None and indexer.drain() == {"chunks": 1, "records": 0}
        assert len(loads) == 1  # the indexer's
        found = search.search([space()], "undo a release that broke")  # no word in common
        assert [h.path for h in found] == ["runbook.md"]
        assert "meaning" in found[0].matched and found.pending == 0
        assert len(loads) == 2  # the server's own, for its first query by meaning
        search.search([space()], "what to do when a deploy fails")
        assert len(loads) == 2
    finally:
        server.close()
        writer.close()


# --- An idle indexer polls nothing but a change token -------------------------------------


class Scheduled:
    """``until`` of :meth:`Indexer.run`, called at every look and pause: ``at[n]()`` runs
    at the n-th call, and the run stops at the ``stop``-th. Counts calls, not time."""

    def __init__(self, stop: int, at: dict[int, Callable[[], object]]) -> None:
        self.stop = stop
        self.at = at
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        if self.calls in self.at:
            self.at[self.calls]()
        return self.calls >= self.stop


def passes_of(indexer: Indexer) -> list[int]:
    """What each pass of ``indexer`` embedded, from now on."""
    passes: list[int] = []
    run_once = indexer.run_once

    def counted() -> int:
        passes.append(run_once())
        return passes[-1]

    indexer.run_once = counted  # type: ignore[method-assign]
    return passes


def idle_indexer(store: SqlStore, recheck_seconds: float) -> Indexer:
    """The store's indexer, looking every millisecond whether anything was committed."""
    return Indexer(
        HashEmbedder(),
        document_sources(store),
        backfill=store.backfill_chunks,
        idle_seconds=0.001,
        recheck_seconds=recheck_seconds,
    )


def test_an_idle_indexer_passes_again_once_a_write_commits(store: SqlStore) -> None:
    indexer = idle_indexer(store, recheck_seconds=3600)
    assert len(indexer.changes) == 1  # the claims and the backfill share one database
    passes = passes_of(indexer)
    write = lambda: store.write(space(), "notes/1.md", doc(1))  # noqa: E731
    indexer.run(until=Scheduled(stop=600, at={300: write}))
    assert sum(passes) == 2  # the note's two chunks, found by meaning
    assert [r.model for r in chunks(store)] == ["hash-a", "hash-a"]
    if store.engine.dialect.name == "sqlite":
        # One pass at the start, one when the note committed, one that found nothing
        # after it: ~300 idle looks ran no claim. (A PostgreSQL server's other
        # databases move its log too, so there an idle pass may come on their writes.)
        assert passes == [0, 2, 0]


def test_an_idle_indexer_still_passes_every_recheck(store: SqlStore) -> None:
    indexer = idle_indexer(store, recheck_seconds=0)  # every look is past it: a pass each
    passes = passes_of(indexer)
    indexer.run(until=Scheduled(stop=200, at={}))
    assert len(passes) >= 10 and set(passes) == {0}


def test_the_change_token_moves_with_every_commit_of_another_connection(
    store: SqlStore,
) -> None:
    changes = DatabaseChanges(store.engine)
    try:
        before = changes()
        store.write(space(), "notes/1.md", doc(1))
        after = changes()
        assert after != before
        store.write(space(), "notes/1.md", doc(2))
        assert changes() != after
        if store.engine.dialect.name == "sqlite":
            settled = changes()
            store.read(space(), "notes/1.md")  # a read commits nothing
            with store.engine.connect() as conn:
                conn.execute(sa.text("SELECT count(*) FROM memory_chunks")).scalar()
            assert changes() == settled
    finally:
        changes.close()


def test_an_indexer_over_functions_cannot_tell_changes_and_passes_at_every_pause() -> None:
    claimed: list[int] = []

    class Empty:
        rows: Sequence[Any] = []

        def store_embeddings(self, blobs: Sequence[bytes]) -> None:
            raise AssertionError("nothing was claimed")

        def __enter__(self) -> Empty:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    def claim(limit: int, model: str) -> Empty:
        claimed.append(limit)
        return Empty()

    indexer = Indexer(HashEmbedder(), [Source("chunks", claim)], idle_seconds=0.001)
    assert indexer.changes == []
    indexer.run(until=Scheduled(stop=200, at={}))
    assert len(claimed) >= 10


def test_a_lazy_embedder_knows_its_model_without_loading_it() -> None:
    lazy = embed.open_embedder("minilm")
    assert isinstance(lazy, LazyEmbedder)
    assert (lazy.model_id, lazy.dim, lazy.loaded) == ("all-MiniLM-L6-v2", 384, False)
    vectors = lazy.embed(["roll back the deploy"])
    assert vectors.shape == (1, 384) and lazy.loaded
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
