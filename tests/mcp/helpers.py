"""What the MCP tests ask of a session, whatever the transport: the tools listed, used and
withheld (the ``keepstone`` command itself is started through :mod:`tests.cli_runner`)."""

from __future__ import annotations

from jsonschema import Draft202012Validator
from mcp import ClientSession

from keepstone.tools import MUTATING_TOOLS, TOOL_NAMES


async def exercise_tools(session: ClientSession) -> None:
    """List, write, list, read, search what was written, and get a canonical-path error back
    as a tool result."""
    listed = await session.list_tools()
    by_name = {t.name: t for t in listed.tools}
    assert list(by_name) == list(TOOL_NAMES)
    for tool in listed.tools:
        # What the client received is a valid JSON Schema (the draft MCP names), and the
        # hints say which tools change the space.
        Draft202012Validator.check_schema(tool.input_schema)
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is (tool.name not in MUTATING_TOOLS)
    assert by_name["memory_search"].annotations is not None
    assert by_name["memory_search"].annotations.read_only_hint is True
    assert "meaning" in (by_name["memory_search"].description or "")
    assert by_name["memory_read"].annotations is not None
    assert by_name["memory_read"].annotations.read_only_hint is True
    assert by_name["memory_write"].annotations is not None
    assert by_name["memory_write"].annotations.read_only_hint is False
    assert by_name["memory_write"].annotations.destructive_hint is True
    assert by_name["memory_write"].input_schema["required"] == ["path", "content"]

    wrote = await session.call_tool("memory_write", {"path": "MEMORY.md", "content": "# kept\n"})
    assert not wrote.is_error
    assert wrote.structured_content is not None and wrote.structured_content["created"] is True

    docs = await session.call_tool("memory_list", {})
    assert not docs.is_error
    assert docs.structured_content is not None
    assert [d["path"] for d in docs.structured_content["documents"]] == ["MEMORY.md"]

    read = await session.call_tool("memory_read", {"path": "MEMORY.md"})
    assert not read.is_error
    assert read.content[0].type == "text" and read.content[0].text == "# kept\n"

    found = await session.call_tool("memory_search", {"query": "kept"})
    assert not found.is_error, found.content
    assert found.structured_content is not None
    assert [h["path"] for h in found.structured_content["results"]] == ["MEMORY.md"]
    text = found.content[0].text if found.content[0].type == "text" else ""
    assert 'document MEMORY.md, section "kept"' in text and "```text\nkept\n```" in text

    bad = await session.call_tool("memory_read", {"path": "./MEMORY.md"})
    assert bad.is_error
    assert bad.content[0].type == "text"
    assert "'MEMORY.md'" in bad.content[0].text and "not canonical" in bad.content[0].text
    assert bad.structured_content == {"canonical": "MEMORY.md"}

    await exercise_edit_move_delete(session)


def _text(result: object) -> str:
    content = getattr(result, "content", [])
    return content[0].text if content and content[0].type == "text" else ""


async def exercise_edit_move_delete(session: ClientSession) -> None:
    """memory_edit (both forms, and its refusals), memory_move and memory_delete, on a note of
    their own; leaves the space as it found it."""
    wrote = await session.call_tool("memory_write", {"path": "scratch.md", "content": "a\nb\nb\n"})
    assert not wrote.is_error, _text(wrote)
    ambiguous = await session.call_tool(
        "memory_edit", {"path": "scratch.md", "old": "b", "new": "c"}
    )
    assert ambiguous.is_error and "occurs 2 times" in _text(ambiguous)
    assert ambiguous.structured_content is not None
    assert ambiguous.structured_content["lines"] == [2, 3]
    edited = await session.call_tool(
        "memory_edit", {"path": "scratch.md", "old": "a\nb", "new": "A\nB"}
    )
    assert not edited.is_error, _text(edited)
    inserted = await session.call_tool(
        "memory_edit", {"path": "scratch.md", "insert_line": 0, "text": "# Scratch"}
    )
    assert not inserted.is_error, _text(inserted)
    both = await session.call_tool(
        "memory_edit", {"path": "scratch.md", "old": "A", "new": "x", "insert_line": 1}
    )
    assert both.is_error and "not both" in _text(both)
    moved = await session.call_tool(
        "memory_move", {"path": "scratch.md", "to": "topics/scratch.md"}
    )
    assert not moved.is_error, _text(moved)
    taken = await session.call_tool("memory_move", {"path": "topics/scratch.md", "to": "MEMORY.md"})
    assert taken.is_error and "already a document" in _text(taken)
    read = await session.call_tool("memory_read", {"path": "topics/scratch.md"})
    assert _text(read) == "# Scratch\nA\nB\nb\n"
    deleted = await session.call_tool("memory_delete", {"path": "topics/scratch.md"})
    assert not deleted.is_error, _text(deleted)
    gone = await session.call_tool("memory_delete", {"path": "topics/scratch.md"})
    assert gone.is_error and "memory_list" in _text(gone)


async def assert_write_withheld(session: ClientSession, *, notice: bool) -> str:
    """The server lists none of the tools that change the space and refuses a call to each
    as a tool result."""
    init_instructions = session.instructions or ""
    listed = await session.list_tools()
    assert [t.name for t in listed.tools] == [
        "memory_read",
        "memory_list",
        "memory_search",
        "memory_history",
        "memory_recent",
    ]
    for name, args in (
        ("memory_edit", {"path": "MEMORY.md", "insert_line": 0, "text": "x"}),
        ("memory_delete", {"path": "MEMORY.md"}),
        ("memory_move", {"path": "MEMORY.md", "to": "moved.md"}),
    ):
        other = await session.call_tool(name, args)
        assert other.is_error and name in _text(other)
    refused = await session.call_tool("memory_write", {"path": "MEMORY.md", "content": "x"})
    assert refused.is_error
    text = _text(refused)
    assert ("<workspace_memory_write_refused>" in text) is notice
    assert ("<workspace_memory_write_refused>" in init_instructions) is notice
    return text
