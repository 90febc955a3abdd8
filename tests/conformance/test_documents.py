"""SPEC §2-§3 through the store: refs, paths, documents, authority, isolation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from keepstone.errors import (
    InvalidDocument,
    InvalidPath,
    InvalidSpaceRef,
    NotFound,
    PlatformAuthorityRequired,
    PreconditionFailed,
    SecretDetected,
    UnsupportedVisibility,
)
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import MemoryStore, PlatformGrant, content_etag
from tests.conformance.helpers import OTHER_TEAM, TEAM, project_ref, ref_for

# Refs built without SpaceRef.build (which drops qualifiers a visibility does not take).
BAD_REFS: list[Callable[[], SpaceRef]] = [
    lambda: SpaceRef(Visibility.PROJECT, "a/b", tenant=TEAM, project="p"),
    lambda: SpaceRef(Visibility.PROJECT, "..", tenant=TEAM, project="p"),
    lambda: SpaceRef(Visibility.PROJECT, "n", tenant=TEAM, project="x:y"),
    lambda: SpaceRef(Visibility.PROJECT, "n", tenant=TEAM, project="a\\b"),
    lambda: SpaceRef(Visibility.PROJECT, "n", tenant=TEAM, project=""),
    lambda: SpaceRef(Visibility.BOT, "n", tenant=TEAM, project="p"),
    lambda: SpaceRef(Visibility.PROJECT, "", tenant=TEAM, project="p"),
    lambda: SpaceRef(Visibility.PROJECT, "n\x00", tenant=TEAM, project="p"),
    lambda: SpaceRef(Visibility.ORG, "n" * 129, tenant=TEAM),
    lambda: SpaceRef(Visibility.ORG, "n", tenant="t/../u"),
    lambda: SpaceRef(Visibility.GLOBAL, "n", tenant=TEAM),
    lambda: SpaceRef("team", "n", tenant=TEAM),  # type: ignore[arg-type]
]

OPERATIONS: dict[str, Callable[[MemoryStore, SpaceRef], Any]] = {
    "read": lambda s, r: s.read(r, "a.md"),
    "write": lambda s, r: s.write(r, "a.md", "x"),
    "delete": lambda s, r: s.delete(r, "a.md"),
    "list": lambda s, r: s.list(r),
    "usage": lambda s, r: s.usage(r),
    "iter_documents": lambda s, r: list(s.iter_documents(r)),
}


@pytest.mark.parametrize("make", BAD_REFS)
def test_no_store_can_be_handed_an_invalid_ref(make: Callable[[], SpaceRef]) -> None:
    # A SpaceRef is valid by construction: an invalid one is refused before any store
    # (of any adapter) could be called with it, so this needs no store.
    with pytest.raises(InvalidSpaceRef):
        make()


@pytest.mark.requires("team_aggregate")
def test_multi_tenant_store_refuses_a_team_ref_without_tenant(store: MemoryStore) -> None:
    ref = SpaceRef(Visibility.ORG, "n")
    for op in OPERATIONS.values():
        with pytest.raises(InvalidSpaceRef, match="tenant"):
            op(store, ref)


def test_private_follows_the_capability(store: MemoryStore) -> None:
    ref = ref_for(Visibility.PRIVATE)
    for name, op in OPERATIONS.items():
        if name == "usage":
            continue
        if "private" in store.capabilities:
            store.write(ref, "a.md", "private note")
            op(store, ref)
            continue
        with pytest.raises(UnsupportedVisibility):
            op(store, ref)
            pytest.fail(f"{name} served a private space")


@pytest.mark.requires("private", "tenant_addressing")
def test_private_space_is_a_team_space(store: MemoryStore) -> None:
    ref = ref_for(Visibility.PRIVATE)
    store.write(ref, "a.md", "mine")
    assert store.read(ref, "a.md").content == "mine"
    assert store.list(ref_for(Visibility.PRIVATE, tenant=OTHER_TEAM)) == []


@pytest.mark.parametrize(
    ("path", "canonical"),
    [
        ("./MEMORY.md", "MEMORY.md"),
        ("topics//deploy.md", "topics/deploy.md"),
        ("topics/./deploy.md", "topics/deploy.md"),
        ("e\u0301t\u00e9.md", "\u00e9t\u00e9.md"),
    ],
)
def test_non_canonical_paths_name_the_canonical_form(
    store: MemoryStore, path: str, canonical: str
) -> None:
    ref = project_ref()
    for op in (
        lambda: store.write(ref, path, "x"),
        lambda: store.read(ref, path),
        lambda: store.delete(ref, path),
    ):
        with pytest.raises(InvalidPath) as info:
            op()
        assert repr(canonical) in info.value.message
        assert info.value.details["canonical"] == canonical
    assert store.list(ref) == []


@pytest.mark.parametrize(
    "path",
    [
        "",
        "../x.md",
        "a/../x.md",
        "/abs.md",
        "C:/x.md",
        "a\\b.md",
        "a.txt",
        "a\x00.md",
        ".md",
        "x/" * 16 + "a.md",
        "a" * 510 + ".md",
    ],
)
def test_invalid_paths_are_refused(store: MemoryStore, path: str) -> None:
    ref = project_ref()
    with pytest.raises(InvalidPath):
        store.write(ref, path, "x")
    with pytest.raises(InvalidPath):
        store.read(ref, path)
    assert store.usage(ref).used_bytes == 0


def test_list_refuses_a_non_canonical_dir(store: MemoryStore) -> None:
    with pytest.raises(InvalidPath, match="'topics'"):
        store.list(project_ref(), "topics/")
    with pytest.raises(InvalidPath):
        store.list(project_ref(), "../x")


def test_write_read_list_delete(store: MemoryStore) -> None:
    ref = project_ref()
    first = store.write(ref, "MEMORY.md", "# Notes\n")
    assert first.created and first.size_bytes == 8 and first.path == "MEMORY.md"
    again = store.write(ref, "MEMORY.md", "# Notes\nmore ü\n")
    assert not again.created and again.size_bytes == len("# Notes\nmore ü\n".encode())
    assert again.etag != first.etag
    doc = store.read(ref, "MEMORY.md")
    assert doc.content == "# Notes\nmore ü\n"
    assert doc.etag == again.etag == content_etag(doc.content.encode())
    assert doc.size_bytes == again.size_bytes
    assert doc.updated_at.tzinfo is not None
    store.delete(ref, "MEMORY.md")
    with pytest.raises(NotFound):
        store.read(ref, "MEMORY.md")
    with pytest.raises(NotFound):
        store.delete(ref, "MEMORY.md")
    assert store.list(ref) == []
    assert not store.exists(ref, "MEMORY.md")


def test_etag_follows_content(store: MemoryStore) -> None:
    ref = project_ref()
    a = store.write(ref, "a.md", "same").etag
    b = store.write(ref, "b.md", "same").etag
    c = store.write(ref, "a.md", "other").etag
    assert a == b != c
    assert store.write(ref, "a.md", "same").etag == a


def test_list_sorted_with_dir_prefix(store: MemoryStore) -> None:
    ref = project_ref()
    paths = [
        "z.md",
        "a.md",
        "topics/b.md",
        "topics/a.md",
        "topics-x.md",
        "topics/deep/c.md",
        "B.md",
        "\u00e9.md",
    ]
    for p in paths:
        store.write(ref, p, p)
    assert [d.path for d in store.list(ref)] == sorted(paths)
    assert [d.path for d in store.list(ref, "topics")] == [
        "topics/a.md",
        "topics/b.md",
        "topics/deep/c.md",
    ]
    assert [d.path for d in store.list(ref, "topics/deep")] == ["topics/deep/c.md"]
    assert store.list(ref, "nothing") == []
    assert [d.path for d in store.iter_documents(ref, "topics")] == [
        "topics/a.md",
        "topics/b.md",
        "topics/deep/c.md",
    ]
    infos = {d.path: d for d in store.list(ref)}
    assert infos["a.md"].size_bytes == 4 and infos["a.md"].etag == content_etag(b"a.md")


def test_if_match_and_if_none_match(store: MemoryStore) -> None:
    ref = project_ref()
    with pytest.raises(PreconditionFailed):
        store.write(ref, "a.md", "x", if_match="0" * 32)
    created = store.write(ref, "a.md", "v1", if_none_match=True)
    assert created.created
    with pytest.raises(PreconditionFailed):
        store.write(ref, "a.md", "v2", if_none_match=True)
    updated = store.write(ref, "a.md", "v2", if_match=created.etag)
    with pytest.raises(PreconditionFailed):
        store.write(ref, "a.md", "v3", if_match=created.etag)
    with pytest.raises(PreconditionFailed):
        store.delete(ref, "a.md", if_match=created.etag)
    assert store.read(ref, "a.md").content == "v2"
    assert store.usage(ref).used_bytes == 2
    store.delete(ref, "a.md", if_match=updated.etag)
    assert store.list(ref) == []


@pytest.mark.requires("platform_grants")
def test_global_mutations_need_platform_authority(store: MemoryStore) -> None:
    ref = ref_for(Visibility.GLOBAL)
    with pytest.raises(PlatformAuthorityRequired):
        store.write(ref, "a.md", "x")
    assert store.list(ref) == []
    store.write(ref, "a.md", "catalogue", grant=PlatformGrant("admin-token"))
    with pytest.raises(PlatformAuthorityRequired):
        store.delete(ref, "a.md")
    with pytest.raises(PlatformAuthorityRequired):
        store.write(ref, "a.md", "defaced")
    assert store.read(ref, "a.md").content == "catalogue"
    assert [d.path for d in store.list(ref)] == ["a.md"]
    store.delete(ref, "a.md", grant=PlatformGrant("admin-token"))
    assert store.list(ref) == []


def test_global_mutations_with_platform_authority(store: MemoryStore) -> None:
    # What a caller with platform authority may do (on a server's client, the server
    # decides that authority from the credential; here the local principal has it).
    ref, grant = ref_for(Visibility.GLOBAL), PlatformGrant("admin-token")
    assert store.write(ref, "a.md", "catalogue", grant=grant).created
    assert store.write(ref, "a.md", "catalogue v2", grant=grant).created is False
    assert store.read(ref, "a.md").content == "catalogue v2"
    assert [d.path for d in store.list(ref)] == ["a.md"]
    assert store.usage(ref).used_bytes == len("catalogue v2")
    store.delete(ref, "a.md", grant=grant)
    assert store.list(ref) == []
    assert store.usage(ref).used_bytes == 0


def test_team_spaces_need_no_platform_authority(store: MemoryStore) -> None:
    for vis in Visibility:
        if vis is Visibility.GLOBAL or (
            vis is Visibility.PRIVATE and "private" not in store.capabilities
        ):
            continue
        store.write(ref_for(vis), "a.md", vis.value)
        store.delete(ref_for(vis), "a.md")


SECRETS = [
    "key AKIAABCDEFGHIJKLMNOP here",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----\n",
]


@pytest.mark.parametrize("body", SECRETS)
def test_secret_shaped_bodies_are_refused(store: MemoryStore, body: str) -> None:
    ref = project_ref()
    store.write(ref, "a.md", "clean")
    with pytest.raises(SecretDetected) as info:
        store.write(ref, "a.md", "line one\n" + body)
    assert "line 2" in info.value.message
    assert "AKIAABCDEFGHIJKLMNOP" not in info.value.message
    assert store.read(ref, "a.md").content == "clean"
    assert store.usage(ref).used_bytes == 5


def test_prose_hashes_and_uuids_are_not_secrets(store: MemoryStore) -> None:
    body = (
        "Deployed commit 3f786850e387550fdab836ed7e6dc881de23001b.\n"
        "Run id 123e4567-e89b-12d3-a456-426614174000, sha256 "
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855.\n"
    )
    store.write(project_ref(), "a.md", body)
    assert store.read(project_ref(), "a.md").content == body


@pytest.mark.requires("tenant_addressing")
def test_tenants_never_see_each_other(store: MemoryStore) -> None:
    for vis in Visibility:
        if vis is Visibility.GLOBAL or (
            vis is Visibility.PRIVATE and "private" not in store.capabilities
        ):
            continue
        mine, theirs = ref_for(vis, TEAM), ref_for(vis, OTHER_TEAM)
        store.write(mine, "same.md", "team a")
        store.write(theirs, "same.md", "team b, longer")
        assert store.read(mine, "same.md").content == "team a"
        assert store.read(theirs, "same.md").content == "team b, longer"
        assert store.usage(mine).used_bytes == 6
        assert store.usage(theirs).used_bytes == 14
        store.delete(theirs, "same.md")
        assert store.read(mine, "same.md").content == "team a"
        with pytest.raises(NotFound):
            store.read(theirs, "same.md")
        assert [d.path for d in store.list(mine)] == ["same.md"]
        assert store.list(theirs) == []


def test_qualifiers_separate_spaces(store: MemoryStore) -> None:
    a = SpaceRef.build("bot", "n", tenant=TEAM, project="p", bot="b1")
    b = SpaceRef.build("bot", "n", tenant=TEAM, project="p", bot="b2")
    c = SpaceRef.build("project", "n", tenant=TEAM, project="p", bot="ignored")
    d = SpaceRef.build("project", "n", tenant=TEAM, project="p")
    store.write(a, "x.md", "a")
    store.write(b, "x.md", "bb")
    store.write(c, "x.md", "ccc")
    assert store.read(a, "x.md").content == "a"
    assert store.read(b, "x.md").content == "bb"
    assert store.read(d, "x.md").content == "ccc"  # the ignored qualifier made no new space
    assert store.usage(a).used_bytes == 1 and store.usage(d).used_bytes == 3


def test_unknown_space_uses_nothing(store: MemoryStore) -> None:
    usage = store.usage(project_ref(name="never-written"))
    assert usage.used_bytes == 0
    assert usage.space_id == project_ref(name="never-written").id
    assert store.list(project_ref(name="never-written")) == []


@pytest.mark.parametrize("content", ["a\x00b", "lone \udce9 surrogate", b"bytes", None])
def test_content_that_is_not_utf8_text_is_refused(store: MemoryStore, content: Any) -> None:
    ref = project_ref()
    with pytest.raises(InvalidDocument):
        store.write(ref, "a.md", content)
    assert store.list(ref) == []
    assert store.usage(ref).used_bytes == 0


def test_awkward_but_valid_paths(store: MemoryStore) -> None:
    ref = project_ref()
    paths = [
        "a.md",
        "a.md/b.md",  # a document and a directory of the same name
        "A.md",  # case matters
        "x" * 509 + ".md",  # 512 bytes in one segment
        "/".join(["d"] * 15) + "/deep.md",  # 16 segments
        "\u00e9" * 254 + ".md",  # 511 bytes of two-byte characters
        "sp ace/tab\u00a0nbsp/~tilde/_/-.md",
        "dots.in.name.md",
        "..hidden.md",
    ]
    for n, p in enumerate(paths):
        store.write(ref, p, f"doc {n}")
    assert [d.path for d in store.list(ref)] == sorted(paths)
    for n, p in enumerate(paths):
        assert store.read(ref, p).content == f"doc {n}"
    assert [d.path for d in store.list(ref, "a.md")] == ["a.md/b.md"]
    store.delete(ref, "a.md")
    assert store.read(ref, "a.md/b.md").content == "doc 1"
    assert store.usage(ref).used_bytes == sum(len(f"doc {n}") for n in range(len(paths))) - 5


# Segments an adapter might escape or encode (file names, markers, case, length) must
# still give distinct spaces: one space per distinct ref, nothing shared.
AWKWARD_SEGMENTS = [
    "_",
    "~",
    "~q",
    "~.",
    "~d",
    "a~+",
    "x.md",
    "X.md",
    "-",
    "..a",
    "e\u0301",
    "\u00e9",
    "n" * 128,
    "n" * 127,
]


def lookalike_refs(*, tenants: bool) -> list[SpaceRef]:
    """Refs that differ by one awkward segment (the tenant's too, when ``tenants``)."""
    refs = [ref_for(Visibility.GLOBAL)]
    for seg in AWKWARD_SEGMENTS:
        if tenants:
            refs.append(ref_for(Visibility.ORG, tenant=seg))
        refs.append(ref_for(Visibility.ORG, name=seg))
        refs.append(SpaceRef.build("bot", "n", tenant=TEAM, project=seg, bot="b"))
        refs.append(SpaceRef.build("bot", "n", tenant=TEAM, project="p", bot=seg))
    return list(dict.fromkeys(refs))


def test_lookalike_segments_never_share_a_space(store: MemoryStore) -> None:
    check_distinct_spaces(store, lookalike_refs(tenants=False))


@pytest.mark.requires("tenant_addressing")
def test_lookalike_tenants_never_share_a_space(store: MemoryStore) -> None:
    check_distinct_spaces(store, lookalike_refs(tenants=True))


def check_distinct_spaces(store: MemoryStore, refs: list[SpaceRef]) -> None:
    for n, ref in enumerate(refs):
        store.write(ref, "same.md", f"space {n}", grant=PlatformGrant("test"))
    for n, ref in enumerate(refs):
        assert [d.path for d in store.list(ref)] == ["same.md"], ref
        assert store.read(ref, "same.md").content == f"space {n}", ref
        assert store.usage(ref).used_bytes == len(f"space {n}")
