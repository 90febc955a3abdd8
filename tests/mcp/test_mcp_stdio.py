"""``keepstone mcp`` over stdio, driven by the mcp SDK's own client against the real process."""

from __future__ import annotations

from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

from keepstone.service.access import console_principal
from keepstone.service.spaces import SpaceService
from keepstone.spaces import SpaceRef, encode_workdir_key
from keepstone.store.base import PlatformGrant
from keepstone.store.fs import FilesystemStore
from tests.cli_runner import keepstone_argv, keepstone_env
from tests.mcp.helpers import assert_write_withheld, exercise_tools


def _params(home: Path, *args: str, cwd: Path | None = None) -> StdioServerParameters:
    argv = keepstone_argv()
    return StdioServerParameters(
        command=argv[0], args=[*argv[1:], "mcp", *args], env=keepstone_env(home), cwd=cwd
    )


def test_stdio_tools_round_trip(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()

    async def main() -> None:
        params = _params(home, "--bot", "whats-next", "--project", str(project))
        with open(tmp_path / "server.log", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    await exercise_tools(session)

    anyio.run(main)
    # The write landed in the local filesystem store, where `keepstone memory` would see it.
    ref = SpaceRef.build(
        "bot", "default", tenant="local", project=encode_workdir_key(project), bot="whats-next"
    )
    doc = FilesystemStore(home / "spaces").read(ref, "MEMORY.md")
    assert doc.content == "# kept\n"


def test_stdio_read_only_withholds_write(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ref = SpaceRef.build("project", "inbox", tenant="local", project=encode_workdir_key(tmp_path))
    SpaceService(FilesystemStore(home / "spaces")).write(
        console_principal("local"), ref, "MEMORY.md", "untouched"
    )

    async def main() -> None:
        params = _params(
            home, "--visibility", "project", "--name", "inbox", "--read-only", cwd=tmp_path
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                text = await assert_write_withheld(session, notice=False)
                assert "read-only" in text
                got = await session.call_tool("memory_read", {"path": "MEMORY.md"})
                assert got.content[0].type == "text" and got.content[0].text == "untouched"

    anyio.run(main)
    assert FilesystemStore(home / "spaces").read(ref, "MEMORY.md").content == "untouched"


def test_stdio_global_block_reads_and_lists_with_the_refusal_notice(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ref = SpaceRef.build("global", "catalogue")
    FilesystemStore(home / "spaces").write(
        ref, "catalogue.md", "shared", grant=PlatformGrant("test-operator")
    )
    config = tmp_path / "agent.yaml"
    config.write_text(
        "memory:\n  visibility: global\n  scope: {name: catalogue}\n  autoload: [catalogue.md]\n"
    )

    async def main() -> None:
        params = _params(home, "--config", str(config))
        with open(tmp_path / "server.log", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    await assert_write_withheld(session, notice=True)
                    # The autoload document is in the context the server hands over.
                    assert "shared" in (session.instructions or "")
                    listed = await session.call_tool("memory_list", {})
                    assert listed.structured_content is not None
                    assert [d["path"] for d in listed.structured_content["documents"]] == [
                        "catalogue.md"
                    ]

    anyio.run(main)
    # The C319 warning reached the operator on stderr.
    assert "C319" in (tmp_path / "server.log").read_text()
    assert FilesystemStore(home / "spaces").read(ref, "catalogue.md").content == "shared"
