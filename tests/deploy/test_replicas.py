"""The PostgreSQL deployment end to end (SPEC §10, docs/deploy.md): two stateless
``keepstone serve`` replicas over one PostgreSQL database and one Redis, driven at once.

* quotas hold across replicas: concurrent writes, overwrites and deletes through
  both never take the team counter over its quota, and afterwards every counter
  equals the bytes actually stored;
* the records search rate limit (5 a second per team) holds across replicas;
* what one replica writes, the other reads.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest

from keepstone.http_client import tls
from tests.conftest import (
    create_postgres_database,
    drop_postgres_database,
    require_postgres,
    require_redis,
)
from tests.deploy.cluster import (
    SERVICE_TOKEN,
    Cluster,
    Tenant,
    expect,
    provision,
    start_cluster,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

KiB = 1024
TEAM_QUOTA = 256 * KiB
#: Spaces the concurrent writers spread over (all of the one team).
SPACES = [
    {"name": "notes", "project": "alpha"},
    {"name": "notes", "project": "beta"},
    {"name": "shared", "visibility": "org"},
]
PATHS = [f"topic-{i}.md" for i in range(8)]


@dataclass
class Deployment:
    cluster: Cluster
    tenant: Tenant


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_postgres()
    redis_url = require_redis()
    database_url = create_postgres_database()
    try:
        with start_cluster(database_url, redis_url, tmp_path_factory.mktemp("deploy")) as started:
            yield started
    finally:
        drop_postgres_database(database_url)


@pytest.fixture
def deployment(cluster: Cluster) -> Deployment:
    """The module's two replicas and a tenant of this test's own: what one test leaves in
    its team (a quota filled to the last bytes) is no other test's starting point."""
    return Deployment(cluster, provision(cluster.urls[0], TEAM_QUOTA))


def _body(rng: random.Random, size: int) -> str:
    words = ["keepstone", "replica", "quota", "deploy", "postgres", "note", "memory", "team"]
    text = "# note\n"
    while len(text) < size:
        text += rng.choice(words) + (" " if rng.random() < 0.9 else ".\n")
    return text[:size]


def _writer(
    url: str, tenant: Tenant, seed: int, operations: int, statuses: list[int], errors: list[str]
) -> None:
    """Random PUTs (new documents and overwrites, 1-48 KiB) and DELETEs."""
    rng = random.Random(seed)
    with httpx.Client(base_url=url, headers=tenant.key_headers, timeout=60) as http:
        for _ in range(operations):
            space = rng.choice(SPACES)
            params = {**space, "path": rng.choice(PATHS)}
            if rng.random() < 0.2:
                r = http.delete("/api/memory/doc", params=params)
                ok = r.status_code in (204, 404)
            else:
                content = _body(rng, rng.randint(1 * KiB, 48 * KiB))
                r = http.put("/api/memory/doc", params=params, json={"content": content})
                # 413 quota_exceeded is the quota doing its job; anything else is a bug.
                ok = r.status_code in (200, 201) or (
                    r.status_code == 413 and r.json()["error"]["code"] == "quota_exceeded"
                )
            statuses.append(r.status_code)
            if not ok:
                errors.append(f"{r.request.method} {params} -> {r.status_code} {r.text}")


def _team_usage(url: str, tenant: Tenant) -> tuple[int, int]:
    r = httpx.get(
        f"{url}/api/memory/usage",
        params=SPACES[0],
        headers=tenant.key_headers,
        timeout=30,
        verify=tls(),
    )
    body = expect(r, 200)
    return int(body["team_used_bytes"]), int(body["team_quota_bytes"])


def _stored_bytes(url: str, tenant: Tenant) -> int:
    total = 0
    with httpx.Client(base_url=url, headers=tenant.key_headers, timeout=30) as http:
        for space in SPACES:
            docs = expect(http.get("/api/memory/docs", params=space), 200)["documents"]
            total += sum(int(d["size_bytes"]) for d in docs)
    return total


def test_quota_holds_under_concurrent_writes_through_both_replicas(
    deployment: Deployment,
) -> None:
    urls, tenant = deployment.cluster.urls, deployment.tenant
    statuses: list[int] = []
    errors: list[str] = []
    samples: list[tuple[int, int]] = []
    stop = threading.Event()

    def watch() -> None:
        # Sample the counter through both replicas while the writers run.
        i = 0
        while not stop.is_set():
            samples.append(_team_usage(urls[i % len(urls)], tenant))
            i += 1

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            futures = [
                pool.submit(_writer, urls[i % len(urls)], tenant, i, 30, statuses, errors)
                for i in range(8)
            ]
            for f in futures:
                f.result()
    finally:
        stop.set()
        watcher.join()

    assert not errors, "\n".join(errors[:10]) + "\n" + deployment.cluster.logs()[-4000:]
    assert statuses.count(413) > 0, f"the writers never met the quota: {statuses}"
    assert any(s in (200, 201) for s in statuses)
    assert samples, "no usage sample was taken"
    over = [(used, quota) for used, quota in samples if used > quota]
    assert not over, f"team counter went over its quota: {over[:5]}"
    assert {quota for _, quota in samples} == {TEAM_QUOTA}

    stored = _stored_bytes(urls[1], tenant)
    for url in urls:
        used, quota = _team_usage(url, tenant)
        assert (used, quota) == (stored, TEAM_QUOTA)
        org = expect(
            httpx.get(
                f"{url}/api/orgs/{tenant.org_id}/usage",
                headers=tenant.key_headers,
                timeout=30,
                verify=tls(),
            ),
            200,
        )
        assert org["memory_used_bytes"] == stored
        assert org["effective_memory_quota_bytes"] == TEAM_QUOTA
        assert org["teams"] == [
            {"team_id": tenant.team_id, "used_bytes": stored, "quota_bytes": TEAM_QUOTA}
        ]


def test_a_document_written_through_one_replica_is_read_through_the_other(
    deployment: Deployment,
) -> None:
    first, second = deployment.cluster.urls
    headers = deployment.tenant.key_headers
    params = {"name": "handover", "project": "gamma", "path": "handover/where-we-left.md"}
    content = "# Where we left off\n\nThe migration to PostgreSQL is half done.\n"
    written = expect(
        httpx.put(
            f"{first}/api/memory/doc",
            params=params,
            json={"content": content},
            headers=headers,
            timeout=30,
            verify=tls(),
        ),
        201,
    )
    read = httpx.get(
        f"{second}/api/memory/doc", params=params, headers=headers, timeout=30, verify=tls()
    )
    body = expect(read, 200)
    assert body["content"] == content
    assert body["etag"] == written["etag"] and read.headers["etag"].strip('"') == written["etag"]
    assert body["size_bytes"] == len(content.encode())

    # A delete through the second is seen by the first.
    expect(
        httpx.delete(
            f"{second}/api/memory/doc", params=params, headers=headers, timeout=30, verify=tls()
        ),
        204,
    )
    gone = httpx.get(
        f"{first}/api/memory/doc", params=params, headers=headers, timeout=30, verify=tls()
    )
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"


def test_records_rate_limit_holds_across_replicas(deployment: Deployment) -> None:
    urls, tenant = deployment.cluster.urls, deployment.tenant
    team = tenant.team_id
    # Memory is off until an org owner turns it on, in a browser session.
    settings = expect(
        httpx.put(
            f"{urls[1]}/api/teams/{team}/memory-settings",
            json={"enabled": True},
            headers=tenant.session_headers,
            timeout=30,
            verify=tls(),
        ),
        200,
    )
    assert settings["enabled"] is True and settings["plan_allows"] is True

    # A record saved through one replica is found through the other.
    saved = expect(
        httpx.post(
            f"{urls[0]}/api/internal/teams/{team}/memory",
            json={"text": "Moved the deployment to PostgreSQL with two replicas."},
            headers={"Authorization": f"Bearer {SERVICE_TOKEN}"},
            timeout=30,
            verify=tls(),
        ),
        201,
    )
    # Found through each replica; a replica's first search loads the embedding model,
    # which on a busy machine can take longer than the limiter's one-second window, so
    # both are warm before the burst below.
    for url in (urls[1], urls[0]):
        found = expect(
            httpx.post(
                f"{url}/api/teams/{team}/memory/search",
                json={"query": "postgresql replicas"},
                headers=tenant.key_headers,
                timeout=30,
                verify=tls(),
            ),
            200,
        )
        assert [r["id"] for r in found["results"]] == [saved["id"]]
    time.sleep(1.1)  # the burst has a window of its own

    # Fire 6 searches at once, split across the replicas: at most 5 are admitted.
    barrier = threading.Barrier(6)

    def search(i: int) -> httpx.Response:
        with httpx.Client(base_url=urls[i % 2], headers=tenant.key_headers, timeout=30) as http:
            barrier.wait()
            return http.post(f"/api/teams/{team}/memory/search", json={"query": "deployment"})

    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(search, range(6)))
    codes = [a.status_code for a in answers]
    assert set(codes) <= {200, 429}, [a.text for a in answers]
    assert codes.count(200) <= 5, codes
    refused = [a for a in answers if a.status_code == 429]
    assert refused, f"no search was refused: {codes}"
    for answer in refused:
        assert answer.json()["error"]["code"] == "rate_limited"
        assert int(answer.headers["Retry-After"]) >= 1
    # Both replicas answered searches (the limit is shared, not per process).
    served_by = {str(a.request.url).rsplit("/api/", 1)[0] for a in answers}
    assert served_by == set(urls)
