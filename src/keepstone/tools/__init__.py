"""The agent tools: schemas in two formats and one dispatcher (SPEC §9.1).

>>> tools = MemoryTools(SpaceService(store), ref)
>>> tools.anthropic_tools()          # or tools.openai_tools()
>>> tools.dispatch("memory_read", {"path": "MEMORY.md"})   # always a ToolResult
"""

# Each name re-exported in the explicit "X as X" form, which is this package's export list.
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
