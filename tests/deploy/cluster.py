"""A small multi-replica deployment for tests: N real ``keepstone serve`` processes over
one fresh PostgreSQL database and one Redis (with a key prefix of its own).

:func:`start_cluster` starts the replicas on free loopback ports, waits for each
``/readyz`` and returns a :class:`Cluster`; :func:`provision` sets up a tenant
through the admin API exactly as an operator would (org, team, user, API key,
browser session). Nothing here reaches into the database behind the service's back.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.serving import ServerProcess, free_port, started_server

ADMIN_TOKEN = "deploy-admin-token-0123456789abcdefghijklmnop"
SERVICE_TOKEN = "deploy-service-token-0123456789abcdefghijklm"
PASSWORD = "correct horse battery staple"
KEEPSTONE = str(Path(sys.executable).with_name("keepstone"))
READY_TIMEOUT_SECONDS = 60.0


@dataclass
class Cluster:
    """Replicas sharing one database and one Redis prefix."""

    database_url: str
    redis_url: str
    redis_prefix: str
    replicas: list[ServerProcess] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [r.url for r in self.replicas]

    def logs(self) -> str:
        return "\n".join(f"--- {r.url}\n{r.log_text()}" for r in self.replicas)


def replica_env(home: Path, redis_url: str, prefix: str) -> dict[str, str]:
    """The environment every replica shares: same tokens, same Redis.

    ``KEEPSTONE_KEY_HASH_SECRET`` is left unset on purpose: the replicas, started together on
    an empty database, must agree on the one secret created there, or an API key minted
    through one replica would not verify on the other."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEPSTONE_")}
    env.update(
        {
            "KEEPSTONE_HOME": str(home),
            "KEEPSTONE_ADMIN_TOKEN": ADMIN_TOKEN,
            "KEEPSTONE_SERVICE_TOKEN": SERVICE_TOKEN,
            "KEEPSTONE_REDIS_URL": redis_url,
            "KEEPSTONE_REDIS_PREFIX": prefix,
            # Cheap password hashes: sign-in speed is not what these tests are about.
            "KEEPSTONE_ARGON2_TIME_COST": "1",
            "KEEPSTONE_ARGON2_MEMORY_KIB": "8192",
        }
    )
    return env


@contextlib.contextmanager
def start_cluster(
    database_url: str, redis_url: str, workdir: Path, replicas: int = 2
) -> Iterator[Cluster]:
    """Start ``replicas`` processes *together* (their migrations race on purpose: the
    advisory lock must serialise them), wait until all are ready, stop them after."""
    prefix = f"keepstone-deploy-test:{uuid.uuid4().hex}:"
    cluster = Cluster(database_url, redis_url, prefix)
    env = replica_env(workdir / "home", redis_url, prefix)
    try:
        with contextlib.ExitStack() as stack:
            for i in range(replicas):
                port = free_port()
                argv = [KEEPSTONE, "serve", "--host", "127.0.0.1", "--port", str(port)]
                argv += ["--database", database_url]
                log = workdir / f"replica-{i}.log"
                server = started_server(argv, port=port, env=env, log=log)
                cluster.replicas.append(stack.enter_context(server))
            for replica in cluster.replicas:
                replica.wait_ready(timeout=READY_TIMEOUT_SECONDS)
            yield cluster
    finally:
        _flush_prefix(redis_url, prefix)


def _flush_prefix(redis_url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@dataclass(frozen=True)
class Tenant:
    """One org on plan pro_plus with one team; ``user`` is an org owner and a team
    member, ``key`` its API key in the team, ``session`` its browser cookie + CSRF."""

    org_id: str
    team_id: str
    user_id: str
    email: str
    key: str
    session_cookie: str
    csrf_token: str

    @property
    def key_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    @property
    def session_headers(self) -> dict[str, str]:
        return {
            "Cookie": f"keepstone_session={self.session_cookie}",
            "X-CSRF-Token": self.csrf_token,
            "X-Keepstone-Team": self.team_id,
        }


def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def expect(response: httpx.Response, status: int) -> Any:
    """The JSON answer of ``response``, which must have ``status``."""
    assert response.status_code == status, (
        f"{response.request.method} {response.request.url} -> "
        f"{response.status_code} {response.text}"
    )
    return response.json() if response.content else None


def provision(base_url: str, quota_bytes: int) -> Tenant:
    """Set up one tenant through the admin API of the replica at ``base_url``."""
    admin = admin_headers()
    with httpx.Client(base_url=base_url, timeout=30) as http:
        email = f"owner-{uuid.uuid4().hex[:8]}@example.com"
        user = expect(
            http.post(
                "/api/admin/users",
                json={"email": email, "password": PASSWORD, "name": "Owner"},
                headers=admin,
            ),
            201,
        )["id"]
        org = expect(
            http.post(
                "/api/admin/orgs", json={"name": "Deploy Co", "plan": "pro_plus"}, headers=admin
            ),
            201,
        )["id"]
        expect(
            http.post(
                f"/api/admin/orgs/{org}/members",
                json={"user_id": user, "role": "owner"},
                headers=admin,
            ),
            201,
        )
        team = expect(
            http.post("/api/admin/teams", json={"org_id": org, "name": "core"}, headers=admin),
            201,
        )["id"]
        expect(
            http.post(
                f"/api/admin/teams/{team}/members",
                json={"user_id": user, "role": "member"},
                headers=admin,
            ),
            201,
        )
        patched = expect(
            http.patch(
                f"/api/admin/orgs/{org}", json={"memory_quota_bytes": quota_bytes}, headers=admin
            ),
            200,
        )
        assert patched["teams_updated"] == [team] and patched["teams_failed"] == [], patched
        key = expect(
            http.post(
                "/api/admin/api-keys",
                json={"user_id": user, "team_id": team, "name": "deploy"},
                headers=admin,
            ),
            201,
        )["key"]
        login = http.post("/api/auth/login", json={"email": email, "password": PASSWORD})
        csrf = expect(login, 200)["csrf_token"]
        cookie = login.cookies.get("keepstone_session")
        assert cookie, f"login set no keepstone_session cookie: {login.headers}"
    return Tenant(org, team, user, email, key, cookie, csrf)
