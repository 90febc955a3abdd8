"""What KeepstoneMemoryTool adds to the reference: the Markdown rule, directories as
prefixes of documents, the space's refusals as tool errors, changes that never overwrite
one made meanwhile. Every command goes through the SDK's own tool runner
(tests/integrations/recorded.py), on a local memory and on a real server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import ToolError
from anthropic.types.beta import BetaMemoryTool20250818ViewCommand

from keepstone.integrations.anthropic import AsyncKeepstoneMemoryTool, KeepstoneMemoryTool
from keepstone.sdk import AsyncMemory, Memory
from tests.integrations.conftest import (
    MemoryFactory,
    check_extra,
    local_and_server,
    refused_import,
)
from tests.integrations.recorded import Result, run, run_async


def _create(path: str, text: str = "x\n") -> dict[str, Any]:
    return {"command": "create", "path": path, "file_text": text}


def _rename(old: str, new: str) -> dict[str, Any]:
    return {"command": "rename", "old_path": old, "new_path": new}


@local_and_server
def test_a_file_named_without_md_is_refused_with_a_tool_error_that_says_so(
    memory_factory: MemoryFactory,
) -> None:
    memory = memory_factory(project="web")
    memory.write("notes.md", "# Notes\n")
    results = run(
        KeepstoneMemoryTool(memory),
        [
            _create("/memories/todo.txt"),
            _create("/memories/todo"),
            _rename("/memories/notes.md", "/memories/notes.txt"),
            {"command": "view", "path": "/memories/todo.txt"},
            {"command": "str_replace", "path": "/memories/a.json", "old_str": "a", "new_str": "b"},
            {"command": "delete", "path": "/memories/todo.txt"},
        ],
    )
    assert all(r.is_error for r in results)
    md_only = "this memory holds Markdown documents only: every file name ends in .md"
    assert results[0].text == (
        f"Cannot create /memories/todo.txt (invalid_path): {md_only}; "
        "name it e.g. /memories/todo.md"
    )
    assert results[1].text.endswith("name it e.g. /memories/todo.md")
    assert results[2].text == (
        f"Cannot rename /memories/notes.md to /memories/notes.txt (invalid_path): {md_only}; "
        "name it e.g. /memories/notes.md"
    )
    assert results[3].text == (
        "The path /memories/todo.txt does not exist. Please provide a valid path. "
        f"Note that {md_only}."
    )
    assert results[4].text.endswith(f"Note that {md_only}.")
    assert results[5].text == f"The path /memories/todo.txt does not exist. Note that {md_only}."
    assert [d.path for d in memory.list()] == ["notes.md"]


@local_and_server
def test_rename_and_delete_of_a_directory_move_and_delete_each_document_with_its_history(
    memory_factory: MemoryFactory,
) -> None:
    memory = memory_factory(project="web")
    for path in ("proj/a.md", "proj/sub/b.md", "projects.md", "other/c.md"):
        memory.write(path, f"# {path}\n")
    tool = KeepstoneMemoryTool(memory)
    results = run(
        tool,
        [
            _rename("/memories/proj", "/memories/other"),  # taken
            _rename("/memories/proj", "/memories/proj/inner"),
            _rename("/memories/proj", "/memories/archive/2026"),
        ],
    )
    assert results == [
        Result("The destination /memories/other already exists", True),
        Result("Cannot move the directory /memories/proj into itself (/memories/proj/inner)", True),
        Result("Successfully renamed /memories/proj to /memories/archive/2026", False),
    ]
    assert [d.path for d in memory.list()] == [
        "archive/2026/a.md",
        "archive/2026/sub/b.md",
        "other/c.md",
        "projects.md",  # a sibling whose name merely starts like the directory stays
    ]
    assert [v.deleted for v in memory.versions("proj/sub/b.md")] == [True, False]
    assert memory.read("archive/2026/sub/b.md").content == "# proj/sub/b.md\n"

    [deleted] = run(tool, [{"command": "delete", "path": "/memories/archive"}])
    assert deleted == Result("Successfully deleted /memories/archive", False)
    assert [d.path for d in memory.list()] == ["other/c.md", "projects.md"]
    assert [v.deleted for v in memory.versions("archive/2026/a.md")] == [True, False]


@local_and_server
def test_a_directory_exists_while_a_document_lies_under_it(memory_factory: MemoryFactory) -> None:
    memory = memory_factory(project="web")
    memory.write("a/b.md", "b\n")
    tool = KeepstoneMemoryTool(memory)
    results = run(
        tool,
        [
            {"command": "delete", "path": "/memories/a/b.md"},
            {"command": "view", "path": "/memories/a"},
            {"command": "view", "path": "/memories"},
        ],
    )
    assert results[0] == Result("Successfully deleted /memories/a/b.md", False)
    # A folder would linger empty; a space has no empty directories.
    assert results[1] == Result(
        "The path /memories/a does not exist. Please provide a valid path.", True
    )
    assert results[2].text.split("\n")[1:] == ["0B\t/memories"]


@local_and_server
def test_nothing_is_put_under_a_file(memory_factory: MemoryFactory) -> None:
    """A name is a file or a directory, never both: a path whose directory is a document is
    refused (the reference's filesystem fails with "Not a directory")."""
    memory = memory_factory(project="web")
    memory.write("f.md", "f\n")
    memory.write("d/a.md", "a\n")
    results = run(
        KeepstoneMemoryTool(memory),
        [
            _create("/memories/f.md/g.md"),
            _create("/memories/f.md/sub/g.md"),
            _rename("/memories/d/a.md", "/memories/f.md/a.md"),
            _rename("/memories/d", "/memories/f.md/d"),
            _rename("/memories/f.md", "/memories/f.md/g.md"),
        ],
    )
    file = "/memories/f.md is a file, not a directory"
    assert results == [
        Result(f"Cannot create /memories/f.md/g.md: {file}", True),
        Result(f"Cannot create /memories/f.md/sub/g.md: {file}", True),
        Result(f"Cannot rename /memories/d/a.md to /memories/f.md/a.md: {file}", True),
        Result(f"Cannot rename /memories/d to /memories/f.md/d: {file}", True),
        Result(f"Cannot rename /memories/f.md to /memories/f.md/g.md: {file}", True),
    ]
    assert [d.path for d in memory.list()] == ["d/a.md", "f.md"]


@local_and_server
def test_the_spaces_refusals_are_tool_errors_the_model_can_read(
    memory_factory: MemoryFactory,
) -> None:
    memory = memory_factory(project="web", team_quota=1000)
    memory.write("notes.md", "# Notes\n\n- one\n")
    results = run(
        KeepstoneMemoryTool(memory),
        [
            _create("/memories/big.md", "b" * 2000),
            _create("/memories/keys.md", "aws key AKIAABCDEFGHIJKLMNOP\n"),
            _create("/memories/evil\u202egpj.md"),
            _create("/memories/" + "/".join("d" * 20) + ".md"),
            {
                "command": "str_replace",
                "path": "/memories/notes.md",
                "old_str": "- one",
                "new_str": "- token ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
            },
            {
                "command": "insert",
                "path": "/memories/notes.md",
                "insert_line": 3,
                "insert_text": "c" * 2000,
            },
        ],
    )
    assert all(r.is_error for r in results), results
    codes = ["quota_exceeded", "secret_detected", "invalid_path", "invalid_path"]
    for result, code, path in zip(
        results, codes, ["big.md", "keys.md", "evil\\u202egpj.md", "d/"], strict=False
    ):
        assert result.text.startswith(f"Cannot create /memories/{path}"), result.text
        assert f"({code}): " in result.text, result.text
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in results[2].text
    assert "\u202e" not in results[2].text  # the refusal cannot display as another path
    assert "AKIAABCDEFGHIJKLMNOP" not in results[1].text
    assert results[4].text.startswith("Cannot str_replace /memories/notes.md (secret_detected): ")
    assert results[5].text.startswith("Cannot insert /memories/notes.md (quota_exceeded): ")
    assert [d.path for d in memory.list()] == ["notes.md"]
    assert memory.read("notes.md").content == "# Notes\n\n- one\n"


@local_and_server
def test_a_path_is_kept_in_one_unicode_spelling(memory_factory: MemoryFactory) -> None:
    memory = memory_factory(project="web")
    decomposed, composed = "/memories/cafe\u0301.md", "/memories/caf\u00e9.md"
    results = run(
        KeepstoneMemoryTool(memory),
        [_create(decomposed, "au lait\n"), {"command": "view", "path": composed}],
    )
    assert results[0] == Result(f"File created successfully at: {decomposed}", False)
    assert results[1].text.endswith("     1\tau lait\n     2\t")
    assert [d.path for d in memory.list()] == ["caf\u00e9.md"]


@local_and_server
def test_a_change_made_meanwhile_is_never_overwritten(
    memory_factory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer changes the document between the command's read and its write: the
    command is redone on the new text, so the other change survives."""
    memory = memory_factory(project="web")
    memory.write("notes.md", "- one\n- two\n")
    read = Memory.read
    meddled: list[str] = []

    def read_then_meddle(self: Memory, path: str, **kwargs: Any) -> Any:
        doc = read(self, path, **kwargs)
        if len(meddled) < 2:  # once for each of the two commands below
            meddled.append(path)
            memory.write(path, doc.content + f"- meanwhile {len(meddled)}\n")
        return doc

    monkeypatch.setattr(Memory, "read", read_then_meddle)
    results = run(
        KeepstoneMemoryTool(memory),
        [
            {
                "command": "str_replace",
                "path": "/memories/notes.md",
                "old_str": "one",
                "new_str": "1",
            },
            {
                "command": "insert",
                "path": "/memories/notes.md",
                "insert_line": 0,
                "insert_text": "top",
            },
        ],
    )
    assert not any(r.is_error for r in results), results
    monkeypatch.undo()
    assert memory.read("notes.md").content == "top\n- 1\n- two\n- meanwhile 1\n- meanwhile 2\n"


@local_and_server
def test_the_async_tool_runs_through_the_async_runner(memory_factory: MemoryFactory) -> None:
    memory = memory_factory(project="web")
    tool = AsyncKeepstoneMemoryTool(AsyncMemory(memory))
    results = asyncio.run(
        run_async(tool, [_create("/memories/a.md", "a\n"), _create("/memories/a.txt")])
    )
    assert results[0] == Result("File created successfully at: /memories/a.md", False)
    assert results[1].is_error and "Markdown documents only" in results[1].text
    assert memory.read("a.md").content == "a\n"
    assert asyncio.run(tool.clear_all_memory()) == "All memory cleared"
    assert memory.list() == []
    assert AsyncKeepstoneMemoryTool(memory).to_dict() == {
        "type": "memory_20250818",
        "name": "memory",
    }


@local_and_server
def test_a_direct_call_raises_the_sdks_tool_error(memory_factory: MemoryFactory) -> None:
    tool = KeepstoneMemoryTool(memory_factory(project="web"))
    view = BetaMemoryTool20250818ViewCommand(command="view", path="/memories/\u202e.md")
    with pytest.raises(ToolError, match=r"^Cannot view /memories/\\u202e\.md \(invalid_path\): "):
        tool.view(view)
    tool.memory.write("a.md", "a\n")
    assert tool.clear_all_memory() == "All memory cleared"
    assert tool.memory.list() == []


def test_the_tools_take_a_memory_and_say_so_otherwise(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="for an AsyncMemory use AsyncKeepstoneMemoryTool"):
        KeepstoneMemoryTool(AsyncMemory.local(project="web", home=tmp_path))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes a keepstone AsyncMemory, not str"):
        AsyncKeepstoneMemoryTool("memory")  # type: ignore[arg-type]
    cached = KeepstoneMemoryTool(
        Memory.local(project="web", home=tmp_path), cache_control={"type": "ephemeral"}
    )
    assert cached.to_dict() == {
        "type": "memory_20250818",
        "name": "memory",
        "cache_control": {"type": "ephemeral"},
    }
    cached.memory.close()


def test_without_the_sdk_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = refused_import(monkeypatch, "anthropic", "keepstone.integrations.anthropic")
    assert "pip install 'keepstone[anthropic]'" in str(refused)


def test_the_core_install_pulls_none_of_the_sdk() -> None:
    check_extra("anthropic", ["anthropic>=0.84"], "anthropic")
