"""A document search after writes reads only the documents whose chunks changed: an index
stamps every chunk row when it is written (chunked, or given a vector), sums each
document's stamps in its database, and the search reads again only the documents whose sums
differ from the rows it holds — its BM25 index and vector matrix patched, ranking exactly
as rows read whole would, whatever the order of writes, deletes, moves, embeddings and
searches (the SQL store on SQLite and PostgreSQL, and the filesystem store's sidecar)."""

from __future__ import annotations

import functools
import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keepstone.db.vectors import encode_many
from keepstone.quota import Limits
from keepstone.search.cache import VectorCache
from keepstone.service.search import DocumentSearch
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.fs import FilesystemStore
from keepstone.store.index import ChunkToEmbed, stamp_digest
from keepstone.store.sql import SqlStore
from tests.conftest import fresh_database
from tests.threads import run_beside
from tests.unit.test_document_search import FakeEmbedder

WORDS = ["deploy", "rollback", "memory", "tomato", "ship", "revert", "ledger", "canary"]
QUERIES = ["deploy rollback", "memory ledger", "tomato canary ship"]
PATHS = [f"notes/{name}.md" for name in "abcdef"]


#: The stores whose index says which chunks changed.
Store = SqlStore | FilesystemStore


@pytest.fixture(
    scope="module",
    params=["fs", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Store]:
    if request.param == "fs":
        tree = FilesystemStore(tmp_path_factory.mktemp("tree") / "spaces", Limits())
        try:
            yield tree
        finally:
            tree.close()
        return
    with fresh_database(request.param, tmp_path_factory) as url:
        opened = SqlStore.open(url, Limits())
        try:
            yield opened
        finally:
            opened.close()


def a_space() -> SpaceRef:
    """A space of its own for each test and example (the database is the module's)."""
    return SpaceRef.build(Visibility.PROJECT, "notes", tenant=uuid.uuid4().hex, project="p1")


def embed_some(store: Store, embedder: FakeEmbedder, limit: int) -> int:
    """Give up to ``limit`` pending chunks their vectors, as an indexer does; how many."""
    with store.claim_pending_chunks(limit, embedder.model_id) as claim:
        rows: list[ChunkToEmbed] = list(claim.rows)
        if rows:
            claim.store_embeddings(encode_many(embedder.embed([r.search_text for r in rows])))
    return len(rows)


def ranked(search: DocumentSearch, space: SpaceRef) -> dict[str, list[tuple[Any, ...]]]:
    return {
        q: [(h.path, h.heading, h.score, h.matched) for h in search.search([space], q, limit=50)]
        for q in QUERIES
    }


def fresh(store: Store) -> DocumentSearch:
    return DocumentSearch(store, FakeEmbedder(), VectorCache())


class Reads:
    """Counts the store's reads of a whole space's rows and of some documents' rows."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.whole: list[str] = []
        self.some: list[list[str]] = []
        whole, some = store.chunk_rows, store.chunk_rows_of

        def chunk_rows(ref: SpaceRef) -> Any:
            self.whole.append(ref.id)
            return whole(ref)

        def chunk_rows_of(ref: SpaceRef, paths: Any) -> Any:
            self.some.append(list(paths))
            return some(ref, paths)

        monkeypatch.setattr(store, "chunk_rows", chunk_rows)
        monkeypatch.setattr(store, "chunk_rows_of", chunk_rows_of)


def text_of(words: list[str], n: int) -> str:
    body = " ".join(words)
    return f"# Note {n}\n\n{body}\n\n## More\n\n{' '.join(reversed(words))} {n}\n"


_step = st.one_of(
    st.tuples(st.just("write"), st.integers(0, 5), st.lists(st.sampled_from(WORDS), max_size=6)),
    st.tuples(st.just("delete"), st.integers(0, 5)),
    st.tuples(st.just("move"), st.integers(0, 5), st.integers(0, 5)),
    st.tuples(st.just("embed"), st.integers(1, 6)),
    st.tuples(st.just("search"), st.booleans()),
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(_step, min_size=1, max_size=14))
def test_a_search_patched_by_what_changed_ranks_as_a_fresh_read(
    store: Store, monkeypatch: pytest.MonkeyPatch, steps: list[tuple[Any, ...]]
) -> None:
    space = a_space()
    embedder = FakeEmbedder()
    for n, path in enumerate(PATHS[:3]):
        store.write(space, path, text_of(WORDS[n : n + 4], n))
    workers = [fresh(store), fresh(store)]  # each with caches of its own
    for worker in workers:
        ranked(worker, space)
    numbers = itertools.count(10)
    with monkeypatch.context() as patch:
        reads = Reads(store, patch)
        for step in steps:
            kind = step[0]
            if kind == "write":
                store.write(space, PATHS[step[1]], text_of(step[2], next(numbers)))
            elif kind == "delete":
                _delete(store, space, PATHS[step[1]])
            elif kind == "move":
                _move(store, space, PATHS[step[1]], PATHS[step[2]])
            elif kind == "embed":
                store.reconcile(space)
                embed_some(store, embedder, step[1])
            else:
                for worker in workers if step[1] else workers[:1]:
                    reads.whole.clear()
                    patched = ranked(worker, space)
                    assert reads.whole == []  # patched by what changed, never read whole
                    assert patched == ranked(fresh(store), space)
        for worker in workers:
            reads.whole.clear()
            patched = ranked(worker, space)
            assert reads.whole == []
            assert patched == ranked(fresh(store), space)
    assert all(set(paths) <= set(PATHS) for paths in reads.some)


def _delete(store: Store, space: SpaceRef, path: str) -> None:
    if store.exists(space, path):
        store.delete(space, path)


def _move(store: Store, space: SpaceRef, source: str, target: str) -> None:
    if source != target and store.exists(space, source):
        store.move(space, source, target, overwrite=True)


def test_a_shared_vector_cache_never_matches_a_rewritten_chunk_with_its_old_vector(
    store: Store,
) -> None:
    # Two searches of one process share its vector cache. The first patches the space's
    # matrix after a rewrite (the old vectors stay in it, unmatched); the second, whose
    # rows are read whole, maps that matrix by each vector's chunk id: a rewritten chunk's
    # old vector, at the same (path, seq), must not match the chunk's new text.
    space, embedder, cache = a_space(), FakeEmbedder(), VectorCache()
    first = DocumentSearch(store, embedder, cache)
    store.write(space, "notes/a.md", "# Ship\n\ndeploy ship production\n")
    store.write(space, "notes/b.md", "# Garden\n\ntomato garden\n")
    store.reconcile(space)
    embed_some(store, embedder, 50)
    assert ranked(first, space) == ranked(fresh(store), space)
    store.write(space, "notes/a.md", "# Ship\n\nmemory ledger ram\n")
    store.reconcile(space)
    embed_some(store, embedder, 50)
    assert ranked(first, space) == ranked(fresh(store), space)
    second = DocumentSearch(store, embedder, cache)
    assert ranked(second, space) == ranked(fresh(store), space)


def test_each_documents_digest_is_its_chunks_stamps_summed_in_the_database(
    store: Store,
) -> None:
    space, embedder = a_space(), FakeEmbedder()
    long = "\n\n".join(f"## Part {n}\n\n" + "deploy rollback memory " * 40 for n in range(6))
    store.write(space, "notes/long.md", f"# Long\n\n{long}")
    store.write(space, "notes/short.md", "# Short\n\ntomato\n")
    store.write(space, "notes/blank.md", "   \n")
    store.reconcile(space)

    def stamps() -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for row in store.chunk_rows(space):
            out.setdefault(row.path, []).append(row.stamp)
        return out

    before = stamps()
    assert set(before) == {"notes/long.md", "notes/short.md"}  # a blank document has none
    assert len(before["notes/long.md"]) > 3
    assert store.chunk_digests(space) == {p: stamp_digest(s) for p, s in before.items()}
    assert all(stamp > 2**40 for s in before.values() for stamp in s)  # 63 random bits
    # A vector given to some chunks of a document changes their stamps alone.
    embed_some(store, embedder, 2)
    embedded = stamps()
    changed = [
        (a != b) for path in before for a, b in zip(before[path], embedded[path], strict=True)
    ]
    assert sum(changed) == 2
    assert store.chunk_digests(space) == {p: stamp_digest(s) for p, s in embedded.items()}
    store.move(space, "notes/short.md", "notes/moved.md")
    store.reconcile(space)
    moved = stamps()
    if isinstance(store, SqlStore):
        # A move keeps the chunks (and their vectors): their stamps go with them. (The
        # filesystem's index finds a new file at the new path, and chunks it again.)
        assert moved["notes/moved.md"] == embedded["notes/short.md"]
    assert "notes/short.md" not in moved
    # New text is chunked again: every chunk of the document new.
    store.write(space, "notes/long.md", f"# Long\n\n{long}\n\nmore")
    store.reconcile(space)
    again = stamps()
    assert not set(again["notes/long.md"]) & set(moved["notes/long.md"])
    assert store.chunk_rows_of(space, ["notes/moved.md", "notes/none.md"]) == [
        row for row in store.chunk_rows(space) if row.path == "notes/moved.md"
    ]
    assert store.chunk_rows_of(space, []) == []


def test_searches_beside_writers_and_an_indexer_end_as_a_fresh_read(store: Store) -> None:
    # Two searches (caches of their own) search while three writers write, delete and move
    # and an indexer gives chunks their vectors: whatever each patched its rows and matrix
    # from meanwhile, once the writes stop each ranks as a fresh read.
    space, embedder = a_space(), FakeEmbedder()
    workers = [fresh(store), fresh(store)]

    def write(n: int) -> None:
        # Each writer its own documents: the writers race the searches and the indexer,
        # not one another (writers of the same paths are bench_contention's).
        mine = [f"notes/w{n}-{k}.md" for k in range(3)]
        for i in range(12):
            path = mine[i % 3]
            store.write(space, path, text_of(WORDS[(n + i) % 5 : (n + i) % 5 + 3], i))
            if i % 4 == 3:
                _delete(store, space, path)
            if i % 5 == 4:
                _move(store, space, path, mine[(i + 1) % 3])

    def index() -> None:
        store.reconcile(space)
        embed_some(store, embedder, 3)

    failures = run_beside(
        [functools.partial(write, n) for n in range(3)],
        [index, *(functools.partial(ranked, worker, space) for worker in workers)],
    )
    assert not failures
    if not store.exists(space, PATHS[0]):  # the writers may have left nothing to find
        store.write(space, PATHS[0], text_of(WORDS, 99))
    store.reconcile(space)
    while embed_some(store, embedder, 50):
        pass
    expected = ranked(fresh(store), space)
    assert any(hits for hits in expected.values())
    for worker in workers:
        assert ranked(worker, space) == expected
