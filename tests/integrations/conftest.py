"""Memories for the integrations' tests: tests/sdk's ``memory_factory``, on a local memory (a
fresh ``KEEPSTONE_HOME``) and on a real ``keepstone serve`` (the session's server, a fresh
team per test); each test that takes it is marked :data:`local_and_server`."""

from __future__ import annotations

import pytest

from tests.sdk.conftest import MemoryFactory, memory_factory, server

__all__ = ["MemoryFactory", "local_and_server", "memory_factory", "server"]

#: Run the test on a local memory and on one on a real server ("slow", over a socket). The
#: integrations adapt the synchronous Memory; their async twins wrap it themselves.
local_and_server = pytest.mark.parametrize(
    "memory_factory", ["local", pytest.param("server", marks=pytest.mark.slow)], indirect=True
)
