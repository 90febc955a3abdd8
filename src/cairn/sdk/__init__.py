"""The Python API: ``from cairn import Memory`` (docs/python.md).

A face beside the API, MCP and the auto-memory runner: it builds its services through
:mod:`cairn.runtime` as the CLI does and calls :class:`~cairn.service.spaces.SpaceService`.
"""

from cairn.sdk.aio import AsyncMemory
from cairn.sdk.memory import Memory

__all__ = ["AsyncMemory", "Memory"]
