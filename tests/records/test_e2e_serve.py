"""End to end: two real ``keepstone serve`` processes over one database and one Redis
share the per-team search limit (SPEC §6 rate), and see each other's records."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from keepstone.db import make_engine
from keepstone.http_client import tls
from keepstone.identity.keys import load_key_hasher
from keepstone.identity.service import IdentityService
from keepstone.records.ratelimit import RedisRateLimiter
from keepstone.schema import upgrade_all
from tests.cli_runner import keepstone_env
from tests.conftest import create_postgres_database, drop_postgres_database
from tests.records.conftest import make_world
from tests.serving import free_port, serve_argv, started_server

pytestmark = pytest.mark.slow

SERVICE = "e2e-service-token"
ADMIN = "e2e-admin-token"


@dataclass
class Cluster:
    urls: list[str]
    team: str
    key: str
    prefix: str
    redis_url: str


@pytest.fixture(params=["sqlite", "postgres"])
def cluster(request: pytest.FixtureRequest, redis_url: str, tmp_path: Path) -> Iterator[Cluster]:
    if request.param == "sqlite":
        db_url = f"sqlite:///{tmp_path}/shared.db"
    else:
        db_url = create_postgres_database()
    engine = make_engine(db_url)
    upgrade_all(engine)
    world = make_world(engine)
    identity = IdentityService(engine, load_key_hasher(engine, None))
    key = identity.create_api_key(world.member, world.team_id)[1]
    engine.dispose()

    prefix = f"e2e:{uuid.uuid4().hex}:"
    env = keepstone_env(
        tmp_path / "home",
        KEEPSTONE_REDIS_URL=redis_url,
        KEEPSTONE_REDIS_PREFIX=prefix,
        KEEPSTONE_SERVICE_TOKEN=SERVICE,
        KEEPSTONE_ADMIN_TOKEN=ADMIN,
    )
    try:
        with contextlib.ExitStack() as stack:
            servers = [
                stack.enter_context(
                    started_server(
                        serve_argv(port, "--database", db_url),
                        port=port,
                        env=env,
                        log=tmp_path / f"serve{i}.log",
                    )
                )
                for i, port in enumerate([free_port(), free_port()])
            ]
            for server in servers:
                server.wait_ready("/healthz")
            yield Cluster([s.url for s in servers], world.team_id, key, prefix, redis_url)
    finally:
        if request.param == "postgres":
            drop_postgres_database(db_url)


def _search(c: Cluster, server: int, query: str = "rollback") -> httpx.Response:
    return httpx.post(
        f"{c.urls[server]}/api/teams/{c.team}/memory/search",
        json={"query": query},
        headers={"Authorization": f"Bearer {c.key}"},
        timeout=30,
        verify=tls(),
    )


def test_two_servers_share_records_and_limits(cluster: Cluster) -> None:
    c = cluster
    saved = httpx.post(
        f"{c.urls[0]}/api/internal/teams/{c.team}/memory",
        json={"text": "Automated the canary rollback for the payments API"},
        headers={"Authorization": f"Bearer {SERVICE}"},
        timeout=30,
        verify=tls(),
    )
    assert saved.status_code == 201, saved.text
    # Warm both servers (a server's first search loads the embedding model, which on a
    # busy machine can take longer than the limiter's one-second window).
    for server in (0, 1):
        hit = _search(c, server)
        assert [r["id"] for r in hit.json()["results"]] == [saved.json()["id"]]

    # A burst of 8 concurrent searches spread over both servers: 5 admitted, the rest 429.
    # A burst that a stalled machine stretched over two windows admits more; it is fired
    # again, a window later, up to three times.
    for _ in range(3):
        time.sleep(1.1)  # a window of its own
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(lambda i: _search(c, i % 2), range(8)))
        statuses = sorted(r.status_code for r in answers)
        if statuses == [200] * 5 + [429] * 3:
            break
    assert statuses == [200] * 5 + [429] * 3, [r.text for r in answers]
    refused = [r for r in answers if r.status_code == 429]
    assert all(r.json()["error"]["code"] == "rate_limited" for r in refused)
    assert all(int(r.headers["Retry-After"]) >= 1 for r in refused)

    # In flight: ten searches of the team held elsewhere (another replica's limiter on
    # the same Redis) leave no slot on either server until one finishes.
    holder = RedisRateLimiter(c.redis_url, prefix=c.prefix, rate=1000)
    held = [holder.acquire(c.team) for _ in range(10)]
    time.sleep(1.1)  # only the in-flight limit is left in play
    for server in (0, 1):
        r = _search(c, server)
        assert r.status_code == 429 and "at once" in r.json()["error"]["message"]
    held.pop()()
    assert _search(c, 1).status_code == 200
    for release in held:
        release()
    holder.close()
