"""End to end: every document search surface against the real ``keepstone serve`` (SQLite and
PostgreSQL) and the real ``keepstone`` executable.

``GET /api/memory/search`` for one space and with ``scope=readable``; ``keepstone memory search``
with ``--server`` and on the local store, plain and ``--json``; the official MCP client
driving ``keepstone mcp`` over stdio, on the local store and on the server, finding a document
``memory_write`` wrote just before; and isolation with warm caches: two teams, and two
users of one team with ``user`` spaces, write documents sharing a word, and every hit of
every search — each searched once before to warm the caches — is in a space its caller
may read.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from keepstone.http_client import tls
from keepstone.spaces import encode_workdir_key
from tests.cli_runner import keepstone_argv, keepstone_env
from tests.e2e.test_serve_api import ADMIN_TOKEN, database, env, server  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow

WORD = "falcon"


@dataclass
class Caller:
    """A member's API key and the space ids it may read, with the documents they hold."""

    key: str
    user_id: str
    readable: dict[str, set[str]] = field(default_factory=dict)  # space id -> paths


@dataclass
class World:
    url: str
    callers: dict[str, Caller]
    #: path -> the space id it was written to (each path is unique in the world).
    space_of: dict[str, str]


def _params(**space: str) -> dict[str, str]:
    return {k: v for k, v in space.items() if v}


@pytest.fixture(scope="module")
def world(server: str) -> World:  # noqa: F811 - the imported fixture
    admin = httpx.Client(
        base_url=server, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30
    )

    def make(path: str, body: dict[str, object]) -> dict[str, object]:
        r = admin.post(path, json=body)
        assert r.status_code == 201, r.text
        out: dict[str, object] = r.json()
        return out

    org = str(make("/api/admin/orgs", {"name": "Search", "plan": "pro"})["id"])
    teams = {t: str(make("/api/admin/teams", {"org_id": org, "name": t})["id"]) for t in "ab"}
    callers: dict[str, Caller] = {}
    for user, team in (("ann", "a"), ("amy", "a"), ("bob", "b")):
        user_id = str(make("/api/admin/users", {"email": f"{user}@search.test"})["id"])
        make(f"/api/admin/teams/{teams[team]}/members", {"user_id": user_id, "role": "member"})
        key = make(
            "/api/admin/api-keys", {"user_id": user_id, "team_id": teams[team], "name": "e2e"}
        )["key"]
        callers[user] = Caller(str(key), user_id)

    space_of: dict[str, str] = {}

    def put(who: str | None, path: str, text: str, **space: str) -> str:
        token = callers[who].key if who else ADMIN_TOKEN
        r = httpx.put(
            f"{server}/api/memory/doc",
            params={**_params(**space), "path": path},
            json={"content": text},
            headers={"Authorization": f"Bearer {token}"},
            verify=tls(),
        )
        assert r.status_code == 201, r.text
        usage = httpx.get(
            f"{server}/api/memory/usage",
            params=_params(**space),
            headers={"Authorization": f"Bearer {token}"},
            verify=tls(),
        )
        space_id = str(usage.json()["space_id"])
        space_of[path] = space_id
        return space_id

    notes = {"visibility": "project", "name": "notes", "project": "web"}
    me = {"visibility": "user", "name": "me"}
    org_space = {"visibility": "org", "name": "shared"}
    # The same words, and the same space names, in both teams and both users' spaces.
    a_notes = put("ann", "alpha-notes.md", f"# Deploy\n{WORD} deploy checklist, team a\n", **notes)
    b_notes = put("bob", "bravo-notes.md", f"# Deploy\n{WORD} deploy checklist, team b\n", **notes)
    a_org = put("amy", "alpha-org.md", f"# Org\n{WORD} habits of team a\n", **org_space)
    b_org = put("bob", "bravo-org.md", f"# Org\n{WORD} habits of team b\n", **org_space)
    ann_me = put("ann", "ann-me.md", f"# Mine\n{WORD} private notes of ann\n", **me)
    amy_me = put("amy", "amy-me.md", f"# Mine\n{WORD} private notes of amy\n", **me)
    bob_me = put("bob", "bob-me.md", f"# Mine\n{WORD} private notes of bob\n", **me)
    glob = put(
        None,
        "catalogue.md",
        f"# Catalogue\n{WORD} catalogue for everyone\n",
        visibility="global",
        name="catalogue",
    )
    assert len({a_notes, b_notes, a_org, b_org, ann_me, amy_me, bob_me, glob}) == 8

    def readable(*ids: str) -> dict[str, set[str]]:
        return {i: {p for p, s in space_of.items() if s == i} for i in ids}

    callers["ann"].readable = readable(a_notes, a_org, ann_me, glob)
    callers["amy"].readable = readable(a_notes, a_org, amy_me, glob)
    callers["bob"].readable = readable(b_notes, b_org, bob_me, glob)
    admin.close()
    return World(server, callers, space_of)


def _search(world: World, who: str, **params: str) -> list[dict[str, object]]:
    r = httpx.get(
        f"{world.url}/api/memory/search",
        params={"q": WORD, "limit": "50", **params},
        headers={"Authorization": f"Bearer {world.callers[who].key}"},
        timeout=30,
        verify=tls(),
    )
    assert r.status_code == 200, r.text
    results: list[dict[str, object]] = r.json()["results"]
    return results


SINGLE_SPACES = {
    "notes": {"visibility": "project", "name": "notes", "project": "web"},
    "org": {"visibility": "org", "name": "shared"},
    "me": {"visibility": "user", "name": "me"},
    "global": {"visibility": "global", "name": "catalogue"},
}


def test_search_route_never_crosses_teams_or_users_with_caches_warm(world: World) -> None:
    def every_search(who: str) -> None:
        caller = world.callers[who]
        allowed = {p for paths in caller.readable.values() for p in paths}
        for space in SINGLE_SPACES.values():
            hits = _search(world, who, **space)
            assert hits, (who, space)
            for hit in hits:  # every hit is in the caller's own space of that name
                assert hit["path"] in allowed, (who, space, hit)
                assert set(hit) == {"path", "heading", "snippet", "score", "matched", "also_in"}
            assert len({world.space_of[str(h["path"])] for h in hits}) == 1
        hits = _search(world, who, scope="readable")
        for hit in hits:
            space = hit["space"]
            assert isinstance(space, dict)
            assert space["id"] in caller.readable, (who, hit)
            assert world.space_of[str(hit["path"])] == space["id"]
            assert space["user"] in (None, caller.user_id)
        assert {str(h["path"]) for h in hits} == allowed

    for _ in range(2):  # the first round warms every cache: BM25, vectors, versions
        for who in ("ann", "amy", "bob"):
            every_search(who)


def test_pending_drains_to_zero_while_the_server_indexes(world: World) -> None:
    """Each answer says how many chunks of its spaces wait for the indexer; the server's
    indexer embeds them, so the count only falls, to 0."""
    headers = {"Authorization": f"Bearer {world.callers['ann'].key}"}
    seen: list[int] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        r = httpx.get(
            f"{world.url}/api/memory/search",
            params={"q": WORD, "scope": "readable"},
            headers=headers,
            timeout=30,
            verify=tls(),
        )
        assert r.status_code == 200, r.text
        seen.append(r.json()["pending"])
        if seen[-1] == 0:
            break
        time.sleep(0.2)
    assert seen[-1] == 0, seen
    assert seen == sorted(seen, reverse=True)
    ready = httpx.get(f"{world.url}/readyz", timeout=30, verify=tls()).json()
    assert ready["status"] == "ready" and ready["backlog"]["chunks"] == 0
    assert (
        'keepstone_index_backlog{kind="chunks"} 0.0'
        in httpx.get(f"{world.url}/metrics", verify=tls()).text
    )


def test_readable_hits_name_their_space(world: World) -> None:
    hits = _search(world, "ann", scope="readable", path_prefix="alpha-notes")
    assert [h["path"] for h in hits] == ["alpha-notes.md"]
    assert hits[0]["space"] == {
        "id": world.space_of["alpha-notes.md"],
        "visibility": "project",
        "name": "notes",
        "project": "web",
        "bot": None,
        "user": None,
    }
    bad = httpx.get(
        f"{world.url}/api/memory/search",
        params={"q": WORD, "scope": "everything"},
        headers={"Authorization": f"Bearer {world.callers['ann'].key}"},
        verify=tls(),
    )
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "scope"


def _keepstone(home: Path, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*keepstone_argv(), *argv],
        env=keepstone_env(home),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_cli_searches_a_server(world: World, tmp_path: Path) -> None:
    remote = ["--server", world.url, "--token", world.callers["ann"].key]
    space = ["--visibility", "org", "--name", "shared"]
    plain = _keepstone(tmp_path / "home", "memory", "search", WORD, *remote, *space)
    assert plain.returncode == 0, plain.stderr
    lines = plain.stdout.splitlines()
    assert lines[0] == "alpha-org.md" and lines[1] == "  Org"
    assert "team b" not in plain.stdout

    as_json = _keepstone(tmp_path / "home", "memory", "search", WORD, *remote, *space, "--json")
    assert as_json.returncode == 0, as_json.stderr
    body = json.loads(as_json.stdout)
    assert [h["path"] for h in body["results"]] == ["alpha-org.md"]
    assert body["pending"] in (0, 1)  # the server's answer: its indexer may be at work

    every = _keepstone(tmp_path / "home", "memory", "search", WORD, *remote, "--all", "--json")
    assert every.returncode == 0, every.stderr
    assert json.loads(every.stdout)["pending"] in range(len(world.callers["ann"].readable) + 1)
    results = json.loads(every.stdout)["results"]
    assert {h["space"]["id"] for h in results} == set(world.callers["ann"].readable)

    refused = _keepstone(tmp_path / "home", "memory", "search", " ", *remote, *space)
    assert refused.returncode == 1 and "invalid_request" in refused.stderr


def test_cli_searches_the_local_store(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "repo"
    project.mkdir()
    note = tmp_path / "note.md"
    note.write_text("# Runbook\n\n## Rollback\n\nRun the rollback and watch the quokka.\n")
    space = ["--bot", "b1", "--project", str(project)]
    put = _keepstone(home, "memory", "put", "ops/runbook.md", "--file", str(note), *space)
    assert put.returncode == 0, put.stderr

    plain = _keepstone(home, "memory", "search", "quokka rollback", *space)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines()[:2] == ["ops/runbook.md", "  Runbook > Rollback"]

    as_json = _keepstone(home, "memory", "search", "quokka", *space, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["pending"] == 0  # embedded within the local budget
    hit = json.loads(as_json.stdout)["results"][0]  # meaning may find the other section too
    assert hit["path"] == "ops/runbook.md" and "keyword" in hit["matched"]

    every = _keepstone(home, "memory", "search", "quokka", "--all", "--json", cwd=project)
    assert every.returncode == 0, every.stderr
    found = json.loads(every.stdout)["results"]
    assert {h["space"]["id"] for h in found} == {found[0]["space"]["id"]}  # the one space
    found = found[0]
    assert found["space"]["bot"] == "b1"
    assert found["space"]["project"] == encode_workdir_key(project)


async def _write_then_search(params: StdioServerParameters, log: Path) -> str:
    """Over the official MCP client: write a note, then find it with memory_search."""
    with open(log, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                names = [t.name for t in (await session.list_tools()).tools]
                assert "memory_search" in names
                wrote = await session.call_tool(
                    "memory_write",
                    {"path": "topics/deploy.md", "content": "# Deploy\nUse the blue pelican.\n"},
                )
                assert not wrote.is_error, wrote.content
                found = await session.call_tool("memory_search", {"query": "pelican"})
                assert not found.is_error, found.content
                assert found.structured_content is not None
                hits = found.structured_content["results"]
                assert [h["path"] for h in hits] == ["topics/deploy.md"]
                # One chunk written: embedded before the search locally, maybe not yet
                # by the server's indexer.
                assert found.structured_content["pending"] in (0, 1)
                text = found.content[0].text if found.content[0].type == "text" else ""
                assert 'document topics/deploy.md, section "Deploy"' in text
                assert "```text\nDeploy Use the blue pelican.\n```" in text
                return text


def test_mcp_client_searches_the_local_store(tmp_path: Path) -> None:
    argv = keepstone_argv()
    params = StdioServerParameters(
        command=argv[0],
        args=[*argv[1:], "mcp", "--bot", "b1", "--project", str(tmp_path)],
        env=keepstone_env(tmp_path / "home"),
    )
    text = anyio.run(_write_then_search, params, tmp_path / "mcp.log")
    assert "Team memory records" not in text  # no server: documents only


def test_mcp_client_searches_the_server(world: World, tmp_path: Path) -> None:
    argv = keepstone_argv()
    key = world.callers["bob"].key
    params = StdioServerParameters(
        command=argv[0],
        args=[
            *argv[1:],
            "mcp",
            "--server",
            world.url,
            "--token",
            key,
            "--bot",
            "b1",
            "--project",
            str(tmp_path),
        ],
        env=keepstone_env(tmp_path / "home"),
    )
    text = anyio.run(_write_then_search, params, tmp_path / "mcp.log")
    # The org's plan has no team records: the documents still come back, the refusal is said.
    assert "Team memory records were not searched: plan_required" in text
    got = httpx.get(
        f"{world.url}/api/memory/search",
        params={
            "q": "pelican",
            "visibility": "bot",
            "name": "default",
            "bot": "b1",
            "project": encode_workdir_key(tmp_path),
        },
        headers={"Authorization": f"Bearer {key}"},
        verify=tls(),
    )
    assert [h["path"] for h in got.json()["results"]] == ["topics/deploy.md"]
