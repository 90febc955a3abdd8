"""``SpaceService.write(create_only=True)``: a new document is written only while its path is
free, decided in the store's one step (the UI's "new document" and the restore of a deleted
one rely on it instead of a read then a write)."""

from __future__ import annotations

from pathlib import Path

import pytest

from keepstone.errors import PreconditionFailed
from keepstone.service.access import console_principal
from keepstone.service.spaces import SpaceService
from keepstone.spaces import SpaceRef
from keepstone.store.base import MemoryStore
from keepstone.store.fs import FilesystemStore
from keepstone.store.sql import SqlStore

REF = SpaceRef.build("project", "notes", tenant="local", project="p")
ME = console_principal("local")


@pytest.fixture(params=["fs", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> MemoryStore:
    if request.param == "fs":
        return FilesystemStore(tmp_path / "spaces")
    opened = SqlStore.open(f"sqlite:///{tmp_path / 'keepstone.db'}")
    request.addfinalizer(opened.close)
    return opened


def test_create_only_writes_a_free_path_and_refuses_a_taken_one(store: MemoryStore) -> None:
    service = SpaceService(store)
    assert service.write(ME, REF, "a.md", "first", create_only=True).created
    with pytest.raises(PreconditionFailed):
        service.write(ME, REF, "a.md", "second", create_only=True)
    assert service.read(REF, "a.md").content == "first"


def test_restore_of_a_deleted_document_only_while_its_path_is_free(store: MemoryStore) -> None:
    service = SpaceService(store)
    service.write(ME, REF, "a.md", "kept words")
    service.delete(ME, REF, "a.md")
    service.write(ME, REF, "a.md", "written meanwhile")
    with pytest.raises(PreconditionFailed):
        service.restore(ME, REF, "a.md", 1, create_only=True)
    assert service.read(REF, "a.md").content == "written meanwhile"
    service.delete(ME, REF, "a.md")
    assert service.restore(ME, REF, "a.md", 1, create_only=True).created
    assert service.read(REF, "a.md").content == "kept words"
