"""A Keepstone space as tools of the OpenAI Agents SDK (docs/integrations/openai-agents.md).

:func:`memory_tools` gives the agent tools of :meth:`keepstone.Memory.tools`
(``memory_read``, ``memory_write``, ``memory_search``...) as the SDK's ``FunctionTool``s:
``Agent(..., tools=memory_tools(memory))``. Names and descriptions are the ones the MCP
server serves; each schema is the strict form of the tool's own
(:attr:`keepstone.sdk.tools.Tool.strict_parameters`: every argument listed, an optional one
nullable, a null run as the argument left out), so the tools run in the SDK's recommended
strict mode.

A call's refusal (no such document, the quota, a credential in the text, a change made
meanwhile) is the tool's output, a text starting with its error code for the model to act
on; it never raises into the run.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

try:
    from agents import FunctionTool
    from agents.tool_context import ToolContext
except ImportError as exc:
    raise ImportError(
        "keepstone.integrations.openai_agents needs the OpenAI Agents SDK (0.24 or later): "
        "pip install 'keepstone[openai-agents]'"
    ) from exc

from keepstone.sdk import AsyncMemory, Memory
from keepstone.sdk.tools import Tool

__all__ = ["memory_tools"]


def memory_tools(memory: Memory | AsyncMemory, *, read_only: bool = False) -> list[FunctionTool]:
    """The agent tools over ``memory`` (a :class:`~keepstone.Memory`, or an
    :class:`~keepstone.AsyncMemory`: the calls run in a worker thread either way) as
    ``FunctionTool``s in strict mode; ``read_only`` (and a global space) leaves out
    the four that change the space."""
    sync = memory.sync if isinstance(memory, AsyncMemory) else memory
    return [_function_tool(tool) for tool in sync.tools(read_only=read_only)]


def _function_tool(tool: Tool) -> FunctionTool:
    return FunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=tool.strict_parameters,
        on_invoke_tool=functools.partial(_invoke, tool),
        strict_json_schema=True,
    )


async def _invoke(tool: Tool, context: ToolContext[Any], arguments: str) -> str:
    """Run the model's call (``arguments``, its JSON text) in a worker thread; the text
    for the model, a refusal's included."""
    result = await asyncio.to_thread(tool.run, arguments)
    return result.text
