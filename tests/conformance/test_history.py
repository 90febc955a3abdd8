"""The history contract (docs/history.md), on every adapter that keeps one.

Every write that changes a document's content, every delete, move and import appends a
version; versions are numbered from 1 per path and never reused; the past is read by
version or by instant; a team's history is held to its version count, its quota and its
age. Time is the store's own ``clock``, driven by the test (:class:`FakeClock`).
"""

from __future__ import annotations

import io
import random
import tarfile
from datetime import UTC, datetime, timedelta, timezone

import pytest

from keepstone.documents import acting_as
from keepstone.errors import InvalidRequest, NotFound
from keepstone.quota import KiB, Limits, MiB
from keepstone.service.access import LOCAL_PRINCIPAL
from keepstone.service.spaces import SpaceService
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import ImportStrategy, MemoryStore, PlatformGrant
from tests.conformance.archives import regular, tar_gz
from tests.conformance.conftest import StoreFactory
from tests.conformance.helpers import (
    OTHER_TEAM,
    TEAM,
    FakeClock,
    history_keeper,
    project_ref,
    ref_for,
)

pytestmark = pytest.mark.requires("history")

REF = project_ref()


def with_clock(store: MemoryStore) -> FakeClock:
    clock = FakeClock()
    store.clock = clock  # type: ignore[attr-defined]  # every history adapter has one
    return clock


@pytest.fixture
def clocked(store_factory: StoreFactory) -> tuple[MemoryStore, FakeClock]:
    store = store_factory(Limits())
    return store, with_clock(store)


def numbers(store: MemoryStore, path: str, ref: SpaceRef = REF) -> list[int]:
    return [v.version for v in store.versions(ref, path)]


def words(rng: random.Random, size: int) -> str:
    """Prose of about ``size`` bytes that compresses little (made-up words, no secrets)."""
    out: list[str] = []
    n = 0
    while n < size:
        word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        out.append(word)
        n += len(word) + 1
    return " ".join(out)


# --- Versions --------------------------------------------------------------------------------


def test_versions_are_newest_first_with_the_live_one_first(
    clocked: tuple[MemoryStore, FakeClock],
) -> None:
    store, clock = clocked
    made = []
    for body in ("one", "two two", "three three three"):
        at = clock.tick()
        made.append((store.write(REF, "notes/a.md", body), at))
    found = store.versions(REF, "notes/a.md")
    assert [v.version for v in found] == [3, 2, 1]
    assert [(v.etag, v.size_bytes, v.at, v.deleted) for v in found] == [
        (w.etag, w.size_bytes, at, False) for w, at in reversed(made)
    ]
    live = store.read(REF, "notes/a.md")
    assert found[0].etag == live.etag
    assert found[0].at == live.updated_at


def test_the_same_content_again_makes_no_new_version(
    clocked: tuple[MemoryStore, FakeClock],
) -> None:
    store, clock = clocked
    store.write(REF, "a.md", "same")
    clock.tick()
    store.write(REF, "a.md", "same")
    assert numbers(store, "a.md") == [1]
    clock.tick()
    store.write(REF, "a.md", "other")
    clock.tick()
    store.write(REF, "a.md", "same")  # back to an earlier content: a change, a version
    assert numbers(store, "a.md") == [3, 2, 1]


def test_a_delete_leaves_a_marker_and_numbers_are_never_reused(
    clocked: tuple[MemoryStore, FakeClock],
) -> None:
    store, clock = clocked
    store.write(REF, "a.md", "first")
    deleted_at = clock.tick()
    store.delete(REF, "a.md")
    marker = store.versions(REF, "a.md")[0]
    assert (marker.version, marker.deleted, marker.etag, marker.size_bytes, marker.at) == (
        2,
        True,
        "",
        0,
        deleted_at,
    )
    clock.tick()
    again = store.write(REF, "a.md", "first")  # the same content as version 1, recreated
    assert again.created
    assert numbers(store, "a.md") == [3, 2, 1]
    assert store.versions(REF, "a.md")[0].etag == again.etag
    clock.tick()
    store.delete(REF, "a.md")
    clock.tick()
    store.write(REF, "a.md", "third life")
    assert numbers(store, "a.md") == [5, 4, 3, 2, 1]
    assert [v.deleted for v in store.versions(REF, "a.md")] == [False, True, False, True, False]


def test_a_path_that_never_held_a_document_has_no_versions(
    clocked: tuple[MemoryStore, FakeClock],
) -> None:
    store, _ = clocked
    store.write(REF, "a.md", "x")
    with pytest.raises(NotFound):
        store.versions(REF, "b.md")
    with pytest.raises(NotFound):
        store.read_version(REF, "b.md", 1)


def test_read_version_is_byte_exact_and_refuses_what_has_no_content(
    clocked: tuple[MemoryStore, FakeClock],
) -> None:
    store, clock = clocked
    bodies = [
        "",
        "# Title\r\nline with trailing spaces   \r\n\r\n",
        "é ü 漢字 🙂 \t tab\n\n\n",
        "no newline at end",
        "x" * (64 * KiB) + "\n",
    ]
    for body in bodies:
        clock.tick()
        store.write(REF, "dir/doc.md", body)
    clock.tick()
    store.delete(REF, "dir/doc.md")
    for number, body in enumerate(bodies, start=1):
        doc = store.read_version(REF, "dir/doc.md", number)
        assert doc.content == body
        assert doc.path == "dir/doc.md"
        assert doc.size_bytes == len(body.encode("utf-8"))
        assert doc.etag == store.versions(REF, "dir/doc.md")[-number].etag
    deletion = len(bodies) + 1
    for missing in (deletion, deletion + 1, 99):
        with pytest.raises(NotFound):
            store.read_version(REF, "dir/doc.md", missing)
    for bad in (0, -1, 2**31, 2**63):  # past the version column's range too, on any store
        with pytest.raises(InvalidRequest):
            store.read_version(REF, "dir/doc.md", bad)


def test_a_move_ends_the_old_path_and_starts_the_new_one(
    clocked: tuple[MemoryStore, FakeClock],
) -> None:
    store, clock = clocked
    first = store.write(REF, "a.md", "moving content")
    moved_at = clock.tick()
    store.move(REF, "a.md", "b.md")
    old = store.versions(REF, "a.md")
    assert [(v.version, v.deleted, v.at) for v in old] == [
        (2, True, moved_at),
        (1, False, old[1].at),
    ]
    new = store.versions(REF, "b.md")
    assert [(v.version, v.etag, v.deleted, v.at) for v in new] == [(1, first.etag, False, moved_at)]
    assert store.read_version(REF, "b.md", 1).content == "moving content"
    # Onto an existing document (overwrite): the target's next version, its old one kept.
    clock.tick()
    store.write(REF, "c.md", "will be replaced")
    replaced_at = clock.tick()
    store.move(REF, "b.md", "c.md", overwrite=True)
    target = store.versions(REF, "c.md")
    assert [(v.version, v.etag, v.at) for v in target][0] == (2, first.etag, replaced_at)
    assert store.read_version(REF, "c.md", 1).content == "will be replaced"
    assert store.read_version(REF, "c.md", 2).content == "moving content"
    assert [v.deleted for v in store.versions(REF, "b.md")] == [True, False]


def test_a_clock_that_steps_back_never_times_a_version_before_the_one_it_replaces(
    clocked: tuple[MemoryStore, FakeClock],
) -> None:
    """An NTP step, or replicas whose clocks disagree: every change of a path is timed no
    earlier than the version it replaces, so a path's versions follow each other in time as
    in number and a read as of the newest one's instant sees it."""
    store, clock = clocked
    late = clock.tick(100)
    store.write(REF, "a.md", "one")
    store.write(REF, "b.md", "target")
    for seconds, change in (
        (50, lambda: store.write(REF, "a.md", "two")),
        (40, lambda: store.delete(REF, "a.md")),
        (30, lambda: store.write(REF, "a.md", "three")),
        (20, lambda: store.move(REF, "a.md", "b.md", overwrite=True)),
        (10, lambda: store.write(REF, "b.md", "four")),
    ):
        clock.now = late - timedelta(seconds=seconds)
        change()
    for path, count in (("a.md", 5), ("b.md", 3)):
        found = store.versions(REF, path)
        assert len(found) == count, path
        times = [v.at for v in found]  # newest first
        assert times == sorted(times, reverse=True), (path, times)
        assert min(times) == late, (path, times)
    with pytest.raises(NotFound):
        store.read_as_of(REF, "a.md", late)
    assert store.read_as_of(REF, "b.md", late).content == "four"
    assert [d.path for d in store.list_as_of(REF, late)] == ["b.md"]


# --- The past by instant ----------------------------------------------------------------------


def test_read_and_list_as_of_instants_before_between_and_after(
    clocked: tuple[MemoryStore, FakeClock],
) -> None:
    store, clock = clocked
    before = clock.now
    t1 = clock.tick(10)
    store.write(REF, "a.md", "a1")
    t2 = clock.tick(10)
    store.write(REF, "dir/b.md", "b1")
    t3 = clock.tick(10)
    store.write(REF, "a.md", "a2 longer")
    t4 = clock.tick(10)
    store.delete(REF, "dir/b.md")
    t5 = clock.tick(10)
    store.move(REF, "a.md", "dir/c.md")
    after = clock.tick(10)
    half = timedelta(seconds=5)

    # What the space held at each instant, by path: content and when it became current.
    expected: list[tuple[datetime, dict[str, tuple[str, datetime]]]] = [
        (before, {}),
        (t1 - timedelta(microseconds=1), {}),
        (t1, {"a.md": ("a1", t1)}),  # a version is current from its very instant
        (t1 + half, {"a.md": ("a1", t1)}),
        (t2, {"a.md": ("a1", t1), "dir/b.md": ("b1", t2)}),
        (t3 + half, {"a.md": ("a2 longer", t3), "dir/b.md": ("b1", t2)}),
        (t4, {"a.md": ("a2 longer", t3)}),
        (t5 - half, {"a.md": ("a2 longer", t3)}),
        (t5, {"dir/c.md": ("a2 longer", t5)}),
        (after, {"dir/c.md": ("a2 longer", t5)}),
        (after + timedelta(days=400), {"dir/c.md": ("a2 longer", t5)}),
    ]
    for at, held in expected:
        listed = store.list_as_of(REF, at)
        assert [d.path for d in listed] == sorted(held), at
        for info in listed:
            body, since = held[info.path]
            assert info.size_bytes == len(body.encode("utf-8"))
            assert info.updated_at == since
        assert [d.path for d in store.list_as_of(REF, at, "dir")] == sorted(
            p for p in held if p.startswith("dir/")
        )
        docs = {d.path: d.content for d in store.iter_documents_as_of(REF, at)}
        assert docs == {p: body for p, (body, _) in held.items()}
        for path in ("a.md", "dir/b.md", "dir/c.md"):
            if path in held:
                doc = store.read_as_of(REF, path, at)
                assert (doc.content, doc.updated_at) == held[path]
            else:
                with pytest.raises(NotFound):
                    store.read_as_of(REF, path, at)
    live = {d.path: (d.etag, d.size_bytes) for d in store.list(REF)}
    assert {d.path: (d.etag, d.size_bytes) for d in store.list_as_of(REF, after)} == live


def test_an_instant_means_the_same_in_any_timezone(
    clocked: tuple[MemoryStore, FakeClock],
) -> None:
    store, clock = clocked
    t1 = clock.tick(3600)
    store.write(REF, "a.md", "early")
    t2 = clock.tick(3600)
    store.write(REF, "a.md", "late")
    store.write(REF, "b.md", "born late")
    between = t1 + (t2 - t1) / 2
    for zone in (timezone(timedelta(hours=2)), timezone(timedelta(hours=-7, minutes=-30))):
        local = between.astimezone(zone)
        assert [d.path for d in store.list_as_of(REF, local)] == ["a.md"]
        assert store.read_as_of(REF, "a.md", local).content == "early"
        with pytest.raises(NotFound):
            store.read_as_of(REF, "b.md", local)
        assert [d.path for d in store.list_as_of(REF, t2.astimezone(zone))] == ["a.md", "b.md"]
    naive = between.astimezone(UTC).replace(tzinfo=None)  # a naive instant is UTC
    assert [d.path for d in store.list_as_of(REF, naive)] == ["a.md"]
    assert store.read_as_of(REF, "a.md", naive).content == "early"


# --- Who, imports, isolation ------------------------------------------------------------------


def expected_actor(store: MemoryStore, actor: str) -> str:
    """The actor a version records: the context's, where the store decides authority
    itself; a client of a server gets the server's name for its caller (here the local
    principal of the served app), whatever the client's context says."""
    return actor if "platform_grants" in store.capabilities else LOCAL_PRINCIPAL.actor


def test_the_actor_of_each_change_is_recorded(clocked: tuple[MemoryStore, FakeClock]) -> None:
    store, clock = clocked
    with acting_as("user:alice"):
        store.write(REF, "a.md", "by alice")
    clock.tick()
    with acting_as("user:bob key:k1"):
        store.write(REF, "a.md", "by bob")
    clock.tick()
    with acting_as("agent:run-7"):
        store.move(REF, "a.md", "b.md")
    clock.tick()
    with acting_as("admin-token"):
        store.delete(REF, "b.md")
    assert [v.actor for v in store.versions(REF, "a.md")] == [
        expected_actor(store, a) for a in ("agent:run-7", "user:bob key:k1", "user:alice")
    ]
    assert [v.actor for v in store.versions(REF, "b.md")] == [
        expected_actor(store, a) for a in ("admin-token", "agent:run-7")
    ]


def test_an_import_records_a_version_of_each_document_it_writes(
    clocked: tuple[MemoryStore, FakeClock],
) -> None:
    store, clock = clocked
    store.write(REF, "kept.md", "old kept")
    store.write(REF, "same.md", "unchanged")
    imported_at = clock.tick()
    archive = tar_gz(
        [regular("kept.md", "new kept"), regular("same.md", "unchanged"), regular("n/new.md", "n")]
    )
    with acting_as("user:importer"):
        report = store.import_archive(REF, io.BytesIO(archive), ImportStrategy.OVERWRITE)
    assert sorted(report.written) == ["kept.md", "n/new.md", "same.md"]
    assert numbers(store, "kept.md") == [2, 1]
    assert numbers(store, "same.md") == [1]  # the same bytes: no new version
    assert numbers(store, "n/new.md") == [1]
    for path in ("kept.md", "n/new.md"):
        newest = store.versions(REF, path)[0]
        assert (newest.at, newest.actor) == (imported_at, expected_actor(store, "user:importer"))
    assert store.read_version(REF, "kept.md", 1).content == "old kept"
    assert {d.path for d in store.list_as_of(REF, imported_at - timedelta(seconds=1))} == {
        "kept.md",
        "same.md",
    }


def test_another_space_never_sees_this_space_history(
    clocked: tuple[MemoryStore, FakeClock],
) -> None:
    store, clock = clocked
    other = project_ref(name="other")
    store.write(REF, "a.md", "mine 1")
    clock.tick()
    store.write(REF, "a.md", "mine 2")
    store.write(REF, "only-mine.md", "x")
    clock.tick()
    store.write(other, "a.md", "theirs")
    assert numbers(store, "a.md", other) == [1]
    assert store.read_version(other, "a.md", 1).content == "theirs"
    with pytest.raises(NotFound):
        store.read_version(other, "a.md", 2)
    with pytest.raises(NotFound):
        store.versions(other, "only-mine.md")
    assert [d.path for d in store.list_as_of(other, clock.now)] == ["a.md"]
    assert [d.path for d in store.list_as_of(REF, clock.now)] == ["a.md", "only-mine.md"]


def test_a_global_space_keeps_history_too(clocked: tuple[MemoryStore, FakeClock]) -> None:
    store, clock = clocked
    glob = ref_for(Visibility.GLOBAL)
    grant = PlatformGrant("history-test")
    store.write(glob, "policy.md", "v1", grant=grant)
    clock.tick()
    store.write(glob, "policy.md", "v2", grant=grant)
    clock.tick()
    store.delete(glob, "policy.md", grant=grant)
    assert [(v.version, v.deleted) for v in store.versions(glob, "policy.md")] == [
        (3, True),
        (2, False),
        (1, False),
    ]
    assert store.read_version(glob, "policy.md", 1).content == "v1"
    assert store.read_as_of(glob, "policy.md", clock.now - timedelta(seconds=1)).content == "v2"
    with pytest.raises(NotFound):
        store.versions(REF, "policy.md")


# A history quota per team: the filesystem store keeps one for its whole tree (as its usage).
@pytest.mark.requires("tenant_addressing", "team_aggregate")
def test_another_team_never_sees_this_team_history(store_factory: StoreFactory) -> None:
    store = store_factory(Limits(history_quota=2 * KiB))
    clock = with_clock(store)
    theirs = project_ref(tenant=OTHER_TEAM)
    store.write(theirs, "a.md", "their first")
    clock.tick()
    store.write(theirs, "a.md", "their second")
    rng = random.Random(3)
    for _ in range(12):  # this team's history overflows its quota: only its own is pruned
        clock.tick()
        store.write(REF, "a.md", words(rng, 800))
    assert numbers(store, "a.md", theirs) == [2, 1]
    assert store.read_version(theirs, "a.md", 1).content == "their first"
    assert numbers(store, "a.md")[0] == 12
    with pytest.raises(NotFound):
        store.versions(theirs, "b.md")
    assert [d.path for d in store.list_as_of(theirs, clock.now)] == ["a.md"]
    keeper = history_keeper(store)
    assert keeper.history_usage(OTHER_TEAM)[0] > 0
    assert keeper.history_usage(TEAM)[0] <= 2 * KiB


# --- Retention --------------------------------------------------------------------------------


def test_history_versions_keeps_that_many_per_document(store_factory: StoreFactory) -> None:
    store = store_factory(Limits(history_versions=3))
    clock = with_clock(store)
    for n in range(1, 8):
        clock.tick()
        store.write(REF, "a.md", f"a{n}")
        if n <= 2:
            store.write(REF, "b.md", f"b{n}")
    assert numbers(store, "a.md") == [7, 6, 5]
    assert numbers(store, "b.md") == [2, 1]  # another document's count is its own
    assert [store.read_version(REF, "a.md", n).content for n in (7, 6, 5)] == ["a7", "a6", "a5"]
    for pruned in (1, 4):
        with pytest.raises(NotFound):
            store.read_version(REF, "a.md", pruned)
    clock.tick()
    store.delete(REF, "a.md")  # the marker counts as a version too, and is kept
    assert numbers(store, "a.md") == [8, 7, 6]
    clock.tick()
    store.write(REF, "a.md", "again")
    assert numbers(store, "a.md") == [9, 8, 7]


def test_history_quota_drops_the_oldest_replaced_versions_first(
    store_factory: StoreFactory,
) -> None:
    quota = 3 * KiB
    store = store_factory(Limits(history_quota=quota))
    clock = with_clock(store)
    keeper = history_keeper(store)
    rng = random.Random(7)
    written: dict[tuple[str, int], datetime] = {}
    for n in range(1, 13):
        for path in ("a.md", "b.md"):
            at = clock.tick()
            store.write(REF, path, words(rng, 700))
            written[(path, n)] = at
            used, limit = keeper.history_usage(TEAM)
            assert limit == quota
            assert used <= quota
    kept = {(p, v.version): v.at for p in ("a.md", "b.md") for v in store.versions(REF, p)}
    assert ("a.md", 12) in kept and ("b.md", 12) in kept  # the live versions stay
    replaced = {k: at for k, at in kept.items() if k[1] < 12}
    dropped = {k: at for k, at in written.items() if k not in kept}
    assert replaced and dropped  # the quota held some history and dropped some
    assert max(dropped.values()) < min(replaced.values())  # oldest first, across documents
    for (path, version), _ in replaced.items():
        assert store.read_version(REF, path, version).content  # what is kept is readable


def test_a_full_history_never_blocks_a_live_write(store_factory: StoreFactory) -> None:
    store = store_factory(Limits(history_quota=1, team_quota=64 * KiB))
    clock = with_clock(store)
    rng = random.Random(11)
    bodies = [words(rng, 20 * KiB) for _ in range(6)]
    for body in bodies:  # each write replaces 20 KB of history with a quota of 1 byte
        clock.tick()
        result = store.write(REF, "big.md", body)
        assert store.read(REF, "big.md").etag == result.etag
    clock.tick()
    store.write(REF, "other.md", bodies[0])
    assert numbers(store, "big.md") == [6]
    assert store.read_version(REF, "big.md", 6).content == bodies[-1]
    assert history_keeper(store).history_usage(TEAM)[0] <= 1


def test_prune_history_drops_what_is_older_than_history_days(
    store_factory: StoreFactory,
) -> None:
    store = store_factory(Limits(history_days=1))
    clock = with_clock(store)
    keeper = history_keeper(store)
    start = clock.now
    store.write(REF, "a.md", "v1")
    clock.tick(3600)
    store.write(REF, "a.md", "v2")
    clock.tick(29 * 3600)  # start + 30 h
    store.write(REF, "a.md", "v3")
    store.write(REF, "gone.md", "soon deleted")
    clock.tick(3600)
    store.delete(REF, "gone.md")
    store.write(REF, "young.md", "y1")
    clock.tick(60)
    store.write(REF, "young.md", "y2")

    clock.now = start + timedelta(hours=50)  # cutoff: start + 26 h
    assert keeper.prune_history() == 1
    # v1 went; v2 stays, since it was still current at the cutoff (an as_of read of any
    # instant within history_days answers as before).
    assert numbers(store, "a.md") == [3, 2]
    assert store.read_as_of(REF, "a.md", start + timedelta(hours=27)).content == "v2"
    with pytest.raises(NotFound):
        store.read_version(REF, "a.md", 1)
    assert numbers(store, "gone.md") == [2, 1]
    assert numbers(store, "young.md") == [2, 1]

    clock.now = start + timedelta(days=30)
    assert keeper.prune_history(TEAM) == 3  # a.md v2, gone.md v1, young.md v1
    assert numbers(store, "a.md") == [3]  # a newest version is never pruned
    assert numbers(store, "gone.md") == [2]  # nor the marker of a deletion
    assert store.versions(REF, "gone.md")[0].deleted
    assert numbers(store, "young.md") == [2]
    assert keeper.history_usage(TEAM)[0] == 0
    assert keeper.prune_history() == 0
    clock.tick()
    store.write(REF, "gone.md", "back")
    assert numbers(store, "gone.md") == [3, 2]  # numbering goes on after a prune


def test_history_usage_counts_replaced_versions_only(store_factory: StoreFactory) -> None:
    store = store_factory(Limits(team_quota=5 * MiB, history_days=1))
    clock = with_clock(store)
    keeper = history_keeper(store)
    assert keeper.history_usage(TEAM) == (0, 5 * MiB)  # the default: the team's quota
    store.write(REF, "a.md", "first body")
    store.write(REF, "b.md", "other body")
    assert keeper.history_usage(TEAM)[0] == 0  # live versions are live usage, not history
    clock.tick()
    store.write(REF, "a.md", "second body")
    one = keeper.history_usage(TEAM)[0]
    assert one > 0
    clock.tick()
    store.delete(REF, "a.md")
    two = keeper.history_usage(TEAM)[0]
    assert two > one
    clock.tick()
    store.write(REF, "b.md", "other body")  # unchanged: nothing replaced
    assert keeper.history_usage(TEAM)[0] == two
    clock.tick(3 * 86400)
    assert keeper.prune_history() == 2
    assert keeper.history_usage(TEAM)[0] == 0
    assert store.usage(REF).used_bytes == len(b"other body")


# --- Export as of an instant ------------------------------------------------------------------


def archive_members(data: bytes) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar:
            body = tar.extractfile(member)
            assert body is not None
            out[member.name] = body.read()
    return out


def test_export_as_of_round_trips_byte_exact_through_an_import(
    clocked: tuple[MemoryStore, FakeClock],
) -> None:
    store, clock = clocked
    service = SpaceService(store)
    bodies = {
        "README.md": "# Team\r\nwith CRLF\r\n",
        "empty.md": "",
        "deep/er/unicode é.md": "é 漢字 🙂\n\ttabbed   \n",
        "notes/no-newline.md": "last line",
    }
    for path, body in bodies.items():
        store.write(REF, path, body)
    then = clock.tick()
    clock.tick()
    store.write(REF, "README.md", "# Team, rewritten\n")
    store.delete(REF, "empty.md")
    store.move(REF, "notes/no-newline.md", "moved.md")
    store.write(REF, "later.md", "after the instant")

    sink = io.BytesIO()
    assert service.export_as_of(REF, then, sink) == len(bodies)
    members = archive_members(sink.getvalue())
    assert members == {p: b.encode("utf-8") for p, b in bodies.items()}

    fresh = project_ref(name="restored")
    report = store.import_archive(fresh, io.BytesIO(sink.getvalue()), ImportStrategy.SKIP)
    assert sorted(report.written) == sorted(bodies)
    restored = {d.path: (d.content, d.etag) for d in store.iter_documents(fresh)}
    past = {d.path: (d.content, d.etag) for d in store.iter_documents_as_of(REF, then)}
    assert restored == past
    assert {p: c for p, (c, _) in restored.items()} == bodies
