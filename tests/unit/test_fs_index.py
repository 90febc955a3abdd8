"""The filesystem store's search index: writes never touch it; a reconcile (before every
search) finds what writes, deletes and hand edits changed."""

from __future__ import annotations

import io
import os
import sqlite3
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from keepstone.errors import StoreUnavailable
from keepstone.quota import Limits
from keepstone.search.chunking import chunk_markdown
from keepstone.search.text import analyze
from keepstone.spaces import SpaceRef
from keepstone.store.base import ChunkRow
from keepstone.store.fs import FilesystemStore
from keepstone.store.fs_history import HISTORY_FILE
from keepstone.store.fs_layout import INDEX_FILE, LOCK_FILE, RESERVE_FILE, STATE_FILE
from tests.processes import child_context

REF = SpaceRef.build("user", "notes", tenant="local", user="ann")
OTHER = SpaceRef.build("project", "docs", tenant="local", project="repo")
DOC = "# Deploy\nRoll out the image.\n## Rollback\nRevert the release tag.\n"


def make(tmp_path: Path) -> FilesystemStore:
    store = FilesystemStore(tmp_path / "spaces", Limits())
    store.reconcile(REF)  # searching once creates the sidecar; later reconciles keep it current
    return store


def space_dir(tmp_path: Path, ref: SpaceRef = REF) -> Path:
    if ref is REF:
        return tmp_path / "spaces/user/local/ann/notes"
    return tmp_path / "spaces/project/local/repo/docs"


def texts(store: FilesystemStore, ref: SpaceRef = REF) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for row in store.chunk_rows(ref):
        out.setdefault(row.path, []).append(row.text)
    return out


def hand_write(path: Path, content: str, mtime_ns: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    os.utime(path, ns=(mtime_ns, mtime_ns))


# --- A reconcile indexes what writes did ------------------------------------------------------


def test_write_indexes_chunks_with_trail_and_terms(tmp_path: Path) -> None:
    store = make(tmp_path)
    before = store.search_version(REF)
    store.write(REF, "runbook.md", DOC)
    assert store.reconcile(REF) == 1  # what a search does first
    rows = store.chunk_rows(REF)
    assert [(r.path, r.seq, r.heading) for r in rows] == [
        ("runbook.md", 0, "Deploy"),
        ("runbook.md", 1, "Deploy > Rollback"),
    ]
    assert rows[1].text == "## Rollback\nRevert the release tag."
    # The terms are the analysis of the chunk's search text (its context trail, then text).
    assert rows[1].terms == " ".join(analyze("Deploy\n## Rollback\nRevert the release tag."))
    assert all(isinstance(r, ChunkRow) and r.embedding is None and r.model is None for r in rows)
    assert store.search_version(REF) > before
    assert store.reconcile(REF) == 0  # nothing left for the next reconcile to do


def test_overwrite_and_delete_replace_and_drop_rows(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(REF, "a.md", DOC)
    store.write(REF, "b.md", "beta")
    store.write(REF, "a.md", "# Only\none section")
    store.reconcile(REF)
    assert texts(store) == {"a.md": ["# Only\none section"], "b.md": ["beta"]}
    v = store.search_version(REF)
    store.delete(REF, "a.md")
    assert store.reconcile(REF) == 1
    assert texts(store) == {"b.md": ["beta"]}
    assert store.search_version(REF) > v
    assert store.reconcile(REF) == 0


def test_spaces_are_kept_apart(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(REF, "a.md", "mine")
    store.write(OTHER, "a.md", "theirs")
    store.reconcile(REF)
    store.reconcile(OTHER)
    assert texts(store) == {"a.md": ["mine"]}
    assert texts(store, OTHER) == {"a.md": ["theirs"]}
    store.delete(OTHER, "a.md")
    assert store.reconcile(REF) == 0  # another space's delete is nothing to this one
    assert store.reconcile(OTHER) == 1
    assert texts(store) == {"a.md": ["mine"]}
    assert texts(store, OTHER) == {}


def test_rewriting_the_same_content_keeps_vectors_and_version(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(REF, "a.md", "alpha")
    store.reconcile(REF)
    pending = store.pending_chunks(10, "m1")
    assert store.store_embeddings(pending, [b"\x01vec"], "m1") == 1
    v = store.search_version(REF)
    store.write(REF, "a.md", "alpha")
    assert store.reconcile(REF) == 0  # re-read (new mtime), same etag: not a change
    assert store.search_version(REF) == v
    assert [r.embedding for r in store.chunk_rows(REF)] == [b"\x01vec"]


def test_large_document_is_chunked_by_the_next_reconcile(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(REF, "big.md", "# Old\nold")
    store.reconcile(REF)
    big = "# Big\n" + "word " * 4000
    store.write(REF, "big.md", big)
    assert texts(store) == {"big.md": ["# Old\nold"]}  # the write itself indexes nothing
    assert store.reconcile(REF) == 1
    assert texts(store) == {"big.md": [c.text for c in chunk_markdown(big)]}


def test_no_sidecar_until_the_first_reconcile(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path / "spaces", Limits())
    store.write(REF, "a.md", "alpha")
    assert not (tmp_path / "spaces" / INDEX_FILE).exists()
    assert store.chunk_rows(REF) == []
    assert store.search_version(REF) == 0
    assert store.reconcile(REF) == 1
    assert texts(store) == {"a.md": ["alpha"]}


def test_writes_and_deletes_never_touch_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make(tmp_path)
    index = tmp_path / "spaces" / INDEX_FILE
    sidecar = {p.name: p.read_bytes() for p in index.parent.glob(f"{INDEX_FILE}*")}

    def broken(*args: object, **kwargs: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(store._index, "_conn", broken)  # any use of the index would fail
    store.write(REF, "a.md", "alpha")
    store.write(REF, "gone.md", "x")
    assert store.read(REF, "a.md").content == "alpha"
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in index.parent.glob(f"{INDEX_FILE}*")} == sidecar
    assert store.chunk_rows(REF) == []
    store.reconcile(REF)
    assert texts(store) == {"a.md": ["alpha"], "gone.md": ["x"]}
    v = store.search_version(REF)
    monkeypatch.setattr(store._index, "_conn", broken)
    store.delete(REF, "gone.md")
    assert not store.exists(REF, "gone.md")
    monkeypatch.undo()
    assert store.search_version(REF) == v
    assert store.reconcile(REF) == 1
    assert texts(store) == {"a.md": ["alpha"]}


# --- Hand edits are found by reconcile --------------------------------------------------------


def test_reconcile_finds_hand_edits_deletes_and_new_files(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(REF, "edited.md", "before")
    store.write(REF, "removed.md", "doomed")
    store.write(REF, "kept.md", "stays")
    assert store.reconcile(REF) == 3
    v = store.search_version(REF)
    d = space_dir(tmp_path)
    hand_write(d / "edited.md", "after the edit", 1_000_000_000)
    (d / "removed.md").unlink()
    hand_write(d / "sub" / "new.md", "# New\nhand made", 2_000_000_000)
    hand_write(d / "notes.txt", "not markdown", 3_000_000_000)
    assert store.reconcile(REF) == 3
    assert texts(store) == {
        "edited.md": ["after the edit"],
        "kept.md": ["stays"],
        "sub/new.md": ["# New\nhand made"],
    }
    assert store.search_version(REF) > v
    v = store.search_version(REF)
    assert store.reconcile(REF) == 0
    assert store.search_version(REF) == v


def test_a_touched_file_is_not_a_change(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(REF, "a.md", "alpha")
    store.reconcile(REF)
    v = store.search_version(REF)
    os.utime(space_dir(tmp_path) / "a.md", ns=(5, 5))
    assert store.reconcile(REF) == 0
    assert store.search_version(REF) == v
    assert store.reconcile(REF) == 0


def test_a_same_size_edit_with_a_new_mtime_is_found(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(REF, "a.md", "alpha")
    store.reconcile(REF)
    hand_write(space_dir(tmp_path) / "a.md", "gamma", 7)
    assert store.reconcile(REF) == 1
    assert texts(store) == {"a.md": ["gamma"]}


def test_an_edit_within_the_same_timestamp_tick_is_found(tmp_path: Path) -> None:
    # Same size, same mtime (a coarse clock tick): the row is "racy", so it is re-read.
    store = make(tmp_path)
    store.write(REF, "a.md", "alpha")
    assert store.reconcile(REF) == 1
    assert texts(store) == {"a.md": ["alpha"]}
    path = space_dir(tmp_path) / "a.md"
    st = path.stat()
    path.write_text("gamma", encoding="utf-8")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert store.reconcile(REF) == 1
    assert texts(store) == {"a.md": ["gamma"]}
    assert store.reconcile(REF) == 0


def test_a_file_that_is_not_utf8_is_indexed_without_chunks(tmp_path: Path) -> None:
    store = make(tmp_path)
    (space_dir(tmp_path)).mkdir(parents=True, exist_ok=True)
    (space_dir(tmp_path) / "bad.md").write_bytes(b"\xff\xfe bad")
    assert store.reconcile(REF) == 1
    assert texts(store) == {}
    assert store.reconcile(REF) == 0  # not re-read on every search


def test_reindex_covers_the_tree_and_drops_vanished_spaces(tmp_path: Path) -> None:
    store = make(tmp_path)
    hand_write(space_dir(tmp_path) / "a.md", "alpha", 1)
    hand_write(space_dir(tmp_path, OTHER) / "b.md", "beta", 1)
    seen: list[int] = []
    assert store.reindex(seen.append) == 2
    assert sum(seen) == 2
    assert texts(store) == {"a.md": ["alpha"]} and texts(store, OTHER) == {"b.md": ["beta"]}
    v = store.search_version(OTHER)
    (space_dir(tmp_path, OTHER) / "b.md").unlink()
    space_dir(tmp_path, OTHER).rmdir()
    assert store.reindex() == 1
    assert texts(store, OTHER) == {}
    assert store.search_version(OTHER) > v
    assert store.reindex(rebuild=True) == 1
    assert texts(store) == {"a.md": ["alpha"]}


# --- The sidecar is never a document ----------------------------------------------------------


def test_the_sidecar_is_never_listed_iterated_or_exported(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(REF, "a.md", "alpha")
    store.reconcile(REF)
    root = tmp_path / "spaces"
    assert (root / INDEX_FILE).is_file()
    # Even a copy of it inside a space, under the names SQLite gives its companions, is no
    # document: the store's files are not Markdown.
    d = space_dir(tmp_path)
    for suffix in ("", "-wal", "-shm"):
        (d / f"{INDEX_FILE}{suffix}").write_bytes((root / INDEX_FILE).read_bytes())
    assert [i.path for i in store.list(REF)] == ["a.md"]
    assert [doc.path for doc in store.iter_documents(REF)] == ["a.md"]
    sink = io.BytesIO()
    assert store.export(REF, sink) == 1
    sink.seek(0)
    with tarfile.open(fileobj=sink, mode="r:gz") as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
    assert all(INDEX_FILE not in n for n in names)
    assert store.reconcile(REF) == 0
    assert store.reindex() == 0
    assert {p.name for p in root.iterdir() if p.is_file()} <= {
        STATE_FILE,
        LOCK_FILE,
        INDEX_FILE,
        f"{INDEX_FILE}-wal",
        f"{INDEX_FILE}-shm",
        *(f"{HISTORY_FILE}{suffix}" for suffix in ("", "-wal", "-shm")),
        RESERVE_FILE,
    }
    assert store.recount() == len("alpha")  # quota counters ignore the sidecar too


# --- A corrupt or deleted sidecar is rebuilt --------------------------------------------------


def test_a_deleted_sidecar_is_rebuilt(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(REF, "a.md", "alpha")
    store.reconcile(REF)
    v = store.search_version(REF)
    root = tmp_path / "spaces"
    for suffix in ("", "-wal", "-shm"):
        (root / f"{INDEX_FILE}{suffix}").unlink(missing_ok=True)
    store.write(REF, "b.md", "beta")  # writes never touch the index: none is recreated
    assert not (root / INDEX_FILE).exists()
    assert store.chunk_rows(REF) == []
    assert store.reconcile(REF) == 2
    assert texts(store) == {"a.md": ["alpha"], "b.md": ["beta"]}
    assert store.search_version(REF) > v  # versions never go back, even across a rebuild


@pytest.mark.parametrize("open_first", [False, True])
def test_a_corrupt_sidecar_is_rebuilt(tmp_path: Path, open_first: bool) -> None:
    store = make(tmp_path)
    store.write(REF, "a.md", "alpha")
    store.close()
    root = tmp_path / "spaces"
    for suffix in ("-wal", "-shm"):
        (root / f"{INDEX_FILE}{suffix}").unlink(missing_ok=True)
    fresh = FilesystemStore(root, Limits())
    garbage = b"this is not a database" * 400
    if open_first:
        fresh.search_version(REF)  # a connection is open when the file is replaced
        (root / "replacement").write_bytes(garbage)
        os.replace(root / "replacement", root / INDEX_FILE)
    else:
        with open(root / INDEX_FILE, "r+b") as f:  # garbage in place
            f.write(garbage)
    assert fresh.reconcile(REF) == 1
    assert texts(fresh) == {"a.md": ["alpha"]}
    fresh.write(REF, "b.md", "beta")
    assert fresh.reconcile(REF) == 1
    assert texts(fresh) == {"a.md": ["alpha"], "b.md": ["beta"]}


# --- Embeddings -------------------------------------------------------------------------------


def test_pending_and_store_embeddings(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(REF, "a.md", DOC)
    store.write(OTHER, "b.md", "beta")
    store.reconcile(REF)
    store.reconcile(OTHER)
    pending = store.pending_chunks(10, "m1")
    # By space, then path and sequence ("v1:project:…" sorts before "v1:user:…").
    assert [(p.path, p.seq) for p in pending] == [("b.md", 0), ("a.md", 0), ("a.md", 1)]
    rollback = next(p for p in pending if p.seq == 1)
    assert rollback.search_text == "Deploy\n## Rollback\nRevert the release tag."
    assert len(store.pending_chunks(1, "m1")) == 1
    v = store.search_version(REF)
    assert store.store_embeddings(pending, [bytes([1, p.seq]) for p in pending], "m1") == 3
    assert store.search_version(REF) > v
    assert store.pending_chunks(10, "m1") == []
    assert {r.model for r in store.chunk_rows(REF)} == {"m1"}
    assert len(store.pending_chunks(10, "m2")) == 3  # another model: everything again
    # A vector computed for content that changed meanwhile is not stored.
    stale = [p for p in store.pending_chunks(10, "m2") if p.path == "b.md"]
    store.write(OTHER, "b.md", "beta two")
    assert store.reconcile(OTHER) == 1
    assert store.store_embeddings(stale, [b"\x01x"], "m2") == 0
    assert [r.embedding for r in store.chunk_rows(OTHER)] == [None]


# --- Several processes ------------------------------------------------------------------------


def _writer(root: str, worker: int, count: int, start: Any) -> None:
    store = FilesystemStore(root, Limits())
    start.wait(60)  # both processes write at once
    for i in range(count):
        store.write(REF, f"w{worker}/{i}.md", f"# Worker {worker}\nnote {i}")
        store.write(REF, f"shared/{i % 5}.md", f"shared {i} by {worker}")
        if i % 7 == 3:
            store.delete(REF, f"w{worker}/{i - 1}.md")
    store.close()


def test_two_processes_writing_then_a_reconcile_agree_with_the_files(tmp_path: Path) -> None:
    store = make(tmp_path)
    root = str(tmp_path / "spaces")
    ctx = child_context()
    start = ctx.Barrier(2)
    procs = [ctx.Process(target=_writer, args=(root, w, 60, start)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    on_disk = {doc.path: doc.content for doc in store.iter_documents(REF)}
    assert store.chunk_rows(REF) == []  # the writers never touched the index
    assert store.reconcile(REF) == len(on_disk)
    indexed = texts(store)
    assert store.reconcile(REF) == 0
    assert texts(store) == indexed
    assert indexed == {
        path: [chunk.text for chunk in chunk_markdown(content)] for path, content in on_disk.items()
    }


def test_an_unusable_sidecar_fails_searches_cleanly_but_never_writes(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path / "spaces", Limits())
    (tmp_path / "spaces" / INDEX_FILE).mkdir(parents=True)  # cannot be opened as a database
    store.write(REF, "a.md", "alpha")  # writes never open the index
    assert store.read(REF, "a.md").content == "alpha"
    with pytest.raises(StoreUnavailable, match="search index"):
        store.reconcile(REF)
    (tmp_path / "spaces" / INDEX_FILE).rmdir()
    assert store.reconcile(REF) == 1


def test_a_sidecar_of_another_schema_is_started_over(tmp_path: Path) -> None:
    root = tmp_path / "spaces"
    root.mkdir()
    with sqlite3.connect(root / INDEX_FILE) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        conn.execute("INSERT INTO meta VALUES ('schema', '0')")
        conn.execute("CREATE TABLE documents (space_id TEXT, path TEXT)")
        conn.execute("INSERT INTO documents VALUES (?, 'a.md')", (REF.id,))
    conn.close()
    store = FilesystemStore(root, Limits())
    store.write(REF, "a.md", "alpha")
    assert store.reconcile(REF) == 1  # opening the old file started it over
    assert texts(store) == {"a.md": ["alpha"]}
    assert store.reconcile(REF) == 0


def test_a_sidecar_of_the_layout_before_stamps_keeps_its_chunks_and_vectors(
    tmp_path: Path,
) -> None:
    # The layout before chunk stamps: the same tables, without the column. Opening it adds
    # the column (0 on every row) in place: nothing is chunked or embedded again.
    store = make(tmp_path)
    store.write(REF, "a.md", DOC)
    store.reconcile(REF)
    rows = store.pending_chunks(10, "m")
    assert store.store_embeddings(rows, [b"\x01" * 8] * len(rows), "m") == len(rows)
    before = store.chunk_rows(REF)
    store.close()
    with sqlite3.connect(tmp_path / "spaces" / INDEX_FILE) as conn:
        conn.execute("DROP INDEX chunks_space_stamps")
        conn.execute("ALTER TABLE chunks DROP COLUMN stamp")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema'")
    conn.close()
    store = FilesystemStore(tmp_path / "spaces", Limits())
    assert store.reconcile(REF) == 0
    after = store.chunk_rows(REF)
    assert [(r.path, r.seq, r.text, r.embedding, r.model) for r in after] == [
        (r.path, r.seq, r.text, r.embedding, r.model) for r in before
    ]
    assert {r.stamp for r in after} == {0}
    assert store.chunk_digests(REF) == {"a.md": (len(after), 0, 0)}
    store.close()


def test_threads_writing_and_reconciling_leave_a_consistent_index(tmp_path: Path) -> None:
    store = make(tmp_path)

    def work(worker: int) -> None:
        for i in range(15):
            store.write(REF, f"t{worker}/{i % 4}.md", f"# T{worker}\nnote {i}")
            if worker == 0:
                store.reconcile(REF)  # a search racing the writers

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(work, range(6)))
    on_disk = {doc.path: doc.content for doc in store.iter_documents(REF)}
    store.reconcile(REF)
    assert texts(store) == {
        path: [chunk.text for chunk in chunk_markdown(content)] for path, content in on_disk.items()
    }
    assert store.reconcile(REF) == 0
