"""KeepstoneMemoryTool answers as the SDK's own BetaLocalFilesystemMemoryTool does.

One recorded session of ``memory_20250818`` commands (every command, its answers and its
refusals) is played through the SDK's tool runner twice: on the SDK's reference tool over a
folder, and on ours over a space (local and on a real server, sync and async). Every
``tool_result`` must be the same text with the same ``is_error``, except a directory's size
in a listing, which the reference takes from the filesystem and ours from the documents
under it.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools._beta_builtin_memory_tool import BetaLocalFilesystemMemoryTool

from keepstone.integrations.anthropic import AsyncKeepstoneMemoryTool, KeepstoneMemoryTool
from keepstone.sdk import AsyncMemory
from tests.integrations.conftest import MemoryFactory, local_and_server
from tests.integrations.recorded import Result, run, run_async

NOTES = "# Notes\n\n- one\n- two\n- one\n"

SESSION: list[dict[str, Any]] = [
    {"command": "view", "path": "/memories"},
    {"command": "create", "path": "/memories/notes.md", "file_text": NOTES},
    {"command": "create", "path": "/memories/notes.md", "file_text": "again"},
    {"command": "create", "path": "/memories/projects/web/todo.md", "file_text": "- ship\n"},
    {"command": "create", "path": "/memories/projects/api.md", "file_text": "# API\n" * 300},
    {"command": "create", "path": "/memories/projects/web/deep/far.md", "file_text": "far"},
    {"command": "create", "path": "/memories/.hidden.md", "file_text": "hidden"},
    {"command": "view", "path": "/memories"},
    {"command": "view", "path": "/memories/projects"},
    {"command": "view", "path": "/memories/notes.md"},
    {"command": "view", "path": "/memories/notes.md", "view_range": [2, 3]},
    {"command": "view", "path": "/memories/notes.md", "view_range": [4, -1]},
    {"command": "view", "path": "/memories/nothing.md"},
    {"command": "view", "path": "/memories/./projects//web/../api.md"},
    {"command": "str_replace", "path": "/memories/notes.md", "old_str": "- two", "new_str": "- 2"},
    {"command": "str_replace", "path": "/memories/notes.md", "old_str": "- one", "new_str": "x"},
    {"command": "str_replace", "path": "/memories/notes.md", "old_str": "zzz", "new_str": "y"},
    {"command": "str_replace", "path": "/memories/projects", "old_str": "a", "new_str": "b"},
    {"command": "str_replace", "path": "/memories/missing.md", "old_str": "a", "new_str": "b"},
    {"command": "insert", "path": "/memories/notes.md", "insert_line": 0, "insert_text": "top"},
    {"command": "insert", "path": "/memories/notes.md", "insert_line": 99, "insert_text": "x"},
    {"command": "insert", "path": "/memories/notes.md", "insert_line": 6, "insert_text": "end\n\n"},
    {"command": "insert", "path": "/memories/projects", "insert_line": 0, "insert_text": "x"},
    {"command": "view", "path": "/memories/notes.md"},
    {"command": "rename", "old_path": "/memories/notes.md", "new_path": "/memories/old/notes.md"},
    {
        "command": "rename",
        "old_path": "/memories/projects/api.md",
        "new_path": "/memories/old/notes.md",
    },
    {"command": "rename", "old_path": "/memories/projects/api.md", "new_path": "/memories/old"},
    {"command": "rename", "old_path": "/memories/missing.md", "new_path": "/memories/y.md"},
    {"command": "rename", "old_path": "/memories", "new_path": "/memories/z"},
    {"command": "rename", "old_path": "/memories/projects", "new_path": "/memories/work"},
    {"command": "view", "path": "/memories"},
    {"command": "delete", "path": "/memories/work/web"},
    {"command": "delete", "path": "/memories/missing.md"},
    {"command": "delete", "path": "/memories"},
    {"command": "delete", "path": "/memories/old"},
    {"command": "delete", "path": "/memories/.hidden.md"},
    {"command": "view", "path": "/memories"},
    {"command": "view", "path": "/memories/../etc/passwd.md"},
    {"command": "view", "path": "/etc/passwd"},
    {"command": "create", "path": "/memory/x.md", "file_text": "x"},
]


#: Texts at the edges: no final line break, CRLF, empty, non-ASCII sizes, ranges past the end.
EDGES: list[dict[str, Any]] = [
    {"command": "create", "path": "/memories/bare.md", "file_text": "a\nb"},
    {"command": "create", "path": "/memories/crlf.md", "file_text": "a\r\nb\r\n"},
    {"command": "create", "path": "/memories/empty.md", "file_text": ""},
    {"command": "create", "path": "/memories/café/crème.md", "file_text": "é" * 700},
    {"command": "view", "path": "/memories"},
    {"command": "view", "path": "/memories/café/"},
    {"command": "view", "path": "/memories/bare.md", "view_range": [0, 1]},
    {"command": "view", "path": "/memories/bare.md", "view_range": [5, 9]},
    {"command": "view", "path": "/memories/bare.md", "view_range": [1]},
    {"command": "view", "path": "/memories/empty.md"},
    {"command": "insert", "path": "/memories/bare.md", "insert_line": 1, "insert_text": "mid"},
    {"command": "insert", "path": "/memories/crlf.md", "insert_line": 2, "insert_text": "c\r"},
    {"command": "insert", "path": "/memories/empty.md", "insert_line": 0, "insert_text": ""},
    {"command": "insert", "path": "/memories/empty.md", "insert_line": -1, "insert_text": "x"},
    {"command": "str_replace", "path": "/memories/bare.md", "old_str": "a\nmid", "new_str": "A"},
    {"command": "str_replace", "path": "/memories/crlf.md", "old_str": "b\r\nc", "new_str": "B"},
    {"command": "view", "path": "/memories/bare.md"},
    {"command": "view", "path": "/memories/crlf.md"},
    {"command": "view", "path": "/memories/empty.md"},
    {"command": "rename", "old_path": "/memories/café", "new_path": "/memories/deep/er/café"},
    {"command": "view", "path": "/memories"},
]

#: A name is a file or a directory, never both: a directory's name is taken as a file's is.
TREE: list[dict[str, Any]] = [
    {"command": "create", "path": "/memories/notes.md/todo.md", "file_text": "milk\n"},
    {"command": "create", "path": "/memories/notes.md", "file_text": "hello\n"},
    {"command": "create", "path": "/memories/x.md", "file_text": "x\n"},
    {"command": "rename", "old_path": "/memories/x.md", "new_path": "/memories/notes.md"},
    {"command": "view", "path": "/memories/notes.md"},
    {"command": "view", "path": "/memories"},
]

#: A path is resolved whole before it must lie in /memories: leaving it and coming back is
#: no escape.
RESOLVED: list[dict[str, Any]] = [
    {"command": "create", "path": "/memories/../memories/x.md", "file_text": "x\n"},
    {"command": "view", "path": "/memories/../memories/x.md"},
    {"command": "view", "path": "/memories/a/../../memories/x.md"},
    {"command": "view", "path": "/memories/../memories"},
    {
        "command": "str_replace",
        "path": "/memories/./../memories/x.md",
        "old_str": "x",
        "new_str": "y",
    },
    {
        "command": "rename",
        "old_path": "/memories/../memories/x.md",
        "new_path": "/memories/a/../y.md",
    },
    {"command": "delete", "path": "/memories/../memories/y.md"},
    {"command": "delete", "path": "/memories/../memories"},
    {"command": "view", "path": "/memories/../../memories"},
    {"command": "view", "path": "/memories/a/../../../etc.md"},
    {"command": "view", "path": "/memories/../memoriesX/x.md"},
]


def _without_directory_sizes(result: Result) -> Result:
    """A listing with each directory's size (its own line and the ones ending in '/') blanked."""
    lines = result.text.split("\n")
    if not lines[0].startswith("Here're the files and directories"):
        return result
    blanked = [lines[0]]
    for i, line in enumerate(lines[1:]):
        size, _, path = line.partition("\t")
        blanked.append(f"-\t{path}" if i == 0 or path.endswith("/") else line)
    return Result("\n".join(blanked), result.is_error)


def reference(tmp_path: Path, uses: list[dict[str, Any]]) -> list[Result]:
    """What the SDK's own memory tool, over a folder, answers to ``uses``."""
    return run(BetaLocalFilesystemMemoryTool(str(tmp_path / "reference")), uses)


@local_and_server
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_every_answer_is_the_reference_answer(
    memory_factory: MemoryFactory, tmp_path: Path, flavour: str
) -> None:
    memory = memory_factory(project="web")
    if flavour == "sync":
        ours = run(KeepstoneMemoryTool(memory), SESSION)
    else:
        ours = asyncio.run(run_async(AsyncKeepstoneMemoryTool(AsyncMemory(memory)), SESSION))
    theirs = reference(tmp_path, SESSION)
    for use, mine, ref in zip(SESSION, ours, theirs, strict=True):
        assert _without_directory_sizes(mine) == _without_directory_sizes(ref), use
    # The session reached what it was written for: each command answered and refused.
    commands = {"view", "create", "str_replace", "insert", "delete", "rename"}
    assert {
        u["command"] for u, r in zip(SESSION, theirs, strict=True) if not r.is_error
    } == commands
    assert {u["command"] for u, r in zip(SESSION, theirs, strict=True) if r.is_error} == commands
    assert sum(r.is_error for r in theirs) == 17


@local_and_server
def test_a_directory_is_sized_by_the_documents_under_it(memory_factory: MemoryFactory) -> None:
    memory = memory_factory(project="web")
    memory.write("a/one.md", "x" * 1000)
    memory.write("a/b/two.md", "y" * 1048)
    memory.write("c.md", "")
    [listing] = run(KeepstoneMemoryTool(memory), [{"command": "view", "path": "/memories"}])
    assert listing.text.split("\n")[1:] == [
        "2K\t/memories",
        "2K\t/memories/a/",
        "1.0K\t/memories/a/b/",  # 1048 bytes
        "1000B\t/memories/a/one.md",
        "0B\t/memories/c.md",
    ]
    assert re.match(r"Here're the files and directories up to 2 levels deep", listing.text)


@local_and_server
def test_the_edges_are_the_reference_edges(memory_factory: MemoryFactory, tmp_path: Path) -> None:
    ours = run(KeepstoneMemoryTool(memory_factory(project="web")), EDGES)
    theirs = reference(tmp_path, EDGES)
    for use, mine, ref in zip(EDGES, ours, theirs, strict=True):
        assert _without_directory_sizes(mine) == _without_directory_sizes(ref), use
    assert sum(r.is_error for r in theirs) == 1


@local_and_server
@pytest.mark.parametrize(
    ("session", "errors"), [(TREE, [1, 3]), (RESOLVED, [7, 8, 9, 10])], ids=["tree", "resolved"]
)
def test_a_name_is_one_thing_and_a_path_is_resolved_whole(
    memory_factory: MemoryFactory, tmp_path: Path, session: list[dict[str, Any]], errors: list[int]
) -> None:
    ours = run(KeepstoneMemoryTool(memory_factory(project="web")), session)
    theirs = reference(tmp_path, session)
    for use, mine, ref in zip(session, ours, theirs, strict=True):
        assert _without_directory_sizes(mine) == _without_directory_sizes(ref), use
    assert [i for i, r in enumerate(theirs) if r.is_error] == errors
