"""``keepstone mcp --http``: the same tools over streamable HTTP, with the SDK's HTTP client."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from keepstone.spaces import SpaceRef, encode_workdir_key
from keepstone.store.fs import FilesystemStore
from tests.cli_runner import keepstone_argv, keepstone_env
from tests.mcp.helpers import assert_write_withheld, exercise_tools
from tests.serving import free_port, running_server


@contextmanager
def serving(home: Path, *args: str) -> Iterator[str]:
    """Start ``keepstone mcp --http`` on a free loopback port; yield its /mcp URL."""
    port = free_port()
    argv = [*keepstone_argv(), "mcp", "--http", "--host", "127.0.0.1", "--port", str(port), *args]
    log = home.parent / f"server-{port}.log"
    # A GET without an event-stream Accept header is refused: the endpoint is up.
    with running_server(
        argv,
        port=port,
        env=keepstone_env(home),
        log=log,
        ready="/mcp",
        ok_status=(400, 405, 406),
        timeout=120,
    ) as server:
        yield f"{server.url}/mcp"


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
