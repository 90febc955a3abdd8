"""A record answered 201 is durable: a real ``keepstone serve`` killed with SIGKILL while
8 clients save records loses none of the saves it acknowledged (SQLite and PostgreSQL,
one process and ``--workers 2``: every process of the server is killed at once).

Saves that were in flight when the process died may or may not be there (their client
got no answer); every save that got its 201 must be, with its text, after a restart.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cli_runner import keepstone_env
from tests.conftest import fresh_database
from tests.records.conftest import listed_records, world_with_key
from tests.serving import ServerProcess, keepstone_serve

pytestmark = pytest.mark.slow

SERVICE = "kill9-service-token"
CLIENTS = 8
#: Acknowledged saves before the kill: enough that groups of several were committed.
BEFORE_KILL = 400


@pytest.fixture(params=["sqlite", "postgres"])
def database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with fresh_database(request.param, tmp_path_factory) as url:
        yield url


@pytest.fixture(params=[1, 2], ids=["1-worker", "2-workers"])
def workers(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def _serve(
    database: str, home: Path, log: Path, workers: int = 1
) -> contextlib.AbstractContextManager[ServerProcess]:
    """``keepstone serve`` in a session of its own: the kill below reaches the workers too,
    as a crash would."""
    env = keepstone_env(
        home, KEEPSTONE_SERVICE_TOKEN=SERVICE, KEEPSTONE_INDEXER="off", KEEPSTONE_EMBEDDER="none"
    )
    return keepstone_serve(
        *("--workers", str(workers), "--database", database),
        env=env,
        log=log,
        ready="/healthz",
        new_session=True,
    )


def test_no_acknowledged_record_is_lost_to_sigkill(
    database: str, workers: int, tmp_path: Path
) -> None:
    world, key = world_with_key(database)
    log = tmp_path / "serve.log"
    acknowledged: dict[str, str] = {}  # record id -> the text saved
    lock = threading.Lock()
    enough = threading.Event()

    with _serve(database, tmp_path / "home", log, workers) as server:

        def client(n: int) -> None:
            with httpx.Client(base_url=server.url, timeout=30) as http:
                for i in range(100_000):
                    text = f"client {n} fixed deploy step {i}"
                    try:
                        r = http.post(
                            f"/api/internal/teams/{world.team_id}/memory",
                            json={"text": text},
                            headers={"Authorization": f"Bearer {SERVICE}"},
                        )
                    except httpx.HTTPError:
                        return  # the server is gone: this save was never acknowledged
                    assert r.status_code == 201, r.text
                    with lock:
                        acknowledged[r.json()["id"]] = text
                        if len(acknowledged) >= BEFORE_KILL:
                            enough.set()

        threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        try:
            for t in threads:
                t.start()
            assert enough.wait(120), log.read_text()
            os.killpg(server.pid, signal.SIGKILL)  # mid-stream: the clients are still saving
            server.proc.wait(timeout=30)
            for t in threads:
                t.join(timeout=60)
            assert not any(t.is_alive() for t in threads)
        finally:
            if server.proc.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)

    with _serve(database, tmp_path / "home", log) as server:
        stored = listed_records(server.url, world.team_id, key)
    lost = set(acknowledged) - set(stored)
    assert not lost, f"{len(lost)} of {len(acknowledged)} acknowledged records lost"
    # Listed texts are fenced for display; the saved text is inside the fence.
    assert all(acknowledged[i] in stored[i] for i in acknowledged)
    assert len(acknowledged) >= BEFORE_KILL
