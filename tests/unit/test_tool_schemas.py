"""The tool schemas are valid JSON Schema in the drafts the Anthropic and OpenAI tool formats
use (2020-12; draft 7 for clients that still validate with it), within each format's rules,
and they agree with the dispatcher: what a schema accepts runs, what it refuses the dispatcher
refuses as a tool result too. (The MCP side is checked through the official client in
tests/mcp/helpers.py.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator, Draft202012Validator

from keepstone.service.spaces import SpaceService
from keepstone.spaces import SpaceRef
from keepstone.store.base import MemoryStore
from keepstone.store.fs import FilesystemStore
from keepstone.store.sql import SqlStore
from keepstone.tools import SPECS, TOOL_NAMES, MemoryTools, anthropic_tools, openai_tools

#: A tool name both formats accept.
NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

#: Per tool: arguments the schema accepts, and arguments it must refuse.
VALID: dict[str, list[dict[str, Any]]] = {
    "memory_read": [{"path": "MEMORY.md"}],
    "memory_write": [
        {"path": "a.md", "content": "x"},
        {"path": "a.md", "content": "", "if_match": "e"},
    ],
    "memory_list": [{}, {"dir": "topics"}],
    "memory_search": [{"query": "deploy"}, {"query": "x", "limit": 50, "path_prefix": "t/"}],
    "memory_edit": [
        {"path": "MEMORY.md", "old": "# Index", "new": "# Notes"},
        {"path": "MEMORY.md", "insert_line": 0, "text": "top"},
    ],
    "memory_delete": [{"path": "b.md"}],
    "memory_move": [{"path": "MEMORY.md", "to": "c.md", "overwrite": False}],
    "memory_history": [{"path": "MEMORY.md"}, {"path": "MEMORY.md", "version": 1}],
    "memory_recent": [{}, {"since": "2026-01-01T00:00:00Z", "limit": 5, "actor_kind": "user"}],
}
INVALID: dict[str, list[dict[str, Any]]] = {
    "memory_read": [{}, {"path": 3}, {"path": "a.md", "mode": "raw"}],
    "memory_write": [{"path": "a.md"}, {"path": "a.md", "content": 1}],
    "memory_list": [{"dir": 5}, {"recursive": True}],
    "memory_search": [{}, {"query": ""}, {"query": "x", "limit": 0}, {"query": "x", "limit": "3"}],
    "memory_edit": [
        {},
        {"path": "a.md", "insert_line": -1, "text": "x"},
        {"path": "a.md", "old": 3, "new": "y"},
    ],
    "memory_delete": [{}, {"path": "a.md", "force": True}],
    "memory_move": [{"path": "a.md"}, {"path": "a.md", "to": "b.md", "overwrite": "yes"}],
    "memory_history": [{}, {"path": "a.md", "version": 0}, {"path": "a.md", "version": "2"}],
    "memory_recent": [{"limit": 0}, {"limit": 101}, {"actor_kind": "robot"}, {"since": 3}],
}


@pytest.mark.parametrize("validator", [Draft202012Validator, Draft7Validator])
def test_every_schema_is_valid_json_schema_in_both_formats(validator: Any) -> None:
    schemas = [t["input_schema"] for t in anthropic_tools()]
    schemas += [t["function"]["parameters"] for t in openai_tools()]
    assert len(schemas) == 2 * len(TOOL_NAMES)
    for schema in schemas:
        validator.check_schema(schema)


def test_each_format_keeps_its_own_rules() -> None:
    for tool in anthropic_tools():
        assert NAME.match(tool["name"])
        schema = tool["input_schema"]
        # Anthropic: an object schema, no combinators at its top level.
        assert schema["type"] == "object"
        assert not {"oneOf", "anyOf", "allOf", "not"} & set(schema)
        assert schema["additionalProperties"] is False
        assert set(schema.get("required", [])) <= set(schema["properties"])
    for tool in openai_tools():
        assert tool["type"] == "function" and NAME.match(tool["function"]["name"])
        assert tool["function"]["parameters"]["type"] == "object"
        assert 0 < len(tool["function"]["description"]) <= 1024 * 4


def test_examples_cover_every_tool() -> None:
    assert set(VALID) == set(INVALID) == set(SPECS)


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_the_schema_and_the_dispatcher_agree(name: str, tmp_path: Path) -> None:
    schema = Draft202012Validator(SPECS[name].input_schema)
    ref = SpaceRef.build("project", "notes", tenant="local", project="p")
    store: MemoryStore = FilesystemStore(tmp_path / "spaces")
    if name == "memory_history":  # a store that keeps history on every branch: SQLite
        store = SqlStore.open(f"sqlite:///{tmp_path / 'keepstone.db'}")
    tools = MemoryTools(SpaceService(store), ref)
    for args in VALID[name]:
        assert not list(schema.iter_errors(args)), args
        tools.dispatch("memory_write", {"path": "MEMORY.md", "content": "# Index\n"})
        result = tools.dispatch(name, args)
        # Accepted by the schema: it runs (a missing document is the only refusal here).
        assert not result.is_error or result.code in ("not_found", "precondition_failed"), (
            args,
            result.text,
        )
    for args in INVALID[name]:
        assert list(schema.iter_errors(args)), args
        result = tools.dispatch(name, args)
        assert result.is_error and result.code != "internal_error", (args, result.text)
