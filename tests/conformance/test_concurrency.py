"""Concurrent writers in several OS processes never break a counter (SPEC §4).

64 writers (4 processes x 16 threads) write, overwrite and delete documents of random
sizes in a project space with a 1 MiB sub-cap and a global space, while an observer
process polls ``usage``. Afterwards every counter equals the bytes actually stored,
and no counter was ever seen above its quota.
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from keepstone.quota import KiB, Limits, MiB
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import MemoryStore
from tests.conformance.conftest import StoreFactory
from tests.conformance.helpers import ref_for
from tests.conformance.workers import observer_process, writer_process
from tests.processes import child_context

PROCESSES = 4
THREADS = 16
OPS = 8
MAX_SIZE = 160 * KiB


def stored_bytes(store: MemoryStore, ref: SpaceRef) -> int:
    return sum(len(d.content.encode("utf-8")) for d in store.iter_documents(ref))


@pytest.mark.requires("multiprocess")
def test_concurrent_writers_keep_every_counter_exact(
    store_factory: StoreFactory, tmp_path: Path
) -> None:
    limits = Limits(team_quota=MiB + 256 * KiB, instance_quota=512 * KiB).with_subcap(
        Visibility.PROJECT, 1 * MiB
    )
    spec = store_factory.spec(limits)
    store = store_factory.open(spec)
    project, glob = ref_for(Visibility.PROJECT), ref_for(Visibility.GLOBAL)
    refs = [project, project, glob]  # two thirds of the writes go to the capped space
    stop, ready = tmp_path / "stop", tmp_path / "ready"

    ctx = child_context()
    with ProcessPoolExecutor(max_workers=PROCESSES + 1, mp_context=ctx) as pool:
        observer = pool.submit(observer_process, spec, [project, glob], str(stop), str(ready))
        deadline = time.monotonic() + 120
        while not ready.exists() and time.monotonic() < deadline and not observer.done():
            time.sleep(0.01)
        writers = [
            pool.submit(writer_process, spec, refs, seed, THREADS, OPS, MAX_SIZE)
            for seed in range(PROCESSES)
        ]
        results = [w.result(timeout=300) for w in writers]
        errors = [e for errs, _ in results for e in errs]
        refusals = sum(n for _, n in results)
        stop.touch()
        samples, over = observer.result(timeout=60)

    assert errors == []
    assert over == []
    assert samples > 0

    project_bytes, global_bytes = stored_bytes(store, project), stored_bytes(store, glob)
    assert project_bytes <= 1 * MiB
    p_usage, g_usage = store.usage(project), store.usage(glob)
    assert p_usage.used_bytes == project_bytes
    assert g_usage.used_bytes == global_bytes
    if "team_aggregate" in store.capabilities:
        assert p_usage.team_used_bytes == project_bytes  # the team counter
        assert g_usage.team_used_bytes == global_bytes  # the instance counter
        assert global_bytes <= 512 * KiB
    if "tree_aggregate" in store.capabilities:
        assert p_usage.team_used_bytes == g_usage.team_used_bytes == project_bytes + global_bytes
        assert project_bytes + global_bytes <= MiB + 256 * KiB
    # The quotas were actually contended, and documents remain.
    assert refusals > 0
    assert project_bytes > 0
