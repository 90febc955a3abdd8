"""The Python API: ``from keepstone import Memory`` (docs/python.md).

A face beside the API, MCP and the auto-memory runner: it builds its services through
:mod:`keepstone.runtime` as the CLI does and calls :class:`~keepstone.service.spaces.SpaceService`.
"""

from keepstone.sdk.aio import AsyncMemory
from keepstone.sdk.memory import Memory

__all__ = ["AsyncMemory", "Memory"]
