"""Launching the real ``cairn`` executable for the MCP tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp import ClientSession


def cairn_argv() -> list[str]:
    """The installed ``cairn`` console script next to this interpreter (else ``-m``)."""
    script = Path(sys.executable).parent / "cairn"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "cairn.cli.main"]


def cairn_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env["CAIRN_HOME"] = str(home)
    return env


async def exercise_tools(session: ClientSession) -> None:
    """List, write, list, read, search what was written, and get a canonical-path error back
    as a tool result."""
    listed = await session.list_tools()
    by_name = {t.name: t for t in listed.tools}
    assert list(by_name) == ["memory_read", "memory_write", "memory_list", "memory_search"]
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


async def assert_write_withheld(session: ClientSession, *, notice: bool) -> str:
    """The server lists no memory_write and refuses a call to it as a tool result."""
    init_instructions = session.instructions or ""
    listed = await session.list_tools()
    assert [t.name for t in listed.tools] == ["memory_read", "memory_list", "memory_search"]
    refused = await session.call_tool("memory_write", {"path": "MEMORY.md", "content": "x"})
    assert refused.is_error
    text = refused.content[0].text if refused.content[0].type == "text" else ""
    assert ("<workspace_memory_write_refused>" in text) is notice
    assert ("<workspace_memory_write_refused>" in init_instructions) is notice
    return text
