"""Kill -9 mid-write leaves no version without its document, nor a document without its
version.

A child process writes, deletes and moves documents in a loop; the test SIGKILLs it at a
random moment, several rounds over the same store. After each round, every document's
newest version is the live document (its etag, its content), every path without a
document ends in a deletion marker, and every version with content reads back whole.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from keepstone.documents import content_etag
from keepstone.errors import AlreadyExists, NotFound
from keepstone.quota import GiB, Limits, MiB
from keepstone.spaces import Visibility
from keepstone.store.base import MemoryStore
from tests.conformance.conftest import StoreFactory
from tests.conformance.helpers import StoreSpec, project_ref
from tests.processes import child_context

pytestmark = pytest.mark.requires("history", "multiprocess")

REF = project_ref()
PATHS = [f"crash/{i}.md" for i in range(6)]
ROUNDS = 6
#: Roomy: no quota refuses a write, and no retention drops a version mid-test.
LIMITS = Limits(history_versions=10_000, max_document=2 * MiB, team_quota=8 * GiB).with_subcap(
    Visibility.PROJECT, 0
)


def churn(spec: StoreSpec, seed: int, ready: str) -> None:
    """Write, delete and move documents until killed (run in a child process)."""
    store = spec.open()
    rng = random.Random(seed)
    n = 0
    while True:
        path = rng.choice(PATHS)
        roll = rng.random()
        try:
            if roll < 0.15:
                store.delete(REF, path)
            elif roll < 0.3:
                to = rng.choice([p for p in PATHS if p != path])
                store.move(REF, path, to, overwrite=rng.random() < 0.5)
            else:
                size = rng.choice((10, 1000, 300_000))  # large bodies: long transactions
                store.write(REF, path, f"{seed} {n} " + "y" * size)
        except (NotFound, AlreadyExists):
            continue
        n += 1
        if n == 5:  # five changes committed: the round has something to check
            Path(ready).touch()


def check_consistent(store: MemoryStore) -> int:
    """Assert history and documents agree; return how many versions there are."""
    live = {d.path: d for d in store.iter_documents(REF)}
    count = 0
    for path in PATHS:
        try:
            versions = store.versions(REF, path)
        except NotFound:
            assert path not in live, f"{path}: a document without its version"
            continue
        count += len(versions)
        assert [v.version for v in versions] == list(range(len(versions), 0, -1)), path
        newest = versions[0]
        if path in live:
            assert not newest.deleted, f"{path}: live, yet its newest version is a deletion"
            assert newest.etag == live[path].etag, f"{path}: a version without its document"
            assert store.read_version(REF, path, newest.version).content == live[path].content
        else:
            assert newest.deleted, f"{path}: a version without its document"
        for v in versions:
            if v.deleted:
                continue
            doc = store.read_version(REF, path, v.version)
            assert content_etag(doc.content.encode("utf-8")) == v.etag == doc.etag
            assert doc.size_bytes == v.size_bytes
    return count


def settled(store: MemoryStore, wait: float = 10.0) -> int:
    """:func:`check_consistent` once the killed writer's last commit, if any, has landed.

    A PostgreSQL server runs the COMMIT a client sent before it was killed, after the
    client is gone; landing between the check's read of the documents and of their
    versions, it looks like a version without its document for a moment. A committed
    inconsistency never settles, so it still fails here."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return check_consistent(store)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_kill_9_mid_write_keeps_versions_and_documents_together(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    spec = store_factory.spec(LIMITS)
    store = store_factory.open(spec)
    rng = random.Random(14)
    ctx = child_context()
    seen = 0
    for round_ in range(ROUNDS):
        ready = tmp_path / f"ready-{round_}"
        child = ctx.Process(target=churn, args=(spec, round_, str(ready)))
        child.start()
        deadline = time.monotonic() + 120
        while not ready.exists() and child.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ready.exists(), "the writer never got going"
        time.sleep(rng.uniform(0.0, 0.6))  # a random moment, most likely mid-transaction
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
        assert child.exitcode == -signal.SIGKILL
        after = settled(store)
        assert after > seen  # the round wrote something, and it was checked
        seen = after
    # The store still takes writes after the kills, and records them.
    store.write(REF, PATHS[0], "after the crashes")
    assert store.versions(REF, PATHS[0])[0].etag == store.read(REF, PATHS[0]).etag
