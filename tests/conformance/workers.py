"""Code the concurrency test runs in child processes (`tests.processes`: importable, picklable)."""

from __future__ import annotations

import os
import random
import threading
import time

from keepstone.errors import NotFound, QuotaExceeded
from keepstone.spaces import SpaceRef
from keepstone.store.base import MemoryStore, PlatformGrant
from tests.conformance.helpers import StoreSpec

#: Paths shared by every writer, so writers overwrite and delete each other's documents.
PATHS = [f"shared/{i:02d}.md" for i in range(24)]


def writer_process(
    spec: StoreSpec, refs: list[SpaceRef], seed: int, threads: int, ops: int, max_size: int
) -> tuple[list[str], int]:
    """Run ``threads`` writer threads of ``ops`` random writes/overwrites/deletes each.

    Returns every unexpected error (QuotaExceeded and NotFound are expected) and the
    number of quota refusals.
    """
    store = spec.open()
    errors: list[str] = []
    refusals: list[int] = []

    def writer(n: int) -> None:
        rng = random.Random(seed * 1000 + n)
        grant = PlatformGrant("concurrency-test")
        for _ in range(ops):
            ref = rng.choice(refs)
            path = rng.choice(PATHS)
            try:
                if rng.random() < 0.25:
                    store.delete(ref, path, grant=grant)
                else:
                    size = rng.choice((0, rng.randrange(max_size), rng.randrange(max_size)))
                    store.write(ref, path, chr(97 + n % 26) * size, grant=grant)
            except QuotaExceeded:
                refusals.append(1)
            except NotFound:
                pass
            except Exception as exc:  # reported to the parent, which fails the test
                errors.append(f"{type(exc).__name__}: {exc}")

    pool = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    store.close()
    return errors, len(refusals)


def observer_process(
    spec: StoreSpec, refs: list[SpaceRef], stop_file: str, ready_file: str
) -> tuple[int, list[str]]:
    """Poll ``usage`` until ``stop_file`` exists; return (samples, counters seen over quota).

    Touches ``ready_file`` once it is polling, so the writers start only then: a slow
    process start can never leave the observer watching nothing."""
    store: MemoryStore = spec.open()
    samples = 0
    over: list[str] = []
    deadline = time.monotonic() + 120
    while not os.path.exists(stop_file) and time.monotonic() < deadline:
        if samples == len(refs):
            open(ready_file, "w").close()
        for ref in refs:
            u = store.usage(ref)
            samples += 1
            if u.quota_bytes > 0 and u.used_bytes > u.quota_bytes:
                over.append(f"{ref.id}: space {u.used_bytes} > {u.quota_bytes}")
            if u.team_used_bytes > u.team_quota_bytes:
                over.append(f"{ref.id}: aggregate {u.team_used_bytes} > {u.team_quota_bytes}")
    store.close()
    return samples, over
