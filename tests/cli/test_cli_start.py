"""The CLI's start loads no SQL stack: building the parser (``keepstone --help``, a
``--server`` command's start) imports neither SQLAlchemy nor a store, which the commands
that use them import when they run; and the commands on the plain tree (the filesystem
store) run without SQLAlchemy or numpy, which only a search needs there
(docs/performance.md, "The CLI's start")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.cli_runner import keepstone_env

HEAVY = (
    "sqlalchemy",
    "argon2",
    "keepstone.store.sql",
    "keepstone.store.fs",
    "keepstone.identity.service",
)


def _loaded_after(code: str) -> dict[str, bool]:
    shown = f"print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))"
    probe = f"import json, sys\n{code}\n{shown}"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded: dict[str, bool] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_building_the_parser_loads_no_sql_stack() -> None:
    loaded = _loaded_after("from keepstone.cli.main import build_parser\nbuild_parser()")
    assert loaded == dict.fromkeys(HEAVY, False)


def test_the_remote_store_loads_no_sql_stack() -> None:
    # What `keepstone memory ... --server URL` builds: the HTTP store under the space service.
    code = (
        "import argparse\n"
        "from keepstone.cli.common import spaces_for\n"
        "spaces_for(argparse.Namespace(server='http://127.0.0.1:9', token='t'))"
    )
    assert _loaded_after(code) == dict.fromkeys(HEAVY, False)


def test_a_local_command_still_finds_its_store() -> None:
    # The local store is imported when a command opens it.
    code = (
        "import argparse, os, tempfile\n"
        "os.environ['KEEPSTONE_HOME'] = tempfile.mkdtemp()\n"
        "from keepstone.cli.common import spaces_for\n"
        "spaces_for(argparse.Namespace(server=None, token=None))"
    )
    assert _loaded_after(code)["keepstone.store.fs"] is True


def test_commands_on_the_plain_tree_load_no_sql_engine_and_no_numpy(tmp_path: Path) -> None:
    # Every command an agent's hook runs on the local tree, but search, in one process.
    code = """
import sys, io, contextlib
from keepstone.cli.main import main
space = ['--bot', 'b']
runs = [
    ['put', 'a.md', *space], ['cat', 'a.md', *space], ['ls', *space], ['du', *space],
    ['log', 'a.md', *space], ['recent', *space], ['mv', 'a.md', 'b.md', *space],
    ['show', 'b.md', '--version', '1', *space], ['spaces'], ['rm', 'b.md', *space],
]
with contextlib.redirect_stdout(io.StringIO()):
    codes = [main(['memory', *run]) for run in runs]
assert codes == [0] * len(runs), codes
print(sorted(m for m in ('sqlalchemy', 'numpy', 'keepstone.store.sql') if m in sys.modules))
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        input="# notes\n",
        env=keepstone_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
