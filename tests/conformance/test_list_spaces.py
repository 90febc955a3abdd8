"""``list_spaces``: the candidate spaces of a search over every space a caller may read."""

from __future__ import annotations

import pytest

from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import MemoryStore, PlatformGrant
from tests.conformance.helpers import OTHER_TEAM, TEAM, USER, ref_for


@pytest.mark.requires("tenant_addressing")
def test_list_spaces_names_the_teams_spaces_and_global_only(store: MemoryStore) -> None:
    mine = [
        ref_for(vis)
        for vis in Visibility
        if vis is not Visibility.GLOBAL
        and (vis is not Visibility.PRIVATE or "private" in store.capabilities)
    ]
    other_user = SpaceRef.build(Visibility.USER, "notes", tenant=TEAM, user=f"{USER}-2")
    for ref in [*mine, other_user]:
        store.write(ref, "a.md", f"in {ref.id}")
    theirs = [ref_for(Visibility.ORG, tenant=OTHER_TEAM), ref_for(Visibility.USER, OTHER_TEAM)]
    for ref in theirs:
        store.write(ref, "b.md", "another team's")
    glob = ref_for(Visibility.GLOBAL)
    store.write(glob, "c.md", "for everyone", grant=PlatformGrant("test-operator"))
    store.write(ref_for(Visibility.ORG, name="never-written-again"), "empty.md", "")

    listed = store.list_spaces(TEAM)
    expected = sorted([*mine, other_user, glob], key=lambda r: r.id)
    # A store may list a space that holds only empty documents; it never lists another team's.
    assert [r for r in listed if r.name != "never-written-again"] == expected
    assert all(r.tenant in (TEAM, "") for r in listed)
    assert {r.id for r in store.list_spaces(OTHER_TEAM)} == {r.id for r in [*theirs, glob]}
    assert store.list_spaces("team-nobody") == [glob]
