"""The README, driven top to bottom (``make run`` aside) in a temp ``KEEPSTONE_HOME``: every code
block is run as a reader would run it, and every command the prose names is run too, so the
README cannot drift from what Keepstone does.

Each fenced block must be claimed by exactly one handler below (a new block without one fails
:func:`test_every_block_is_driven`); each handler runs its block's text as it stands in the
README, only moving ports and paths a test must own (the server's port, the MCP config's
``/path/to/your/repo``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from keepstone.tools import TOOL_NAMES
from tests.serving import ServerProcess, free_port, running_server

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    line: int


def blocks() -> list[Block]:
    found = []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", README, flags=re.S | re.M):
        found.append(Block(m.group(1), m.group(2), README.count("\n", 0, m.start()) + 1))
    return found


#: name → (does this block belong to the handler, ...) — the classification of every block.
CLAIMS: dict[str, Callable[[Block], bool]] = {
    "quickstart": lambda b: b.text.startswith("make run"),
    "local_cli": lambda b: "keepstone memory put" in b.text,
    "claude_mcp_add": lambda b: b.text.startswith("claude mcp add"),
    "mcp_config": lambda b: b.lang == "json" and "mcpServers" in b.text,
    "python": lambda b: b.lang == "python",
    "serve": lambda b: "keepstone serve" in b.text and "KEEPSTONE_ADMIN_TOKEN" in b.text,
    "admin_curl": lambda b: "/api/admin/orgs" in b.text,
    "member_curl": lambda b: "/api/memory/doc" in b.text and "$KEY" in b.text,
}


def the_block(name: str) -> Block:
    (block,) = [b for b in blocks() if CLAIMS[name](b)]
    return block


def test_every_block_is_driven() -> None:
    for block in blocks():
        owners = [name for name, claims in CLAIMS.items() if claims(block)]
        assert len(owners) == 1, f"README line {block.line}: claimed by {owners or 'nobody'}"


def test_quickstart_is_the_two_make_targets() -> None:
    # `make run` is the one thing not driven here (it would serve until stopped); `make test`
    # is what runs this very test.
    lines = [line.split("#")[0].strip() for line in the_block("quickstart").text.splitlines()]
    assert lines == ["make run", "make test"]


# --- Running things as a reader would ----------------------------------------------------------


@pytest.fixture
def reader(tmp_path: Path) -> dict[str, str]:
    """A reader's environment: a fresh KEEPSTONE_HOME, `keepstone` on PATH, no KEEPSTONE_* of
    ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEPSTONE_")}
    env.update(KEEPSTONE_HOME=str(tmp_path / "home"), PATH=f"{BIN}{os.pathsep}{env['PATH']}")
    return env


def bash(script: str, env: dict[str, str], cwd: Path, timeout: float = 300) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_the_python_block(reader: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "readme.py"
    script.write_text(the_block("python").text)
    done = subprocess.run(
        [sys.executable, str(script)],
        env=reader,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    # What the block's comment says it prints, it prints.
    (shown,) = re.findall(r"print\(.*\)\s+# (.+)", the_block("python").text)
    assert done.stdout.strip() == shown.strip()


def test_the_local_cli_block(reader: dict[str, str], tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    out = bash(the_block("local_cli").text, reader, work)
    assert "created MEMORY.md" in out
    assert "exported 1 document(s)" in out
    assert (work / "mem.tar.gz").is_file()
    with tarfile.open(work / "mem.tar.gz") as archive:
        assert archive.getnames() == ["MEMORY.md"]
    # The import skipped the one document that exists; the search found it by meaning.
    assert "skipped 1" in out
    assert out.count("MEMORY.md") >= 4
    # `keepstone memory spaces` listed the bot's space.
    assert "whats-next" in out


# --- MCP -------------------------------------------------------------------------------------


async def _list_tools(params: StdioServerParameters, log: Path) -> list[str]:
    with open(log, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return [t.name for t in (await session.list_tools()).tools]


def _installed(argv: list[str]) -> list[str]:
    """The README's ``uvx keepstone …`` as the installed ``keepstone …``: uvx fetches the
    published package, which is the wheel tests/install/test_wheel.py runs through uvx."""
    assert argv[:2] == ["uvx", "keepstone"], argv
    return argv[1:]


def test_claude_mcp_add_runs_the_server_it_names(reader: dict[str, str], tmp_path: Path) -> None:
    # `claude mcp add keepstone -- COMMAND...`: Claude Code runs COMMAND as a stdio MCP server.
    argv = _installed(the_block("claude_mcp_add").text.strip().split(" -- ", 1)[1].split())
    params = StdioServerParameters(
        command=shutil.which(argv[0], path=reader["PATH"]) or argv[0],
        args=argv[1:],
        env=reader,
        cwd=tmp_path,
    )
    assert anyio.run(_list_tools, params, tmp_path / "mcp.log") == list(TOOL_NAMES)


def test_the_mcp_client_config(reader: dict[str, str], tmp_path: Path) -> None:
    entry = json.loads(the_block("mcp_config").text)["mcpServers"]["keepstone"]
    repo = tmp_path / "repo"
    repo.mkdir()
    command, *args = _installed([entry["command"], *entry["args"]])
    args = [str(repo) if a == "/path/to/your/repo" else a for a in args]
    assert str(repo) in args, "the README's placeholder path moved"
    params = StdioServerParameters(
        command=shutil.which(command, path=reader["PATH"]) or command,
        args=args,
        env=reader,
    )
    assert anyio.run(_list_tools, params, tmp_path / "mcp.log") == list(TOOL_NAMES)


def _inline(command_start: str) -> str:
    """The one inline command of the prose that starts with ``command_start``."""
    (found,) = {m for m in re.findall(r"`([^`\n]+)`", README) if m.startswith(command_start)}
    return found


def test_the_streamable_http_mcp_endpoint(reader: dict[str, str], tmp_path: Path) -> None:
    command = _inline("keepstone mcp --http")
    assert "--port 8421" in command and "http://127.0.0.1:8421/mcp" in README
    port = free_port()
    argv = command.replace("--port 8421", f"--port {port}").split()
    with _running(argv, reader, tmp_path, port, ready="/mcp", ok_status=(400, 405, 406)):

        async def main() -> list[str]:
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return [t.name for t in (await session.list_tools()).tools]

        assert anyio.run(main) == list(TOOL_NAMES)


def test_keepstone_run_and_keepstone_validate(reader: dict[str, str], tmp_path: Path) -> None:
    # `claude` is stood in for by a script that does what Claude Code does with the settings
    # keepstone run hands it: writes a note into the auto-memory directory.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "claude").write_text(
        "#!" + sys.executable + "\n"
        "import json, pathlib, sys\n"
        "settings = json.loads(sys.argv[sys.argv.index('--settings') + 1])\n"
        "d = pathlib.Path(settings['autoMemoryDirectory'])\n"
        "(d / 'MEMORY.md').write_text('# learned\\nuse staging first\\n')\n"
    )
    (fake / "claude").chmod(0o755)
    env = {**reader, "PATH": f"{fake}{os.pathsep}{reader['PATH']}"}
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    bash(_inline("keepstone run --auto-memory on"), env, repo)
    listed = bash("keepstone memory ls --bot my-bot --name auto-memory", env, repo)
    assert "MEMORY.md" in listed

    (repo / "agent.yaml").write_text(
        "memory:\n  visibility: bot\n  scope: {name: notes, bot: my-bot}\n"
        "auto_memory: on\nbackend: claude_code\n"
    )
    bash(_inline("keepstone validate agent.yaml"), env, repo)


# --- The server: start it, the admin's curl calls, the member's ------------------------------


@pytest.fixture
def served(reader: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    block = the_block("serve").text
    port = free_port()
    export, serve = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert serve == "keepstone serve" and export.startswith("export KEEPSTONE_ADMIN_TOKEN=")
    env = {**reader, "KEEPSTONE_ARGON2_TIME_COST": "1", "KEEPSTONE_ARGON2_MEMORY_KIB": "1024"}
    token = bash(f"{export}\necho $KEEPSTONE_ADMIN_TOKEN", env, tmp_path).strip()
    env["KEEPSTONE_ADMIN_TOKEN"] = token
    argv = ["keepstone", "serve", "--port", str(port)]
    with _running(argv, env, tmp_path, port):
        yield {**env, "PORT": str(port)}


def test_the_server_walkthrough(served: dict[str, str], tmp_path: Path) -> None:
    port = served["PORT"]
    admin = the_block("admin_curl").text.replace("127.0.0.1:8420", f"127.0.0.1:{port}")
    assert admin != the_block("admin_curl").text, "the README's server address moved"
    member = the_block("member_curl").text
    work = tmp_path / "work"
    work.mkdir()
    out = bash(f'{admin}\n{member}\necho "KEY=$KEY"', served, work)
    key = out.rsplit("KEY=", 1)[1].split()[0]
    assert key.startswith("keepstone_")
    assert '"path":"MEMORY.md"' in out.replace(" ", "")
    with tarfile.open(work / "notes.tar.gz") as archive:
        assert archive.getnames() == ["MEMORY.md"]
        member_file = archive.extractfile("MEMORY.md")
        assert member_file is not None and member_file.read() == b"# What we learned"
    # The same note is reachable from the CLI, over the server, by its project name.
    cli = bash(
        f"keepstone memory cat MEMORY.md --server http://127.0.0.1:{port} --token {key} "
        "--visibility project --name notes --project web",
        served,
        work,
    )
    assert cli == "# What we learned"


def _running(
    argv: list[str], env: dict[str, str], where: Path, port: int, **wait: Any
) -> contextlib.AbstractContextManager[ServerProcess]:
    """``argv`` as the reader's shell finds it on ``env``'s PATH, run in ``where`` and waited
    for until it answers on ``port`` (:func:`running_server`), stopped on exit."""
    exe = shutil.which(argv[0], path=env["PATH"]) or argv[0]
    log = where / f"{argv[1]}.log"
    return running_server([exe, *argv[1:]], port=port, env=env, log=log, cwd=where, **wait)
