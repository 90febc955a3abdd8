"""An MCP server over :class:`~keepstone.tools.MemoryTools`, on the official ``mcp`` SDK.

It uses the SDK's low-level :class:`mcp.server.Server` rather than the decorator
API: the tools already have hand-written JSON schemas and one dispatcher, so the
server only translates ``tools/list`` and ``tools/call``. Every tool result is a
``CallToolResult`` — a refusal is ``isError: true`` with the dispatcher's text, never
a protocol error — and each tool declares ``readOnlyHint`` / ``destructiveHint``.

The autoload documents and the notices (the global write refusal) are the server's
``instructions``: what a client puts into the agent's context when it connects.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.to_thread
import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

from keepstone import __version__
from keepstone.tools.dispatch import MemoryTools
from keepstone.tools.schemas import ToolSpec

SERVER_NAME = "keepstone"

_BASE_INSTRUCTIONS = (
    "Keepstone memory: a persistent space of Markdown documents that survives from one run to the "
    "next. Read MEMORY.md (memory_read) or list the space (memory_list) before you start, and "
    "search it by meaning and keywords (memory_search) when you need something specific; record "
    "what you learned and where you left off before you finish."
)


def _tool(spec: ToolSpec) -> types.Tool:
    return types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=spec.input_schema,
        annotations=types.ToolAnnotations(
            title=spec.name.replace("_", " "),
            read_only_hint=spec.read_only,
            destructive_hint=spec.destructive,
            idempotent_hint=spec.idempotent,
            open_world_hint=False,
        ),
    )


def instructions_for(tools: MemoryTools) -> str:
    """The server instructions: what the memory is, then notices and autoload documents."""
    context = tools.context_text()
    return f"{_BASE_INSTRUCTIONS}\n\n{context}" if context else _BASE_INSTRUCTIONS


def build_server(tools: MemoryTools) -> Server[Any]:
    """A low-level MCP server exposing exactly ``tools.names``."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_tool(spec) for spec in tools.specs])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # The stores are synchronous; a worker thread keeps the event loop (and any
        # other session on the HTTP transport) responsive during a slow write.
        result = await anyio.to_thread.run_sync(tools.dispatch, params.name, params.arguments)
        return types.CallToolResult(
            content=[types.TextContent(text=result.text)],
            is_error=result.is_error,
            structured_content=result.data or None,
        )

    return Server(
        SERVER_NAME,
        version=__version__,
        title="Keepstone memory",
        instructions=instructions_for(tools),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def serve_stdio(tools: MemoryTools) -> None:
    """Serve over stdin/stdout until the client closes the stream."""
    server = build_server(tools)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)


def serve_http(tools: MemoryTools, host: str = "127.0.0.1", port: int = 8421) -> None:
    """Serve streamable HTTP at ``http://HOST:PORT/mcp`` until interrupted."""
    import uvicorn

    server = build_server(tools)
    app = server.streamable_http_app(host=host)
    uvicorn.run(app, host=host, port=port, log_level="warning")
