"""End to end: the real ``keepstone serve`` in a subprocess, over a socket.

An admin builds an org with two teams; members write, list, read, export and import
(team A's export into team B's space, with B's key) through ``HttpMemoryStore``; a
viewer is refused; a super-admin writes a global space and the audit shows it; the
operator CLI works on the same database. Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from keepstone.errors import MemberRoleRequired, NotFound, PlatformAuthorityRequired
from keepstone.spaces import SpaceRef
from keepstone.store.http import HttpMemoryStore
from tests.api.conftest import database_fixture
from tests.cli_runner import keepstone_argv
from tests.serving import keepstone_serve

pytestmark = pytest.mark.slow

ADMIN_TOKEN = "e2e-admin-token-0123456789abcdefghij"


# A fresh, empty SQLite and PostgreSQL database for the module (as the API tests have).
database = database_fixture("database")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = dict(os.environ)
    out.update(
        KEEPSTONE_HOME=str(tmp_path_factory.mktemp("home")),
        KEEPSTONE_ADMIN_TOKEN=ADMIN_TOKEN,
        KEEPSTONE_ARGON2_TIME_COST="1",
        KEEPSTONE_ARGON2_MEMORY_KIB="1024",
    )
    return out


@pytest.fixture(scope="module")
def server(
    database: str, env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    log = tmp_path_factory.mktemp("log") / "serve.log"
    with keepstone_serve("--database", database, env=env, log=log) as served:
        yield served.url
    logged = log.read_text(errors="replace")
    # The server's log is JSON lines and never carries the admin token.
    assert ADMIN_TOKEN not in logged
    for line in logged.splitlines():
        if line.startswith("{"):
            json.loads(line)


def test_serve_end_to_end(server: str, database: str, env: dict[str, str]) -> None:
    admin = httpx.Client(base_url=server, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})

    def make(path: str, body: dict[str, object]) -> str:
        r = admin.post(path, json=body)
        assert r.status_code == 201, r.text
        return str(r.json().get("id", ""))

    org = make("/api/admin/orgs", {"name": "Acme", "plan": "pro"})
    team_a = make("/api/admin/teams", {"org_id": org, "name": "a"})
    team_b = make("/api/admin/teams", {"org_id": org, "name": "b"})
    users = {
        r: make("/api/admin/users", {"email": f"{r}@acme.test"}) for r in ("ann", "bob", "vic")
    }
    root = make("/api/admin/users", {"email": "root@acme.test", "super_admin": True})
    for user, team, role in (
        ("ann", team_a, "member"),
        ("bob", team_b, "member"),
        ("vic", team_a, "viewer"),
    ):
        make(f"/api/admin/teams/{team}/members", {"user_id": users[user], "role": role})
    make(f"/api/admin/teams/{team_a}/members", {"user_id": root, "role": "member"})

    def key(user_id: str, team: str) -> str:
        r = admin.post(
            "/api/admin/api-keys", json={"user_id": user_id, "team_id": team, "name": "e2e"}
        )
        assert r.status_code == 201
        return str(r.json()["key"])

    ann = HttpMemoryStore(server, key(users["ann"], team_a))
    bob = HttpMemoryStore(server, key(users["bob"], team_b))
    vic = HttpMemoryStore(server, key(users["vic"], team_a))
    sup = HttpMemoryStore(server, key(root, team_a))
    space = SpaceRef.build("project", "notes", project="web")

    # A member writes, lists, reads and exports.
    assert ann.write(space, "MEMORY.md", "# Memory\n").created is True
    assert ann.write(space, "topics/deploy.md", "deploy with care\n").created is True
    assert [d.path for d in ann.list(space)] == ["MEMORY.md", "topics/deploy.md"]
    assert ann.read(space, "topics/deploy.md").content == "deploy with care\n"
    assert ann.usage(space).used_bytes == len("# Memory\n") + len("deploy with care\n")
    archive = io.BytesIO()
    assert ann.export(space, archive) == 2

    # Team B cannot see it, then imports A's export into its own space with its own key.
    assert bob.list(space) == []
    with pytest.raises(NotFound):
        bob.read(space, "MEMORY.md")
    archive.seek(0)
    report = bob.import_archive(space, archive)
    assert sorted(report.written) == ["MEMORY.md", "topics/deploy.md"] and not report.rejected
    assert bob.read(space, "MEMORY.md").content == "# Memory\n"
    bob.write(space, "MEMORY.md", "# B's own\n")
    assert ann.read(space, "MEMORY.md").content == "# Memory\n"

    # A viewer reads but is refused every mutation.
    assert vic.read(space, "MEMORY.md").content == "# Memory\n"
    with pytest.raises(MemberRoleRequired):
        vic.write(space, "MEMORY.md", "overwritten")
    with pytest.raises(MemberRoleRequired):
        vic.delete(space, "MEMORY.md")

    # Global: a member is refused, a super-admin writes, and the audit shows it.
    shared = SpaceRef.build("global", "handbook")
    with pytest.raises(PlatformAuthorityRequired):
        ann.write(shared, "rules.md", "x")
    assert sup.write(shared, "rules.md", "# Rules\n").created is True
    assert ann.read(shared, "rules.md").content == "# Rules\n"
    events = admin.get("/api/admin/audit").json()["events"]
    assert events[0]["action"] == "memory.global_write"
    assert events[0]["actor"] == f"user:{root}" and events[0]["path"] == "rules.md"

    # The operator CLI works on the same database, with the same operations.
    cli = [*keepstone_argv(), "admin"]
    out = subprocess.run(
        [*cli, "set-quota", "--org", org, "--bytes", "4096", "--database", database],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert sorted(json.loads(out.stdout)["teams_updated"]) == sorted([team_a, team_b])
    usage = admin.get(f"/api/orgs/{org}/usage").json()
    assert usage["effective_memory_quota_bytes"] == 4096
    assert {t["quota_bytes"] for t in usage["teams"]} == {4096}
    for store in (ann, bob, vic, sup):
        store.close()
    admin.close()


def test_db_upgrade_is_idempotent(database: str, env: dict[str, str], server: str) -> None:
    out = subprocess.run(
        [*keepstone_argv(), "db", "upgrade", "--database", database],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) == {"applied": []}


def test_serve_defaults_to_keepstone_home(tmp_path: Path) -> None:
    from keepstone.config import Config

    settings = Config.from_env({"KEEPSTONE_HOME": str(tmp_path)})
    assert settings.database_url == f"sqlite:///{tmp_path}/keepstone.db"
    assert Config.from_env({"KEEPSTONE_DATABASE_URL": "postgresql://x/y"}).database_url.startswith(
        "postgresql://"
    )
