"""The records search limit's Redis (SPEC §6) killed, then hung, under load.

A real ``keepstone serve --workers 2`` saves, lists and searches team records with a few
concurrent clients while this module's own ``redis-server`` (a free port, never the
machine's) is killed with SIGKILL and started again on the same port, then stopped with
SIGSTOP and continued. The designed behaviour (docs/deploy.md, "Redis"): a search whose
limit cannot be checked answers ``503 store_unavailable`` (the limit is never dropped);
saving and listing, which do not use Redis, go on. So throughout: saves 201, lists 200,
searches 200, 429 or that 503 — never a 500, never a traceback in the server's log, and no
request left without an answer (the client's timeout is the bound). ``/readyz`` and
``keepstone doctor`` say Redis is down while it is, and both faults end without a restart
of the server; the team's in-flight slots are all free once the clients stop; every save
that was answered 201 is listed at the end.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections import Counter
from pathlib import Path

import httpx
import pytest
import redis

from keepstone.http_client import tls
from tests.cli_runner import keepstone_env, run_cli
from tests.records.conftest import listed_records, world_with_key
from tests.serving import ServerProcess, free_port, keepstone_serve, redis_server

#: Several processes and two faults: handed out first under pytest-xdist (tests/conftest.py).
pytestmark = pytest.mark.slow

SERVICE = "redis-fault-service-token"
PREFIX = "fault:"
CLIENTS = 4
#: The Redis client's timeout in the server (KEEPSTONE_REDIS_TIMEOUT): short, so a hung
#: Redis is given up on quickly here.
REDIS_TIMEOUT = "1"
#: How long a client waits for any answer: a request not answered by then hung.
CLIENT_TIMEOUT = 30.0
#: How long a phase may take to show what it waits for, on a loaded machine.
PHASE_TIMEOUT = 60.0

#: (phase, kind, status, error code) of every answer; status 0: no answer in time.
Answer = tuple[str, str, int, str]


class Load:
    """``CLIENTS`` threads saving, listing and searching records until stopped."""

    def __init__(self, url: str, team: str, key: str) -> None:
        self.url, self.team = url, team
        self.member = {"Authorization": f"Bearer {key}"}
        self.phase = "up"
        self.answers: list[Answer] = []
        self.saved: dict[str, str] = {}  # record id -> the text answered 201
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._seen = threading.Condition(self._lock)
        self._checked: set[tuple[str, int]] = set()  # (phase, client)
        self._threads = [threading.Thread(target=self._client, args=(n,)) for n in range(CLIENTS)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the clients once their requests are answered (again: nothing more)."""
        self._stop.set()
        for t in self._threads:
            t.join()

    def _client(self, n: int) -> None:
        records = f"/api/teams/{self.team}/memory"
        service = {"Authorization": f"Bearer {SERVICE}"}
        with httpx.Client(base_url=self.url, timeout=CLIENT_TIMEOUT) as http:
            i = 0
            while not self._stop.is_set():
                text = f"client {n} rolled back deploy {i}"
                _, saved = self._ask(
                    http, "save", f"/api/internal/teams/{self.team}/memory", {"text": text}, service
                )
                if saved is not None and saved.status_code == 201:
                    with self._lock:
                        self.saved[saved.json()["id"]] = text
                self._ask(http, "list", records, None, self.member)
                phase, found = self._ask(
                    http, "search", f"{records}/search", {"query": "deploy"}, self.member
                )
                if found is not None and found.status_code in (200, 429):
                    with self._seen:  # Redis ran the limit's script for this client
                        self._checked.add((phase, n))
                        self._seen.notify_all()
                i += 1

    def _ask(
        self,
        http: httpx.Client,
        kind: str,
        url: str,
        body: dict[str, str] | None,
        auth: dict[str, str],
    ) -> tuple[str, httpx.Response | None]:
        """POST ``body`` (GET without one), its answer kept under ``kind``: the phase it was
        sent in, and the answer (None: none in time)."""
        phase = self.phase
        try:
            r: httpx.Response | None = http.request(
                "GET" if body is None else "POST", url, json=body, headers=auth
            )
        except httpx.TimeoutException:
            r = None
        status, code = (0, "no answer") if r is None else (r.status_code, "")
        if r is not None and r.status_code >= 400:
            code = str(r.json()["error"]["code"])
        with self._seen:
            self.answers.append((phase, kind, status, code))
            self._seen.notify_all()
        return phase, r

    def enter(self, phase: str) -> None:
        """Label the requests sent from now on ``phase``."""
        self.phase = phase

    def await_search(self, status: int) -> None:
        """Until a search sent in the current phase answers ``status``."""
        wanted = (self.phase, "search", status)
        with self._seen:
            met = self._seen.wait_for(
                lambda: any(a[:3] == wanted for a in self.answers), PHASE_TIMEOUT
            )
        assert met, f"no search of phase {self.phase!r} answered {status}: {self.tally()}"

    def await_every_client_checked(self) -> None:
        """Until the limit was checked on Redis (200 or 429) for a search of each client
        sent in the current phase: the calls its server process gave up on before are
        cancelled by then."""
        with self._seen:
            met = self._seen.wait_for(
                lambda: all((self.phase, n) in self._checked for n in range(CLIENTS)),
                PHASE_TIMEOUT,
            )
        assert met, f"not every client searched in phase {self.phase!r}: {self.tally()}"

    def tally(self) -> Counter[Answer]:
        with self._lock:
            return Counter(self.answers)


def _ready(server: ServerProcess) -> tuple[int, object]:
    r = httpx.get(f"{server.url}/readyz", timeout=CLIENT_TIMEOUT, verify=tls())
    return r.status_code, r.json().get("redis")


def _doctor_redis(capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``keepstone doctor --json``, in this process: its exit code and its redis check."""
    code, out, _ = run_cli(capsys, "doctor", "--json")
    checks = {c["name"]: c["status"] for c in json.loads(out)["checks"]}
    return code, checks["redis"]


#: What each kind of request may answer, Redis up or not: (kind, status, error code).
ALLOWED = {
    ("save", 201, ""),
    ("list", 200, ""),
    ("search", 200, ""),
    ("search", 429, "rate_limited"),
    ("search", 503, "store_unavailable"),
}


def _settings(tmp_path: Path, redis_port: int) -> tuple[str, str, dict[str, str]]:
    """(the team's id, its member's API key, the server's KEEPSTONE_* settings): a team
    with records on, in a new SQLite database."""
    database = f"sqlite:///{tmp_path}/keepstone.db"
    world, key = world_with_key(database)
    return (
        world.team_id,
        key,
        {
            "KEEPSTONE_DATABASE_URL": database,
            "KEEPSTONE_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
            "KEEPSTONE_REDIS_PREFIX": PREFIX,
            "KEEPSTONE_REDIS_TIMEOUT": REDIS_TIMEOUT,
            "KEEPSTONE_EMBEDDER": "none",
            "KEEPSTONE_INDEXER": "off",
        },
    )


def test_a_killed_then_hung_redis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    team, key, settings = _settings(tmp_path, port)
    for name, value in settings.items():  # the doctor runs in this process
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KEEPSTONE_HOME", str(tmp_path / "home"))
    env = keepstone_env(tmp_path / "home", KEEPSTONE_SERVICE_TOKEN=SERVICE, **settings)
    log = tmp_path / "serve.log"

    with (
        redis_server(port, tmp_path) as r,
        keepstone_serve("--workers", "2", env=env, log=log) as server,
    ):
        with Load(server.url, team, key) as load:
            load.await_search(200)
            assert _ready(server) == (200, "ok")

            load.enter("killed")
            os.kill(r.pid, signal.SIGKILL)
            r.proc.wait()
            load.await_search(503)
            assert _ready(server) == (200, "unreachable")
            assert _doctor_redis(capsys) == (1, "FAIL")

            with redis_server(port, tmp_path) as again:  # the same port: the server is not told
                load.enter("restarted")
                load.await_search(200)

                load.enter("hung")
                os.kill(again.pid, signal.SIGSTOP)
                try:
                    load.await_search(503)
                    assert _ready(server) == (200, "unreachable")
                    assert _doctor_redis(capsys) == (1, "FAIL")
                finally:
                    os.kill(again.pid, signal.SIGCONT)
                load.enter("continued")
                load.await_search(200)
                load.await_every_client_checked()
                load.stop()  # while Redis runs: every search the clients sent is over

                assert _ready(server) == (200, "ok")
                assert _doctor_redis(capsys) == (0, "ok")
                # No slot of the team is held by a search that is over, nor by one whose
                # call Redis ran only after it was given up on.
                with redis.Redis(port=port) as client:
                    held = client.zcard(f"{PREFIX}records:{{{team}}}:inflight")
                assert held == 0, sorted(load.tally().items())
        listed = listed_records(server.url, team, key)

    assert "Traceback" not in log.read_text(), log.read_text()[-6000:]
    tally = load.tally()
    assert not {a: n for a, n in tally.items() if a[1:] not in ALLOWED}, sorted(tally.items())
    lost = set(load.saved) - set(listed)
    assert not lost, f"{len(lost)} of {len(load.saved)} acknowledged records lost"
    # Listed texts are fenced for display; the saved text is inside the fence.
    assert all(load.saved[i] in listed[i] for i in load.saved)
