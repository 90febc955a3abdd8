"""``keepstone serve --workers 2`` end to end, on SQLite (WAL) and PostgreSQL.

Two worker processes accept on the one port. Concurrent writes arrive on fresh
connections, so the kernel hands them to both workers; afterwards every document reads
back whole from either, the listing has them all, and the space's byte counter equals
the bytes stored — the two processes' transactions never lost an update. Each worker
counts the requests it answered in its own metrics; the counts of the two add up to
every write. The purge runs in the one worker holding the lock file.
"""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from keepstone.api.app import WorkerApp
from keepstone.config import Config
from keepstone.http_client import tls
from tests.api.conftest import database_fixture
from tests.deploy.cluster import Tenant, expect, provision
from tests.e2e.workers import connections, two_workers
from tests.serving import worker_processes

pytestmark = pytest.mark.slow

WRITERS = 8
DOCS_EACH = 10
SPACE = {"name": "workers", "project": "p"}

database = database_fixture("database")


@pytest.fixture(scope="module")
def served(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """The URL and process id of ``keepstone serve --workers 2`` on ``database``."""
    with two_workers(database, tmp_path_factory.mktemp("workers")) as server:
        yield server.url, server.pid


def _content(writer: int, doc: int) -> str:
    return f"# writer {writer} doc {doc}\n" + "w" * (100 + 37 * writer + doc)


def _write_all(url: str, tenant: Tenant, writer: int) -> list[int]:
    statuses = []
    for doc in range(DOCS_EACH):
        # A new connection each time: the kernel picks the worker that accepts it.
        r = httpx.put(
            f"{url}/api/memory/doc",
            params={**SPACE, "path": f"w{writer}/d{doc}.md"},
            json={"content": _content(writer, doc)},
            headers=tenant.key_headers,
            timeout=60,
            verify=tls(),
        )
        statuses.append(r.status_code)
    return statuses


def _read(url: str, tenant: Tenant, route: str, **params: str) -> Any:
    """The JSON of ``GET route`` on the test's space as the tenant's member, on a new
    connection (so either worker may answer)."""
    answer = httpx.get(
        f"{url}{route}",
        params={**SPACE, **params},
        headers=tenant.key_headers,
        timeout=30,
        verify=tls(),
    )
    return expect(answer, 200)


def _put_count(metrics: str) -> float:
    pattern = (
        r'keepstone_http_requests_total\{method="PUT",route="/api/memory/doc",status="201"\} (\S+)'
    )
    found = re.search(pattern, metrics)
    return float(found.group(1)) if found else 0.0


def test_two_workers_share_the_port_and_the_data(served: tuple[str, int]) -> None:
    url, pid = served
    assert len(worker_processes(pid)) == 2
    tenant = provision(url, 10 * 1024 * 1024)

    with ThreadPoolExecutor(WRITERS) as pool:
        results = list(pool.map(lambda w: _write_all(url, tenant, w), range(WRITERS)))
    assert all(status == 201 for statuses in results for status in statuses), results

    expected = {f"w{w}/d{d}.md": _content(w, d) for w in range(WRITERS) for d in range(DOCS_EACH)}
    for path, content in expected.items():
        assert _read(url, tenant, "/api/memory/doc", path=path)["content"] == content
    listed = _read(url, tenant, "/api/memory/docs")
    assert {d["path"] for d in listed["documents"]} == set(expected)
    usage = _read(url, tenant, "/api/memory/usage")
    assert usage["used_bytes"] == sum(len(c.encode()) for c in expected.values())

    # Each worker has its own metrics: scrape on fresh connections until both have
    # answered; their counts of the writes add up to every write. A scrape is told to its
    # worker by the worker's end of the connection, not by the count it printed: the two
    # may well have answered 40 writes each. The scrapes go 16 at a time: the kernel hands
    # a lone connection on a shared socket to whichever worker wakes first, and an idle one
    # may win every time (one CI run: 200 of 200), while connections that arrive together
    # find the first worker busy.
    workers = worker_processes(pid)
    counts: dict[int, float] = {}
    with ThreadPoolExecutor(16) as pool:
        for _ in range(50):
            for worker, count in pool.map(lambda _: _scrape(url, workers), range(16)):
                assert counts.setdefault(worker, count) == count, (worker, count, counts)
            if len(counts) == 2:
                break
    assert len(counts) == 2, f"one worker answered every scrape: {counts}"
    assert sum(counts.values()) == WRITERS * DOCS_EACH, counts


def _scrape(url: str, workers: list[psutil.Process]) -> tuple[int, float]:
    """The process id of the worker that answered a scrape on a new connection, and the
    count of writes it printed. The connection stays open while the workers' sockets are
    searched for its far end."""
    address = httpx.URL(url)
    conn = http.client.HTTPConnection(address.host, address.port, timeout=30)
    try:
        conn.connect()
        assert conn.sock is not None
        port = conn.sock.getsockname()[1]
        conn.request("GET", "/metrics")
        count = _put_count(conn.getresponse().read().decode())
        for worker in workers:
            for c in connections(worker):
                if c.raddr and c.raddr.port == port:
                    return worker.pid, count
        raise AssertionError(f"no worker holds the connection from port {port}")
    finally:
        conn.close()


def test_one_worker_takes_the_purge_lock(tmp_path: Path) -> None:
    lock = str(tmp_path / "purge.lock")
    config = Config(database_url=f"sqlite:///{tmp_path}/keepstone.db")
    first, second = WorkerApp(config, lock), WorkerApp(config, lock)
    assert first._take_purge_lock()
    assert not second._take_purge_lock()
    assert first._lock_file is not None
    first._lock_file.close()  # the leader exits: its replacement takes the lock
    replacement = WorkerApp(config, lock)
    assert replacement._take_purge_lock()
    assert replacement._lock_file is not None
    replacement._lock_file.close()
