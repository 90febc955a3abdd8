"""16 concurrent writers on one document keep every acknowledged version exactly once, in
commit order.

Half the writers loop read → write ``if_match`` the etag read (retrying when another
writer got in first), half write plainly. Every body is unique, so every acknowledged
write is a new version. Afterwards the document's versions are numbered 1..N without
gaps, hold each acknowledged etag exactly once, each writer's own writes in the order the
store acknowledged them, and every conditional write right after the version it matched.
"""

from __future__ import annotations

import threading
from concurrent.futures import ProcessPoolExecutor

import pytest

from keepstone.errors import PreconditionFailed
from keepstone.quota import Limits
from keepstone.store.base import MemoryStore
from tests.conformance.conftest import StoreFactory
from tests.conformance.helpers import StoreSpec, project_ref
from tests.processes import child_context

pytestmark = pytest.mark.requires("history")

REF = project_ref()
PATH = "shared.md"
WRITERS = 16
WRITES = 6
#: Room for every version: the per-document count would otherwise trim the oldest.
LIMITS = Limits(history_versions=10_000)

#: What a writer reports: (writer, etag acknowledged, etag it matched or None) in the
#: order the store acknowledged them.
Acks = list[tuple[int, str, str | None]]


def body(writer: int, n: int) -> str:
    return f"# writer {writer}\n\nwrite {n}\n" + "x" * (writer * 37 + n)


def run_writer(store: MemoryStore, writer: int, writes: int) -> tuple[Acks, list[str]]:
    """``writes`` writes by ``writer``: conditional for even writers, plain for odd."""
    acks: Acks = []
    errors: list[str] = []
    for n in range(writes):
        try:
            if writer % 2:
                acks.append((writer, store.write(REF, PATH, body(writer, n)).etag, None))
                continue
            while True:
                seen = store.read(REF, PATH).etag
                try:
                    done = store.write(REF, PATH, body(writer, n), if_match=seen)
                except PreconditionFailed:
                    continue  # another writer got in between: read again
                acks.append((writer, done.etag, seen))
                break
        except Exception as exc:  # reported to the test, which fails
            errors.append(f"writer {writer}: {type(exc).__name__}: {exc}")
    return acks, errors


def writer_threads(
    spec: StoreSpec | None, store: MemoryStore | None, first: int, count: int, writes: int
) -> tuple[Acks, list[str]]:
    """Run writers ``first`` .. ``first + count - 1`` as threads of one store (opened from
    ``spec`` in a child process)."""
    own = spec.open() if store is None and spec is not None else None
    target = store or own
    assert target is not None
    results: list[tuple[Acks, list[str]]] = []
    lock = threading.Lock()

    def one(writer: int) -> None:
        result = run_writer(target, writer, writes)
        with lock:
            results.append(result)

    threads = [threading.Thread(target=one, args=(w,)) for w in range(first, first + count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if own is not None:
        own.close()
    return [a for acks, _ in results for a in acks], [e for _, errs in results for e in errs]


def check_history(store: MemoryStore, seed_etag: str, acks: Acks) -> None:
    versions = store.versions(REF, PATH)
    total = 1 + WRITERS * WRITES
    assert len(acks) == WRITERS * WRITES
    assert [v.version for v in versions] == list(range(total, 0, -1))  # 1..N, no gap
    assert not any(v.deleted for v in versions)
    at_version = {v.etag: v.version for v in versions}
    etags = [v.etag for v in versions]
    assert sorted(etags) == sorted([seed_etag] + [etag for _, etag, _ in acks])  # once each
    assert at_version[seed_etag] == 1
    for writer in range(WRITERS):  # each writer's writes in the order acknowledged
        mine = [at_version[etag] for w, etag, _ in acks if w == writer]
        assert mine == sorted(mine), writer
        assert len(mine) == WRITES
    for _, etag, matched in acks:  # a conditional write comes right after what it matched
        if matched is not None:
            assert at_version[etag] == at_version[matched] + 1
    assert versions[0].etag == store.read(REF, PATH).etag
    for v in versions[:: max(1, total // 12)]:  # a sample of the versions reads back whole
        assert store.read_version(REF, PATH, v.version).etag == v.etag


def test_threads_on_one_document_keep_every_version_in_commit_order(
    store_factory: StoreFactory,
) -> None:
    store = store_factory(LIMITS)
    seed = store.write(REF, PATH, "# seed\n")
    acks, errors = writer_threads(None, store, 0, WRITERS, WRITES)
    assert errors == []
    check_history(store, seed.etag, acks)


@pytest.mark.requires("multiprocess")
def test_processes_on_one_document_keep_every_version_in_commit_order(
    store_factory: StoreFactory,
) -> None:
    spec = store_factory.spec(LIMITS)
    store = store_factory.open(spec)
    seed = store.write(REF, PATH, "# seed\n")
    processes = 4
    per = WRITERS // processes
    ctx = child_context()
    with ProcessPoolExecutor(max_workers=processes, mp_context=ctx) as pool:
        futures = [
            pool.submit(writer_threads, spec, None, p * per, per, WRITES) for p in range(processes)
        ]
        results = [f.result(timeout=300) for f in futures]
    assert [e for _, errs in results for e in errs] == []
    check_history(store, seed.etag, [a for acks, _ in results for a in acks])


@pytest.mark.requires("tenant_addressing")
def test_the_first_writes_of_a_team_in_several_spaces_never_deadlock(
    store_factory: StoreFactory,
) -> None:
    """Recording a version takes the team's counter row; so does charging the write, after
    the space's row. Both must take them in one order, or two first writes of a team (whose
    counter row does not exist yet for one of them) wait on each other."""
    store = store_factory(Limits())
    errors: list[str] = []
    for round_ in range(12):
        team = f"team-{round_}"
        start = threading.Barrier(6)

        def writer(worker: int, team: str = team, start: threading.Barrier = start) -> None:
            start.wait()
            for i in range(4):
                try:
                    ref = project_ref(tenant=team, name=f"s{(worker + i) % 3}")
                    store.write(ref, f"w{worker}-{i}.md", "x" * 100)
                except Exception as exc:  # reported below, which fails the test
                    errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
