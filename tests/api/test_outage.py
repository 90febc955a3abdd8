"""A PostgreSQL outage mid-load: every route kind answers ``503 store_unavailable`` (never
another 5xx) to every credential kind, and the app recovers on its own once the database
is back.

The cluster is this module's own (tests/pgvector_server.py), durable (fsync and synchronous
commits on): it is stopped (fast and immediate shutdown) and started again here, so no
other test's database goes away. Eight writers keep writing through the outage; every write
they were told succeeded is read back afterwards.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from tests import pgvector_server as pg
from tests.api.log_scan import DOC_TEXT, everything_logged, leaks
from tests.api.world import SEED_PATH, SPACE, World
from tests.conftest import require_pgvector

#: Long: handed out first under pytest-xdist (tests/conftest.py).
pytestmark = pytest.mark.slow

#: Writers through the outage.
WRITERS = 8

CREDENTIALS = ("api_key", "session", "admin_token")


@pytest.fixture(scope="module")
def server() -> Iterator[pg.PgvectorServer]:
    require_pgvector()
    # Durable, unlike the suite's disposable clusters: an acknowledged write must survive
    # an immediate shutdown.
    durable = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
    with pg.start_server(settings=durable) as s:
        yield s


@pytest.fixture(scope="module")
def database_url(server: pg.PgvectorServer) -> str:
    """The app, client and world of tests/api/conftest.py, on this module's own cluster."""
    return server.create_database()


def _headers(world: World, cred: str) -> dict[str, str]:
    return world.headers("member" if cred == "session" else cred)


def _requests(world: World) -> list[tuple[str, str, str, dict[str, object] | None]]:
    """(kind, method, url, json body) of one request of each route kind."""
    q = f"name={SPACE['name']}&project={SPACE['project']}"
    team = world.team_id
    return [
        ("docs", "GET", f"/api/memory/doc?{q}&path={SEED_PATH}", None),
        ("docs", "PUT", f"/api/memory/doc?{q}&path=outage.md", {"content": DOC_TEXT}),
        ("history", "GET", f"/api/memory/doc/versions?{q}&path={SEED_PATH}", None),
        ("search", "GET", f"/api/memory/search?{q}&q=seed", None),
        ("spaces", "GET", "/api/memory/spaces", None),
        ("records", "GET", f"/api/teams/{team}/memory", None),
        ("records", "POST", f"/api/teams/{team}/memory/search", {"query": "seed"}),
        ("admin", "GET", "/api/admin/users", None),
        ("ui", "GET", f"/t/{team}/spaces", None),
        ("ui", "GET", f"/t/{team}/doc?{q}&path={SEED_PATH}", None),
    ]


def _call(
    world: World, cred: str, method: str, url: str, body: dict[str, object] | None
) -> tuple[int, str]:
    r = world.client.request(
        method, url, json=body, headers=_headers(world, cred), follow_redirects=False
    )
    if r.status_code < 400:
        return r.status_code, ""
    if r.headers.get("content-type", "").startswith("text/html"):
        return r.status_code, "page"  # the UI answers its error as a page
    return r.status_code, str(r.json()["error"]["code"])


def _unknown_key(world: World) -> dict[str, str]:
    """A well-formed API key no one was given (looked up in the database to be refused)."""
    key = world.keys["member"]
    return {"Authorization": f"Bearer {key[:-4]}{'AAAA' if key[-4:] != 'AAAA' else 'BBBB'}"}


Q = f"name={SPACE['name']}&project={SPACE['project']}"


def _writer(
    world: World, stop: threading.Event, seen: Counter[int], kept: dict[str, str], n: int
) -> None:
    """Writes documents until ``stop``; counts the answers, and keeps what was acknowledged."""
    i = 0
    while not stop.is_set():
        path, content = f"load/{n}-{i}.md", f"{DOC_TEXT} {n} {i}"
        r = world.client.put(
            f"/api/memory/doc?{Q}&path={path}",
            json={"content": content},
            headers=_headers(world, "api_key"),
        )
        seen[r.status_code] += 1
        if r.status_code in (200, 201):
            kept[path] = content
        i += 1


def _wait_until_answered(world: World, deadline: float) -> None:
    while time.monotonic() < deadline:
        if _call(world, "api_key", "GET", "/api/memory/spaces", None)[0] == 200:
            return
        time.sleep(0.1)
    raise AssertionError("the app did not recover after the database came back")


@pytest.mark.parametrize("mode", [signal.SIGINT, signal.SIGQUIT], ids=["fast", "immediate"])
def test_an_outage_answers_503_everywhere_then_recovers(
    world: World, server: pg.PgvectorServer, mode: signal.Signals, caplog: pytest.LogCaptureFixture
) -> None:
    """…and logs, at DEBUG on every logger, nothing secret while it fails and recovers."""
    with everything_logged(caplog):
        _outage(world, server, mode)
    assert not leaks(caplog, world, DOC_TEXT)
    assert any("store_unavailable" in r.getMessage() for r in caplog.records)


def _outage(world: World, server: pg.PgvectorServer, mode: signal.Signals) -> None:
    requests = _requests(world)
    before = {  # the database is up: nothing fails
        (kind, cred, method, url): _call(world, cred, method, url, body)
        for cred in CREDENTIALS
        for kind, method, url, body in requests
    }
    assert all(status < 500 for status, _ in before.values()), before
    # Each kind is answered from the database for each credential (a refusal that needs
    # no database, such as the admin token on a team's space, stays what it was).
    assert {k[0] for k, v in before.items() if v[0] < 300} == {r[0] for r in requests}

    stop = threading.Event()
    seen: Counter[int] = Counter()
    kept: dict[str, str] = {}
    writers = [
        threading.Thread(target=_writer, args=(world, stop, seen, kept, n)) for n in range(WRITERS)
    ]
    for t in writers:
        t.start()
    try:
        time.sleep(0.3)
        server.halt(mode=mode)
        during: dict[tuple[str, str, str, str], tuple[int, str]] = {}
        for cred in CREDENTIALS:
            for kind, method, url, body in requests:
                during[(kind, cred, method, url)] = _call(world, cred, method, url, body)
        bad_key = world.client.get("/api/memory/spaces", headers=_unknown_key(world))
        time.sleep(0.3)
        server.resume()
        _wait_until_answered(world, time.monotonic() + 30)
    finally:
        stop.set()
        for t in writers:
            t.join()

    assert set(seen) <= {200, 201, 503}, seen
    assert seen[503] > 0, f"the writers never saw the outage: {seen}"
    for path, content in kept.items():  # no acknowledged write was lost
        r = world.client.get(f"/api/memory/doc?{Q}&path={path}", headers=_headers(world, "api_key"))
        assert r.status_code == 200 and r.json()["content"] == content, (path, r.text)
    outage = {(503, "store_unavailable"), (503, "page")}
    wrong = {k: v for k, v in during.items() if v[0] >= 500 and v not in outage}
    assert not wrong, wrong
    for key, answer in during.items():
        if before[key][0] < 300:
            assert answer in outage, (key, answer)
        else:
            assert answer in (before[key], *outage), (key, before[key], answer)
    assert bad_key.status_code == 503, bad_key.text
    assert bad_key.json()["error"]["code"] == "store_unavailable"

    for cred in CREDENTIALS:  # back, without a restart of the app
        for kind, method, url, body in requests:
            key = (kind, cred, method, url)
            assert _call(world, cred, method, url, body)[0] // 100 == before[key][0] // 100, key
    r = world.client.get("/api/memory/spaces", headers=_unknown_key(world))
    assert r.status_code == 401, r.text
