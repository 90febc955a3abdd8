"""The agent tools: schemas in two formats and one dispatcher (SPEC §9.1).

>>> tools = MemoryTools(SpaceService(store), ref)
>>> tools.anthropic_tools()          # or tools.openai_tools()
>>> tools.dispatch("memory_read", {"path": "MEMORY.md"})   # always a ToolResult
"""

# One import a name, each marked re-exported (X as X); __all__ keeps the star-import exact.
from keepstone.tools.dispatch import WRITE_REFUSED_GLOBAL as WRITE_REFUSED_GLOBAL
from keepstone.tools.dispatch import MemoryTools as MemoryTools
from keepstone.tools.dispatch import RecordsSearcher as RecordsSearcher
from keepstone.tools.dispatch import ToolResult as ToolResult
from keepstone.tools.dispatch import error_result as error_result
from keepstone.tools.dispatch import ref_for_block as ref_for_block
from keepstone.tools.schemas import MEMORY_DELETE as MEMORY_DELETE
from keepstone.tools.schemas import MEMORY_EDIT as MEMORY_EDIT
from keepstone.tools.schemas import MEMORY_HISTORY as MEMORY_HISTORY
from keepstone.tools.schemas import MEMORY_LIST as MEMORY_LIST
from keepstone.tools.schemas import MEMORY_MOVE as MEMORY_MOVE
from keepstone.tools.schemas import MEMORY_READ as MEMORY_READ
from keepstone.tools.schemas import MEMORY_SEARCH as MEMORY_SEARCH
from keepstone.tools.schemas import MEMORY_WRITE as MEMORY_WRITE
from keepstone.tools.schemas import MUTATING_TOOLS as MUTATING_TOOLS
from keepstone.tools.schemas import SPECS as SPECS
from keepstone.tools.schemas import TOOL_NAMES as TOOL_NAMES
from keepstone.tools.schemas import ToolSpec as ToolSpec
from keepstone.tools.schemas import anthropic_tools as anthropic_tools
from keepstone.tools.schemas import openai_tools as openai_tools

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
