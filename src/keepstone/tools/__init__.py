"""The agent tools: schemas in two formats and one dispatcher (SPEC §9.1).

>>> tools = MemoryTools(SpaceService(store), ref)
>>> tools.anthropic_tools()          # or tools.openai_tools()
>>> tools.dispatch("memory_read", {"path": "MEMORY.md"})   # always a ToolResult
"""

from keepstone.tools.dispatch import (
    WRITE_REFUSED_GLOBAL,
    MemoryTools,
    RecordsSearcher,
    ToolResult,
    error_result,
    ref_for_block,
)
from keepstone.tools.schemas import (
    MEMORY_DELETE,
    MEMORY_EDIT,
    MEMORY_HISTORY,
    MEMORY_LIST,
    MEMORY_MOVE,
    MEMORY_READ,
    MEMORY_SEARCH,
    MEMORY_WRITE,
    MUTATING_TOOLS,
    SPECS,
    TOOL_NAMES,
    ToolSpec,
    anthropic_tools,
    openai_tools,
)

__all__ = [
    "MEMORY_DELETE",
    "MEMORY_EDIT",
    "MEMORY_HISTORY",
    "MEMORY_LIST",
    "MEMORY_MOVE",
    "MEMORY_READ",
    "MEMORY_SEARCH",
    "MEMORY_WRITE",
    "MUTATING_TOOLS",
    "SPECS",
    "TOOL_NAMES",
    "WRITE_REFUSED_GLOBAL",
    "MemoryTools",
    "RecordsSearcher",
    "ToolResult",
    "ToolSpec",
    "anthropic_tools",
    "error_result",
    "openai_tools",
    "ref_for_block",
]
