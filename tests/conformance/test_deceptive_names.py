"""SPEC §11 through every store: a path or name that displays as something it is not
(bidirectional controls, zero-width characters, BOM, look-alike slashes) is refused
naming the code point, and nothing is written."""

from __future__ import annotations

import io
import os

import pytest

from keepstone.errors import InvalidPath, InvalidSpaceRef
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import MemoryStore
from keepstone.store.fs import FilesystemStore
from tests.conformance.archives import regular, tar_gz
from tests.conformance.helpers import TEAM, project_ref

DECEPTIVE = {
    "U+202E": "evil\u202egpj.md",  # shows as "evildm.jpg"
    "U+2067": "notes/\u2067a.md",
    "U+200B": "MEMORY\u200b.md",  # looks exactly like MEMORY.md
    "U+FEFF": "\ufeffMEMORY.md",
    "U+2215": "notes\u2215secret.md",  # looks like notes/secret.md
    "U+FF0F": "notes\uff0fsecret.md",
    "U+2044": "a\u2044b.md",
}


def _files_on_disk(store: MemoryStore) -> list[str]:
    if not isinstance(store, FilesystemStore) or not store.root.exists():
        return []
    return [
        os.path.join(d, f)
        for d, _, files in os.walk(store.root)
        for f in files
        if f.endswith(".md")
    ]


@pytest.mark.parametrize("point", sorted(DECEPTIVE))
def test_a_deceptive_path_is_refused_and_nothing_is_written(store: MemoryStore, point: str) -> None:
    ref = project_ref()
    with pytest.raises(InvalidPath) as info:
        store.write(ref, DECEPTIVE[point], "hello")
    assert point in info.value.message
    assert store.list(ref) == []
    assert store.usage(ref).used_bytes == 0
    assert _files_on_disk(store) == []


def test_a_deceptive_space_name_is_refused_before_any_store_sees_it() -> None:
    for name in ("notes\u202e", "no\u200btes", "a\u2215b"):
        with pytest.raises(InvalidSpaceRef):
            SpaceRef.build(Visibility.PROJECT, name, tenant=TEAM, project="p")
        with pytest.raises(InvalidSpaceRef):
            SpaceRef.build(Visibility.PROJECT, "notes", tenant=TEAM, project=name)


def test_an_import_rejects_deceptive_members_and_writes_the_rest(store: MemoryStore) -> None:
    ref = project_ref()
    members = [regular(path, "x") for path in DECEPTIVE.values()]
    members.append(regular("fine.md", "ok"))
    report = store.import_archive(ref, io.BytesIO(tar_gz(members)))
    assert report.written == ["fine.md"]
    assert sorted(r.path for r in report.rejected) == sorted(DECEPTIVE.values())
    for rejected in report.rejected:
        assert "U+" in rejected.reason
    assert [d.path for d in store.list(ref)] == ["fine.md"]
    if isinstance(store, FilesystemStore):  # and on disk, nothing but the one document
        assert [os.path.basename(f) for f in _files_on_disk(store)] == ["fine.md"]
