"""Memory.tools(), anthropic_tools(), openai_tools() and run_tool(): the agent tools of the
MCP server as plain callables and as each API's definitions, one table underneath, on a
local memory and on a real server; AsyncMemory's twins."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from keepstone.sdk import AsyncMemory, Memory
from keepstone.tools import MUTATING_TOOLS, SPECS, TOOL_NAMES
from tests.sdk.conftest import MemoryFactory

#: The synchronous memories: local, and on a real server over a socket ("slow").
sync_kinds = pytest.mark.parametrize(
    "memory_factory", ["local", pytest.param("server", marks=pytest.mark.slow)], indirect=True
)


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "none")
    with Memory.local(bot="b", home=tmp_path / "home") as memory:
        yield memory


def test_the_tools_are_the_mcp_servers_table(local: Memory) -> None:
    tools = local.tools()
    assert [t.name for t in tools] == list(TOOL_NAMES)
    for tool in tools:
        assert tool.description == SPECS[tool.name].description
        assert tool.parameters == SPECS[tool.name].input_schema
    read_only = [t.name for t in local.tools(read_only=True)]
    assert read_only == [n for n in TOOL_NAMES if n not in MUTATING_TOOLS]
    assert local.anthropic_tools() == [SPECS[n].anthropic() for n in TOOL_NAMES]
    assert local.openai_tools() == [SPECS[n].openai() for n in TOOL_NAMES]
    assert [t["name"] for t in local.anthropic_tools(read_only=True)] == read_only


def test_the_openai_shapes_chat_responses_and_strict(local: Memory) -> None:
    responses = local.openai_tools(api="responses")
    assert responses[0] == {
        "type": "function",
        "name": "memory_read",
        "description": SPECS["memory_read"].description,
        "parameters": SPECS["memory_read"].input_schema,
        "strict": False,
    }
    strict = {t["function"]["name"]: t["function"] for t in local.openai_tools(strict=True)}
    search = strict["memory_search"]
    assert search["strict"] is True
    params = search["parameters"]
    assert params["required"] == list(SPECS["memory_search"].input_schema["properties"])
    assert params["additionalProperties"] is False
    assert params["properties"]["query"] == {
        "type": "string",
        "description": SPECS["memory_search"].input_schema["properties"]["query"]["description"],
    }
    assert params["properties"]["limit"]["type"] == ["integer", "null"]
    assert params["properties"]["limit"]["maximum"] == 50
    flat = local.openai_tools(api="responses", strict=True)
    assert [t["parameters"] for t in flat] == [t["parameters"] for t in strict.values()]
    assert [t.strict_parameters for t in local.tools()] == [t["parameters"] for t in flat]
    with pytest.raises(Exception, match="api must be 'chat' or 'responses', not 'completions'"):
        local.openai_tools(api="completions")  # type: ignore[arg-type]


def test_a_strict_call_with_nulls_runs_as_one_that_left_them_out(local: Memory) -> None:
    tools = {t.name: t for t in local.tools()}
    for tool in tools.values():
        # What a strict model sends: every argument, each optional one null (the required
        # ones are all strings). Leaving an optional one out is refused by the strict schema.
        required = set(tool.parameters.get("required", ()))
        call = {k: "x.md" if k in required else None for k in tool.strict_parameters["properties"]}
        jsonschema.validate(call, tool.strict_parameters)
        if len(call) > len(required):
            with pytest.raises(jsonschema.ValidationError, match="is a required property"):
                jsonschema.validate({k: call[k] for k in required}, tool.strict_parameters)
    write = {"path": "a.md", "content": "alpha beta\n", "if_match": None}
    # The edit's replace form (its first two text arguments, by the schema's own names), the
    # insert form's arguments null.
    edit = dict.fromkeys(tools["memory_edit"].strict_parameters["properties"])
    old, new = [k for k in edit if k not in ("path", "insert_line", "if_match")][:2]
    edit.update({"path": "a.md", old: "beta", new: "gamma"})
    for name, args in (("memory_write", write), ("memory_edit", edit)):
        jsonschema.validate(args, tools[name].strict_parameters)
        result = local.run_tool(name, json.dumps(args))
        assert not result.is_error, result.text
    assert local.read("a.md").content == "alpha gamma\n"
    refused = local.run_tool("memory_write", {"path": "b.md", "content": None})
    assert refused.is_error and refused.code == "invalid_request" and "content" in refused.text


@sync_kinds
def test_each_tool_runs_on_keyword_arguments_and_answers_text(
    memory_factory: MemoryFactory,
) -> None:
    memory = memory_factory(project="web")
    tool = {t.name: t for t in memory.tools()}
    assert tool["memory_write"](path="notes.md", content="# Notes\n\n- deploy Fridays\n") == (
        f"created notes.md (26 bytes, etag {memory.read('notes.md').etag})"
    )
    assert tool["memory_read"](path="notes.md") == "# Notes\n\n- deploy Fridays\n"
    assert tool["memory_list"]().startswith("notes.md\t26 bytes\tupdated ")
    assert tool["memory_edit"](path="notes.md", old_str="Fridays", new_str="Mondays").startswith(
        "edited notes.md: replaced the text"
    )
    assert "deploy Mondays" in tool["memory_search"](query="deploy")
    assert tool["memory_move"](path="notes.md", new_path="topics/deploy.md").startswith(
        "moved notes.md to topics/deploy.md"
    )
    assert tool["memory_history"](path="topics/deploy.md").startswith("version ")
    assert tool["memory_delete"](path="topics/deploy.md") == "deleted topics/deploy.md"
    assert memory.list() == []
    result = tool["memory_read"].run({"path": "topics/deploy.md"})
    assert (result.is_error, result.code, result.data) == (
        True,
        "not_found",
        {"path": "topics/deploy.md"},
    )
    assert result.text.startswith("not_found: no document at 'topics/deploy.md' in space ")
    assert result.text.endswith("; call memory_list to see what exists")


@sync_kinds
def test_the_spaces_refusals_are_text_for_the_model(memory_factory: MemoryFactory) -> None:
    memory = memory_factory(project="web", team_quota=1000)
    etag = memory.write("notes.md", "# Notes\n").etag
    memory.write("notes.md", "# Notes\n\n- changed meanwhile\n")
    calls: list[tuple[str, Any]] = [
        ("memory_write", {"path": "big.md", "content": "b" * 2000}),
        ("memory_write", {"path": "keys.md", "content": "aws key AKIAABCDEFGHIJKLMNOP\n"}),
        ("memory_write", {"path": "notes.md", "content": "stale\n", "if_match": etag}),
        ("memory_read", {"path": "./notes.md"}),
        ("memory_read", {"path": "nope.md", "extra": 1}),
        ("memory_forget", {}),
        ("memory_read", "{not json"),
    ]
    results = [memory.run_tool(name, args) for name, args in calls]
    assert all(r.is_error for r in results), results
    codes = ["quota_exceeded", "secret_detected", "precondition_failed", "invalid_path"]
    codes += ["invalid_request", "unknown_tool", "invalid_request"]
    assert [r.code for r in results] == codes
    assert "bytes are left in the" in results[0].text
    assert "AKIAABCDEFGHIJKLMNOP" not in results[1].text
    assert results[3].text.endswith("is not canonical; use 'notes.md'")
    assert "memory_read does not take extra" in results[4].text
    assert results[6].text.startswith("invalid_request: the arguments are not valid JSON")
    assert memory.read("notes.md").content == "# Notes\n\n- changed meanwhile\n"
    assert [d.path for d in memory.list()] == ["notes.md"]


def test_read_only_tools_refuse_a_change(local: Memory) -> None:
    write = local.run_tool("memory_write", {"path": "a.md", "content": "a\n"}, read_only=True)
    assert write.is_error and write.code == "write_refused"
    assert "read-only for this run" in write.text
    assert local.list() == []
    local.close()
    with pytest.raises(Exception, match="this Memory is closed"):
        local.tools()


def test_the_async_twins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "none")

    async def main() -> None:
        async with AsyncMemory.local(bot="b", home=tmp_path) as memory:
            tools = {t.name: t for t in memory.tools()}
            assert list(tools) == list(TOOL_NAMES)
            assert tools["memory_read"].parameters == SPECS["memory_read"].input_schema
            written = await tools["memory_write"](path="a.md", content="a\n")
            assert written.startswith("created a.md")
            assert await tools["memory_read"](path="a.md") == "a\n"
            missing = await memory.run_tool("memory_read", {"path": "b.md"})
            assert missing.is_error and missing.code == "not_found"
            assert memory.anthropic_tools() == memory.sync.anthropic_tools()
            assert memory.openai_tools(strict=True) == memory.sync.openai_tools(strict=True)
            assert [t.name for t in memory.tools(read_only=True)] == [
                n for n in TOOL_NAMES if n not in MUTATING_TOOLS
            ]

    asyncio.run(main())
