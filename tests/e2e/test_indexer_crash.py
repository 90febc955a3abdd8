"""Kill -9 of ``keepstone serve`` while its background indexer embeds, then a restart.

A real server (the real all-MiniLM-L6-v2 model, SQLite and PostgreSQL) takes document
writes from a team member and team records from the service token; as soon as its
indexer has stored some vectors and not all, the server gets SIGKILL (its indexer's
child process dies with it). Restarted on the same database: every document and record
is found by keyword at once; no chunk or record is half-indexed (each vector is NULL or
a whole blob of the model's 384 dimensions, with its model named exactly when it is
there); and once the indexer has caught up every row carries the model's vector and
paraphrased queries find their documents and records by meaning.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from keepstone.db import make_engine
from keepstone.http_client import tls
from keepstone.identity.keys import load_key_hasher
from keepstone.identity.service import IdentityService
from keepstone.records.schema import records
from keepstone.schema import upgrade_all
from keepstone.spaces import SpaceRef
from keepstone.store.http import HttpMemoryStore
from keepstone.store.sql_schema import memory_chunks
from tests.api.conftest import database_fixture
from tests.cli_runner import keepstone_env
from tests.records.conftest import make_world
from tests.serving import keepstone_serve

pytestmark = pytest.mark.slow

MODEL = "all-MiniLM-L6-v2"
DIM = 384
WHOLE_BLOB = 1 + 4 * DIM  # the float32 format tag, then the vector
SPACE = SpaceRef.build("project", "notes", project="web")
SERVICE = "e2e-indexer-service-token"
FILLERS = 120
RECORDS = 40
CATCH_UP_SECONDS = 300  # a bound for a stalled machine; a fast one is done in seconds

#: Documents a paraphrase must find by meaning: (path, content, paraphrased query).
TOPICAL = [
    (
        "incidents/backup-disk.md",
        "# Backup host disk full\n\nThe nightly database backup failed because the volume "
        "ran out of free space.",
        "storage exhausted during the overnight dump",
    ),
    (
        "incidents/login-cert.md",
        "# Login outage\n\nUsers could not sign in after the certificate on the auth proxy "
        "expired.",
        "people unable to log in because a TLS cert lapsed",
    ),
    (
        "incidents/worker-leak.md",
        "# Memory leak in the queue worker\n\nThe consumer process kept growing until the "
        "kernel killed it for using too much RAM.",
        "background job gets OOM killed as its usage climbs",
    ),
    (
        "incidents/report-timezone.md",
        "# Invoices dated a day early\n\nInvoices showed yesterday's date because timestamps "
        "were rendered in UTC instead of local time.",
        "billing documents display the previous day due to time zone conversion",
    ),
]

#: Records a paraphrase must find by meaning: (text, paraphrased query).
TOPICAL_RECORDS = [
    (
        "Moved the image thumbnails to a CDN so the product pages load faster",
        "serving pictures from an edge cache to speed up the catalogue",
    ),
    (
        "Rotated the leaked Stripe webhook secret and redeployed the billing service",
        "replaced a compromised payment signing key",
    ),
]

_SUBJECTS = ["roadmap", "hiring", "budget", "offsite", "design review", "customer call"]
_TEAMS = ["platform", "mobile", "growth", "data", "support"]


def filler(i: int) -> tuple[str, str]:
    subject, team = _SUBJECTS[i % len(_SUBJECTS)], _TEAMS[(i // 6) % len(_TEAMS)]
    body = f"Discussed the {subject} item {i} with the {team} team. Codeword kx{i:04d}q."
    return f"meetings/{i:04d}.md", f"# Meeting {i}: {subject}\n\n{body}\n"


def record(i: int) -> str:
    return f"Saved the {_SUBJECTS[i % len(_SUBJECTS)]} summary {i}; marker kr{i:04d}z."


@contextmanager
def serve(database: str, home: Path, log: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A real ``keepstone serve`` with the indexer on; killed at the end if alive."""
    env = keepstone_env(
        home,
        KEEPSTONE_INDEXER="on",
        KEEPSTONE_EMBEDDER="minilm",
        KEEPSTONE_SERVICE_TOKEN=SERVICE,
    )
    with keepstone_serve(
        "--database", database, env=env, log=log, stop_signal=signal.SIGKILL
    ) as server:
        yield server.proc, server.url


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux ``/proc``): the indexer's process."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"  # a zombie is dead, not yet reaped


States = list[tuple[bytes | None, str | None]]


def vector_states(database: str) -> tuple[States, States]:
    """(embedding, model) of every chunk and of every record, read from the database."""
    engine = make_engine(database)
    try:
        with engine.connect() as conn:
            found = []
            for table in (memory_chunks, records):
                rows = conn.execute(sa.select(table.c.embedding, table.c.model))
                found.append([(None if e is None else bytes(e), m) for e, m in rows])
            return found[0], found[1]
    finally:
        engine.dispose()


def embedded(states: States) -> int:
    return sum(e is not None for e, _ in states)


def world_of(database: str) -> tuple[str, str]:
    """A team with memory on and an API key of one of its members."""
    engine = make_engine(database)
    try:
        upgrade_all(engine)
        world = make_world(engine)
        identity = IdentityService(engine, load_key_hasher(engine, None))
        return world.team_id, identity.create_api_key(world.member, world.team_id)[1]
    finally:
        engine.dispose()


def search_records(base: str, key: str, team: str, query: str) -> list[dict[str, object]]:
    """The records search (5 a second per team: a 429 waits its Retry-After)."""
    while True:
        r = httpx.post(
            f"{base}/api/teams/{team}/memory/search",
            json={"query": query, "limit": 10},
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
            verify=tls(),
        )
        if r.status_code != 429:
            assert r.status_code == 200, r.text
            return list(r.json()["results"])
        time.sleep(float(r.headers.get("Retry-After", "0.2")))


def assert_nothing_half_indexed(states: list[tuple[bytes | None, str | None]]) -> None:
    for embedding, model in states:
        if embedding is None:
            assert model is None
        else:
            assert len(embedding) == WHOLE_BLOB
            assert model == MODEL


database = database_fixture("database")


def test_kill_9_while_indexing_loses_nothing_and_half_indexes_nothing(
    database: str, tmp_path: Path
) -> None:
    home, log = tmp_path / "home", tmp_path / "serve.log"
    team, key = world_of(database)
    docs = [filler(i) for i in range(FILLERS)] + [(p, c) for p, c, _ in TOPICAL]
    texts = [record(i) for i in range(RECORDS)] + [t for t, _ in TOPICAL_RECORDS]
    saved: dict[str, str] = {}  # text -> record id

    with serve(database, home, log) as (proc, base):
        client = HttpMemoryStore(base, key)
        service = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {SERVICE}"})
        for n, (path, content) in enumerate(docs):
            client.write(SPACE, path, content)
            if n < len(texts):
                r = service.post(f"/api/internal/teams/{team}/memory", json={"text": texts[n]})
                assert r.status_code == 201, r.text
                saved[texts[n]] = r.json()["id"]
        # Kill it mid-way: some vectors stored, more pending.
        deadline = time.monotonic() + CATCH_UP_SECONDS
        while time.monotonic() < deadline:
            chunks, recs = vector_states(database)
            if 0 < embedded(chunks) + embedded(recs) < len(docs) + len(texts):
                break
            time.sleep(0.02)
        # The indexer's process (and multiprocessing's resource tracker beside it).
        indexer_processes = children(proc.pid)
        assert indexer_processes
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        client.close()
        service.close()
    # The server's children die with it: no orphan keeps embedding.
    deadline = time.monotonic() + 10
    while any(alive(p) for p in indexer_processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in indexer_processes)
    chunks, recs = vector_states(database)
    assert len(recs) == len(texts)  # every saved record survived the kill
    done_at_kill = embedded(chunks) + embedded(recs)
    assert 0 < done_at_kill < len(docs) + len(texts), "the kill was meant to land mid-way"
    assert_nothing_half_indexed(chunks)
    assert_nothing_half_indexed(recs)

    with serve(database, home, log) as (_proc, base):
        client = HttpMemoryStore(base, key)
        # Found by keyword at once, whether embedded or not.
        for i in range(FILLERS):
            hits = client.search(SPACE, f"kx{i:04d}q", 10)
            found = [h for h in hits if h.path == f"meetings/{i:04d}.md"]
            assert found and "keyword" in found[0].matched, (i, hits)
        for i in range(RECORDS):
            results = search_records(base, key, team, f"kr{i:04d}z")
            hit = [r for r in results if r["id"] == saved[record(i)]]
            assert hit and "keyword" in hit[0]["matched"], (i, results)  # type: ignore[operator]
        chunks, recs = vector_states(database)
        assert_nothing_half_indexed(chunks)
        assert_nothing_half_indexed(recs)

        # The indexer catches up: every chunk and record carries the model's whole vector.
        deadline = time.monotonic() + CATCH_UP_SECONDS
        while time.monotonic() < deadline:
            chunks, recs = vector_states(database)
            if len(chunks) == len(docs) and all(m == MODEL for _, m in chunks + recs):
                break
            time.sleep(0.2)
        assert len(chunks) == len(docs) and len(recs) == len(texts)
        assert all(m == MODEL for _, m in chunks + recs), log.read_text(errors="replace")[-2000:]
        assert_nothing_half_indexed(chunks)
        assert_nothing_half_indexed(recs)

        # And now by meaning: paraphrases that share (almost) no word with their target.
        for path, _content, query in TOPICAL:
            hits = client.search(SPACE, query, 10)
            found = [h for h in hits if h.path == path]
            assert found, (query, [h.path for h in hits])
            assert "meaning" in found[0].matched
        for text, query in TOPICAL_RECORDS:
            results = search_records(base, key, team, query)
            hit = [r for r in results if r["id"] == saved[text]]
            assert hit, (query, results)
            assert "meaning" in hit[0]["matched"]  # type: ignore[operator]
        client.close()
    logged = log.read_text(errors="replace")
    assert "Traceback" not in logged
