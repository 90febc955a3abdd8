"""SPEC §5 export/import through the store: round trip, strategies, hostile archives."""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Callable

import pytest

from keepstone.errors import (
    ImportTooLarge,
    InvalidArchive,
    InvalidRequest,
    PlatformAuthorityRequired,
    SecretDetected,
)
from keepstone.quota import Limits
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import ImportReport, ImportStrategy, MemoryStore, PlatformGrant
from tests.conformance.archives import (
    bomb_declared,
    bomb_trailing,
    regular,
    special,
    tar_bytes,
    tar_gz,
    tiny_members,
)
from tests.conformance.conftest import StoreFactory
from tests.conformance.helpers import TEAM, contents, project_ref, ref_for, snapshot

DOCS = {
    "MEMORY.md": "# Memory\n\nWhere we left off.\n",
    "topics/deploy.md": "Deploy with `make ship`.\r\nWindows line ending kept.\n",
    "topics/deep/er/still.md": "deep\n",
    "\u00e9t\u00e9/na\u00efve \u2014 notes.md": "unicode \U0001f600 content\n",
    "empty.md": "",
    "long/" + "n" * 200 + ".md": "a long path\n",
    "big.md": "line of text\n" * 20_000,
}


def export_bytes(store: MemoryStore, ref: SpaceRef) -> bytes:
    sink = io.BytesIO()
    store.export(ref, sink)
    return sink.getvalue()


def do_import(
    store: MemoryStore,
    ref: SpaceRef,
    data: bytes,
    strategy: str = "skip",
    *,
    grant: PlatformGrant | None = None,
) -> ImportReport:
    return store.import_archive(ref, io.BytesIO(data), ImportStrategy(strategy), grant=grant)


def test_export_members_are_plain_files(store: MemoryStore) -> None:
    ref = project_ref()
    for path, body in DOCS.items():
        store.write(ref, path, body)
    sink = io.BytesIO()
    assert store.export(ref, sink) == len(DOCS)
    infos = {d.path: d for d in store.list(ref)}
    with tarfile.open(fileobj=io.BytesIO(sink.getvalue()), mode="r:gz") as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == sorted(DOCS)
        for m in members:
            assert m.isreg() and m.mode == 0o644
            assert m.uname == "" and m.gname == "" and m.uid == 0 and m.gid == 0
            assert m.mtime == int(infos[m.name].updated_at.timestamp())
            extracted = tar.extractfile(m)
            assert extracted is not None
            assert extracted.read() == DOCS[m.name].encode("utf-8")


def test_round_trip_byte_for_byte(store_factory: StoreFactory) -> None:
    source = store_factory(Limits())
    ref = project_ref()
    for path, body in DOCS.items():
        source.write(ref, path, body)
    data = export_bytes(source, ref)

    target = store_factory(Limits())
    report = do_import(target, ref, data)
    assert sorted(report.written) == sorted(DOCS)
    assert report.skipped == [] and report.renamed == {} and report.rejected == []
    assert contents(target, ref) == DOCS
    assert target.usage(ref) == source.usage(ref)
    assert [(d.path, d.size_bytes, d.etag) for d in target.list(ref)] == [
        (d.path, d.size_bytes, d.etag) for d in source.list(ref)
    ]
    # And again into another space of the same store, then back out identically.
    other = ref_for(Visibility.BOT, name="copy")
    do_import(source, other, data)
    assert contents(source, other) == DOCS
    assert source.usage(other).used_bytes == source.usage(ref).used_bytes
    with tarfile.open(fileobj=io.BytesIO(export_bytes(source, other)), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == sorted(DOCS)


def test_empty_space_round_trips(store: MemoryStore) -> None:
    data = export_bytes(store, project_ref())
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        assert tar.getnames() == []
    assert do_import(store, project_ref(name="b"), data) == ImportReport()


def seeded(store: MemoryStore) -> SpaceRef:
    ref = project_ref()
    store.write(ref, "a.md", "old a")
    store.write(ref, "a-1.md", "taken")
    store.write(ref, "b.md", "same b")
    store.write(ref, "topics/x.md", "old x")
    return ref


INCOMING = tar_gz(
    [
        regular("a.md", "new a"),
        regular("b.md", "same b"),
        regular("c.md", "fresh c"),
        regular("./topics/x.md", "new x"),
    ]
)


def test_strategy_skip(store: MemoryStore) -> None:
    ref = seeded(store)
    report = do_import(store, ref, INCOMING, "skip")
    assert report.written == ["c.md"]
    assert report.skipped == ["a.md", "b.md", "topics/x.md"]
    assert report.renamed == {} and report.rejected == []
    assert contents(store, ref) == {
        "a.md": "old a",
        "a-1.md": "taken",
        "b.md": "same b",
        "c.md": "fresh c",
        "topics/x.md": "old x",
    }


def test_strategy_overwrite(store: MemoryStore) -> None:
    ref = seeded(store)
    report = do_import(store, ref, INCOMING, "overwrite")
    assert report.written == ["a.md", "b.md", "c.md", "topics/x.md"]
    assert report.skipped == [] and report.renamed == {} and report.rejected == []
    assert contents(store, ref) == {
        "a.md": "new a",
        "a-1.md": "taken",
        "b.md": "same b",
        "c.md": "fresh c",
        "topics/x.md": "new x",
    }
    assert store.usage(ref).used_bytes == sum(len(v) for v in contents(store, ref).values())


def test_strategy_rename(store: MemoryStore) -> None:
    ref = seeded(store)
    report = do_import(store, ref, INCOMING, "rename")
    assert report.written == ["c.md"]
    assert report.renamed == {"a.md": "a-2.md", "b.md": "b-1.md", "topics/x.md": "topics/x-1.md"}
    assert report.skipped == [] and report.rejected == []
    assert contents(store, ref) == {
        "a.md": "old a",
        "a-1.md": "taken",
        "a-2.md": "new a",
        "b.md": "same b",
        "b-1.md": "same b",
        "c.md": "fresh c",
        "topics/x.md": "old x",
        "topics/x-1.md": "new x",
    }


def test_unknown_strategy_is_refused(store: MemoryStore) -> None:
    with pytest.raises(InvalidRequest, match="skip, overwrite, rename"):
        store.import_archive(project_ref(), io.BytesIO(INCOMING), "merge")  # type: ignore[arg-type]


def test_each_member_goes_through_write(store_factory: StoreFactory) -> None:
    store = store_factory(Limits(max_document=1000).with_subcap(Visibility.PROJECT, 3300))
    ref = project_ref()
    store.write(ref, "pre-1.md", "p" * 700)
    store.write(ref, "pre-2.md", "p" * 700)
    data = tar_gz(
        [
            regular("first.md", "a" * 900),
            regular("too-big.md", "b" * 1001),
            regular("second.md", "c" * 900),
            regular("over-quota.md", "d" * 300),
            regular("secret.md", "token AKIAABCDEFGHIJKLMNOP\n"),
            regular("small.md", "e" * 100),
            regular("nul.md", "a\x00b"),
        ]
    )
    report = do_import(store, ref, data)
    assert report.written == ["first.md", "second.md", "small.md"], report.rejected
    reasons = {r.path: r.reason for r in report.rejected}
    assert set(reasons) == {"too-big.md", "over-quota.md", "secret.md", "nul.md"}
    assert "1001" in reasons["too-big.md"] and "1000" in reasons["too-big.md"]
    assert "quota" in reasons["over-quota.md"] and "3200" in reasons["over-quota.md"]
    assert "aws_access_key_id" in reasons["secret.md"]
    assert "AKIAABCDEFGHIJKLMNOP" not in reasons["secret.md"]
    assert store.usage(ref).used_bytes == 3300


@pytest.mark.requires("platform_grants")
def test_global_import_needs_authority(store: MemoryStore) -> None:
    ref = ref_for(Visibility.GLOBAL)
    with pytest.raises(PlatformAuthorityRequired):
        do_import(store, ref, INCOMING)
    assert store.list(ref) == []
    report = do_import(store, ref, INCOMING, grant=PlatformGrant("cli"))
    assert len(report.written) == 4


def test_global_import_with_platform_authority(store: MemoryStore) -> None:
    ref = ref_for(Visibility.GLOBAL)
    report = do_import(store, ref, INCOMING, grant=PlatformGrant("cli"))
    assert report.written == ["a.md", "b.md", "c.md", "topics/x.md"]
    assert contents(store, ref)["topics/x.md"] == "new x"


# --- The hostile corpus --------------------------------------------------------------------

HOSTILE_LIMITS = Limits(team_quota=1 << 20).with_subcap(Visibility.PROJECT, 64 << 10)

#: name → (archive, the member names expected in ``rejected``, a word of each reason)
REJECTED_CASES: dict[str, tuple[Callable[[], bytes], list[str], str]] = {
    "absolute": (lambda: tar_gz([regular("/etc/evil.md", "x")]), ["/etc/evil.md"], "absolute"),
    "dotdot": (
        lambda: tar_gz([regular("../evil.md", "x"), regular("a/../../evil.md", "y")]),
        ["../evil.md", "a/../../evil.md"],
        "'..'",
    ),
    "symlink": (
        lambda: tar_gz([special("link.md", tarfile.SYMTYPE, "/etc/passwd")]),
        ["link.md"],
        "symbolic link",
    ),
    "hardlink": (
        lambda: tar_gz([special("hard.md", tarfile.LNKTYPE, "existing.md")]),
        ["hard.md"],
        "hard link",
    ),
    "fifo": (lambda: tar_gz([special("pipe.md", tarfile.FIFOTYPE)]), ["pipe.md"], "FIFO"),
    "char device": (
        lambda: tar_gz([special("null.md", tarfile.CHRTYPE)]),
        ["null.md"],
        "character device",
    ),
    "block device": (
        lambda: tar_gz([special("sda.md", tarfile.BLKTYPE)]),
        ["sda.md"],
        "block device",
    ),
    "directory": (lambda: tar_gz([special("dir.md", tarfile.DIRTYPE)]), ["dir.md"], "directory"),
    "4 KB names": (
        lambda: tar_gz([regular("a" * 4096 + ".md", "x"), regular("d/" * 2048 + "x.md", "y")]),
        ["a" * 4096 + ".md", "d/" * 2048 + "x.md"],
        "limit",
    ),
    "non-utf8 name (gnu)": (
        lambda: tar_gz([regular("caf\udce9.md", "x")], fmt=tarfile.GNU_FORMAT),
        ["caf\ufffd.md"],
        "UTF-8",
    ),
    "non-utf8 name (pax)": (
        lambda: tar_gz([regular("caf\udce9-" + "x" * 120 + ".md", "x")]),
        ["caf\ufffd-" + "x" * 120 + ".md"],
        "UTF-8",
    ),
    "non-md": (lambda: tar_gz([regular("notes.txt", "x")]), ["notes.txt"], ".md"),
    "non-canonical": (
        lambda: tar_gz([regular("topics//x.md", "x")]),
        ["topics//x.md"],
        "'topics/x.md'",
    ),
    "invalid utf8 content": (
        lambda: tar_gz([regular("latin1.md", b"caf\xe9\n")]),
        ["latin1.md"],
        "UTF-8",
    ),
    "secret": (
        lambda: tar_gz([regular("keys.md", "AKIAABCDEFGHIJKLMNOP")]),
        ["keys.md"],
        "aws_access_key_id",
    ),
    "10,000 tiny non-md members": (
        lambda: tiny_members(10_000, ".txt", 1),
        [f"n/{i:05d}.txt" for i in range(10_000)],
        ".md",
    ),
}

REFUSED_CASES: dict[str, tuple[Callable[[], bytes], type[Exception], str]] = {
    "not gzip": (lambda: b"PK\x03\x04 this is a zip, not a gzip", InvalidArchive, "gzip"),
    "empty upload": (lambda: b"", InvalidArchive, "tar"),
    "plain tar": (lambda: tar_bytes([regular("a.md", "x")]), InvalidArchive, "gzip"),
    "gzip of text": (lambda: gzip.compress(b"hello " * 200), InvalidArchive, "tar"),
    "truncated gzip": (
        lambda: tar_gz([regular(f"{i}.md", f"doc {i}\n" * 50) for i in range(20)])[:-300],
        InvalidArchive,
        "truncated",
    ),
    "truncated tar": (
        lambda: gzip.compress(
            tar_bytes([regular(f"{i}.md", f"doc {i}\n" * 50) for i in range(20)])[:5000]
        ),
        InvalidArchive,
        "truncated",
    ),
    "tar without end marker": (
        lambda: gzip.compress(tar_bytes([regular("a.md", "x" * 512)])[:1024]),
        InvalidArchive,
        "truncated",
    ),
    "corrupt header": (
        lambda: gzip.compress(
            tar_bytes([regular("a.md", "x" * 512)])[:1024] + b"\x01" * 512 + b"\0" * 1024
        ),
        InvalidArchive,
        "header",
    ),
    "bomb: a 1 GiB member": (bomb_declared, ImportTooLarge, "could hold"),
    "bomb: 1 GiB after the end": (bomb_trailing, ImportTooLarge, "could hold"),
    "10,000 tiny members past the quota": (
        lambda: tiny_members(10_000, ".md", 10),
        ImportTooLarge,
        "could hold",
    ),
}


def hostile_store(store_factory: StoreFactory) -> tuple[MemoryStore, SpaceRef]:
    store = store_factory(HOSTILE_LIMITS)
    ref = project_ref()
    store.write(ref, "existing.md", "already here\n")
    store.write(ref, "topics/x.md", "x\n")
    return store, ref


@pytest.mark.parametrize("case", sorted(REJECTED_CASES))
def test_hostile_members_are_rejected(store_factory: StoreFactory, case: str) -> None:
    store, ref = hostile_store(store_factory)
    build, names, word = REJECTED_CASES[case]
    before = snapshot(store, ref)
    report = do_import(store, ref, build(), "overwrite")
    assert report.written == [] and report.skipped == [] and report.renamed == {}
    assert [r.path for r in report.rejected] == names
    assert all(word in r.reason for r in report.rejected), report.rejected[:3]
    assert snapshot(store, ref) == before
    assert contents(store, ref)["existing.md"] == "already here\n"


@pytest.mark.parametrize("case", sorted(REFUSED_CASES))
def test_broken_archives_are_refused_whole(store_factory: StoreFactory, case: str) -> None:
    store, ref = hostile_store(store_factory)
    build, error, word = REFUSED_CASES[case]
    before = snapshot(store, ref)
    with pytest.raises(error) as info:
        do_import(store, ref, build(), "overwrite")
    assert word in str(info.value)
    assert snapshot(store, ref) == before


@pytest.mark.parametrize("field", ["name", "project"])
def test_an_import_into_a_space_named_with_a_credential_is_refused_whole(
    store_factory: StoreFactory, field: str
) -> None:
    # One refusal for the request, as a write into the space gets, not one per member.
    store = store_factory(Limits())
    names = {"name": "notes", "project": "proj-1", field: "AKIAQ7X2KDZLMNPZT4RV"}
    ref = SpaceRef.build(Visibility.PROJECT, names["name"], tenant=TEAM, project=names["project"])
    with pytest.raises(SecretDetected) as info:
        do_import(store, ref, tar_gz([regular("a.md", "a"), regular("b.md", "b")]))
    assert info.value.details.get("field") == field
    assert "AKIAQ7X2KDZLMNPZT4RV" not in info.value.message


@pytest.mark.parametrize(
    "tail",
    [
        b"garbage after the archive",  # not a gzip member
        gzip.compress(b"x", mtime=0)[:-4],  # a second member, truncated
    ],
    # Named, not shown: pytest-xdist's workers must collect the same test names.
    ids=["garbage after the archive", "a truncated second member"],
)
def test_good_members_before_a_bad_end_are_not_written(
    store_factory: StoreFactory, tail: bytes
) -> None:
    store, ref = hostile_store(store_factory)
    before = snapshot(store, ref)
    data = tar_gz([regular("fine.md", "fine"), regular("existing.md", "replaced")]) + tail
    with pytest.raises(InvalidArchive):
        do_import(store, ref, data, "overwrite")
    assert snapshot(store, ref) == before


def test_duplicates_first_wins(store_factory: StoreFactory) -> None:
    store, ref = hostile_store(store_factory)
    data = tar_gz(
        [
            regular("dup.md", "first"),
            regular("./dup.md", "second"),
            regular("dup.md", "third"),
            regular("other.md", "other"),
        ]
    )
    report = do_import(store, ref, data, "overwrite")
    assert report.written == ["dup.md", "other.md"]
    assert [(r.path, "duplicate" in r.reason) for r in report.rejected] == [
        ("dup.md", True),
        ("dup.md", True),
    ]
    assert store.read(ref, "dup.md").content == "first"


def test_leading_dot_slash_is_dropped_once(store: MemoryStore) -> None:
    data = tar_gz([regular("./a.md", "a"), regular("././b.md", "b"), special("./", b"5")])
    report = do_import(store, project_ref(), data)
    assert report.written == ["a.md"]
    reasons = {r.path: r.reason for r in report.rejected}
    assert "'./b.md'" in reasons["././b.md"] or "'b.md'" in reasons["././b.md"]
    assert [p for p, r in reasons.items() if "directory" in r] in (["."], ["./"])


def test_an_exact_fit_import_is_accepted(store_factory: StoreFactory) -> None:
    # The bound is what the space could hold: an archive that fills it exactly lands.
    store = store_factory(Limits().with_subcap(Visibility.PROJECT, 10_000))
    ref = project_ref()
    data = tar_gz([regular(f"{i}.md", "z" * 1000) for i in range(10)])
    report = do_import(store, ref, data)
    assert len(report.written) == 10
    assert store.usage(ref).used_bytes == 10_000
    with pytest.raises(ImportTooLarge):
        do_import(store, ref, tar_gz([regular(f"{i}.md", "z" * 1000) for i in range(11)]))


def test_an_import_reports_its_total_and_progress_meeting_it(store: MemoryStore) -> None:
    # Every adapter, a client of a server too: the total (the member count) comes before
    # the report, and the progress counts every member, a rejected one included.
    archive = tar_gz([regular("a.md", "a"), regular("b.md", "b"), regular("../evil.md", "x")])
    events: list[tuple[str, int]] = []
    report = store.import_archive(
        project_ref(),
        io.BytesIO(archive),
        progress=lambda n: events.append(("tick", n)),
        total=lambda n: events.append(("total", n)),
    )
    assert len(report.written) == 2 and len(report.rejected) == 1
    assert events[0] == ("total", 3)
    assert sum(n for kind, n in events if kind == "tick") == 3


@pytest.mark.parametrize("level", [0, 1, 9])
def test_every_gzip_level_exports_the_same_archive_content(
    store_factory: StoreFactory, level: int
) -> None:
    store = store_factory()
    ref = project_ref()
    for path, content in DOCS.items():
        store.write(ref, path, content)
    sink = io.BytesIO()
    assert store.export(ref, sink, gzip_level=level) == len(DOCS)
    with tarfile.open(fileobj=io.BytesIO(sink.getvalue()), mode="r:gz") as tar:
        names = tar.getnames()
        got = {m.name: _read(tar, m) for m in tar.getmembers()}
    assert names == sorted(DOCS) and got == DOCS


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    extracted = tar.extractfile(member)
    assert extracted is not None
    return extracted.read().decode()
