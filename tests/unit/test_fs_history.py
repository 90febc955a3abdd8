"""The filesystem store's history (``keepstone.store.fs_history``): versions beside the plain
tree, hand edits picked up, crash safety, retention."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from threading import Thread
from typing import Any

import pytest

from keepstone.documents import acting_as, content_etag
from keepstone.errors import InvalidDocument, NotFound, StoreUnavailable
from keepstone.quota import HistoryLimits, Limits
from keepstone.spaces import SpaceRef
from keepstone.store.fs import FilesystemStore, space_components
from keepstone.store.fs_history import BEFORE_HISTORY, HAND_EDIT, HISTORY_FILE, HistoryDb
from keepstone.store.fs_tree import FileTree
from tests.processes import child_context

REF = SpaceRef.build("org", "notes", tenant="acme")
OTHER = SpaceRef.build("org", "other", tenant="acme")
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    """A clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def tick(self, minutes: int = 1) -> datetime:
        self.now += timedelta(minutes=minutes)
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make(root: Path, clock: Clock | None = None, **limits: Any) -> FilesystemStore:
    store = FilesystemStore(root / "spaces", Limits(**limits))
    if clock is not None:
        store.clock = clock
    return store


def on_disk(root: Path, ref: SpaceRef, path: str) -> Path:
    return root / "spaces" / Path(*space_components(ref)) / path


def consistent(store: FilesystemStore, ref: SpaceRef, paths: list[str]) -> None:
    """Every live file is its path's newest version (content included); every path
    without a file ends in a deletion marker (or never had a version)."""
    for path in paths:
        versions = store._versions(ref, path)
        try:
            live = store.read(ref, path)
        except NotFound:
            assert not versions or versions[0].deleted, (path, versions[0])
            continue
        assert versions and not versions[0].deleted, path
        assert versions[0].etag == live.etag, path
        newest = store.read_version(ref, path, versions[0].version)
        assert newest.content == live.content
        numbers = [v.version for v in versions]
        assert numbers == sorted(numbers, reverse=True) and len(set(numbers)) == len(numbers)


# --- Versions ---------------------------------------------------------------------------------


def test_every_write_delete_and_move_is_a_numbered_attributed_version(
    tmp_path: Path, clock: Clock
) -> None:
    store = make(tmp_path, clock)
    with acting_as("user:ann"):
        store.write(REF, "a.md", "one")
    clock.tick()
    with acting_as("key:ci"):
        store.write(REF, "a.md", "two")
    clock.tick()
    with acting_as("run:42"):
        store.delete(REF, "a.md")
    got = store.versions(REF, "a.md")
    assert [(v.version, v.actor, v.deleted, v.at) for v in got] == [
        (3, "run:42", True, T0 + timedelta(minutes=2)),
        (2, "key:ci", False, T0 + timedelta(minutes=1)),
        (1, "user:ann", False, T0),
    ]
    assert got[1].etag == content_etag(b"two") and got[1].size_bytes == 3
    assert got[0].etag == "" and got[0].size_bytes == 0
    assert store.read_version(REF, "a.md", 1).content == "one"
    assert store.read_version(REF, "a.md", 2).updated_at == T0 + timedelta(minutes=1)
    with pytest.raises(NotFound):
        store.read_version(REF, "a.md", 3)  # a deletion has no content
    with pytest.raises(NotFound):
        store.versions(REF, "never.md")
    # A write after the deletion continues the numbering.
    store.write(REF, "a.md", "three")
    assert store.versions(REF, "a.md")[0].version == 4
    assert "history" in store.capabilities


def test_the_same_bytes_again_make_no_version(tmp_path: Path, clock: Clock) -> None:
    store = make(tmp_path, clock)
    store.write(REF, "a.md", "same")
    clock.tick()
    store.write(REF, "a.md", "same")
    assert [v.version for v in store.versions(REF, "a.md")] == [1]
    assert store.versions(REF, "a.md")[0].at == T0


def test_a_move_ends_the_old_path_and_continues_the_new_one(tmp_path: Path, clock: Clock) -> None:
    store = make(tmp_path, clock)
    store.write(REF, "a.md", "moving")
    store.write(REF, "b.md", "replaced")
    clock.tick()
    with acting_as("user:bob"):
        store.move(REF, "a.md", "b.md", overwrite=True)
    a, b = store.versions(REF, "a.md"), store.versions(REF, "b.md")
    assert [(v.version, v.deleted, v.actor) for v in a] == [
        (2, True, "user:bob"),
        (1, False, "unknown"),
    ]
    assert [(v.version, v.deleted) for v in b] == [(2, False), (1, False)]
    assert b[0].etag == content_etag(b"moving") and b[0].at == clock.now
    assert store.read_version(REF, "b.md", 1).content == "replaced"
    consistent(store, REF, ["a.md", "b.md"])


def test_the_space_as_of_an_instant(tmp_path: Path, clock: Clock) -> None:
    store = make(tmp_path, clock)
    store.write(REF, "a.md", "a1")
    store.write(REF, "dir/b.md", "b1")
    store.write(OTHER, "a.md", "elsewhere")
    t1 = clock.tick()
    store.write(REF, "a.md", "a2")
    store.write(REF, "dir/c.md", "c1")
    t2 = clock.tick()
    store.delete(REF, "dir/b.md")
    store.move(REF, "a.md", "dir/a.md")
    t3 = clock.tick()

    def listing(at: datetime, prefix: str = "") -> list[tuple[str, str]]:
        return [(i.path, i.etag) for i in store.list_as_of(REF, at, prefix)]

    assert listing(T0 - timedelta(seconds=1)) == []
    assert listing(T0) == [("a.md", content_etag(b"a1")), ("dir/b.md", content_etag(b"b1"))]
    assert listing(t1 + timedelta(seconds=30)) == [
        ("a.md", content_etag(b"a2")),
        ("dir/b.md", content_etag(b"b1")),
        ("dir/c.md", content_etag(b"c1")),
    ]
    assert listing(t2, "dir") == [
        ("dir/a.md", content_etag(b"a2")),
        ("dir/c.md", content_etag(b"c1")),
    ]
    now = [(i.path, i.etag) for i in store.list(REF)]
    assert listing(t3) == now
    info = store.list_as_of(REF, t1)[0]
    assert (info.size_bytes, info.updated_at) == (2, t1)
    assert store.read_as_of(REF, "a.md", t1 - timedelta(seconds=1)).content == "a1"
    assert store.read_as_of(REF, "dir/a.md", t2).content == "a2"
    with pytest.raises(NotFound):
        store.read_as_of(REF, "dir/b.md", t2)
    docs = list(store.iter_documents_as_of(REF, t1))
    assert [(d.path, d.content) for d in docs] == [
        ("a.md", "a2"),
        ("dir/b.md", "b1"),
        ("dir/c.md", "c1"),
    ]


def test_an_import_records_each_write(tmp_path: Path, clock: Clock) -> None:
    store = make(tmp_path, clock)
    store.write(REF, "kept.md", "same")
    store.write(REF, "changed.md", "old")
    on_disk(tmp_path, REF, "changed.md").write_text("edited by hand")
    clock.tick()
    with acting_as("user:importer"), store.import_writer(REF, None) as write:
        for path, content in [
            ("kept.md", "same"),
            ("changed.md", "imported"),
            ("new.md", "first"),
            ("new.md", "second"),
        ]:
            write(store.check_write(REF, path, content))
    assert [v.version for v in store.versions(REF, "kept.md")] == [1]
    changed = store.versions(REF, "changed.md")
    assert [(v.version, v.actor) for v in changed] == [
        (3, "user:importer"),
        (2, HAND_EDIT),
        (1, "unknown"),
    ]
    assert store.read_version(REF, "changed.md", 2).content == "edited by hand"
    assert [(v.version, v.at) for v in store.versions(REF, "new.md")] == [
        (2, clock.now),
        (1, clock.now),
    ]
    consistent(store, REF, ["kept.md", "changed.md", "new.md"])


def test_writers_on_one_document_keep_every_version_exactly_once(tmp_path: Path) -> None:
    store = make(tmp_path, history_versions=100)
    store.write(REF, "hot.md", "start")

    def writer(n: int) -> None:
        for i in range(10):
            store.write(REF, "hot.md", f"writer {n} write {i}")

    threads = [Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    versions = store.versions(REF, "hot.md")
    assert [v.version for v in versions] == list(range(81, 0, -1))
    expected = {content_etag(f"writer {n} write {i}".encode()) for n in range(8) for i in range(10)}
    assert {v.etag for v in versions[:-1]} == expected
    for n in range(8):  # each writer's versions in its own (commit) order
        mine = [v.etag for v in reversed(versions) if v.etag in expected]
        own = [content_etag(f"writer {n} write {i}".encode()) for i in range(10)]
        assert [e for e in mine if e in own] == own


# --- Beside the tree, and hand edits -------------------------------------------------------------


def test_the_tree_shows_only_documents_and_the_stores_dot_files(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(REF, "a.md", "1")
    store.write(REF, "a.md", "2")
    store.write(REF, "deep/b.md", "b")
    store.move(REF, "deep/b.md", "c.md")
    store.delete(REF, "a.md")
    root = tmp_path / "spaces"
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if Path(dirpath) == root:
                assert name.startswith(".keepstone"), name
            else:
                assert name.endswith(".md"), Path(dirpath, name)
    assert (root / HISTORY_FILE).is_file()
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == ["org"]
    assert [d.path for d in store.iter_documents(REF)] == ["c.md"]


def test_a_hand_edit_is_recorded_before_the_next_write(tmp_path: Path, clock: Clock) -> None:
    store = make(tmp_path, clock)
    store.write(REF, "a.md", "through the store")
    file = on_disk(tmp_path, REF, "a.md")
    file.write_text("by hand")
    mtime = datetime(2025, 3, 1, 12, 30, tzinfo=UTC)
    os.utime(file, (mtime.timestamp(), mtime.timestamp()))
    clock.tick(60)
    store.write(REF, "a.md", "through the store again")
    got = store.versions(REF, "a.md")
    assert [(v.version, v.actor, v.at) for v in got] == [
        (3, "unknown", clock.now),
        (2, HAND_EDIT, mtime),
        (1, "unknown", T0),
    ]
    assert store.read_version(REF, "a.md", 2).content == "by hand"
    # A deletion by hand, then a write: the deletion is a marker first.
    file.unlink()
    clock.tick()
    store.write(REF, "a.md", "back")
    assert [(v.version, v.deleted, v.actor) for v in store.versions(REF, "a.md")][:2] == [
        (5, False, "unknown"),
        (4, True, HAND_EDIT),
    ]


def test_reading_versions_and_reconcile_pick_up_hand_edits(tmp_path: Path, clock: Clock) -> None:
    store = make(tmp_path, clock)
    store.write(REF, "a.md", "one")
    store.write(REF, "gone.md", "soon removed")
    store.write(OTHER, "x.md", "the whole space goes")
    on_disk(tmp_path, REF, "a.md").write_text("edited")
    assert [(v.version, v.actor) for v in store.versions(REF, "a.md")] == [
        (2, HAND_EDIT),
        (1, "unknown"),
    ]
    on_disk(tmp_path, REF, "a.md").write_text("edited again")
    on_disk(tmp_path, REF, "new.md").write_text("added by hand")
    on_disk(tmp_path, REF, "gone.md").unlink()
    for path in (tmp_path / "spaces" / Path(*space_components(OTHER))).iterdir():
        path.unlink()
    assert store.reconcile_history() == 4
    assert store.reconcile_history() == 0
    assert store.read_version(REF, "a.md", 3).content == "edited again"
    assert [(v.version, v.actor) for v in store.versions(REF, "new.md")] == [(1, HAND_EDIT)]
    assert store.versions(REF, "gone.md")[0].deleted
    assert store.versions(OTHER, "x.md")[0].deleted
    consistent(store, REF, ["a.md", "new.md", "gone.md"])


def test_a_hand_edit_that_is_not_utf8_is_kept_and_refused_plainly(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(REF, "a.md", "text")
    on_disk(tmp_path, REF, "a.md").write_bytes(b"\xff\xfe not text")
    store.write(REF, "a.md", "text again")
    assert [v.actor for v in store.versions(REF, "a.md")] == ["unknown", HAND_EDIT, "unknown"]
    with pytest.raises(InvalidDocument, match="version 2 of 'a.md' is not valid UTF-8"):
        store.read_version(REF, "a.md", 2)


def test_versions_are_packed_by_size_and_those_of_every_era_read_back(tmp_path: Path) -> None:
    import zlib

    small, large = "note " * 100, "a line of notes\n" * 1000  # 500 B and 16 KB
    store = make(tmp_path)
    store.write(REF, "small.md", small)
    store.write(REF, "large.md", large)
    with sqlite3.connect(tmp_path / "spaces" / HISTORY_FILE) as conn:
        rows = dict(conn.execute("SELECT path, content FROM versions").fetchall())
        assert rows["small.md"] == b"\x00" + small.encode()  # as it is, after a zero byte
        assert rows["large.md"][:4] == b"\x28\xb5\x2f\xfd"  # a zstd frame
        assert len(rows["large.md"]) < len(large) // 10
        # Before zstd, every version was a zlib stream: those still read.
        for path, text in (("small.md", small), ("large.md", large)):
            conn.execute(
                "UPDATE versions SET content = ? WHERE path = ?",
                (zlib.compress(text.encode(), 1), path),
            )
    assert store.read_version(REF, "small.md", 1).content == small
    assert store.read_version(REF, "large.md", 1).content == large


def test_documents_that_predate_the_history_are_its_version_one(tmp_path: Path) -> None:
    old = on_disk(tmp_path, REF, "old.md")
    old.parent.mkdir(parents=True)
    old.write_text("written before any history")
    mtime = datetime(2024, 1, 2, tzinfo=UTC)
    os.utime(old, (mtime.timestamp(), mtime.timestamp()))
    store = make(tmp_path)
    assert not (tmp_path / "spaces" / HISTORY_FILE).exists()
    (v,) = store.versions(REF, "old.md")
    assert (v.version, v.actor, v.at) == (1, BEFORE_HISTORY, mtime)
    assert [i.path for i in store.list_as_of(REF, mtime)] == ["old.md"]
    # A history file deleted by hand starts over from the files.
    store.write(REF, "old.md", "changed")
    store.close()
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / "spaces" / f"{HISTORY_FILE}{suffix}").unlink(missing_ok=True)
    store = make(tmp_path)
    assert [(v.version, v.actor) for v in store.versions(REF, "old.md")] == [(1, BEFORE_HISTORY)]
    assert store.read_version(REF, "old.md", 1).content == "changed"


def test_an_unreadable_history_is_moved_aside_and_started_again(tmp_path: Path) -> None:
    make(tmp_path).write(REF, "a.md", "x")
    root = tmp_path / "spaces"
    for suffix in ("", "-wal", "-shm"):
        (root / f"{HISTORY_FILE}{suffix}").unlink(missing_ok=True)
    (root / HISTORY_FILE).write_bytes(b"this is not a database" * 100)
    store = make(tmp_path)
    store.write(REF, "a.md", "y")
    assert [(v.version, v.actor) for v in store.versions(REF, "a.md")] == [
        (2, "unknown"),
        (1, BEFORE_HISTORY),
    ]
    assert [p.name for p in root.iterdir() if ".corrupt-" in p.name]


# --- Crash safety -------------------------------------------------------------------------------


def _broken_append(*_args: object, **_kwargs: object) -> None:
    raise sqlite3.OperationalError("disk I/O error")


def test_a_failure_between_the_file_and_the_history_undoes_a_write_and_heals_the_rest(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make(tmp_path, clock)
    store.write(REF, "a.md", "one")
    store.write(REF, "b.md", "to delete")
    store.write(REF, "c.md", "to move")
    paths = ["a.md", "b.md", "c.md", "d.md"]
    operations: list[Callable[[], object]] = [
        # The insert fails after the file was replaced: the write is undone (a refused
        # write leaves nothing behind, SPEC "Errors").
        lambda: store.write(REF, "a.md", "two"),
        lambda: store.delete(REF, "b.md"),
        lambda: store.move(REF, "c.md", "d.md"),
    ]
    for operation in operations:
        with monkeypatch.context() as patched:
            patched.setattr(HistoryDb, "append", _broken_append)
            with pytest.raises(StoreUnavailable, match="history"):
                operation()
        # The counters were left dirty: the next operation heals (here, a recount), and
        # the files are the truth.
        store.recount()
        consistent(store, REF, paths)
    assert [d.path for d in store.list(REF)] == ["a.md", "d.md"]
    assert store.read(REF, "a.md").content == "one"
    assert [v.version for v in store.versions(REF, "a.md")] == [1]
    assert store.versions(REF, "b.md")[0].deleted
    assert store.versions(REF, "c.md")[0].deleted
    assert store.usage(REF).used_bytes == len("one") + len("to move")


def test_a_failure_before_the_file_operation_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make(tmp_path)
    store.write(REF, "a.md", "one")

    def broken(*_args: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(FileTree, "replace_file_undoably", broken)
    with pytest.raises(StoreUnavailable):
        store.write(REF, "a.md", "two")
    monkeypatch.undo()
    assert [v.version for v in store.versions(REF, "a.md")] == [1]
    consistent(store, REF, ["a.md"])


def hang_in(step: str, root: str, marker: str, op: str) -> None:
    """Child process: perform ``op`` and stop forever inside ``step`` (the parent kills it)."""
    store = FilesystemStore(root)
    owner: type = {"append": HistoryDb, "replace_file_undoably": FileTree}.get(
        step, FilesystemStore
    )
    original: Callable[..., None] = getattr(owner, step)

    def hang(*args: object, **kwargs: object) -> None:
        if step != "append":
            original(*args, **kwargs)  # the file operation is done, its insert is not
        Path(marker).write_text("in")
        while True:
            time.sleep(1)

    setattr(owner, step, hang)
    if op == "write":
        store.write(REF, "a.md", "written by the killed process")
    elif op == "delete":
        store.delete(REF, "a.md")
    else:
        store.move(REF, "a.md", "b.md")


def kill_inside(tmp_path: Path, step: str, op: str) -> None:
    marker = tmp_path / f"marker-{step}-{op}"
    ctx = child_context()
    child = ctx.Process(target=hang_in, args=(step, str(tmp_path / "spaces"), str(marker), op))
    child.start()
    try:
        while not marker.exists():
            assert child.is_alive(), "the child ended before its step"
            time.sleep(0.02)
    finally:
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join()


@pytest.mark.parametrize(
    ("op", "step"),
    [
        ("write", "append"),  # between the file operation and the history insert
        ("write", "replace_file_undoably"),  # just after the file operation, inside change()
        ("delete", "append"),
        ("delete", "_remove_file"),
        ("move", "append"),
        ("move", "_rename_file"),
    ],
)
def test_kill_9_mid_mutation_leaves_history_and_files_consistent(
    tmp_path: Path, step: str, op: str
) -> None:
    store = make(tmp_path)
    store.write(REF, "a.md", "before")
    store.close()
    kill_inside(tmp_path, step, op)
    store = make(tmp_path)
    consistent(store, REF, ["a.md", "b.md"])
    # Killed after its file operation: the operation stands, recorded once, and no version
    # of something the files never held (an insert ahead of its file would leave one).
    before, written = content_etag(b"before"), content_etag(b"written by the killed process")
    expected = {
        "write": ([written, before], []),
        "delete": (["", before], []),
        "move": (["", before], [before]),
    }[op]
    assert (
        [v.etag for v in store._versions(REF, "a.md")],
        [v.etag for v in store._versions(REF, "b.md")],
    ) == expected
    # Every version's content is what its etag says.
    for path in ("a.md", "b.md"):
        for v in store._versions(REF, path):
            if not v.deleted:
                assert (
                    content_etag(store.read_version(REF, path, v.version).content.encode())
                    == v.etag
                )
    assert store.recount() == sum(d.size_bytes for d in store.list(REF))


def loop_writes(root: str, ready: str) -> None:
    """Child process: write, overwrite, move and delete until killed."""
    store = FilesystemStore(root)
    Path(ready).write_text("go")
    i = 0
    while True:
        i += 1
        store.write(REF, f"doc{i % 5}.md", f"content {i}")
        if i % 7 == 0:
            store.move(REF, f"doc{i % 5}.md", f"doc{(i + 1) % 5}.md", overwrite=True)
        if i % 11 == 0:
            # It may have been moved away already: the loop must go on until it is killed.
            with contextlib.suppress(NotFound):
                store.delete(REF, f"doc{(i + 1) % 5}.md")


def test_kill_9_at_arbitrary_moments_leaves_history_and_files_consistent(tmp_path: Path) -> None:
    ctx = child_context()
    paths = [f"doc{i}.md" for i in range(5)]
    for round_ in range(4):
        ready = tmp_path / f"ready-{round_}"
        child = ctx.Process(target=loop_writes, args=(str(tmp_path / "spaces"), str(ready)))
        child.start()
        while not ready.exists():
            assert child.is_alive()
            time.sleep(0.01)
        time.sleep(0.05 + 0.07 * round_)
        assert child.pid is not None
        assert child.is_alive(), f"the writer stopped before it was killed: {child.exitcode}"
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        assert child.exitcode == -signal.SIGKILL
        store = make(tmp_path)
        consistent(store, REF, paths)
        store.close()


# --- Retention and quota -------------------------------------------------------------------------


def test_a_document_keeps_at_most_history_versions(tmp_path: Path, clock: Clock) -> None:
    store = make(tmp_path, clock, history_versions=3)
    for i in range(6):
        store.write(REF, "a.md", f"v{i}")
        clock.tick()
    assert [v.version for v in store.versions(REF, "a.md")] == [6, 5, 4]
    used, quota = store.history_usage("acme")
    assert quota == Limits().team_quota
    assert used == sum(len(_packed(f"v{i}")) for i in (3, 4))  # replaced versions kept
    with pytest.raises(NotFound):
        store.read_version(REF, "a.md", 1)


def _packed(text: str) -> bytes:
    from keepstone.store.version_pack import pack_version

    return pack_version(text.encode())


def test_the_history_quota_drops_the_oldest_replaced_versions_first(
    tmp_path: Path, clock: Clock
) -> None:
    body = random.Random(7).randbytes(600).hex()  # incompressible enough to count
    # Room for exactly the three newest replaced versions (b.md's 2, a.md's 3, b.md's 3).
    kept = sum(len(_packed(body + str(i))) for i in (1, 2, 2))
    store = make(tmp_path, clock, history_quota=kept)
    for i in range(4):
        store.write(REF, "a.md", body + str(i))
        clock.tick()
        store.write(REF, "b.md", body + str(i))
        clock.tick()
    assert store.history_usage("acme") == (kept, kept)
    a = [v.version for v in store.versions(REF, "a.md")]
    b = [v.version for v in store.versions(REF, "b.md")]
    assert a[0] == 4 and b[0] == 4  # never a path's newest
    assert len(a) + len(b) - 2 == 3  # three replaced versions fit
    assert a == [4, 3] and b == [4, 3, 2]  # the oldest went first (a.md's 2 before b.md's)
    # A full history never blocks a live write.
    store.write(REF, "c.md", "x" * 5000)


def test_prune_history_drops_versions_replaced_before_history_days(
    tmp_path: Path, clock: Clock
) -> None:
    store = make(tmp_path, clock, history_days=30)
    store.write(REF, "a.md", "old")
    clock.tick(60 * 24 * 10)
    store.write(REF, "a.md", "middle")  # "old" replaced at day 10
    clock.tick(60 * 24 * 25)
    store.write(REF, "a.md", "new")  # "middle" replaced at day 35
    store.write(REF, "still.md", "only version")
    store.delete(REF, "still.md")
    clock.tick(60 * 24 * 10)  # day 45: the cutoff is day 15
    before, _ = store.history_usage("acme")
    assert store.prune_history() == 1
    assert [v.version for v in store.versions(REF, "a.md")] == [
        3,
        2,
    ]  # "middle" was current at the cutoff
    assert store.history_usage("acme")[0] == before - len(_packed("old"))
    assert [v.version for v in store.versions(REF, "still.md")] == [2, 1]
    assert store.read_as_of(REF, "a.md", T0 + timedelta(days=20)).content == "middle"


def test_history_limits_set_on_the_tree(tmp_path: Path, clock: Clock) -> None:
    store = make(tmp_path, clock)
    store.write(REF, "a.md", "0")
    store.set_history_limits("acme", HistoryLimits(history_versions=2, history_quota_bytes=1234))
    assert store.history_usage("acme")[1] == 1234
    for i in range(1, 5):
        store.write(REF, "a.md", str(i))
    assert [v.version for v in store.versions(REF, "a.md")] == [5, 4]
    store.set_history_limits("acme")
    assert store.history_usage("acme")[1] == Limits().team_quota


def test_a_store_without_a_tree_has_no_history(tmp_path: Path) -> None:
    store = make(tmp_path)
    assert store._versions(REF, "a.md") == []
    assert store.list_as_of(REF, T0) == []
    assert store.history_usage("acme") == (0, Limits().team_quota)
    assert store.reconcile_history() == 0
    assert not (tmp_path / "spaces").exists()
