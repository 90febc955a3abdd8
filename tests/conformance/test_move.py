"""Moving a document within its space: one atomic step on every adapter."""

from __future__ import annotations

import pytest

from keepstone.errors import (
    AlreadyExists,
    InvalidPath,
    InvalidRequest,
    NotFound,
    PlatformAuthorityRequired,
    PreconditionFailed,
    QuotaExceeded,
)
from keepstone.quota import Limits
from keepstone.spaces import Visibility
from keepstone.store.base import MemoryStore, PlatformGrant
from tests.conformance.conftest import StoreFactory
from tests.conformance.helpers import OTHER_TEAM, contents, project_ref, ref_for


def test_move_keeps_content_and_etag_and_frees_the_old_path(store: MemoryStore) -> None:
    ref = project_ref()
    written = store.write(ref, "notes/draft.md", "# Deploys\n\nstaging first\n")
    used = store.usage(ref).used_bytes

    moved = store.move(ref, "notes/draft.md", "topics/deploy.md")

    assert (moved.path, moved.size_bytes, moved.etag, moved.created) == (
        "topics/deploy.md",
        written.size_bytes,
        written.etag,
        True,
    )
    assert contents(store, ref) == {"topics/deploy.md": "# Deploys\n\nstaging first\n"}
    assert store.read(ref, "topics/deploy.md").etag == written.etag
    with pytest.raises(NotFound):
        store.read(ref, "notes/draft.md")
    assert store.usage(ref).used_bytes == used  # the same bytes, at another path


def test_move_refuses_an_occupied_path_unless_overwrite(store: MemoryStore) -> None:
    ref = project_ref()
    store.write(ref, "a.md", "new words")
    store.write(ref, "b.md", "an older, longer note")
    with pytest.raises(AlreadyExists) as refused:
        store.move(ref, "a.md", "b.md")
    assert refused.value.details["path"] == "b.md"
    assert contents(store, ref) == {"a.md": "new words", "b.md": "an older, longer note"}

    moved = store.move(ref, "a.md", "b.md", overwrite=True)

    assert moved.created is False
    assert contents(store, ref) == {"b.md": "new words"}
    assert store.usage(ref).used_bytes == len("new words")  # the replaced one is credited


def test_move_of_a_missing_document_is_not_found_and_changes_nothing(
    store: MemoryStore,
) -> None:
    ref = project_ref()
    store.write(ref, "b.md", "stays")
    with pytest.raises(NotFound):
        store.move(ref, "a.md", "c.md")
    with pytest.raises(NotFound):
        store.move(ref, "a.md", "b.md", overwrite=True)
    assert contents(store, ref) == {"b.md": "stays"}


def test_move_is_conditional_on_the_etag(store: MemoryStore) -> None:
    ref = project_ref()
    first = store.write(ref, "a.md", "v1")
    store.write(ref, "a.md", "v2")
    with pytest.raises(PreconditionFailed):
        store.move(ref, "a.md", "b.md", if_match=first.etag)
    assert contents(store, ref) == {"a.md": "v2"}
    current = store.read(ref, "a.md").etag
    assert store.move(ref, "a.md", "b.md", if_match=current).path == "b.md"


def test_move_checks_both_paths_and_refuses_a_move_onto_itself(store: MemoryStore) -> None:
    ref = project_ref()
    store.write(ref, "a.md", "x")
    with pytest.raises(InvalidPath):
        store.move(ref, "a.md", "../escape.md")
    with pytest.raises(InvalidPath):
        store.move(ref, "a.md", "notes/a.txt")
    with pytest.raises(InvalidPath):
        store.move(ref, "./a.md", "b.md")
    with pytest.raises(InvalidRequest, match="already at"):
        store.move(ref, "a.md", "a.md")
    assert contents(store, ref) == {"a.md": "x"}


def test_move_stays_in_its_own_space(store: MemoryStore) -> None:
    ref, other_name = project_ref(), project_ref(name="other")
    store.write(ref, "a.md", "mine")
    store.move(ref, "a.md", "b.md")
    assert store.list(other_name) == []
    with pytest.raises(NotFound):
        store.move(other_name, "b.md", "c.md")
    assert contents(store, ref) == {"b.md": "mine"}


@pytest.mark.requires("tenant_addressing")
def test_move_cannot_reach_another_teams_space(store: MemoryStore) -> None:
    ours, theirs = project_ref(), project_ref(tenant=OTHER_TEAM)
    store.write(theirs, "a.md", "theirs")
    with pytest.raises(NotFound):
        store.move(ours, "a.md", "b.md")
    assert contents(store, theirs) == {"a.md": "theirs"}


def test_move_at_a_full_quota_needs_no_room(store_factory: StoreFactory) -> None:
    # The bytes only change address: a space filled to its cap can still reorganise.
    store = store_factory(Limits().with_subcap(Visibility.PROJECT, 10))
    ref = project_ref()
    store.write(ref, "a.md", "0123456789")
    with pytest.raises(QuotaExceeded):
        store.write(ref, "b.md", "x")
    assert store.move(ref, "a.md", "deep/er/b.md").path == "deep/er/b.md"
    assert contents(store, ref) == {"deep/er/b.md": "0123456789"}
    assert store.usage(ref).used_bytes == 10


@pytest.mark.requires("platform_grants")
def test_a_global_move_needs_platform_authority(store: MemoryStore) -> None:
    ref = ref_for(Visibility.GLOBAL)
    store.write(ref, "a.md", "catalogue", grant=PlatformGrant("admin-token"))
    with pytest.raises(PlatformAuthorityRequired):
        store.move(ref, "a.md", "b.md")
    assert contents(store, ref) == {"a.md": "catalogue"}
    store.move(ref, "a.md", "b.md", grant=PlatformGrant("admin-token"))
    assert contents(store, ref) == {"b.md": "catalogue"}
