"""A full disk, for real (a small tmpfs): writes are refused with ``507
insufficient_storage`` naming the disk and leave nothing behind (the usage counter stays
true); reads, listings, usage, searches and deletes go on (the store's reserve,
:mod:`keepstone.store.reserve`); once space is freed, writes resume without a restart. On
the SQLite store, on the filesystem store, and through the API."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from keepstone.api.app import create_app
from keepstone.errors import InsufficientStorage
from keepstone.service.access import LOCAL_PRINCIPAL
from keepstone.service.search import DocumentSearch
from keepstone.service.spaces import SpaceService
from keepstone.store.base import MemoryStore
from keepstone.store.fs import FilesystemStore
from keepstone.store.sql import SqlStore
from tests.api.conftest import make_settings
from tests.api.world import SPACE, build_world
from tests.conformance.helpers import project_ref
from tests.conftest import require_small_disk

#: Long: handed out first under pytest-xdist (tests/conftest.py).
pytestmark = pytest.mark.slow

#: Each document: 20 KB of distinct words (so the search has something to find).
BODY = " ".join(f"word{i}" for i in range(2500))
#: A file standing in for what an operator deletes to free the disk.
BALLAST = 6 * 1024 * 1024


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "disk"
    require_small_disk(str(where), "16m")
    try:
        with open(where / "ballast", "wb") as f:
            f.write(b"\0" * BALLAST)
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(service: SpaceService) -> tuple[list[str], InsufficientStorage]:
    """Write documents until the disk refuses one; the paths written and the refusal."""
    ref, written = project_ref(), []
    for i in range(10_000):
        path = f"notes/{i:04d}.md"
        try:
            service.write(LOCAL_PRINCIPAL, ref, path, BODY)
        except InsufficientStorage as refused:
            return written, refused
        written.append(path)
    raise AssertionError("the disk never filled")


def _survives_a_full_disk(store: MemoryStore, disk: Path) -> None:
    service = SpaceService(store, lambda: DocumentSearch(store))
    ref = project_ref()
    written, refused = _fill(service)
    assert refused.status == 507 and refused.code == "insufficient_storage"
    assert str(disk) in refused.message  # the refusal names the disk
    # The refused write left nothing: the listing and the counter are the writes that landed.
    assert [d.path for d in store.list(ref)] == written
    assert store.usage(ref).used_bytes == len(written) * len(BODY)
    # Reads, searches and deletes go on.
    assert store.read(ref, written[0]).content == BODY
    service.search(LOCAL_PRINCIPAL, ref, "word17")
    for path in written[:3]:
        service.delete(LOCAL_PRINCIPAL, ref, path)
    assert [d.path for d in store.list(ref)] == written[3:]
    assert store.usage(ref).used_bytes == len(written[3:]) * len(BODY)
    # The operator frees space: writes resume, no restart.
    os.unlink(disk / "ballast")
    service.write(LOCAL_PRINCIPAL, ref, "after.md", "room again")
    assert store.read(ref, "after.md").content == "room again"


def test_the_sqlite_store_survives_a_full_disk(disk: Path) -> None:
    store = SqlStore.open(f"sqlite:///{disk}/keepstone.db")
    try:
        _survives_a_full_disk(store, disk)
    finally:
        store.close()


def test_the_filesystem_store_survives_a_full_disk(disk: Path) -> None:
    store = FilesystemStore(disk / "spaces")
    try:
        _survives_a_full_disk(store, disk)
        # No file of a refused write is left in the tree (the listing walks it too).
        tree = [n for _, _, files in os.walk(disk / "spaces") for n in files if n.endswith(".md")]
        assert len(tree) == len(store.list(project_ref()))
    finally:
        store.close()


def test_the_api_answers_507_and_still_serves_reads_and_deletes(disk: Path) -> None:
    app = create_app(make_settings(f"sqlite:///{disk}/keepstone.db"))
    try:
        with TestClient(app) as client:
            world = build_world(app, client)
            headers = {"Authorization": f"Bearer {world.keys['member']}"}
            written, answer = [], None
            for i in range(10_000):
                path = f"n/{i:04d}.md"
                params = {**SPACE, "path": path}
                answer = client.put(
                    "/api/memory/doc", params=params, json={"content": BODY}, headers=headers
                )
                if answer.status_code != 201:
                    break
                written.append(path)
            assert answer is not None and answer.status_code == 507, answer.text
            assert answer.json()["error"]["code"] == "insufficient_storage"
            got = client.get(
                "/api/memory/doc", params={**SPACE, "path": written[0]}, headers=headers
            )
            assert got.status_code == 200
            found = client.get(
                "/api/memory/search", params={**SPACE, "q": "word17"}, headers=headers
            )
            assert found.status_code == 200, found.text
            gone = client.delete(
                "/api/memory/doc", params={**SPACE, "path": written[1]}, headers=headers
            )
            assert gone.status_code == 204, gone.text
    finally:
        app.state.runtime.engine.dispose()
