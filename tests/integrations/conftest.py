"""Memories for the integrations' tests: tests/sdk's ``memory_factory``, on a local memory (a
fresh ``KEEPSTONE_HOME``) and on a real ``keepstone serve`` (the session's server, a fresh
team per test); each test that takes it is marked :data:`local_and_server`."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.sdk.conftest import MemoryFactory, memory_factory, server

__all__ = [
    "MemoryFactory",
    "check_extra",
    "local_and_server",
    "memory_factory",
    "refused_import",
    "server",
]

ROOT = Path(__file__).resolve().parents[2]

#: Run the test on a local memory and on one on a real server ("slow", over a socket). The
#: integrations adapt the synchronous Memory; their async twins wrap it themselves.
local_and_server = pytest.mark.parametrize(
    "memory_factory", ["local", pytest.param("server", marks=pytest.mark.slow)], indirect=True
)


def refused_import(mp: pytest.MonkeyPatch, package: str, module: str) -> ImportError:
    """The ImportError that importing ``module`` raises when ``package`` is not installed."""
    for name in [n for n in sys.modules if n.split(".")[0] == package]:
        mp.setitem(sys.modules, name, None)  # as if not installed
    mp.setitem(sys.modules, package, None)
    mp.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError) as refused:
        importlib.import_module(module)
    return refused.value


def check_extra(extra: str, requirements: list[str], package: str) -> None:
    """The core install pulls none of ``package``: no dependency of the core names it, the
    extra ``extra`` is ``requirements``, and importing the core and every face loads none
    of it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert not [d for d in project["dependencies"] if d.startswith(package)]
    assert project["optional-dependencies"][extra] == requirements
    probe = (
        "import sys, keepstone, keepstone.sdk, keepstone.cli.main, keepstone.integrations\n"
        "from keepstone import Memory\n"
        f"assert not [m for m in sys.modules if m.split('.')[0] == {package!r}], 'loaded'\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)
