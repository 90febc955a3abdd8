"""End to end, against a real ``keepstone serve`` (SQLite and PostgreSQL): the relevance
floor, the empty answer's hint, near-duplicates folded into ``also_in``, and the
``since`` / ``until`` / ``min_score`` / ``tags`` filters, on every face that searches —
``GET /api/memory/search``, ``POST /api/teams/{team}/memory/search``, ``keepstone memory
search --server``, ``memory_search`` over the official MCP client, and
``Memory.connect(...).search``. (The web UI's search page: tests/web/test_browser.py.)

The server searches by keyword alone (``KEEPSTONE_EMBEDDER=none``), so what each search
answers does not hang on when its indexer embeds what was written; the floor's dense
side is tested on the labelled sets (tests/search/test_floor.py).
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from keepstone import Memory
from keepstone.errors import InvalidRequest
from keepstone.http_client import tls
from tests.api.conftest import database_fixture
from tests.cli_runner import keepstone_argv, keepstone_env
from tests.serving import keepstone_serve

pytestmark = pytest.mark.slow

ADMIN = "floor-admin-token-0123456789abcdefghijklmn"
SERVICE = "floor-service-token-0123456789abcdefghijk"
PASSWORD = "correct horse battery staple"
#: Nothing any document or record holds.
OFF_TOPIC = "boiling point of mercury in kelvin"
SPACE = {"visibility": "org", "name": "shared"}
OTHER = {"visibility": "project", "name": "notes", "project": "web"}
RUNBOOK = "---\ntags: [ops, deploy]\n---\n# Deploy\nfalcon deploy checklist and rollback steps\n"
JOURNAL = "# Journal\nfalcon migrated the billing database\n"
COPY = "# Copied\nthe shared falcon glossary\n"
TOMORROW = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
YESTERDAY = (datetime.now(UTC) - timedelta(days=1)).date().isoformat()

database = database_fixture("database")


@dataclass
class Server:
    url: str
    team: str
    key: str
    records: list[str]

    def docs(self, **params: str) -> httpx.Response:
        return httpx.get(
            f"{self.url}/api/memory/search",
            params=params,
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=30,
            verify=tls(),
        )

    def records_search(self, **body: Any) -> httpx.Response:
        """One records search; a team may search 5 times a second (SPEC §6), and these
        tests ask more often than that, so a ``rate_limited`` answer is waited out as a
        client would (its ``Retry-After``) and asked again."""
        for _ in range(5):
            r = httpx.post(
                f"{self.url}/api/teams/{self.team}/memory/search",
                json=body,
                headers={"Authorization": f"Bearer {self.key}"},
                timeout=30,
                verify=tls(),
            )
            if r.status_code != 429:
                return r
            time.sleep(float(r.headers.get("Retry-After", "1")))
        return r


def _ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code < 300, r.text
    body: dict[str, Any] = r.json() if r.content else {}
    return body


def _people(c: httpx.Client) -> tuple[str, str]:
    """An org with team memory, its owner (who turns memory on) and a member's API key:
    (team id, key)."""
    admin = {"Authorization": f"Bearer {ADMIN}"}
    org = _ok(c.post("/api/admin/orgs", json={"name": "Acme", "plan": "pro_plus"}, headers=admin))
    team = str(
        _ok(c.post("/api/admin/teams", json={"org_id": org["id"], "name": "t"}, headers=admin))[
            "id"
        ]
    )
    ids = {}
    for role in ("owner", "member"):
        email = f"{role}-{uuid.uuid4().hex[:6]}@example.com"
        body = {"email": email, "password": PASSWORD}
        ids[role] = (_ok(c.post("/api/admin/users", json=body, headers=admin))["id"], email)
    owner = {"user_id": ids["owner"][0], "role": "owner"}
    _ok(c.post(f"/api/admin/orgs/{org['id']}/members", json=owner, headers=admin))
    member = {"user_id": ids["member"][0], "role": "member"}
    _ok(c.post(f"/api/admin/teams/{team}/members", json=member, headers=admin))
    minted = {"user_id": ids["member"][0], "team_id": team, "name": "floor"}
    key = str(_ok(c.post("/api/admin/api-keys", json=minted, headers=admin))["key"])
    login = _ok(c.post("/api/auth/login", json={"email": ids["owner"][1], "password": PASSWORD}))
    csrf = {"X-CSRF-Token": str(login["csrf_token"]), "X-Keepstone-Team": team}
    _ok(c.put(f"/api/teams/{team}/memory-settings", json={"enabled": True}, headers=csrf))
    c.cookies.clear()
    return team, key


@pytest.fixture(scope="module")
def server(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("serve")
    env = keepstone_env(
        tmp / "home",
        KEEPSTONE_ADMIN_TOKEN=ADMIN,
        KEEPSTONE_SERVICE_TOKEN=SERVICE,
        KEEPSTONE_ARGON2_TIME_COST="1",
        KEEPSTONE_ARGON2_MEMORY_KIB="1024",
        KEEPSTONE_EMBEDDER="none",
    )
    with keepstone_serve("--database", database, env=env, log=tmp / "serve.log") as served:
        with httpx.Client(base_url=served.url, timeout=30) as c:
            team, key = _people(c)
            auth = {"Authorization": f"Bearer {key}"}
            for space, path, text in (
                (SPACE, "ops/runbook.md", RUNBOOK),
                (SPACE, "journal.md", JOURNAL),
                (SPACE, "glossary.md", COPY),
                (OTHER, "glossary.md", COPY),  # the same text in a second space
            ):
                params = {**space, "path": path}
                _ok(c.put("/api/memory/doc", params=params, json={"content": text}, headers=auth))
            saved = []
            for text in ("Pinned the falcon worker image", "Pinned the falcon worker image."):
                body = {"text": text}
                service = {"Authorization": f"Bearer {SERVICE}"}
                saved.append(
                    str(
                        _ok(
                            c.post(f"/api/internal/teams/{team}/memory", json=body, headers=service)
                        )["id"]
                    )
                )
        yield Server(served.url, team, key, saved)


# --- the API ----------------------------------------------------------------------------------


def test_api_documents_floor_hint_filters_and_also_in(server: Server) -> None:
    empty = _ok(server.docs(**SPACE, q=OFF_TOPIC))
    assert empty["results"] == [] and "nothing relevant enough matched" in empty["hint"]
    found = _ok(server.docs(**SPACE, q="falcon"))
    assert {h["path"] for h in found["results"]} == {"ops/runbook.md", "journal.md", "glossary.md"}
    assert "hint" not in found
    tagged = _ok(server.docs(**SPACE, q="falcon", tags="ops,deploy"))
    assert [h["path"] for h in tagged["results"]] == ["ops/runbook.md"]
    assert _ok(server.docs(**SPACE, q="falcon", tags="ops,billing"))["results"] == []
    later = _ok(server.docs(**SPACE, q="falcon", since=TOMORROW))
    assert later["results"] == [] and "filters" in later["hint"]
    assert (
        len(_ok(server.docs(**SPACE, q="falcon", since=YESTERDAY, until=TOMORROW))["results"]) == 3
    )
    assert len(_ok(server.docs(**SPACE, q="falcon", recency_days="30"))["results"]) == 3
    # "falcon" is a share of "falcon telescope": above the floor, below min_score 0.9.
    assert _ok(server.docs(**SPACE, q="falcon telescope"))["results"]
    assert _ok(server.docs(**SPACE, q="falcon telescope", min_score="0.9"))["results"] == []
    both = _ok(server.docs(scope="readable", q="shared glossary"))["results"]
    [glossary] = [h for h in both if h["path"] == "glossary.md"]
    assert len(glossary["also_in"]) == 1 and glossary["also_in"][0]["path"] == "glossary.md"
    assert glossary["also_in"][0]["space_id"] != glossary["space"]["id"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "yesterday"}, "since"),
        ({"until": "2025-02-30"}, "until"),
        ({"since": TOMORROW, "until": YESTERDAY}, "since"),
        ({"min_score": "1.5"}, "min_score"),
        ({"min_score": "high"}, "min_score"),
        ({"tags": "no spaces"}, "tags"),
        ({"recency_days": "-3"}, "recency_days"),
    ],
)
def test_api_documents_bad_filters_are_400_naming_them(
    server: Server, params: dict[str, str], field: str
) -> None:
    r = server.docs(**SPACE, q="falcon", **params)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_request" and error["field"] == field


def test_api_records_floor_hint_filters_and_also_in(server: Server) -> None:
    answer = _ok(server.records_search(query="falcon worker"))
    [hit] = answer["results"]  # the two records of one text are one hit
    assert sorted([hit["id"], *hit["also_in"]]) == sorted(server.records)
    empty = _ok(server.records_search(query=OFF_TOPIC))
    assert empty["results"] == [] and "nothing relevant enough matched" in empty["hint"]
    assert _ok(server.records_search(query="falcon worker", since=TOMORROW))["results"] == []
    window = _ok(server.records_search(query="falcon worker", since=YESTERDAY, until=TOMORROW))
    assert len(window["results"]) == 1
    assert len(_ok(server.records_search(query="falcon worker", recency_days=30))["results"]) == 1
    assert _ok(server.records_search(query="falcon telescope", min_score=0.9))["results"] == []
    for body, field in (
        ({"since": "soon"}, "since"),
        ({"since": TOMORROW, "until": YESTERDAY}, "since"),
        ({"min_score": 2}, "min_score"),
        ({"min_score": "0.5"}, "min_score"),
        ({"tags": "ops"}, "tags"),  # records have no tags: an unknown field
    ):
        r = server.records_search(query="falcon", **body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["field"] == field, (body, r.text)


# --- the CLI ----------------------------------------------------------------------------------


def _cli(server: Server, home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    remote = ["--server", server.url, "--token", server.key]
    space = ["--visibility", "org", "--name", "shared"]
    return subprocess.run(
        [*keepstone_argv(), "memory", "search", *argv, *remote, *space],
        env=keepstone_env(home),
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_cli_floor_hint_and_filters(server: Server, tmp_path: Path) -> None:
    home = tmp_path / "home"
    empty = _cli(server, home, OFF_TOPIC, "--json")
    assert empty.returncode == 0, empty.stderr
    body = json.loads(empty.stdout)
    assert body["results"] == [] and "nothing relevant enough" in body["hint"]
    plain = _cli(server, home, OFF_TOPIC)
    assert plain.returncode == 0 and "nothing relevant enough matched" in plain.stderr
    tagged = _cli(server, home, "falcon", "--tags", "ops", "--json")
    assert [h["path"] for h in json.loads(tagged.stdout)["results"]] == ["ops/runbook.md"]
    later = _cli(server, home, "falcon", "--since", TOMORROW, "--json")
    assert json.loads(later.stdout)["results"] == []
    window = _cli(server, home, "falcon", "--since", YESTERDAY, "--until", TOMORROW, "--json")
    assert len(json.loads(window.stdout)["results"]) == 3
    high = _cli(server, home, "falcon telescope", "--min-score", "0.9", "--json")
    assert json.loads(high.stdout)["results"] == []
    bad = _cli(server, home, "falcon", "--since", "soon")
    assert bad.returncode == 1 and "invalid_request" in bad.stderr and "since" in bad.stderr


# --- MCP --------------------------------------------------------------------------------------


async def _mcp_searches(params: StdioServerParameters, log: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with open(log, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = {t.name: t for t in (await session.list_tools()).tools}
                out["schema"] = tools["memory_search"].input_schema["properties"]
                searches: dict[str, dict[str, Any]] = {
                    "empty": {"query": OFF_TOPIC},
                    "tagged": {"query": "falcon", "tags": "ops,deploy"},
                    "later": {"query": "falcon", "since": TOMORROW},
                    "high": {"query": "falcon telescope", "min_score": 0.9},
                    "records": {"query": "falcon worker"},
                    "bad": {"query": "falcon", "until": "never"},
                }
                for name, args in searches.items():
                    result = await session.call_tool("memory_search", args)
                    text = result.content[0].text if result.content[0].type == "text" else ""
                    out[name] = (result.is_error, text, result.structured_content)
    return out


def test_mcp_floor_hint_filters_and_also_in(server: Server, tmp_path: Path) -> None:
    argv = keepstone_argv()
    params = StdioServerParameters(
        command=argv[0],
        args=[*argv[1:], "mcp", "--server", server.url, "--visibility", "org", "--name", "shared"],
        env={**keepstone_env(tmp_path / "home"), "KEEPSTONE_TOKEN": server.key},
    )
    got = anyio.run(_mcp_searches, params, tmp_path / "mcp.log")
    assert {"since", "until", "min_score", "tags", "recency_days"} <= set(got["schema"])
    failed, text, data = got["empty"]
    assert not failed and data["results"] == [] and "nothing relevant enough" in data["hint"]
    assert "nothing relevant enough matched" in text
    assert [h["path"] for h in got["tagged"][2]["results"]] == ["ops/runbook.md"]
    assert got["later"][2]["results"] == [] and got["later"][2]["records"]["results"] == []
    assert got["high"][2]["results"] == []
    records = got["records"][2]["records"]["results"]
    assert len(records) == 1 and len(records[0]["also_in"]) == 1
    assert "same text as" in got["records"][1]
    failed, text, _ = got["bad"]
    assert failed and "until" in text


# --- Python -----------------------------------------------------------------------------------


def test_python_floor_filters_and_also_in(server: Server) -> None:
    memory = Memory.connect(server.url, server.key, visibility="org", name="shared")
    try:
        nothing = memory.search(OFF_TOPIC)
        assert nothing == [] and "nothing relevant enough matched" in str(nothing.hint)
        assert [h.path for h in memory.search("falcon", tags=["ops", "deploy"])] == [
            "ops/runbook.md"
        ]
        assert memory.search("falcon", since=datetime.now(UTC) + timedelta(days=1)) == []
        assert len(memory.search("falcon", since=YESTERDAY, until=TOMORROW)) == 3
        assert memory.search("falcon telescope", min_score=0.9) == []
        assert memory.search("falcon telescope", min_score=-1)
        with pytest.raises(InvalidRequest) as caught:
            memory.search("falcon", min_score=3)
        assert caught.value.details["field"] == "min_score"
    finally:
        memory.close()
    other = Memory.connect(
        server.url, server.key, visibility="project", name="notes", project="web"
    )
    try:
        [hit] = other.search("shared glossary")
        assert hit.path == "glossary.md" and hit.also_in == ()  # one space: nothing to fold
    finally:
        other.close()
