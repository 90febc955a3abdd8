"""What is particular to the filesystem store (the shared contract is in tests/conformance/)."""

from __future__ import annotations

import json
import os
import unicodedata
from datetime import UTC
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepstone.config import Config
from keepstone.errors import (
    Conflict,
    DocumentTooLarge,
    InvalidDocument,
    InvalidRequest,
    NotFound,
    PlatformAuthorityRequired,
    PreconditionFailed,
    QuotaExceeded,
    SecretDetected,
    UnsupportedVisibility,
)
from keepstone.paths import DECEPTIVE_CHARACTERS
from keepstone.quota import Limits
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import PlatformGrant, content_etag
from keepstone.store.fs import (
    LOCK_FILE,
    STATE_FILE,
    FilesystemStore,
    encode_doc_path,
    encode_segment,
    space_components,
)
from tests.processes import child_context

BOT = SpaceRef.build("bot", "default", tenant="local", project="repo-0123456789ab", bot="b1")


def make(tmp_path: Path, **limits: int) -> FilesystemStore:
    return FilesystemStore(tmp_path / "spaces", Limits(**limits))


def test_layout_is_a_plain_readable_tree(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(BOT, "topics/deploy.md", "# Deploy\n")
    on_disk = tmp_path / "spaces/bot/local/repo-0123456789ab/b1/default/topics/deploy.md"
    assert on_disk.read_text() == "# Deploy\n"
    user = SpaceRef.build("user", "notes", tenant="local", user="ann")
    store.write(user, "MEMORY.md", "u")
    assert (tmp_path / "spaces/user/local/ann/notes/MEMORY.md").read_text() == "u"
    store.write(SpaceRef.build("global", "catalog"), "a.md", "g", grant=PlatformGrant("test"))
    assert (tmp_path / "spaces/global/_/catalog/a.md").read_text() == "g"
    assert sorted(p.name for p in (tmp_path / "spaces").iterdir()) == [
        ".keepstone-history.sqlite",  # the history (fs_history), with SQLite's WAL files
        ".keepstone-history.sqlite-shm",
        ".keepstone-history.sqlite-wal",
        ".keepstone-reserve",  # room kept for deletes on a full disk (store/reserve.py)
        ".keepstone-usage.json",
        ".keepstone.lock",
        "bot",
        "global",
        "user",
    ]


def test_document_metadata(tmp_path: Path) -> None:
    store = make(tmp_path)
    result = store.write(BOT, "MEMORY.md", "héllo")
    doc = store.read(BOT, "MEMORY.md")
    assert doc.etag == result.etag == content_etag("héllo".encode())
    assert doc.size_bytes == 6
    assert doc.updated_at.tzinfo is UTC
    on_disk = tmp_path / "spaces" / Path(*space_components(BOT)) / "MEMORY.md"
    assert abs(doc.updated_at.timestamp() - on_disk.stat().st_mtime) < 1e-3


def test_empty_tenant_and_underscore_tenant_are_distinct(tmp_path: Path) -> None:
    store = make(tmp_path)
    empty = SpaceRef(Visibility.ORG, "n", tenant="")
    under = SpaceRef(Visibility.ORG, "n", tenant="_")
    store.write(empty, "a.md", "empty tenant")
    store.write(under, "a.md", "underscore tenant")
    assert store.read(empty, "a.md").content == "empty tenant"
    assert store.read(under, "a.md").content == "underscore tenant"
    assert space_components(empty) != space_components(under)


segment = (
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\\:"),
        min_size=1,
        max_size=128,
    )
    .map(lambda s: unicodedata.normalize("NFC", s))
    .filter(lambda s: s not in (".", ".."))
)


@settings(max_examples=200, deadline=None)
@given(segment, segment)
def test_distinct_segments_never_share_a_name(a: str, b: str) -> None:
    for kind in ("qual", "dir", "file"):
        if a != b:
            assert encode_segment(a, kind) != encode_segment(b, kind)
        assert all(len(c.encode()) <= 255 for c in encode_segment(a, kind))


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        # Deceptive characters are refused in paths (tests/unit/test_deceptive_characters.py).
        segment.filter(lambda s: DECEPTIVE_CHARACTERS.isdisjoint(s)).map(lambda s: s + ".md"),
        min_size=1,
        max_size=3,
        unique=True,
    )
)
def test_long_and_odd_names_round_trip(
    tmp_path_factory: pytest.TempPathFactory, names: list[str]
) -> None:
    store = make(tmp_path_factory.mktemp("odd"))
    paths = [f"d/{n}" for n in names]
    for p in paths:
        store.write(BOT, p, p)
    assert [d.path for d in store.list(BOT)] == sorted(paths)
    assert all(store.read(BOT, p).content == p for p in paths)


def test_a_document_and_a_directory_of_the_same_name_coexist(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(BOT, "a.md", "file")
    store.write(BOT, "a.md/b.md", "inside")
    assert [d.path for d in store.list(BOT)] == ["a.md", "a.md/b.md"]
    assert [d.path for d in store.list(BOT, "a.md")] == ["a.md/b.md"]
    assert encode_doc_path("a.md/b.md")[0] != "a.md"


def test_private_is_refused_on_every_operation(tmp_path: Path) -> None:
    store = make(tmp_path)
    ref = SpaceRef.build("private", "scratch", tenant="local")
    calls = [
        lambda: store.read(ref, "a.md"),
        lambda: store.write(ref, "a.md", "x"),
        lambda: store.delete(ref, "a.md"),
        lambda: store.list(ref),
        lambda: store.usage(ref),
        lambda: store.iter_documents(ref),
    ]
    for call in calls:
        with pytest.raises(UnsupportedVisibility):
            call()
    assert not (tmp_path / "spaces" / "private").exists()


def test_refs_and_paths_are_validated_inside_the_store(tmp_path: Path) -> None:
    store = make(tmp_path)
    with pytest.raises(Exception) as exc:  # a bad ref cannot even be made
        store.write(SpaceRef(Visibility.BOT, "n", tenant="t", project="p", bot="../x"), "a.md", "x")
    assert getattr(exc.value, "code", "") == "invalid_space_ref"
    with pytest.raises(Exception) as exc:
        store.read(BOT, "../a.md")
    assert getattr(exc.value, "code", "") == "invalid_path"
    assert not (tmp_path / "spaces" / "bot").exists()


def test_global_mutations_need_platform_authority(tmp_path: Path) -> None:
    store = make(tmp_path)
    ref = SpaceRef.build("global", "catalog")
    with pytest.raises(PlatformAuthorityRequired):
        store.write(ref, "a.md", "x")
    store.write(ref, "a.md", "x", grant=PlatformGrant("test"))
    with pytest.raises(PlatformAuthorityRequired):
        store.delete(ref, "a.md")
    assert store.read(ref, "a.md").content == "x"


def test_bad_content_is_refused(tmp_path: Path) -> None:
    store = make(tmp_path)
    with pytest.raises(InvalidDocument):
        store.write(BOT, "a.md", b"bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidDocument):
        store.write(BOT, "a.md", "lone \ud800 surrogate")
    with pytest.raises(SecretDetected):
        store.write(BOT, "a.md", "key AKIAQ3EGRT6YHNP2LXVB here")
    assert store.list(BOT) == []


def test_preconditions_and_not_found(tmp_path: Path) -> None:
    store = make(tmp_path)
    with pytest.raises(PreconditionFailed):
        store.write(BOT, "a.md", "x", if_match="0" * 32)
    first = store.write(BOT, "a.md", "one")
    assert first.created
    with pytest.raises(PreconditionFailed):
        store.write(BOT, "a.md", "two", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        store.write(BOT, "a.md", "two", if_match="stale")
    second = store.write(BOT, "a.md", "two", if_match=first.etag)
    assert not second.created
    with pytest.raises(PreconditionFailed):
        store.delete(BOT, "a.md", if_match=first.etag)
    store.delete(BOT, "a.md", if_match=second.etag)
    with pytest.raises(NotFound):
        store.read(BOT, "a.md")
    with pytest.raises(NotFound):
        store.delete(BOT, "a.md")


def test_tree_aggregate_sub_cap_and_document_cap(tmp_path: Path) -> None:
    store = make(tmp_path, team_quota=100, max_document=60)
    other = SpaceRef.build("org", "o", tenant="local")
    store.write(BOT, "a.md", "x" * 60)
    with pytest.raises(DocumentTooLarge):
        store.write(BOT, "b.md", "x" * 61)
    with pytest.raises(QuotaExceeded) as exc:
        store.write(other, "a.md", "x" * 41)
    assert exc.value.details == {
        "limit": "tree",
        "used_bytes": 60,
        "quota_bytes": 100,
        "needed_bytes": 41,
    }
    store.write(other, "a.md", "x" * 40)
    store.write(BOT, "a.md", "x" * 10)  # shrinking credits the tree
    usage = store.usage(other)
    assert (usage.used_bytes, usage.team_used_bytes, usage.team_quota_bytes) == (40, 50, 100)
    capped = FilesystemStore(tmp_path / "spaces", Limits().with_subcap(Visibility.ORG, 45))
    with pytest.raises(QuotaExceeded) as exc:
        capped.write(other, "b.md", "x" * 6)
    assert exc.value.details["limit"] == "space"


def test_zero_limits_refuse_growth_but_not_shrink(tmp_path: Path) -> None:
    make(tmp_path).write(BOT, "a.md", "x" * 10)
    zero = make(tmp_path, team_quota=0, max_document=0)
    with pytest.raises(QuotaExceeded):
        make(tmp_path, team_quota=0).write(BOT, "b.md", "y")
    with pytest.raises(DocumentTooLarge):
        zero.write(BOT, "b.md", "y")
    zero.write(BOT, "a.md", "")  # empty document, shrinking the tree
    zero.delete(BOT, "a.md")
    assert zero.usage(BOT).team_used_bytes == 0


def test_limits_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The store takes its limits from the one reader of the environment, the config.
    monkeypatch.setenv("KEEPSTONE_MEMORY_QUOTA_BOT", "5")
    monkeypatch.setenv("KEEPSTONE_MEMORY_MAX_DOC", "1000")
    store = FilesystemStore(tmp_path, Config.from_env().limits())
    assert store.usage(BOT).quota_bytes == 5
    with pytest.raises(QuotaExceeded):
        store.write(BOT, "a.md", "x" * 6)
    monkeypatch.setenv("KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL", "lots")
    with pytest.raises(InvalidRequest, match="KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL"):
        FilesystemStore(tmp_path, Config.from_env().limits())


def test_counters_heal_from_a_missing_corrupt_or_dirty_state(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(BOT, "a.md", "x" * 7)
    store.write(BOT, "d/b.md", "y" * 5)
    state = tmp_path / "spaces" / STATE_FILE
    assert json.loads(state.read_text())["spaces"] == {BOT.id: 12}
    state.unlink()
    assert store.usage(BOT).used_bytes == 12
    state.write_text("{not json")
    assert store.usage(BOT).team_used_bytes == 12
    body = json.loads(state.read_text())
    state.write_text(json.dumps({**body, "tree": 999, "dirty": True}))
    assert store.usage(BOT).team_used_bytes == 12
    # A file added by hand counts after recount().
    (tmp_path / "spaces" / Path(*space_components(BOT)) / "hand.md").write_text("abc")
    assert store.recount() == 15
    assert store.usage(BOT).used_bytes == 15


def test_temp_foreign_and_linked_files_are_never_listed(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(BOT, "a.md", "real")
    space = tmp_path / "spaces" / Path(*space_components(BOT))
    (space / ".keepstone-tmp-0123.tmp").write_text("half a write")
    (space / "notes.txt").write_text("not markdown")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("outside the tree")
    (space / "link.md").symlink_to(outside / "secret.md")
    (space / "linkdir").symlink_to(outside)
    assert [d.path for d in store.list(BOT)] == ["a.md"]
    assert [d.path for d in store.iter_documents(BOT)] == ["a.md"]
    assert store.recount() == 4


def test_symlinks_are_never_followed(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(BOT, "a.md", "x")
    space = tmp_path / "spaces" / Path(*space_components(BOT))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "b.md").write_text("outside")
    (space / "d").symlink_to(outside)
    (space / "f.md").symlink_to(outside / "b.md")
    with pytest.raises(Conflict, match="symbolic link"):
        store.read(BOT, "d/b.md")
    with pytest.raises(Conflict, match="symbolic link"):
        store.write(BOT, "d/c.md", "x")
    with pytest.raises(Conflict, match="symbolic link"):
        store.read(BOT, "f.md")
    with pytest.raises(Conflict):
        store.write(BOT, "f.md", "x")
    assert not (outside / "c.md").exists()
    assert (outside / "b.md").read_text() == "outside"
    assert store.list(BOT, "d") == []


def test_delete_tidies_empty_directories(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.write(BOT, "a/b/c.md", "x")
    store.write(BOT, "keep.md", "y")
    store.delete(BOT, "a/b/c.md")
    space = tmp_path / "spaces" / Path(*space_components(BOT))
    assert sorted(p.name for p in space.iterdir()) == ["keep.md"]


def test_a_failed_write_leaves_the_old_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make(tmp_path)
    store.write(BOT, "a.md", "old")
    real_replace = os.replace

    def failing_replace(src: str, dst: str, **kwargs: int) -> None:
        if dst == "a.md":  # the document's rename fails; the state file's succeed
            raise OSError(5, "Input/output error")
        real_replace(src, dst, **kwargs)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(Exception) as exc:
        store.write(BOT, "a.md", "new content")
    monkeypatch.undo()
    assert getattr(exc.value, "code", "") == "store_unavailable"
    assert store.read(BOT, "a.md").content == "old"
    assert store.usage(BOT).used_bytes == 3
    space = tmp_path / "spaces" / Path(*space_components(BOT))
    assert [p.name for p in space.iterdir()] == ["a.md"]


def _writer(root: str, worker: int) -> None:
    store = FilesystemStore(root, Limits(team_quota=3000))
    ref = SpaceRef.build("org", "shared", tenant="local")
    for i in range(40):
        try:
            store.write(ref, f"w{worker}/d{i % 7}.md", "x" * (37 * (i % 5) + worker))
        except QuotaExceeded:
            pass
        if i % 9 == 0:
            try:
                store.delete(ref, f"w{worker}/d{(i + 3) % 7}.md")
            except NotFound:
                pass


def test_writers_in_several_processes_keep_exact_counters(tmp_path: Path) -> None:
    root = str(tmp_path / "spaces")
    ctx = child_context()
    procs = [ctx.Process(target=_writer, args=(root, w)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = FilesystemStore(root, Limits(team_quota=3000))
    ref = SpaceRef.build("org", "shared", tenant="local")
    stored = sum(d.size_bytes for d in store.list(ref))
    usage = store.usage(ref)
    assert usage.used_bytes == usage.team_used_bytes == stored <= 3000
    assert store.recount() == stored
    assert (Path(root) / LOCK_FILE).exists()
