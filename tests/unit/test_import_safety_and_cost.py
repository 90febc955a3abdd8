"""``keepstone memory import`` is linear, and rejects, never aborts on, what it cannot
safely write.

The filesystem store is where both showed: a symbolic link planted in the store's tree
stopped the whole import with a conflict, and every document paid a walk from the root,
two state saves and three fsyncs. Linearity is proved by counting, never by timing:
the filesystem flushes and fsyncs of an import do not grow with its size, the
descriptors opened grow by one per document, and the archive is decompressed twice
(validate, then write) whatever its size. ``bench/bench_import.py`` prints the times.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import keepstone.store.fs_import as fs_import
from keepstone.quota import Limits
from keepstone.spaces import SpaceRef
from keepstone.store.base import ImportStrategy
from keepstone.store.fs import FilesystemStore, space_components
from keepstone.store.sql import SqlStore
from tests.conformance.archives import Member, regular, special, tar_gz

REF = SpaceRef.build("project", "notes", tenant="local", project="web")


@pytest.fixture
def store(tmp_path: Path) -> FilesystemStore:
    return FilesystemStore(tmp_path / "spaces", Limits())


def _space_dir(store: FilesystemStore) -> Path:
    return store.root.joinpath(*space_components(REF))


def _sparse(name: str) -> Member:
    info = tarfile.TarInfo(name)
    info.type = tarfile.GNUTYPE_SPARSE
    return info, None


#: Every member kind the importer refuses, by name → a word of its reason.
UNSAFE: dict[str, tuple[Member, str]] = {
    "link.md": (special("link.md", tarfile.SYMTYPE, "/etc/passwd"), "symbolic link"),
    "hard.md": (special("hard.md", tarfile.LNKTYPE, "good-0.md"), "hard link"),
    "null.md": (special("null.md", tarfile.CHRTYPE), "character device"),
    "sda.md": (special("sda.md", tarfile.BLKTYPE), "block device"),
    "pipe.md": (special("pipe.md", tarfile.FIFOTYPE), "FIFO"),
    "folder.md": (special("folder.md", tarfile.DIRTYPE), "directory"),
    "holes.md": (_sparse("holes.md"), "sparse"),
    "../escape.md": (regular("../escape.md", "x"), "'..'"),
    "a/../../escape.md": (regular("a/../../escape.md", "x"), "'..'"),
    "/etc/evil.md": (regular("/etc/evil.md", "x"), "absolute"),
    "evil\u202egpj.md": (regular("evil\u202egpj.md", "x"), "U+202E"),
    "notes.txt": (regular("notes.txt", "x"), ".md"),
}
#: Planted in the store's own tree before the import: what the store cannot safely write.
PLANTED = {
    "through/secret.md": "symbolic link",  # `through` is a link to a directory outside
    "planted.md": "symbolic link",  # the document itself is a link to a file outside
    "dir.md": "directory",  # a directory where the document would go
    "blocked/x.md": "a file where the store needs a directory",  # `blocked` is a file
}


def _plant(store: FilesystemStore, outside: Path) -> None:
    space = _space_dir(store)
    space.mkdir(parents=True)
    (outside / "target").mkdir()
    (outside / "passwd").write_text("root:x:0:0\n")
    # The store spells document names its own way: find it through a real write.
    store.write(REF, "probe/x.md", "probe")
    probe_dir = next(p for p in space.iterdir() if p.is_dir())
    probe_file = next(probe_dir.iterdir())
    store.delete(REF, "probe/x.md")
    dir_name = probe_dir.name.replace("probe", "through")
    file_name = probe_file.name.replace("x", "planted")
    os.symlink(outside / "target", space / dir_name)
    os.symlink(outside / "passwd", space / file_name)
    (space / probe_file.name.replace("x", "dir")).mkdir()
    (space / probe_dir.name.replace("probe", "blocked")).write_text("not a directory")


def test_unsafe_members_are_rejected_and_the_rest_imports(
    store: FilesystemStore, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    _plant(store, outside)
    members: list[Member] = []
    good = [f"good-{i}.md" for i in range(6)]
    unsafe = [member for member, _word in UNSAFE.values()]
    planted = [regular(p, "would escape") for p in PLANTED]
    # Interleaved: each refusal sits between documents that must still land.
    for i, name in enumerate(good):
        members.append(regular(name, f"note {i}\n"))
        members.extend(unsafe[i * 2 : i * 2 + 2])
        if i < len(planted):
            members.append(planted[i])
    report = store.import_archive(REF, io.BytesIO(tar_gz(members)), ImportStrategy.SKIP)
    assert report.written == good
    reasons = {r.path: r.reason for r in report.rejected}
    expected = {name: word for name, (_m, word) in UNSAFE.items()} | PLANTED
    assert set(reasons) == set(expected)
    for name, word in expected.items():
        assert word in reasons[name], (name, reasons[name])
    # Nothing escaped the store, nothing was written through a link.
    assert sorted(p.name for p in (outside / "target").iterdir()) == []
    assert (outside / "passwd").read_text() == "root:x:0:0\n"
    assert [d.path for d in store.list(REF)] == good
    assert store.usage(REF).used_bytes == sum(len(f"note {i}\n") for i in range(6))


def test_a_planted_link_is_rejected_under_every_strategy(
    store: FilesystemStore, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    _plant(store, outside)
    archive = tar_gz([regular("planted.md", "x"), regular("ok.md", "fine")])
    for strategy in ImportStrategy:
        report = store.import_archive(REF, io.BytesIO(archive), strategy)
        assert [r.path for r in report.rejected] == ["planted.md"]
    assert (outside / "passwd").read_text() == "root:x:0:0\n"


# --- linear: counted, not timed ----------------------------------------------------------


class _Calls:
    """Counts calls of a few functions while an import runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts: Counter[str] = Counter()
        for owner, name in (
            (os, "fsync"),
            (os, "open"),
            (os, "replace"),
            (fs_import, "_sync_filesystem"),
            (gzip.GzipFile, "__init__"),
        ):
            monkeypatch.setattr(owner, name, self._counted(name, getattr(owner, name)))

    def _counted(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] += 1
            return fn(*args, **kwargs)

        return wrapper


def _import_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int) -> Counter[str]:
    store = FilesystemStore(tmp_path / f"spaces-{n}")
    store.write(REF, "existing.md", "already here")  # the state exists before the import
    archive = tar_gz([regular(f"d{i % 5}/n{i}.md", f"note {i}\n") for i in range(n)])
    with monkeypatch.context() as m:
        calls = _Calls(m)
        report = store.import_archive(REF, io.BytesIO(archive))
    assert len(report.written) == n
    return calls.counts


def test_an_import_costs_a_constant_number_of_flushes_and_one_open_per_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = _import_counts(tmp_path, monkeypatch, 100)
    large = _import_counts(tmp_path, monkeypatch, 800)
    # Flushes and fsyncs do not grow with the archive (one per directory, state, batch).
    assert large["_sync_filesystem"] == small["_sync_filesystem"] == 1
    assert large["fsync"] == small["fsync"] <= 10
    # Per document: one temporary file opened, one rename. Nothing else grows.
    assert large["open"] - small["open"] == 700
    assert large["replace"] - small["replace"] == 700
    # The archive is decompressed twice (validate, then write), whatever its size.
    assert large["__init__"] == small["__init__"] == 2


def test_a_batch_flushes_before_it_holds_too_many_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fs_import, "FLUSH_DIRECTORIES", 4)
    monkeypatch.setattr(fs_import, "FLUSH_DOCUMENTS", 7)
    store = FilesystemStore(tmp_path / "spaces")
    archive = tar_gz([regular(f"d{i}/n{j}.md", f"{i}/{j}") for i in range(10) for j in range(3)])
    report = store.import_archive(REF, io.BytesIO(archive))
    assert len(report.written) == 30
    assert {d.path: d.size_bytes for d in store.list(REF)} == {
        f"d{i}/n{j}.md": len(f"{i}/{j}") for i in range(10) for j in range(3)
    }
    assert store.usage(REF).used_bytes == sum(len(f"{i}/{j}") for i in range(10) for j in range(3))


def test_a_batch_flushes_before_its_versions_hold_too_many_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The versions' bytes wait in memory for the flush: past FLUSH_BYTES they are written,
    # so an import's memory does not grow with the archive. Each flush is one syncfs.
    monkeypatch.setattr(fs_import, "FLUSH_BYTES", 1000)
    flushes: list[int] = []
    real = fs_import._sync_filesystem
    monkeypatch.setattr(fs_import, "_sync_filesystem", lambda fd: flushes.append(fd) or real(fd))
    store = FilesystemStore(tmp_path / "spaces")
    bodies = {f"n{i}.md": f"{i}" * 400 for i in range(10)}
    report = store.import_archive(
        REF, io.BytesIO(tar_gz([regular(p, b) for p, b in bodies.items()]))
    )
    assert len(report.written) == 10
    assert len(flushes) == 4  # after 3, 6 and 9 documents of 400 bytes, then at the end
    assert {d.path: store.read(REF, d.path).content for d in store.list(REF)} == bodies
    assert all(len(store.versions(REF, p)) == 1 for p in bodies)


# --- the batch keeps every rule of a single write -------------------------------------------


def test_rename_counts_documents_still_pending_in_the_batch(store: FilesystemStore) -> None:
    store.write(REF, "a.md", "on disk")
    archive = tar_gz([regular("a-1.md", "incoming a-1"), regular("a.md", "incoming a")])
    report = store.import_archive(REF, io.BytesIO(archive), ImportStrategy.RENAME)
    assert report.written == ["a-1.md"]
    assert report.renamed == {"a.md": "a-2.md"}
    assert store.read(REF, "a-2.md").content == "incoming a"
    assert store.read(REF, "a.md").content == "on disk"


def test_quota_is_charged_as_the_batch_goes(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path / "spaces", Limits(team_quota=40))
    store.write(REF, "before.md", "x" * 15)
    archive = tar_gz([regular(f"n{i}.md", "0123456789") for i in range(4)])
    report = store.import_archive(REF, io.BytesIO(archive))
    assert report.written == ["n0.md", "n1.md"]
    assert [r.path for r in report.rejected] == ["n2.md", "n3.md"]
    assert all("quota" in r.reason for r in report.rejected)
    assert store.usage(REF).used_bytes == 35


def test_an_import_stopped_midway_leaves_a_consistent_store(store: FilesystemStore) -> None:
    archive = tar_gz([regular(f"n{i}.md", f"note {i}") for i in range(10)])
    done: list[int] = []

    def stop_after_five(n: int) -> None:
        done.append(n)
        if len(done) == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store.import_archive(REF, io.BytesIO(archive), progress=stop_after_five)
    listed = store.list(REF)
    # Nothing pending was named: every listed document is whole, usage matches it, and
    # no temporary file is left behind.
    assert store.usage(REF).used_bytes == sum(d.size_bytes for d in listed)
    for d in listed:
        assert store.read(REF, d.path).content == f"note {d.path[1:-3]}"
    assert [p.name for p in _walk(_space_dir(store)) if p.name.startswith(".keepstone-tmp-")] == []
    # And the store takes writes again (the lock was released).
    store.write(REF, "after.md", "fine")


def test_the_next_import_removes_what_a_killed_import_left(store: FilesystemStore) -> None:
    store.write(REF, "notes/a.md", "alpha")
    notes = next(p for p in _space_dir(store).iterdir() if p.is_dir())
    for i in range(3):  # temporary files of a process killed before its flush
        (notes / f".keepstone-tmp-{i:032x}.tmp").write_text("half")
    (notes / ".keepstone-tmp-keep").write_text("not ours: no .tmp suffix")
    report = store.import_archive(REF, io.BytesIO(tar_gz([regular("notes/b.md", "beta")])))
    assert report.written == ["notes/b.md"]
    left = sorted(p.name for p in notes.iterdir() if p.name.startswith(".keepstone-tmp-"))
    assert left == [".keepstone-tmp-keep"]
    assert {d.path for d in store.list(REF)} == {"notes/a.md", "notes/b.md"}


def _walk(root: Path) -> Iterator[Path]:
    if root.exists():
        yield from (p for p in root.rglob("*"))


def test_the_sql_store_rejects_the_same_members_and_imports_the_rest(tmp_path: Path) -> None:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'c.db'}", Limits())
    try:
        members = [regular("good.md", "fine"), *(m for m, _w in UNSAFE.values())]
        report = store.import_archive(REF, io.BytesIO(tar_gz(members)))
        assert report.written == ["good.md"]
        assert {r.path for r in report.rejected} == set(UNSAFE)
    finally:
        store.close()
