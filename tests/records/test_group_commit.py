"""Group commit: concurrent saves share one transaction, each keeps its own answer.

The batcher (:class:`keepstone.records.group.GroupCommit`) is tested with plain functions for
``run`` (what a group is, who leads, what fails whom); the records service's grouped
saves against real SQLite and PostgreSQL (refusals stay per save, what is answered is
stored)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy.engine import Engine

from keepstone.errors import KeepstoneError, MemoryOff, RepoNotFound
from keepstone.principal import CredentialKind, Principal
from keepstone.records.group import GroupCommit, Outcome
from keepstone.records.store import Record
from keepstone.service.records import RecordService
from tests.records.conftest import World, make_world, records_of

SERVICE = Principal(kind=CredentialKind.SERVICE_TOKEN)


class Recorder:
    """A ``run`` that records each group it is given; the first group waits for
    ``release`` so that the callers arriving meanwhile queue up behind it."""

    def __init__(self, answer: Callable[[int], Outcome[int]] = lambda i: i * 10) -> None:
        self.groups: list[list[int]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.answer = answer
        self._lock = threading.Lock()

    def __call__(self, items: list[int]) -> list[Outcome[int]]:
        with self._lock:
            self.groups.append(list(items))
            first = len(self.groups) == 1
        if first:
            self.entered.set()
            assert self.release.wait(10)
        if any(i < 0 for i in items):  # a poisoned item fails whatever group it is in
            raise RuntimeError("a poisoned group")
        return [self.answer(i) for i in items]


def _queue_behind_first(
    group: GroupCommit[int, int], run: Recorder, items: list[int]
) -> list[object]:
    """Submit ``items[0]``, wait until its group is being written, submit the rest (they
    queue), then let the first group finish; return each item's value or error."""
    answers: list[object] = [None] * len(items)

    def submit(i: int) -> None:
        try:
            answers[i] = group.submit(items[i])
        except Exception as exc:  # the item's own error, compared by the test
            answers[i] = exc

    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        pool.submit(submit, 0)
        assert run.entered.wait(10)
        for i in range(1, len(items)):
            pool.submit(submit, i)
        while len(group._queue) < len(items) - 1:  # every follower queued
            threading.Event().wait(0.001)
        run.release.set()
    return answers


def test_callers_waiting_during_a_commit_share_the_next_one() -> None:
    run = Recorder()
    group: GroupCommit[int, int] = GroupCommit(run)
    answers = _queue_behind_first(group, run, list(range(8)))
    assert answers == [i * 10 for i in range(8)]
    assert run.groups[0] == [0]
    assert sorted(run.groups[1]) == list(range(1, 8))  # one group, one transaction
    assert len(run.groups) == 2
    assert not group._leading and not group._queue


def test_a_lone_caller_runs_its_own_group() -> None:
    run = Recorder()
    run.release.set()
    group: GroupCommit[int, int] = GroupCommit(run)
    assert [group.submit(i) for i in range(3)] == [0, 10, 20]
    assert run.groups == [[0], [1], [2]]


def test_max_group_bounds_a_group() -> None:
    run = Recorder()
    group: GroupCommit[int, int] = GroupCommit(run, max_group=3)
    answers = _queue_behind_first(group, run, list(range(8)))
    assert answers == [i * 10 for i in range(8)]
    assert [len(g) for g in run.groups] == [1, 3, 3, 1]


def test_an_items_refusal_is_its_own() -> None:
    refused = ValueError("refused: 3")
    run = Recorder(lambda i: refused if i == 3 else i * 10)
    group: GroupCommit[int, int] = GroupCommit(run)
    answers = _queue_behind_first(group, run, list(range(6)))
    assert answers == [0, 10, 20, refused, 40, 50]
    assert len(run.groups) == 2  # refused inside the group, not by splitting it


def test_a_group_that_fails_is_run_again_one_by_one() -> None:
    run = Recorder(lambda i: i * 10)
    group: GroupCommit[int, int] = GroupCommit(run)
    answers = _queue_behind_first(group, run, [0, 1, 2, -1, 4])
    assert answers[:3] == [0, 10, 20] and answers[4] == 40
    # Alone, the poisoned item fails again: that error is its own, and only its own.
    assert isinstance(answers[3], RuntimeError)
    assert sorted(run.groups[1]) == [-1, 1, 2, 4]
    assert sorted(len(g) for g in run.groups[2:]) == [1, 1, 1, 1]


def test_a_failing_group_of_one_raises_to_its_caller() -> None:
    def run(items: list[int]) -> list[Outcome[int]]:
        raise OSError("disk gone")

    group: GroupCommit[int, int] = GroupCommit(run)
    with pytest.raises(OSError, match="disk gone"):
        group.submit(1)
    with pytest.raises(OSError):  # the next caller leads again: nothing is stuck
        group.submit(2)


def test_an_answer_count_mismatch_is_an_error_not_a_wrong_answer() -> None:
    group: GroupCommit[int, int] = GroupCommit(lambda items: [])
    with pytest.raises(RuntimeError, match="0 outcomes for a group of 1"):
        group.submit(1)


def test_many_threads_every_caller_gets_its_own_value() -> None:
    seen: list[int] = []

    def run(items: list[int]) -> list[Outcome[int]]:
        seen.extend(items)
        return [i + 1000 for i in items]

    group: GroupCommit[int, int] = GroupCommit(run, max_group=16)
    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(group.submit, range(2000)))
    assert answers == [i + 1000 for i in range(2000)]
    assert sorted(seen) == list(range(2000))  # each item written exactly once


# --- coroutines: waiting on the event loop, one thread per group ----------------------------


def test_coroutines_waiting_during_a_commit_share_the_next_one() -> None:
    run = Recorder()
    group: GroupCommit[int, int] = GroupCommit(run)
    threads_in_run: set[str] = set()
    recorded = run.__call__

    def run_noting_thread(items: list[int]) -> list[Outcome[int]]:
        threads_in_run.add(threading.current_thread().name)
        return recorded(items)

    group._run = run_noting_thread

    async def main() -> list[object]:
        first = asyncio.ensure_future(group.submit_async(0))
        while not run.entered.is_set():
            await asyncio.sleep(0.001)
        rest = [asyncio.ensure_future(group.submit_async(i)) for i in range(1, 8)]
        while len(group._queue) < 7:
            await asyncio.sleep(0.001)
        run.release.set()
        return list(await asyncio.gather(first, *rest))

    assert asyncio.run(main()) == [i * 10 for i in range(8)]
    assert run.groups == [[0], list(range(1, 8))]  # one group, one transaction
    # Written in a worker thread, never on the event loop.
    assert threads_in_run and threading.main_thread().name not in threads_in_run
    assert not group._leading and not group._queue


def test_coroutines_and_threads_share_groups_each_with_its_own_answer() -> None:
    refused = ValueError("refused")
    seen: list[int] = []
    lock = threading.Lock()

    def run(items: list[int]) -> list[Outcome[int]]:
        with lock:
            seen.extend(items)
        return [refused if i % 97 == 0 else i + 1000 for i in items]

    group: GroupCommit[int, int] = GroupCommit(run, max_group=16)

    def sync(i: int) -> object:
        try:
            return group.submit(i)
        except ValueError as exc:
            return exc

    async def one(i: int) -> object:
        try:
            return await group.submit_async(i)
        except ValueError as exc:
            return exc

    async def main() -> tuple[list[object], list[object]]:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max_workers=8) as pool:
            threads = [loop.run_in_executor(pool, sync, i) for i in range(0, 2000, 2)]
            coros = [one(i) for i in range(1, 2000, 2)]
            return list(await asyncio.gather(*threads)), list(await asyncio.gather(*coros))

    from_threads, from_coros = asyncio.run(main())
    expect = [refused if i % 97 == 0 else i + 1000 for i in range(2000)]
    assert from_threads == expect[0::2] and from_coros == expect[1::2]
    assert sorted(seen) == list(range(2000))  # each item written exactly once
    assert not group._leading and not group._queue


def test_a_coroutine_is_answered_only_after_its_group_was_written() -> None:
    written = threading.Event()

    def run(items: list[int]) -> list[Outcome[int]]:
        threading.Event().wait(0.05)
        written.set()
        return list(items)

    group: GroupCommit[int, int] = GroupCommit(run)

    async def main() -> bool:
        await group.submit_async(1)
        return written.is_set()

    assert asyncio.run(main())


def test_a_cancelled_coroutine_does_not_stop_its_group() -> None:
    run = Recorder()
    group: GroupCommit[int, int] = GroupCommit(run)

    async def main() -> object:
        first = asyncio.ensure_future(group.submit_async(0))
        while not run.entered.is_set():
            await asyncio.sleep(0.001)
        gone = asyncio.ensure_future(group.submit_async(1))
        kept = asyncio.ensure_future(group.submit_async(2))
        while len(group._queue) < 2:
            await asyncio.sleep(0.001)
        gone.cancel()  # its client went away while it waited
        run.release.set()
        return await asyncio.gather(first, kept)

    assert asyncio.run(main()) == [0, 20]
    assert run.groups == [[0], [1, 2]]  # the cancelled item is written all the same


# --- the records service: grouped saves against real databases ------------------------------


def _save_concurrently(
    records: RecordService, jobs: list[tuple[str, str, str | None]]
) -> list[object]:
    """Save ``(team, text, repo)`` jobs from 8 threads; each job's record or error."""

    def one(job: tuple[str, str, str | None]) -> Record | KeepstoneError:
        team, text, repo = job
        try:
            return records.save(SERVICE, team, text, repo)
        except KeepstoneError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(one, jobs))


def test_concurrent_saves_keep_their_own_refusals(engine: Engine) -> None:
    world = make_world(engine)
    off = make_world(engine, enabled=False)
    records = records_of(engine)
    jobs: list[tuple[str, str, str | None]] = []
    for i in range(60):
        if i % 10 == 3:
            jobs.append((off.team_id, f"saved while off {i}", None))
        elif i % 10 == 7:
            jobs.append((world.team_id, f"saved to another team's repo {i}", world.other_repo))
        else:
            jobs.append((world.team_id, f"deploy fix number {i}", world.repo_a if i % 2 else None))
    answers = _save_concurrently(records, jobs)
    for i, answer in enumerate(answers):
        if i % 10 == 3:
            assert isinstance(answer, MemoryOff), answer
        elif i % 10 == 7:
            assert isinstance(answer, RepoNotFound), answer
        else:
            assert isinstance(answer, Record) and answer.text == jobs[i][1], answer
    stored = _all_ids(world)
    saved = {a.id for a in answers if isinstance(a, Record)}
    assert stored == saved and len(saved) == 48
    assert _all_ids(off) == set()


def test_a_grouped_save_is_searchable_at_once(world: World) -> None:
    answers = _save_concurrently(
        world.records,
        [(world.team_id, f"rotated the kafka broker certificate {i}", None) for i in range(16)],
    )
    member = world.principal(world.member)
    hits = world.records.search(member, world.team_id, "kafka certificate", limit=50).hits
    assert {h.id for h in hits} == {a.id for a in answers if isinstance(a, Record)}


def _all_ids(world: World) -> set[str]:
    member = Principal(kind=CredentialKind.API_KEY, user_id=world.member, team_id=world.team_id)
    ids: set[str] = set()
    token: str | None = None
    while True:
        page = world.records.list(member, world.team_id, next_token=token)
        ids |= {r.id for r in page.records}
        token = page.next_token
        if token is None:
            return ids
