"""End to end against a real ``keepstone serve``: ``keepstone mcp --server`` offers
memory_search over the team's records and writes through the REST API; ``keepstone run
--server`` persists there."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from keepstone.http_client import tls
from keepstone.spaces import AUTO_MEMORY_SPACE, encode_workdir_key
from keepstone.tools import TOOL_NAMES
from tests.automemory.agent_script import AGENT
from tests.cli_runner import keepstone_argv, keepstone_env
from tests.mcp.helpers import exercise_edit_move_delete
from tests.serving import keepstone_serve

ADMIN = "e2e-admin-token-0123456789abcdefghijklmnop"
SERVICE = "e2e-service-token-0123456789abcdefghijklm"
PASSWORD = "correct horse battery staple"

pytestmark = pytest.mark.slow


@dataclass
class Server:
    url: str
    team: str
    key: str


def _ok(r: httpx.Response) -> dict[str, object]:
    assert r.status_code < 300, r.text
    body: dict[str, object] = r.json() if r.content else {}
    return body


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("serve")
    env = keepstone_env(
        tmp / "home",
        KEEPSTONE_ADMIN_TOKEN=ADMIN,
        KEEPSTONE_SERVICE_TOKEN=SERVICE,
        KEEPSTONE_ARGON2_TIME_COST="1",
        KEEPSTONE_ARGON2_MEMORY_KIB="1024",
    )
    database = f"sqlite:///{tmp}/keepstone.db"
    with keepstone_serve(
        "--database", database, env=env, log=tmp / "serve.log", ready="/healthz"
    ) as served:
        url = served.url
        with httpx.Client(base_url=url, timeout=30) as c:
            admin = {"Authorization": f"Bearer {ADMIN}"}

            def post(path: str, body: dict[str, object]) -> dict[str, object]:
                return _ok(c.post(path, json=body, headers=admin))

            org = post("/api/admin/orgs", {"name": "Acme", "plan": "pro_plus"})["id"]
            team = str(post("/api/admin/teams", {"org_id": org, "name": "core"})["id"])
            ids: dict[str, tuple[object, str]] = {}
            for role in ("owner", "member"):
                email = f"{role}-{uuid.uuid4().hex[:6]}@example.com"
                user = post("/api/admin/users", {"email": email, "password": PASSWORD})
                ids[role] = (user["id"], email)
            post(f"/api/admin/orgs/{org}/members", {"user_id": ids["owner"][0], "role": "owner"})
            member = {"user_id": ids["member"][0], "role": "member"}
            post(f"/api/admin/teams/{team}/members", member)
            minted = post(
                "/api/admin/api-keys",
                {"user_id": ids["member"][0], "team_id": team, "name": "mcp"},
            )
            key = str(minted["key"])
            login = _ok(
                c.post("/api/auth/login", json={"email": ids["owner"][1], "password": PASSWORD})
            )
            _ok(
                c.put(
                    f"/api/teams/{team}/memory-settings",
                    json={"enabled": True},
                    headers={"X-CSRF-Token": str(login["csrf_token"]), "X-Keepstone-Team": team},
                )
            )
            c.cookies.clear()
            _ok(
                c.post(
                    f"/api/internal/teams/{team}/memory",
                    json={"text": "Fixed the flaky migration test by pinning PostgreSQL 16."},
                    headers={"Authorization": f"Bearer {SERVICE}"},
                )
            )
        yield Server(url, team, key)


def test_mcp_against_a_server_searches_records_and_writes(server: Server, tmp_path: Path) -> None:
    argv = keepstone_argv()
    params = StdioServerParameters(
        command=argv[0],
        args=[*argv[1:], "mcp", "--server", server.url, "--bot", "b", "--project", str(tmp_path)],
        env={**keepstone_env(tmp_path / "home"), "KEEPSTONE_TOKEN": server.key},
    )

    async def main() -> None:
        with open(tmp_path / "mcp.log", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    names = [t.name for t in (await session.list_tools()).tools]
                    assert names == list(TOOL_NAMES)
                    found = await session.call_tool("memory_search", {"query": "flaky migration"})
                    assert not found.is_error, found.content
                    text = found.content[0].text if found.content[0].type == "text" else ""
                    assert "pinning PostgreSQL 16" in text and "```" in text
                    wrote = await session.call_tool(
                        "memory_write", {"path": "MEMORY.md", "content": "via the server"}
                    )
                    assert not wrote.is_error, wrote.content
                    bad = await session.call_tool("memory_read", {"path": "./MEMORY.md"})
                    assert bad.is_error and bad.structured_content is not None
                    assert bad.structured_content.get("canonical") == "MEMORY.md"
                    empty = await session.call_tool("memory_search", {"query": ""})
                    assert empty.is_error
                    # Edit, move and delete go through the server's routes too.
                    await exercise_edit_move_delete(session)

    anyio.run(main)
    got = httpx.get(
        f"{server.url}/api/memory/doc",
        params={
            "visibility": "bot",
            "name": "default",
            "project": encode_workdir_key(tmp_path),
            "bot": "b",
            "path": "MEMORY.md",
        },
        headers={"Authorization": f"Bearer {server.key}"},
        verify=tls(),
    )
    assert got.status_code == 200 and got.json()["content"] == "via the server"


def test_run_against_a_server_persists_there(server: Server, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    env = {
        **keepstone_env(tmp_path / "home"),
        "AGENT_REPORT": str(tmp_path / "r.json"),
        "AGENT_LINE": "remembered on the server",
    }
    proc = subprocess.run(
        [
            *keepstone_argv(),
            "run",
            "--server",
            server.url,
            "--token",
            server.key,
            "--auto-memory",
            "on",
            "--bot",
            "b",
            "--",
            sys.executable,
            str(agent),
            "append",
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    got = httpx.get(
        f"{server.url}/api/memory/doc",
        params={
            "visibility": "bot",
            "name": AUTO_MEMORY_SPACE,
            "project": encode_workdir_key(repo),
            "bot": "b",
            "path": "MEMORY.md",
        },
        headers={"Authorization": f"Bearer {server.key}"},
        verify=tls(),
    )
    assert got.status_code == 200, got.text
    assert got.json()["content"] == "remembered on the server\n"
    assert json.loads((tmp_path / "r.json").read_text())["seen"] == {}
