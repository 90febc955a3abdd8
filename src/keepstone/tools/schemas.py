"""The agent tools' definitions, in the Anthropic and the OpenAI tool formats (SPEC §9.1).

Built from :mod:`keepstone.vocabulary`, the one table of operations every face reads: a
tool's name, description and arguments are its operation's. The descriptions are written
for a model: what the tool does, what a valid argument looks like, and what an error
result means, so a model can correct itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from keepstone.vocabulary import OPERATIONS, Face, tool_names, tool_operations

MEMORY_READ = "memory_read"
MEMORY_WRITE = "memory_write"
MEMORY_LIST = "memory_list"
MEMORY_SEARCH = "memory_search"
MEMORY_EDIT = "memory_edit"
MEMORY_DELETE = "memory_delete"
MEMORY_MOVE = "memory_move"
MEMORY_HISTORY = "memory_history"
MEMORY_RECENT = "memory_recent"

#: The tools, in the vocabulary's order (:data:`keepstone.vocabulary.OPERATIONS`).
TOOL_NAMES: tuple[str, ...] = tool_names()

#: The tools that change the space: withheld from a read-only run and on a global space.
MUTATING_TOOLS: frozenset[str] = frozenset(
    op.mcp for op in OPERATIONS if op.mcp is not None and op.mutates
)

#: The read-only tools withheld from a run that sees the space as of a past moment: the
#: search index and the feed of changes hold the space as it is now.
AS_OF_WITHHELD: frozenset[str] = frozenset({MEMORY_SEARCH, MEMORY_RECENT})


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool: its name, description, JSON schema of its input and its MCP hints."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool = True
    destructive: bool = False
    idempotent: bool = True

    def anthropic(self) -> dict[str, Any]:
        """``{"name", "description", "input_schema"}`` (Anthropic Messages API)."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }

    def openai(self) -> dict[str, Any]:
        """``{"type": "function", "function": {...}}`` (OpenAI Chat Completions / Responses)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema,
            },
        }


def _arguments(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    """A tool's input schema: an object of ``properties``, ``required`` among them, no
    others."""
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    schema["additionalProperties"] = False
    return schema


def _spec(tool: str) -> ToolSpec:
    """Tool ``tool`` as the vocabulary describes it: the description of the operation that
    carries one, and the parameters of every operation it serves (``memory_history`` lists
    versions and shows one), in the table's order."""
    served = tool_operations(tool)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for op in served:
        for name, param in op.params_on(Face.MCP).items():
            properties.setdefault(name, dict(param.schema))
            if param.required and op is served[0] and name not in required:
                required.append(name)
    main = next(op for op in served if op.guide)
    return ToolSpec(
        name=tool,
        description=main.guide,
        input_schema=_arguments(properties, *required),
        read_only=not main.mutates,
        destructive=main.mutates,
        idempotent=main.idempotent,
    )


SPECS: dict[str, ToolSpec] = {tool: _spec(tool) for tool in TOOL_NAMES}

#: Each tool's former argument names, still accepted: old name -> name now.
DEPRECATED_ARGUMENTS: dict[str, dict[str, str]] = {
    tool: {old: new for op in tool_operations(tool) for old, new in op.deprecated.items()}
    for tool in TOOL_NAMES
}


def anthropic_tools(names: tuple[str, ...] | list[str] = TOOL_NAMES) -> list[dict[str, Any]]:
    """The named tools in the Anthropic format, in the order given."""
    return [SPECS[n].anthropic() for n in names]


def openai_tools(names: tuple[str, ...] | list[str] = TOOL_NAMES) -> list[dict[str, Any]]:
    """The named tools in the OpenAI function-calling format, in the order given."""
    return [SPECS[n].openai() for n in names]
