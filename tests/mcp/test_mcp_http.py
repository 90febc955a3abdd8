"""``keepstone mcp --http``: the same tools over streamable HTTP, with the SDK's HTTP client."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from keepstone.spaces import SpaceRef, encode_workdir_key
from keepstone.store.fs import FilesystemStore
from tests.mcp.helpers import assert_write_withheld, exercise_tools, keepstone_argv, keepstone_env


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(home: Path, *args: str) -> Iterator[str]:
    """Start ``keepstone mcp --http`` on a free loopback port; yield its /mcp URL."""
    port = _free_port()
    log = open(home.parent / f"server-{port}.log", "w")  # closed in the finally below
    proc = subprocess.Popen(
        [*keepstone_argv(), "mcp", "--http", "--host", "127.0.0.1", "--port", str(port), *args],
        env=keepstone_env(home),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        # Wait for the socket to accept; a server that died is reported with its log.
        for _ in range(2400):
            if proc.poll() is not None:
                raise AssertionError(
                    f"keepstone mcp --http exited {proc.returncode}: "
                    + (home.parent / f"server-{port}.log").read_text()
                )
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise AssertionError(
                "keepstone mcp --http never accepted: "
                + (home.parent / f"server-{port}.log").read_text()
            )
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_http_tools_round_trip(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    with serving(home, "--bot", "whats-next", "--project", str(project)) as url:

        async def main() -> None:
            async with streamable_http_client(url) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    await exercise_tools(session)

        anyio.run(main)
    ref = SpaceRef.build(
        "bot", "default", tenant="local", project=encode_workdir_key(project), bot="whats-next"
    )
    assert FilesystemStore(home / "spaces").read(ref, "MEMORY.md").content == "# kept\n"


def test_http_read_only_and_global(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = tmp_path / "agent.yaml"
    config.write_text("memory:\n  visibility: global\n  scope: {name: catalogue}\n")
    with (
        serving(home, "--bot", "b", "--project", str(tmp_path), "--read-only") as ro_url,
        serving(home, "--config", str(config)) as global_url,
    ):

        async def main() -> None:
            for url, notice in ((ro_url, False), (global_url, True)):
                async with streamable_http_client(url) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        await assert_write_withheld(session, notice=notice)

        anyio.run(main)
