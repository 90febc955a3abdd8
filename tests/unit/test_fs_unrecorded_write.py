"""A filesystem write its history cannot record did not happen: the old file is back.

The file is replaced before its version is recorded; when the record fails (a full disk
refuses it there), the write is undone. A small old file is written again from the bytes
read under the lock, in room the disk reserve gives back when the disk is full; one larger
than a quarter of the reserve was linked aside first and is renamed back; a new document is
removed.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from keepstone.errors import NotFound, StoreUnavailable
from keepstone.spaces import SpaceRef
from keepstone.store import fs_tree
from keepstone.store.fs import FilesystemStore, space_components
from keepstone.store.fs_versions import TreeHistory

REF = SpaceRef.build("project", "notes", tenant="local", project="p1")


def _refuse_records(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(TreeHistory, "record", refused)


def _space_files(root: Path) -> list[str]:
    """Every file under the space's directory, temporary ones included."""
    space = root / "spaces" / Path(*space_components(REF))
    return sorted(str(p.relative_to(space)) for p in space.rglob("*") if p.is_file())


def _assert_as_before(store: FilesystemStore, root: Path, old: str, before: Any) -> None:
    doc = store.read(REF, "a/doc.md")
    assert doc.content == old
    assert doc.updated_at == before.updated_at  # the old file's time, not the undo's
    assert [v.version for v in store.versions(REF, "a/doc.md")] == [1]
    assert store.usage(REF).used_bytes == len(old)
    assert _space_files(root) == ["a/doc.md"]  # no temporary or set-aside file left


@pytest.mark.parametrize("reserve_bytes", [4096, 16], ids=["from-memory", "linked-aside"])
def test_an_unrecorded_overwrite_leaves_the_old_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reserve_bytes: int
) -> None:
    # 4,096: the 40-byte old file fits a quarter of the reserve; 16: it does not.
    store = FilesystemStore(tmp_path / "spaces", reserve_bytes=reserve_bytes)
    old = "the old text, forty bytes long, exactly."
    store.write(REF, "a/doc.md", old)
    before = store.read(REF, "a/doc.md")
    _refuse_records(monkeypatch)
    with pytest.raises(StoreUnavailable):
        store.write(REF, "a/doc.md", "a new text that is never recorded")
    monkeypatch.undo()
    _assert_as_before(store, tmp_path, old, before)
    store.write(REF, "a/doc.md", "written once the history records again")
    assert [v.version for v in store.versions(REF, "a/doc.md")] == [2, 1]  # newest first
    store.close()


def test_the_old_file_is_written_again_in_the_room_the_reserve_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FilesystemStore(tmp_path / "spaces", reserve_bytes=4096)
    old = "kept through a full disk"
    store.write(REF, "a/doc.md", old)
    before = store.read(REF, "a/doc.md")
    reserve = store.reserve.path
    assert reserve.exists()
    _refuse_records(monkeypatch)
    real_write, refused = fs_tree.atomic_write, []

    def full_until_room(dir_fd: int, name: str, data: bytes, **kwargs: Any) -> None:
        # The disk is full for the old bytes until the reserve is given back.
        if data == old.encode() and reserve.exists():
            refused.append(name)
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(dir_fd, name, data, **kwargs)

    monkeypatch.setattr(fs_tree, "atomic_write", full_until_room)
    with pytest.raises(StoreUnavailable):
        store.write(REF, "a/doc.md", "never recorded")
    monkeypatch.undo()
    assert refused == ["doc.md"]  # refused once, then written in the reserve's room
    assert not reserve.exists()
    os.sync()
    store.write(REF, "b.md", "the next write makes the reserve again")
    assert reserve.exists()
    store.delete(REF, "b.md")
    _assert_as_before(store, tmp_path, old, before)
    store.close()


def test_an_unrecorded_create_leaves_no_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FilesystemStore(tmp_path / "spaces", reserve_bytes=4096)
    store.write(REF, "kept.md", "another document")
    _refuse_records(monkeypatch)
    with pytest.raises(StoreUnavailable):
        store.write(REF, "a/new.md", "a first text that is never recorded")
    monkeypatch.undo()
    assert [i.path for i in store.list(REF)] == ["kept.md"]
    with pytest.raises(NotFound):
        store.versions(REF, "a/new.md")
    assert store.usage(REF).used_bytes == len("another document")
    assert _space_files(tmp_path) == ["kept.md"]  # nor its directory, nor a temporary file
    store.close()


def test_only_an_old_file_too_large_to_hold_is_linked_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A link aside costs an unlink after every change: a create (nothing to keep) and an
    # old file up to a quarter of the reserve (held in memory) make none.
    store = FilesystemStore(tmp_path / "spaces", reserve_bytes=64)
    real_link, linked = os.link, []

    def counting(src: str, dst: str, **kwargs: Any) -> None:
        linked.append(src)
        real_link(src, dst, **kwargs)

    monkeypatch.setattr(fs_tree.os, "link", counting)
    store.write(REF, "a/doc.md", "sixteen bytes!!!")  # a create
    store.write(REF, "a/doc.md", "a text of more than sixteen bytes")  # over 16: held
    assert linked == []
    store.write(REF, "a/doc.md", "short")  # over 33 bytes: linked aside
    assert linked == ["doc.md"]
    assert _space_files(tmp_path) == ["a/doc.md"]  # the link is gone after the change
    store.close()
