"""One suite for the Memory API, run local and server, sync and async (conftest.py).

Each test is written once against :class:`keepstone.Memory`'s methods; the fixture runs it on
the local store, against a real ``keepstone serve``, and through :class:`keepstone.AsyncMemory` on
both.
"""

from __future__ import annotations

import io
import re
import tarfile
from datetime import UTC, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from keepstone.documents import (
    Document,
    DocumentInfo,
    ImportReport,
    Usage,
    VersionInfo,
    WriteResult,
    version_as_of,
)
from keepstone.errors import (
    AlreadyExists,
    InvalidEdit,
    InvalidPath,
    InvalidRequest,
    InvalidSpaceRef,
    NotFound,
    PreconditionFailed,
    QuotaExceeded,
    SecretDetected,
)
from tests.sdk.conftest import HISTORY_KINDS, MemoryFactory

NOTES = {
    "MEMORY.md": "# Memory\n\n- deploy with blue-green on Fridays\n",
    "topics/deploy.md": "# Deploy\n\nRoll back with `make rollback`.\n",
    "topics/naïve café.md": "Ünïcödé ✓ and CRLF\r\nlines\r\n",
}


def _fill(memory: Any) -> None:
    for path, content in NOTES.items():
        memory.write(path, content)


def test_write_creates_then_replaces_and_read_returns_it(memory: Any) -> None:
    first = memory.write("MEMORY.md", "# v1\n")
    assert isinstance(first, WriteResult)
    assert (first.path, first.size_bytes, first.created) == ("MEMORY.md", 5, True)
    second = memory.write("MEMORY.md", "# v2 ✓\n")
    assert second.created is False and second.etag != first.etag
    doc = memory.read("MEMORY.md")
    assert isinstance(doc, Document)
    assert (doc.content, doc.size_bytes, doc.etag) == ("# v2 ✓\n", 9, second.etag)


def test_list_is_sorted_and_takes_a_directory(memory: Any) -> None:
    assert memory.list() == []
    _fill(memory)
    listed = memory.list()
    assert all(isinstance(d, DocumentInfo) for d in listed)
    assert [d.path for d in listed] == sorted(NOTES)
    assert [d.path for d in memory.list("topics")] == ["topics/deploy.md", "topics/naïve café.md"]
    sizes = {d.path: d.size_bytes for d in listed}
    assert sizes == {p: len(c.encode()) for p, c in NOTES.items()}


def test_list_pages_with_limit_and_stays_a_list_without(memory: Any) -> None:
    _fill(memory)
    whole = memory.list()
    assert isinstance(whole, list) and whole.next_cursor is None
    pages, cursor = [], None
    while True:
        page = memory.list(limit=2, cursor=cursor)
        assert len(page) <= 2
        pages.append(page)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert [d for p in pages for d in p] == whole
    newest = memory.list(limit=1, sort="updated")
    last_change = max(d.updated_at for d in whole)
    assert [d.path for d in newest] == [min(d.path for d in whole if d.updated_at == last_change)]
    with pytest.raises(InvalidRequest):
        memory.list(limit=2, cursor="not-a-cursor")
    with pytest.raises(InvalidRequest):
        memory.list(limit=2, sort="size")


def test_delete_removes_and_a_missing_document_is_not_found(memory: Any) -> None:
    memory.write("a.md", "a")
    memory.delete("a.md")
    assert memory.list() == []
    with pytest.raises(NotFound) as info:
        memory.read("a.md")
    assert info.value.code == "not_found" and "a.md" in info.value.message
    with pytest.raises(NotFound):
        memory.delete("a.md")


def test_if_match_guards_write_and_delete(memory: Any) -> None:
    etag = memory.write("a.md", "one").etag
    with pytest.raises(PreconditionFailed) as info:
        memory.write("a.md", "two", if_match="0" * 32)
    assert info.value.code == "precondition_failed"
    assert memory.write("a.md", "two", if_match=etag).created is False
    with pytest.raises(PreconditionFailed):
        memory.delete("a.md", if_match=etag)  # the etag of "one", no more
    assert memory.read("a.md").content == "two"
    memory.delete("a.md", if_match=memory.read("a.md").etag)
    assert memory.list() == []


def test_create_only_never_replaces_a_document(memory: Any) -> None:
    assert memory.write("a.md", "one", create_only=True).created is True
    with pytest.raises(PreconditionFailed, match="already exists"):
        memory.write("a.md", "two", create_only=True)
    assert memory.read("a.md").content == "one"


def test_edit_replaces_one_exact_occurrence(memory: Any) -> None:
    memory.write("MEMORY.md", "# Memory\n\n- deploy on Fridays\n- test on Mondays\n")
    result = memory.edit("MEMORY.md", "deploy on Fridays", "deploy on Tuesdays")
    assert isinstance(result, WriteResult) and result.created is False
    content = memory.read("MEMORY.md").content
    assert content == "# Memory\n\n- deploy on Tuesdays\n- test on Mondays\n"
    assert result.etag == memory.read("MEMORY.md").etag
    with pytest.raises(InvalidEdit) as info:
        memory.edit("MEMORY.md", "on ", "at ")  # twice: which one?
    assert info.value.code == "invalid_edit" and "2 times" in info.value.message
    with pytest.raises(InvalidEdit, match="does not occur"):
        memory.edit("MEMORY.md", "on Sundays", "never")
    assert memory.read("MEMORY.md").content == content
    with pytest.raises(NotFound):
        memory.edit("nope.md", "a", "b")


def test_edit_inserts_lines_and_refuses_a_line_out_of_range(memory: Any) -> None:
    memory.write("list.md", "one\nthree\n")
    memory.edit("list.md", insert_line=1, text="two")
    memory.edit("list.md", insert_line=0, text="# List")
    memory.edit("list.md", insert_line=4, text="four\n")
    assert memory.read("list.md").content == "# List\none\ntwo\nthree\nfour\n"
    with pytest.raises(InvalidEdit, match="line 9 is outside"):
        memory.edit("list.md", insert_line=9, text="nine")
    with pytest.raises(InvalidRequest, match="not a mix"):
        memory.edit("list.md", "one", "1", insert_line=0, text="x")
    with pytest.raises(InvalidRequest, match="edit takes old and new"):
        memory.edit("list.md", "one")
    assert memory.read("list.md").content == "# List\none\ntwo\nthree\nfour\n"


def test_edit_and_move_honour_if_match_and_the_secret_scan(memory: Any) -> None:
    etag = memory.write("a.md", "alpha\n").etag
    with pytest.raises(PreconditionFailed):
        memory.edit("a.md", "alpha", "beta", if_match="0" * 32)
    with pytest.raises(SecretDetected):
        memory.edit("a.md", "alpha", "AKIAABCDEFGHIJKLMNOP")
    with pytest.raises(PreconditionFailed):
        memory.move("a.md", "b.md", if_match="0" * 32)
    assert memory.edit("a.md", "alpha", "beta", if_match=etag).path == "a.md"
    assert memory.read("a.md").content == "beta\n"


def test_move_renames_and_refuses_to_overwrite_unless_told(memory: Any) -> None:
    memory.write("draft.md", "draft\n")
    memory.write("final.md", "final\n")
    moved = memory.move("draft.md", "notes/draft.md")
    assert isinstance(moved, WriteResult)
    assert (moved.path, moved.size_bytes) == ("notes/draft.md", 6)
    assert [d.path for d in memory.list()] == ["final.md", "notes/draft.md"]
    with pytest.raises(NotFound):
        memory.read("draft.md")
    with pytest.raises(AlreadyExists) as info:
        memory.move("notes/draft.md", "final.md")
    assert info.value.code == "already_exists"
    assert memory.read("final.md").content == "final\n"
    memory.move("notes/draft.md", "final.md", overwrite=True)
    assert [d.path for d in memory.list()] == ["final.md"]
    assert memory.read("final.md").content == "draft\n"
    assert memory.usage().used_bytes == 6
    with pytest.raises(InvalidPath):
        memory.move("final.md", "../out.md")
    with pytest.raises(NotFound):
        memory.move("gone.md", "here.md")


def test_usage_counts_the_space(memory: Any) -> None:
    _fill(memory)
    usage = memory.usage()
    assert isinstance(usage, Usage)
    assert usage.space_id.startswith("v1:project:") and usage.space_id.endswith(":web:::default")
    assert usage.used_bytes == sum(len(c.encode()) for c in NOTES.values())
    assert usage.team_used_bytes >= usage.used_bytes


def test_over_the_team_quota_is_refused_and_nothing_is_lost(memory_factory: MemoryFactory) -> None:
    memory = memory_factory(project="web", team_quota=1000)
    memory.write("a.md", "a" * 600)
    with pytest.raises(QuotaExceeded) as info:
        memory.write("b.md", "b" * 600)
    assert info.value.code == "quota_exceeded"
    assert [d.path for d in memory.list()] == ["a.md"]
    assert memory.usage().used_bytes == 600


@pytest.mark.parametrize("path", ["../escape.md", "/etc/passwd", "a//b.md", "evil\u202egpj.md"])
def test_a_bad_path_is_invalid_path(memory: Any, path: str) -> None:
    with pytest.raises(InvalidPath) as info:
        memory.write(path, "x")
    assert info.value.code == "invalid_path"
    assert memory.list() == []


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda m: m.read(5), "path"),
        (lambda m: m.write("a.md", None), "content"),
        (lambda m: m.write(b"a.md", "x"), "path"),
        (lambda m: m.move("a.md", 3), "to"),
        (lambda m: m.delete(None), "path"),
        (lambda m: m.versions(["a.md"]), "path"),
    ],
    ids=["read", "write-content", "write-path", "move", "delete", "versions"],
)
def test_an_argument_of_another_type_is_invalid_request_naming_it(
    memory: Any, call: Any, field: str
) -> None:
    # As the agent tools answer the same call, locally and through a server alike.
    memory.write("a.md", "a")
    with pytest.raises(InvalidRequest) as info:
        call(memory)
    assert (info.value.code, info.value.details.get("field")) == ("invalid_request", field)
    assert [d.path for d in memory.list()] == ["a.md"]


def test_a_secret_is_refused_without_echoing_it(memory: Any) -> None:
    with pytest.raises(SecretDetected) as info:
        memory.write("keys.md", "aws key AKIAABCDEFGHIJKLMNOP here\n")
    assert info.value.code == "secret_detected"
    assert "AKIAABCDEFGHIJKLMNOP" not in info.value.message
    assert memory.list() == []


def test_search_finds_a_written_note(memory: Any) -> None:
    _fill(memory)
    hits = memory.search("rollback")
    assert [h.path for h in hits] == ["topics/deploy.md"]
    assert hits.pending == 0  # keyword-only search (these memories embed nothing)
    assert "rollback" in hits[0].snippet and "keyword" in hits[0].matched
    assert memory.search("blue-green fridays", path_prefix="topics/") == []
    assert [h.path for h in memory.search("blue-green fridays", limit=1)] == ["MEMORY.md"]
    with pytest.raises(InvalidRequest):
        memory.search("deploy", limit=0)


def test_export_then_import_round_trips_every_byte(memory_factory: MemoryFactory) -> None:
    source = memory_factory(project="web")
    _fill(source)
    archive = source.export()
    assert isinstance(archive, bytes)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        assert sorted(m.name for m in tar.getmembers() if m.isfile()) == sorted(NOTES)
    target = memory_factory(project="web", name="copy")
    report = target.import_(archive)
    assert isinstance(report, ImportReport)
    assert sorted(report.written) == sorted(NOTES) and not report.rejected
    for path, content in NOTES.items():
        assert target.read(path).content.encode() == content.encode()
        assert target.read(path).etag == source.read(path).etag
    again = target.export()
    with tarfile.open(fileobj=io.BytesIO(again), mode="r:gz") as tar:
        files = {m.name: tar.extractfile(m) for m in tar.getmembers() if m.isfile()}
        assert {n: f.read() for n, f in files.items() if f} == {
            p: c.encode() for p, c in NOTES.items()
        }


def test_export_to_a_path_or_a_file_and_import_from_either(
    memory_factory: MemoryFactory, tmp_path: Path
) -> None:
    source = memory_factory(project="web")
    _fill(source)
    out = tmp_path / "mem.tar.gz"
    assert source.export(out) == len(NOTES)
    assert source.export(str(tmp_path / "again.tar.gz")) == len(NOTES)
    sink = io.BytesIO()
    assert source.export(sink) == len(NOTES)
    assert not list(tmp_path.glob(".*.part"))  # no temp file left beside the archive

    from_path = memory_factory(project="web", name="from-path")
    assert sorted(from_path.import_(out).written) == sorted(NOTES)
    from_file = memory_factory(project="web", name="from-file")
    sink.seek(0)
    assert sorted(from_file.import_(sink).written) == sorted(NOTES)
    with open(tmp_path / "again.tar.gz", "rb") as f:
        assert sorted(from_file.import_(f).skipped) == sorted(NOTES)


def test_import_strategies(memory: Any) -> None:
    memory.write("MEMORY.md", "old\n")
    archive = memory.export()
    memory.write("MEMORY.md", "new\n")
    assert memory.import_(archive).skipped == ["MEMORY.md"]
    assert memory.read("MEMORY.md").content == "new\n"
    renamed = memory.import_(archive, "rename").renamed
    assert list(renamed) == ["MEMORY.md"]
    assert memory.read(renamed["MEMORY.md"]).content == "old\n"
    assert memory.import_(archive, strategy="overwrite").written == ["MEMORY.md"]
    assert memory.read("MEMORY.md").content == "old\n"
    with pytest.raises(InvalidRequest) as info:
        memory.import_(archive, "merge")
    assert "skip, overwrite, rename" in info.value.message


def test_bad_export_and_import_arguments_are_one_clear_error(memory: Any, tmp_path: Path) -> None:
    memory.write("a.md", "a")
    with open(tmp_path / "text.tar.gz", "w") as text:
        with pytest.raises(InvalidRequest, match="binary mode"):
            memory.export(text)
    with pytest.raises(InvalidRequest, match="no-such-dir"):
        memory.export(tmp_path / "no-such-dir" / "mem.tar.gz")
    with pytest.raises(InvalidRequest, match="missing.tar.gz"):
        memory.import_(tmp_path / "missing.tar.gz")
    with pytest.raises(InvalidRequest, match="must be a path, bytes or a binary file"):
        memory.import_(42)


def test_the_space_is_named_by_bot_project_name_and_visibility(
    memory_factory: MemoryFactory,
) -> None:
    bot = memory_factory(bot="my-bot", project="web")
    assert (bot.space.visibility, bot.space.project, bot.space.bot) == ("bot", "web", "my-bot")
    project = memory_factory(project="web")
    assert (project.space.visibility, project.space.project) == ("project", "web")
    bot.write("MEMORY.md", "the bot's\n")
    project.write("MEMORY.md", "the project's\n")
    notes = memory_factory(project="web", name="notes")
    assert notes.list() == []
    assert bot.read("MEMORY.md").content == "the bot's\n"
    assert memory_factory(project="web").read("MEMORY.md").content == "the project's\n"
    org = memory_factory(visibility="org", name="handbook")
    assert (org.space.visibility, org.space.project) == ("org", "")


def test_a_space_argument_that_names_no_space_is_refused(memory_factory: MemoryFactory) -> None:
    with pytest.raises(InvalidSpaceRef, match="needs bot="):
        memory_factory(project="web", visibility="bot")
    with pytest.raises(InvalidSpaceRef, match="does not take bot"):
        memory_factory(bot="b", project="web", visibility="project")
    with pytest.raises(InvalidSpaceRef, match="unknown visibility"):
        memory_factory(project="web", visibility="team")
    with pytest.raises(InvalidSpaceRef, match="name"):
        memory_factory(project="web", name="a/b")
    with pytest.raises(InvalidSpaceRef, match="no such directory"):
        memory_factory(project="./no-such-folder")


def test_a_closed_memory_refuses_and_the_context_manager_closes(
    memory_factory: MemoryFactory,
) -> None:
    memory = memory_factory(project="web")
    with memory as same:
        same.write("a.md", "a")
    with pytest.raises(InvalidRequest, match="closed"):
        memory.read("a.md")
    memory.close()  # again: nothing happens
    assert memory_factory(project="web").read("a.md").content == "a"


# --- History (docs/history.md) ------------------------------------------------------------------
#
# Run on every kind and on sqlite (HISTORY_KINDS). The instants come from the versions
# themselves (no kind but sqlite lets a test drive the clock): what was current at a version's
# ``at`` is what the space must answer as of that instant.

history = pytest.mark.parametrize("memory_factory", HISTORY_KINDS, indirect=True)


@history
def test_versions_list_every_change_newest_first_and_read_one(
    memory_factory: MemoryFactory,
) -> None:
    memory = memory_factory(project="web")
    memory.write("MEMORY.md", "# v1\n")
    memory.write("MEMORY.md", "# v2 ✓\n")
    memory.delete("MEMORY.md")
    memory.write("MEMORY.md", "# v4\n")
    versions = memory.versions("MEMORY.md")
    assert all(isinstance(v, VersionInfo) for v in versions)
    assert [v.version for v in versions] == [4, 3, 2, 1]
    assert [v.deleted for v in versions] == [False, True, False, False]
    assert [v.size_bytes for v in versions] == [5, 0, 9, 5]
    assert versions[0].etag == memory.read("MEMORY.md").etag and versions[1].etag == ""
    assert all(v.actor for v in versions)
    assert [v.at for v in versions] == sorted((v.at for v in versions), reverse=True)
    old = memory.read("MEMORY.md", version=2)
    assert isinstance(old, Document) and old.content == "# v2 ✓\n"
    assert old.etag == versions[2].etag
    with pytest.raises(NotFound):
        memory.read("MEMORY.md", version=3)  # a deletion has no content
    with pytest.raises(NotFound):
        memory.read("MEMORY.md", version=9)
    with pytest.raises(NotFound):
        memory.versions("never.md")
    with pytest.raises(InvalidRequest, match="whole number"):
        memory.read("MEMORY.md", version=0)
    with pytest.raises(InvalidRequest, match="not both"):
        memory.read("MEMORY.md", version=1, as_of=versions[0].at)
    with pytest.raises(InvalidRequest, match="as_of must be a datetime"):
        memory.read("MEMORY.md", as_of="yesterday")


@history
def test_a_move_ends_one_history_and_starts_another(memory_factory: MemoryFactory) -> None:
    memory = memory_factory(project="web")
    memory.write("draft.md", "draft\n")
    memory.move("draft.md", "notes/final.md")
    assert [v.deleted for v in memory.versions("draft.md")] == [True, False]
    moved = memory.versions("notes/final.md")
    assert moved[0].deleted is False and moved[0].size_bytes == 6
    assert memory.read("notes/final.md", version=moved[0].version).content == "draft\n"


@history
def test_read_and_list_as_of_an_instant(memory_factory: MemoryFactory) -> None:
    memory = memory_factory(project="web")
    memory.write("MEMORY.md", "# v1\n")
    memory.write("topics/a.md", "a\n")
    memory.write("MEMORY.md", "# v2\n")
    memory.delete("topics/a.md")
    memory.write("topics/b.md", "b\n")
    history = {p: memory.versions(p) for p in ("MEMORY.md", "topics/a.md", "topics/b.md")}
    contents = {
        ("MEMORY.md", 1): "# v1\n",
        ("MEMORY.md", 2): "# v2\n",
        ("topics/a.md", 1): "a\n",
        ("topics/b.md", 1): "b\n",
    }
    instants = sorted({v.at for vs in history.values() for v in vs})
    first = min(instants)
    for at in [first - timedelta(seconds=1), *instants]:
        expected = {}
        for path, versions in history.items():
            current = version_as_of(versions, at)
            if current is not None:
                expected[path] = contents[path, current.version]
        listed = memory.list(as_of=at)
        assert all(isinstance(d, DocumentInfo) for d in listed)
        assert [d.path for d in listed] == sorted(expected), at
        assert {p: memory.read(p, as_of=at).content for p in expected} == expected
        for path in set(history) - set(expected):
            with pytest.raises(NotFound):
                memory.read(path, as_of=at)
        assert [d.path for d in memory.list("topics", as_of=at)] == sorted(
            p for p in expected if p.startswith("topics/")
        )
    # A naive instant is UTC; an offset names the same instant (topics/a.md was deleted
    # after MEMORY.md's second version).
    second = history["MEMORY.md"][0].at
    naive = second.astimezone(UTC).replace(tzinfo=None)
    assert memory.read("MEMORY.md", as_of=naive).content == "# v2\n"
    assert [d.path for d in memory.list(as_of=naive)] == ["MEMORY.md", "topics/a.md"]
    east = second.astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert memory.read("MEMORY.md", as_of=east).content == "# v2\n"
    assert [d.path for d in memory.list(as_of=east)] == ["MEMORY.md", "topics/a.md"]


@history
def test_export_as_of_round_trips_through_import(
    memory_factory: MemoryFactory, tmp_path: Path
) -> None:
    source = memory_factory(project="web")
    _fill(source)
    then = max(v.at for p in NOTES for v in source.versions(p))
    source.write("MEMORY.md", "# later\n")
    source.delete("topics/deploy.md")
    archive = source.export(as_of=then)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        files = {m.name: tar.extractfile(m) for m in tar.getmembers() if m.isfile()}
        assert {n: f.read() for n, f in files.items() if f} == {
            p: c.encode() for p, c in NOTES.items()
        }
    assert source.export(tmp_path / "then.tar.gz", as_of=then) == len(NOTES)
    target = memory_factory(project="web", name="then")
    assert sorted(target.import_(tmp_path / "then.tar.gz").written) == sorted(NOTES)
    for path, content in NOTES.items():
        assert target.read(path).content.encode() == content.encode()


@history
def test_diff_and_restore(memory_factory: MemoryFactory) -> None:
    memory = memory_factory(project="web")
    memory.write("MEMORY.md", "one\ntwo\n")
    memory.write("MEMORY.md", "one\n2\nthree\n")
    text = memory.diff("MEMORY.md", 1)
    assert "--- a/MEMORY.md (version 1)" in text and "+++ b/MEMORY.md (version 2)" in text
    assert "-two\n" in text and "+2\n" in text and "+three\n" in text
    assert memory.diff("MEMORY.md", 1, 1) == ""
    assert memory.diff("MEMORY.md", 2, 1).startswith("--- a/MEMORY.md (version 2)")
    with pytest.raises(NotFound):
        memory.diff("MEMORY.md", 7)
    with pytest.raises(PreconditionFailed):
        memory.restore("MEMORY.md", 1, if_match="0" * 32)
    restored = memory.restore("MEMORY.md", 1)
    assert isinstance(restored, WriteResult) and restored.created is False
    assert memory.read("MEMORY.md").content == "one\ntwo\n"
    assert [v.version for v in memory.versions("MEMORY.md")] == [3, 2, 1]
    with pytest.raises(NotFound):
        memory.restore("MEMORY.md", 9)
    memory.delete("MEMORY.md")
    assert memory.restore("MEMORY.md", 2).created is True  # a deleted note comes back
    assert memory.read("MEMORY.md").content == "one\n2\nthree\n"


# --- Every readable space (the REST spaces listing and scope=readable) ------------------------


def test_spaces_and_a_search_of_every_readable_space(memory_factory: MemoryFactory) -> None:
    web, api = memory_factory(project="web"), memory_factory(project="api")
    web.write("deploy.md", "# Deploy\nroll back with helm\n")
    api.write("runbook.md", "# Runbook\nroll back the schema first\n")
    listed = web.spaces()
    assert not listed.truncated
    by_project = {item.space.project: item for item in listed.spaces}
    assert {"web", "api"} <= set(by_project)
    assert by_project["web"].used_bytes == web.usage().used_bytes
    assert by_project["web"].space.name == "default"
    found = web.search("roll back", scope="readable")
    assert {(h.space.project, h.hit.path) for h in found} == {
        ("web", "deploy.md"),
        ("api", "runbook.md"),
    }
    assert found.pending == 0
    assert [h.path for h in web.search("roll back")] == ["deploy.md"]
    with pytest.raises(InvalidRequest, match="unknown scope 'all'") as refused:
        web.search("roll back", scope="all")
    assert refused.value.details.get("field") == "scope"  # as REST names it


def test_a_missing_document_reads_the_same_everywhere(memory: Any) -> None:
    # One wording, whichever store says it: locally the store's, over a server its answer.
    with pytest.raises(NotFound) as info:
        memory.read("nope.md")
    assert re.fullmatch(r"no document at 'nope\.md' in space \S+", info.value.message)


@history
def test_a_missing_history_reads_the_same_everywhere(memory_factory: MemoryFactory) -> None:
    # The server's refusal stands over a client, naming the space as the server does.
    memory = memory_factory(project="web")
    with pytest.raises(NotFound) as info:
        memory.versions("nope.md")
    assert re.fullmatch(
        r"'nope\.md' has no history in space v1:project:\w+:web:::default", info.value.message
    )
    memory.write("a.md", "# one\n")
    with pytest.raises(NotFound) as info:
        memory.read("a.md", version=7)
    assert info.value.message.startswith("'a.md' has no version 7 with content in space v1:")
    assert ":project::" not in info.value.message  # the space's team is named


@history
def test_recent_says_what_changed_since_a_moment(memory_factory: MemoryFactory) -> None:
    memory = memory_factory(project="web")
    memory.write("MEMORY.md", "one\n")
    first = memory.recent().changes[0]
    memory.write("MEMORY.md", "one\ntwo\n")
    memory.move("MEMORY.md", "notes.md")
    memory.restore("MEMORY.md", 1)  # the path the move left, back as it first was
    page = memory.recent(since=first.at)
    got = [(c.path, c.action, c.version, c.size_delta) for c in page.changes]
    assert got == [
        ("MEMORY.md", "restore", 4, 4),
        ("notes.md", "move", 1, 0),
        ("MEMORY.md", "move", 3, 0),
        ("MEMORY.md", "write", 2, 4),
        ("MEMORY.md", "write", 1, 4),
    ]
    assert all(c.space_id.endswith(":default") and c.actor.name for c in page.changes)
    assert "user:" not in " ".join(c.actor.name for c in page.changes)
    later = memory.recent(since=page.changes[0].at.isoformat(), limit=1)
    assert [c.action for c in later.changes] == ["restore"] and later.next_cursor is None
    two = memory.recent(limit=2)
    rest = memory.recent(limit=10, cursor=two.next_cursor)
    assert [c.version for c in two.changes + rest.changes] == [4, 1, 3, 2, 1]
    with pytest.raises(InvalidRequest):
        memory.recent(limit=0)
    with pytest.raises(InvalidRequest):
        memory.recent(actor_kind="robot")
