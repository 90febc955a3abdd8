"""Property-based tests of the quota arithmetic and the filesystem limits (SPEC §4)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keepstone.config import Config
from keepstone.errors import DocumentTooLarge, InvalidRequest, QuotaExceeded
from keepstone.quota import (
    DEFAULT_INSTANCE_QUOTA,
    DEFAULT_MAX_DOCUMENT_SIZE,
    DEFAULT_SUBCAPS,
    DEFAULT_TEAM_AGGREGATE_QUOTA,
    Counter,
    GiB,
    Limits,
    MiB,
    check_document_size,
    clamp,
    default_quota_for,
    subcap_or_none,
)
from keepstone.spaces import Visibility

sizes = st.integers(min_value=0, max_value=1 << 40)
deltas = st.integers(min_value=-(1 << 40), max_value=1 << 40)


@given(sizes, st.one_of(st.none(), sizes), deltas)
def test_counter_check_arithmetic(used: int, quota: int | None, delta: int) -> None:
    counter = Counter("space", used, quota)
    allowed = delta <= 0 or quota is None or used + delta <= quota
    if allowed:
        counter.check(delta)
        return
    with pytest.raises(QuotaExceeded) as info:
        counter.check(delta)
    assert info.value.details == {
        "limit": "space",
        "used_bytes": used,
        "quota_bytes": quota,
        "needed_bytes": delta,
    }
    assert str(used) in info.value.message and str(quota) in info.value.message
    assert str(delta) in info.value.message and "space" in info.value.message


@given(sizes)
def test_a_counter_at_its_quota_allows_only_shrinking(quota: int) -> None:
    counter = Counter("team", quota, quota)
    counter.check(0)
    counter.check(-1)
    with pytest.raises(QuotaExceeded):
        counter.check(1)


def test_zero_quota_refuses_every_growth() -> None:
    Counter("tree", 0, 0).check(0)
    with pytest.raises(QuotaExceeded):
        Counter("tree", 0, 0).check(1)


@given(deltas)
def test_clamp(value: int) -> None:
    assert clamp(value) == max(value, 0)


@given(st.integers(min_value=-10, max_value=1 << 40))
def test_subcap_zero_means_none(quota: int) -> None:
    assert subcap_or_none(quota) == (quota if quota > 0 else None)


@given(sizes, st.integers(min_value=0, max_value=1 << 30))
def test_document_size(size: int, cap: int) -> None:
    if size <= cap:
        check_document_size(size, cap)
        return
    with pytest.raises(DocumentTooLarge) as info:
        check_document_size(size, cap)
    assert info.value.details["limit"] == "document"
    assert str(size) in info.value.message and str(cap) in info.value.message


def test_defaults_match_the_spec() -> None:
    assert DEFAULT_MAX_DOCUMENT_SIZE == 2 * MiB
    assert DEFAULT_TEAM_AGGREGATE_QUOTA == DEFAULT_INSTANCE_QUOTA == 1 * GiB
    assert {v: default_quota_for(v) for v in Visibility} == {
        Visibility.PRIVATE: 64 * MiB,
        Visibility.BOT: 256 * MiB,
        Visibility.PROJECT: 256 * MiB,
        Visibility.CROSS_PROJECT: 512 * MiB,
        Visibility.USER: 128 * MiB,
        Visibility.ORG: 1 * GiB,
        Visibility.GLOBAL: 0,
    }
    assert Limits() == Config.from_env({}).limits()
    check_document_size(2 * MiB)
    with pytest.raises(DocumentTooLarge):
        check_document_size(2 * MiB + 1)


env_values = st.dictionaries(
    st.sampled_from(
        [f"KEEPSTONE_MEMORY_QUOTA_{v.value.upper()}" for v in Visibility]
        + ["KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL", "KEEPSTONE_MEMORY_MAX_DOC"]
    ),
    st.integers(min_value=0, max_value=1 << 45),
)


@given(env_values)
def test_config_limits(values: dict[str, int]) -> None:
    environ = {k: str(v) for k, v in values.items()}
    environ["KEEPSTONE_UNRELATED"] = "x"
    limits = Config.from_env(environ).limits()
    for vis in Visibility:
        key = f"KEEPSTONE_MEMORY_QUOTA_{vis.value.upper()}"
        assert limits.subcap(vis) == values.get(key, DEFAULT_SUBCAPS[vis])
    assert limits.team_quota == values.get("KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL", 1 * GiB)
    assert limits.max_document == values.get("KEEPSTONE_MEMORY_MAX_DOC", 2 * MiB)
    assert limits.instance_quota == DEFAULT_INSTANCE_QUOTA


@given(st.integers(min_value=0, max_value=1 << 40))
def test_config_limits_tolerate_whitespace(value: int) -> None:
    config = Config.from_env({"KEEPSTONE_MEMORY_MAX_DOC": f" {value}\n"})
    assert config.limits().max_document == value


@pytest.mark.parametrize("raw", ["-1", "1.5", "10MB", "", "0x10", "abc"])
@pytest.mark.parametrize(
    "name",
    [
        "KEEPSTONE_MEMORY_QUOTA_PROJECT",
        "KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL",
        "KEEPSTONE_MEMORY_MAX_DOC",
    ],
)
def test_config_limits_name_the_bad_variable(name: str, raw: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        Config.from_env({name: raw})
    assert name in info.value.message


@given(st.sampled_from(list(Visibility)), st.integers(min_value=0, max_value=1 << 40))
def test_with_subcap_changes_one_visibility(vis: Visibility, quota: int) -> None:
    base = Limits(max_document=7, team_quota=11, instance_quota=13)
    limits = base.with_subcap(vis, quota)
    assert limits.subcap(vis) == quota
    assert all(limits.subcap(v) == base.subcap(v) for v in Visibility if v is not vis)
    assert (limits.max_document, limits.team_quota, limits.instance_quota) == (7, 11, 13)
