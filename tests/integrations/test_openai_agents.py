"""memory_tools(): the agent tools as the OpenAI Agents SDK's FunctionTools, checked with the
SDK's own types: its strict-schema rules, its ToolContext, and Runner.run driving the SDK's
ScriptedModel (a Model that emits recorded tool calls; no network), on a local memory and
on a real server."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, FunctionTool, RunConfig, Runner, UserError
from agents.strict_schema import ensure_strict_json_schema
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext

from keepstone.integrations.openai_agents import memory_tools
from keepstone.sdk import AsyncMemory, Memory
from keepstone.tools import MUTATING_TOOLS, SPECS, TOOL_NAMES
from tests.integrations.conftest import (
    MemoryFactory,
    check_extra,
    local_and_server,
    refused_import,
)

ROOT = Path(__file__).resolve().parents[2]
NO_TRACES = RunConfig(tracing_disabled=True)


def invoke(tool: FunctionTool, arguments: dict[str, Any] | str) -> str:
    """One call of ``tool`` as the SDK makes it: a ToolContext and the arguments' JSON."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    context = ToolContext(
        context=None, tool_name=tool.name, tool_call_id="call-1", tool_arguments=raw
    )
    output = asyncio.run(tool.on_invoke_tool(context, raw))
    assert isinstance(output, str)
    return output


def by_name(tools: list[FunctionTool]) -> dict[str, FunctionTool]:
    return {t.name: t for t in tools}


def test_the_function_tools_are_ours_in_strict_mode(tmp_path: Path) -> None:
    with Memory.local(bot="b", home=tmp_path) as memory:
        tools = memory_tools(memory)
        assert [t.name for t in tools] == list(TOOL_NAMES)
        for tool in tools:
            assert isinstance(tool, FunctionTool)
            assert tool.description == SPECS[tool.name].description
            assert tool.strict_json_schema is True
            schema = tool.params_json_schema
            # The SDK's strict rules leave the schema as it is: it already satisfies them.
            assert ensure_strict_json_schema(copy.deepcopy(schema)) == schema
            assert list(schema["properties"]) == list(SPECS[tool.name].input_schema["properties"])
            assert schema["required"] == list(schema["properties"])
            assert not any(
                "minLength" in p or "maxLength" in p for p in schema["properties"].values()
            )
        read_only = [t.name for t in memory_tools(memory, read_only=True)]
        assert read_only == [n for n in TOOL_NAMES if n not in MUTATING_TOOLS]
        assert [t.name for t in memory_tools(AsyncMemory(memory))] == list(TOOL_NAMES)


@local_and_server
def test_on_invoke_tool_runs_the_tool_with_the_sdks_tool_context(
    memory_factory: MemoryFactory,
) -> None:
    memory = memory_factory(project="web")
    tools = by_name(memory_tools(memory))
    written = invoke(
        tools["memory_write"], {"path": "deploys.md", "content": "# Deploys\n", "if_match": None}
    )
    assert written == f"created deploys.md (10 bytes, etag {memory.read('deploys.md').etag})"
    assert invoke(tools["memory_read"], {"path": "deploys.md"}) == "# Deploys\n"
    edit = {
        "path": "deploys.md",
        "old_str": None,
        "new_str": None,
        "insert_line": 1,
        "insert_text": "- Fridays, blue-green.",
        "if_match": None,
    }
    assert invoke(tools["memory_edit"], edit).startswith("edited deploys.md: inserted after line 1")
    assert memory.read("deploys.md").content == "# Deploys\n- Fridays, blue-green.\n"


@local_and_server
def test_the_spaces_refusals_come_back_as_text_not_exceptions(
    memory_factory: MemoryFactory,
) -> None:
    memory = memory_factory(project="web", team_quota=1000)
    etag = memory.write("notes.md", "# Notes\n").etag
    memory.write("notes.md", "# Notes\n\n- changed meanwhile\n")
    tools = by_name(memory_tools(memory))
    outputs = [
        invoke(tools["memory_read"], {"path": "nope.md"}),
        invoke(tools["memory_write"], {"path": "big.md", "content": "b" * 2000, "if_match": None}),
        invoke(
            tools["memory_write"],
            {"path": "keys.md", "content": "aws key AKIAABCDEFGHIJKLMNOP\n", "if_match": None},
        ),
        invoke(tools["memory_write"], {"path": "notes.md", "content": "x\n", "if_match": etag}),
        invoke(tools["memory_read"], "{not json"),
    ]
    codes = ["not_found", "quota_exceeded", "secret_detected", "precondition_failed"]
    for output, code in zip(outputs, [*codes, "invalid_request"], strict=True):
        assert output.startswith(f"{code}: "), output
    assert "AKIAABCDEFGHIJKLMNOP" not in outputs[2]
    assert [d.path for d in memory.list()] == ["notes.md"]
    assert memory.read("notes.md").content == "# Notes\n\n- changed meanwhile\n"


@local_and_server
def test_search_covers_the_documents_and_repo_id_changes_nothing(
    memory_factory: MemoryFactory,
) -> None:
    """As the page says: the team records are not searched through a Memory, so the
    records' own argument, offered by the shared schema, has no effect."""
    memory = memory_factory(project="web")
    memory.write("deploys.md", "# Deploys\n\nWe deploy on Fridays.\n")
    search = by_name(memory_tools(memory))["memory_search"]
    args = dict.fromkeys(search.params_json_schema["properties"]) | {"query": "deploy"}
    plain = invoke(search, args)
    assert "deploys.md" in plain and "Team memory records" not in plain
    assert invoke(search, args | {"repo_id": "some-repo"}) == plain


@local_and_server
def test_runner_run_with_a_model_that_calls_the_tools(memory_factory: MemoryFactory) -> None:
    memory = memory_factory(project="web")
    model = ScriptedModel(
        [
            [function_call("memory_list", {"dir": None}, call_id="c1")],
            [function_call("memory_read", {"path": "deploys.md"}, call_id="c2")],
            [
                function_call(
                    "memory_write",
                    {"path": "deploys.md", "content": "# Deploys\n\nFridays.\n", "if_match": None},
                    call_id="c3",
                )
            ],
            [assistant_message("I'll remember that you deploy on Fridays.")],
        ]
    )
    agent = Agent(name="Assistant", model=model, tools=memory_tools(memory))
    result = asyncio.run(Runner.run(agent, "We deploy on Fridays.", run_config=NO_TRACES))
    assert result.final_output == "I'll remember that you deploy on Fridays."
    model.assert_complete()
    assert [t.name for t in model.calls[0].tools] == list(TOOL_NAMES)
    outputs = {
        item["call_id"]: item["output"]
        for item in model.calls[3].input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }
    assert outputs["c1"] == "no documents in this memory space yet"
    assert outputs["c2"].startswith("not_found: no document at 'deploys.md'")
    assert outputs["c3"].startswith("created deploys.md (20 bytes, etag ")
    assert memory.read("deploys.md").content == "# Deploys\n\nFridays.\n"


def test_an_async_memory_runs_through_the_same_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "none")

    async def main() -> str:
        async with AsyncMemory.local(bot="b", home=tmp_path) as memory:
            await memory.write("a.md", "# A\n\nthe alpha note\n")
            model = ScriptedModel(
                [
                    [function_call("memory_search", {"query": "alpha"}, call_id="s1")],
                    [assistant_message("found it")],
                ]
            )
            agent = Agent(name="Assistant", model=model, tools=memory_tools(memory))
            await Runner.run(agent, "what about alpha?", run_config=NO_TRACES)
            outputs = [i for i in model.calls[1].input if isinstance(i, dict) and "output" in i]
            return str(outputs[0]["output"])

    found = asyncio.run(main())
    assert "document a.md" in found and "the alpha note" in found


def test_without_the_sdk_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = refused_import(monkeypatch, "agents", "keepstone.integrations.openai_agents")
    assert "pip install 'keepstone[openai-agents]'" in str(refused)


def test_the_core_install_pulls_none_of_the_sdk() -> None:
    for package in ("agents", "openai"):
        check_extra("openai-agents", ["openai-agents>=0.24"], package)


def test_a_closed_memory_is_the_applications_error_and_ends_the_run(tmp_path: Path) -> None:
    memory = Memory.local(bot="b", home=tmp_path)
    tools = memory_tools(memory)
    memory.close()
    model = ScriptedModel([[function_call("memory_read", {"path": "a.md"}, call_id="c1")]])
    agent = Agent(name="Assistant", model=model, tools=tools)
    with pytest.raises(UserError, match="this Memory is closed; make another one to go on"):
        asyncio.run(Runner.run(agent, "read a.md", run_config=NO_TRACES))
