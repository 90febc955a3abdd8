"""SPEC §4 through the store: document cap, sub-caps, aggregates, credits, refusals."""

from __future__ import annotations

from typing import Any

import pytest

from keepstone.errors import DocumentTooLarge, QuotaExceeded
from keepstone.quota import Limits
from keepstone.spaces import Visibility
from keepstone.store.base import MemoryStore, PlatformGrant
from tests.conformance.conftest import StoreFactory
from tests.conformance.helpers import OTHER_TEAM, TEAM, project_ref, ref_for

TEAM_VISIBILITIES = [v for v in Visibility if v is not Visibility.GLOBAL]


def assert_refusal(exc: QuotaExceeded, limit: str, used: int, quota: int, needed: int) -> None:
    assert exc.details == {
        "limit": limit,
        "used_bytes": used,
        "quota_bytes": quota,
        "needed_bytes": needed,
    }
    for number in (used, quota, needed):
        assert str(number) in exc.message


def admin(store: MemoryStore) -> Any:
    """The SQL stores' admin methods (declared with the ``team_aggregate`` capability)."""
    return store


def test_document_cap_counts_utf8_bytes(store_factory: StoreFactory) -> None:
    store = store_factory(Limits(max_document=100))
    ref = project_ref()
    store.write(ref, "a.md", "x" * 100)
    with pytest.raises(DocumentTooLarge) as info:
        store.write(ref, "b.md", "\u00e9" * 51)  # 102 bytes, 51 characters
    assert info.value.details["limit"] == "document"
    assert info.value.details["quota_bytes"] == 100
    assert "100" in info.value.message and "102" in info.value.message
    assert [d.path for d in store.list(ref)] == ["a.md"]
    assert store.usage(ref).used_bytes == 100


def test_document_cap_zero_allows_only_empty(store_factory: StoreFactory) -> None:
    store = store_factory(Limits(max_document=0))
    ref = project_ref()
    assert store.write(ref, "empty.md", "").size_bytes == 0
    with pytest.raises(DocumentTooLarge):
        store.write(ref, "a.md", "x")


@pytest.mark.parametrize(
    "visibility", [v for v in TEAM_VISIBILITIES if v is not Visibility.PRIVATE], ids=str
)
def test_subcap_per_visibility(store_factory: StoreFactory, visibility: Visibility) -> None:
    check_subcap(store_factory, visibility)


@pytest.mark.requires("private")
def test_subcap_of_a_private_space(store_factory: StoreFactory) -> None:
    check_subcap(store_factory, Visibility.PRIVATE)


def check_subcap(store_factory: StoreFactory, visibility: Visibility) -> None:
    store = store_factory(Limits().with_subcap(visibility, 100))
    ref = ref_for(visibility)
    store.write(ref, "a.md", "a" * 60)
    with pytest.raises(QuotaExceeded) as info:
        store.write(ref, "b.md", "b" * 50)
    assert_refusal(info.value, "space", 60, 100, 50)
    store.write(ref, "a.md", "a" * 100)  # an overwrite is charged its delta only
    assert store.usage(ref).used_bytes == 100
    assert store.usage(ref).quota_bytes == 100
    with pytest.raises(QuotaExceeded):
        store.write(ref, "c.md", "c")
    store.write(ref, "c.md", "")  # an empty document grows nothing
    other = ref_for(visibility, name="other")
    store.write(other, "a.md", "o" * 100)  # the cap is per space
    assert store.usage(other).used_bytes == 100
    # Another visibility keeps its own default cap.
    store.write(
        ref_for(Visibility.ORG if visibility is not Visibility.ORG else Visibility.BOT),
        "a.md",
        "z" * 200,
    )


def test_default_subcaps_are_reported(store: MemoryStore) -> None:
    expected = {
        Visibility.BOT: 256 << 20,
        Visibility.PROJECT: 256 << 20,
        Visibility.CROSS_PROJECT: 512 << 20,
        Visibility.USER: 128 << 20,
        Visibility.ORG: 1 << 30,
        Visibility.GLOBAL: 0,
    }
    for vis, quota in expected.items():
        assert store.usage(ref_for(vis)).quota_bytes == quota


def test_global_has_no_subcap(store_factory: StoreFactory) -> None:
    limits = Limits(team_quota=10_000, instance_quota=10_000)
    for vis in TEAM_VISIBILITIES:
        limits = limits.with_subcap(vis, 10)
    store = store_factory(limits)
    ref = ref_for(Visibility.GLOBAL)
    store.write(ref, "catalogue.md", "g" * 5000, grant=PlatformGrant("test"))
    assert store.usage(ref).used_bytes == 5000
    assert store.usage(ref).quota_bytes == 0


def test_shrink_and_delete_credit(store: MemoryStore) -> None:
    ref = project_ref()
    other = ref_for(Visibility.ORG)
    store.write(other, "keep.md", "k" * 10)
    store.write(ref, "a.md", "a" * 100)
    store.write(ref, "b.md", "b" * 50)
    assert store.usage(ref).used_bytes == 150
    assert store.usage(ref).team_used_bytes == 160
    store.write(ref, "a.md", "a" * 40)
    assert store.usage(ref).used_bytes == 90
    assert store.usage(ref).team_used_bytes == 100
    store.delete(ref, "b.md")
    store.delete(ref, "a.md")
    assert store.usage(ref).used_bytes == 0
    assert store.usage(ref).team_used_bytes == 10
    assert store.usage(other).used_bytes == 10


def test_freed_bytes_can_be_reused(store_factory: StoreFactory) -> None:
    store = store_factory(Limits().with_subcap(Visibility.PROJECT, 100))
    ref = project_ref()
    store.write(ref, "a.md", "a" * 100)
    with pytest.raises(QuotaExceeded):
        store.write(ref, "b.md", "b")
    store.write(ref, "a.md", "a" * 90)
    store.write(ref, "b.md", "b" * 10)
    store.delete(ref, "a.md")
    store.write(ref, "c.md", "c" * 90)
    assert store.usage(ref).used_bytes == 100


@pytest.mark.requires("team_aggregate", "tenant_addressing")
def test_team_aggregate(store_factory: StoreFactory) -> None:
    store = store_factory(Limits(team_quota=1000))
    store.write(ref_for(Visibility.PROJECT), "a.md", "p" * 600)
    store.write(ref_for(Visibility.ORG), "a.md", "o" * 300)
    with pytest.raises(QuotaExceeded) as info:
        store.write(ref_for(Visibility.BOT), "a.md", "b" * 200)
    assert_refusal(info.value, "team", 900, 1000, 200)
    usage = store.usage(ref_for(Visibility.USER))
    assert (usage.team_used_bytes, usage.team_quota_bytes) == (900, 1000)
    assert admin(store).team_usage(TEAM) == (900, 1000)
    # Another team has its own counter, starting at the default quota.
    store.write(ref_for(Visibility.ORG, tenant=OTHER_TEAM), "a.md", "x" * 1000)
    assert admin(store).team_usage(OTHER_TEAM) == (1000, 1000)
    assert admin(store).team_usage("team-new") == (0, 1000)
    # Re-capping the counter takes effect on the next write.
    admin(store).set_team_quota(TEAM, 2000)
    store.write(ref_for(Visibility.BOT), "a.md", "b" * 200)
    assert admin(store).team_usage(TEAM) == (1100, 2000)
    admin(store).set_team_quota(TEAM, 500)  # below usage: growth refused, shrink allowed
    with pytest.raises(QuotaExceeded) as info:
        store.write(ref_for(Visibility.BOT), "b.md", "b")
    assert_refusal(info.value, "team", 1100, 500, 1)
    store.write(ref_for(Visibility.PROJECT), "a.md", "p" * 100)
    assert admin(store).team_usage(TEAM) == (600, 500)


@pytest.mark.requires("team_aggregate")
def test_instance_aggregate_with_attribution(store_factory: StoreFactory) -> None:
    store = store_factory(Limits(team_quota=100, instance_quota=1000))
    glob = ref_for(Visibility.GLOBAL)
    member = PlatformGrant("user:1", attribution_team=TEAM)
    # The team's counter is debited past its own quota: attribution, not enforcement.
    store.write(glob, "a.md", "g" * 700, grant=member)
    assert admin(store).team_usage(TEAM) == (700, 100)
    assert admin(store).instance_usage() == (700, 1000)
    usage = store.usage(glob)
    assert (usage.used_bytes, usage.team_used_bytes, usage.team_quota_bytes) == (
        700,
        700,
        1000,
    )
    with pytest.raises(QuotaExceeded) as info:
        store.write(glob, "b.md", "g" * 400, grant=member)
    assert_refusal(info.value, "instance", 700, 1000, 400)
    assert admin(store).team_usage(TEAM) == (700, 100)
    store.write(glob, "a.md", "g" * 200, grant=member)  # shrink credits both
    assert admin(store).team_usage(TEAM) == (200, 100)
    assert admin(store).instance_usage() == (200, 1000)
    admin(store).set_instance_quota(2000)
    # No team: nothing attributed.
    store.write(glob, "b.md", "g" * 1500, grant=PlatformGrant("admin-token"))
    assert admin(store).instance_usage() == (1700, 2000)
    assert admin(store).team_usage(TEAM) == (200, 100)
    # The attributed bytes do count against the team's own later team-space writes.
    with pytest.raises(QuotaExceeded) as info:
        store.write(ref_for(Visibility.ORG), "a.md", "o" * 50)
    assert_refusal(info.value, "team", 200, 100, 50)
    admin(store).set_team_quota(TEAM, 10_000)
    store.write(ref_for(Visibility.ORG), "a.md", "o" * 50)
    # Team spaces never touch the instance counter.
    assert admin(store).instance_usage() == (1700, 2000)
    assert admin(store).team_usage(TEAM) == (250, 10_000)


@pytest.mark.requires("team_aggregate")
def test_attribution_credit_clamps_at_zero(store_factory: StoreFactory) -> None:
    store = store_factory(Limits())
    glob = ref_for(Visibility.GLOBAL)
    other = PlatformGrant("user:2", attribution_team=OTHER_TEAM)
    store.write(glob, "a.md", "g" * 500, grant=PlatformGrant("user:1", attribution_team=TEAM))
    store.write(glob, "a.md", "g" * 100, grant=other)  # the other team shrinks it: credited 400
    assert admin(store).team_usage(OTHER_TEAM)[0] == 0
    assert admin(store).team_usage(TEAM)[0] == 500
    store.delete(glob, "a.md", grant=other)
    assert admin(store).team_usage(OTHER_TEAM)[0] == 0
    assert admin(store).instance_usage()[0] == 0


@pytest.mark.requires("tree_aggregate", "tenant_addressing")
def test_tree_aggregate_charges_every_write(store_factory: StoreFactory) -> None:
    store = store_factory(Limits(team_quota=1000))
    store.write(ref_for(Visibility.PROJECT), "a.md", "p" * 400)
    store.write(ref_for(Visibility.ORG, tenant=OTHER_TEAM), "a.md", "o" * 300)
    store.write(ref_for(Visibility.GLOBAL), "a.md", "g" * 200, grant=PlatformGrant("test"))
    for vis in (Visibility.BOT, Visibility.GLOBAL):
        usage = store.usage(ref_for(vis))
        assert (usage.team_used_bytes, usage.team_quota_bytes) == (900, 1000)
    with pytest.raises(QuotaExceeded) as info:
        store.write(ref_for(Visibility.BOT), "a.md", "b" * 200)
    assert_refusal(info.value, "tree", 900, 1000, 200)
    with pytest.raises(QuotaExceeded) as info:
        store.write(ref_for(Visibility.GLOBAL), "b.md", "g" * 101, grant=PlatformGrant("test"))
    assert_refusal(info.value, "tree", 900, 1000, 101)
    store.delete(ref_for(Visibility.PROJECT), "a.md")
    store.write(ref_for(Visibility.BOT), "a.md", "b" * 500)
    assert store.usage(ref_for(Visibility.BOT)).team_used_bytes == 1000


@pytest.mark.requires("tree_aggregate")
def test_tree_aggregate_zero_refuses_growth(store_factory: StoreFactory) -> None:
    store = store_factory(Limits(team_quota=0))
    ref = project_ref()
    with pytest.raises(QuotaExceeded) as info:
        store.write(ref, "a.md", "x")
    assert_refusal(info.value, "tree", 0, 0, 1)
    store.write(ref, "empty.md", "")
    assert [d.path for d in store.list(ref)] == ["empty.md"]
