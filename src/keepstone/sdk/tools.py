"""The agent tools as plain callables: what :meth:`Memory.tools` and
:meth:`AsyncMemory.tools` return (docs/python.md, "Tools for an agent").

A :class:`Tool` is one of the agent tools of :mod:`keepstone.tools` (``memory_read``,
``memory_write``...) bound to one memory: its name, description and JSON schema are the
ones the MCP server serves, and calling it runs the same dispatcher, so any framework that
takes a name, a description, a JSON schema and a function can offer a space to a model.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from keepstone.errors import InvalidRequest
from keepstone.tools.dispatch import ToolResult
from keepstone.tools.formats import strict_schema, without_nulls
from keepstone.tools.schemas import SPECS, ToolSpec

#: A tool call's arguments: a mapping, the JSON object text a model sends, or None for none.
Arguments = Mapping[str, Any] | str | bytes | None
#: What runs a tool call by name: :meth:`Memory.run_tool`, bound to the tool set's options.
Runner = Callable[[str, Arguments], ToolResult]


@dataclass(frozen=True, slots=True)
class Tool:
    """One agent tool over a memory: ``name``, ``description`` (written for a model) and
    ``parameters`` (the JSON schema of its keyword arguments).

    ``tool(path="MEMORY.md")`` runs it and returns the text for the model: a refusal
    (not found, quota, secrets, a change made meanwhile) is that text too, starting with
    its error code, never an exception. :meth:`run` returns the whole
    :class:`~keepstone.tools.ToolResult` (``is_error``, ``code``, ``data``).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    runner: Runner = field(repr=False, compare=False)

    @classmethod
    def of(cls, spec: ToolSpec, runner: Runner) -> Tool:
        return cls(spec.name, spec.description, spec.input_schema, runner)

    @property
    def strict_parameters(self) -> dict[str, Any]:
        """``parameters`` in OpenAI's strict form: every argument required, an optional one
        nullable (:func:`keepstone.tools.formats.strict_schema`); a null runs as left out."""
        return strict_schema(self.parameters)

    def run(self, arguments: Arguments = None) -> ToolResult:
        """Run the tool on ``arguments``: a mapping, or the JSON object text of a model's
        call."""
        return self.runner(self.name, arguments)

    def __call__(self, **arguments: Any) -> str:
        return self.run(arguments).text


@dataclass(frozen=True, slots=True)
class AsyncTool:
    """:class:`Tool` for asyncio: ``await tool(path="MEMORY.md")``; the call runs in a
    worker thread, as every :class:`~keepstone.AsyncMemory` call does."""

    sync: Tool

    @property
    def name(self) -> str:
        return self.sync.name

    @property
    def description(self) -> str:
        return self.sync.description

    @property
    def parameters(self) -> dict[str, Any]:
        return self.sync.parameters

    async def run(self, arguments: Arguments = None) -> ToolResult:
        """Run the tool on ``arguments``: a mapping, or the JSON object text of a model's
        call."""
        return await asyncio.to_thread(self.sync.run, arguments)

    async def __call__(self, **arguments: Any) -> str:
        return (await self.run(arguments)).text


def tool_arguments(name: str, given: Arguments) -> dict[str, Any]:
    """The arguments of a call of tool ``name`` as a dict: ``given`` as a mapping, as the
    JSON object text a model sends (``'{"path": "MEMORY.md"}'``), or None for none; an
    optional argument given as null left out (:func:`~keepstone.tools.formats.without_nulls`).
    ``InvalidRequest`` saying what to send instead when ``given`` is no object."""
    if given is None:
        return {}
    if isinstance(given, str | bytes | bytearray):
        try:
            given = json.loads(given) if given.strip() else {}
        except ValueError as exc:
            raise InvalidRequest(
                f"the arguments are not valid JSON ({exc}); send a JSON object"
            ) from None
    if not isinstance(given, Mapping):
        raise InvalidRequest(
            f"the arguments must be a JSON object of named arguments, not {type(given).__name__}"
        )
    spec = SPECS.get(name)
    return dict(given) if spec is None else without_nulls(spec, given)
