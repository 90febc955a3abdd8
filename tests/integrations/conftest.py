"""Memories for the integrations' tests: tests/sdk's ``memory_factory``, on a local memory (a
fresh ``KEEPSTONE_HOME``) and on a real ``keepstone serve`` (the session's server, a fresh
team per test); each test that takes it is marked :data:`local_and_server`."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from tests.sdk.conftest import MemoryFactory, memory_factory, server

__all__ = [
    "MemoryFactory",
    "import_without",
    "local_and_server",
    "memory_factory",
    "not_loaded_by_the_core",
    "server",
]

#: Run the test on a local memory and on one on a real server ("slow", over a socket). The
#: integrations adapt the synchronous Memory; their async twins wrap it themselves.
local_and_server = pytest.mark.parametrize(
    "memory_factory", ["local", pytest.param("server", marks=pytest.mark.slow)], indirect=True
)


def import_without(mp: pytest.MonkeyPatch, package: str, module: str) -> None:
    """Import ``module`` afresh as if ``package`` (a top-level name) were not installed."""
    for name in [n for n in sys.modules if n.split(".")[0] == package]:
        mp.setitem(sys.modules, name, None)
    mp.delitem(sys.modules, module)
    importlib.import_module(module)


def not_loaded_by_the_core(*packages: str) -> None:
    """Fail unless importing Keepstone's faces, in a fresh interpreter, loads none of
    ``packages`` (top-level names)."""
    probe = (
        "import sys, keepstone, keepstone.sdk, keepstone.cli.main, keepstone.integrations\n"
        "from keepstone import Memory\n"
        f"loaded = [m for m in sys.modules if m.split('.')[0] in {packages!r}]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)
