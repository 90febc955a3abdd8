"""Kill -9 of ``cairn serve`` while its background indexer embeds, then a restart.

A real server (local mode, the real all-MiniLM-L6-v2 model, SQLite and PostgreSQL)
takes N document writes; as soon as its indexer has stored some vectors and not all,
the process gets SIGKILL. Restarted on the same database: every document is found by
keyword at once; no chunk is half-indexed (each vector is NULL or a whole blob of the
model's 384 dimensions, with its model named exactly when it is there); and once the
indexer has caught up every chunk carries the model's vector and paraphrased queries
find their documents by meaning.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from cairn.db import make_engine
from cairn.spaces import SpaceRef
from cairn.store.http import HttpMemoryStore
from cairn.store.sql_schema import memory_chunks
from tests.api.conftest import database_fixture

pytestmark = pytest.mark.slow

MODEL = "all-MiniLM-L6-v2"
DIM = 384
WHOLE_BLOB = 1 + 4 * DIM  # the float32 format tag, then the vector
SPACE = SpaceRef.build("project", "notes", project="web")
FILLERS = 120
CATCH_UP_SECONDS = 120

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

_SUBJECTS = ["roadmap", "hiring", "budget", "offsite", "design review", "customer call"]
_TEAMS = ["platform", "mobile", "growth", "data", "support"]


def filler(i: int) -> tuple[str, str]:
    subject, team = _SUBJECTS[i % len(_SUBJECTS)], _TEAMS[(i // 6) % len(_TEAMS)]
    body = f"Discussed the {subject} item {i} with the {team} team. Codeword kx{i:04d}q."
    return f"meetings/{i:04d}.md", f"# Meeting {i}: {subject}\n\n{body}\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(database: str, home: Path, log: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A real ``cairn serve --local`` with the indexer on; killed at the end if alive."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env.update(CAIRN_HOME=str(home), CAIRN_INDEXER="on", CAIRN_EMBEDDER="minilm")
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cairn.cli.main", "serve", "--local"]
            + ["--port", str(port), "--database", database],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"cairn serve did not start:\n{log.read_text(errors='replace')}")
            time.sleep(0.1)
        yield proc, base
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


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


def chunk_states(database: str) -> list[tuple[bytes | None, str | None]]:
    engine = make_engine(database)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.select(memory_chunks.c.embedding, memory_chunks.c.model))
            return [(None if e is None else bytes(e), m) for e, m in rows]
    finally:
        engine.dispose()


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
    docs = [filler(i) for i in range(FILLERS)] + [(p, c) for p, c, _ in TOPICAL]

    with serve(database, home, log) as (proc, base):
        client = HttpMemoryStore(base, None)
        for path, content in docs:
            client.write(SPACE, path, content)
        # Kill it mid-way: some vectors stored, more pending.
        deadline = time.monotonic() + CATCH_UP_SECONDS
        while time.monotonic() < deadline:
            states = chunk_states(database)
            embedded = sum(e is not None for e, _ in states)
            if embedded and embedded < len(docs):
                break
            time.sleep(0.02)
        indexer_processes = children(proc.pid)
        # The indexer's process (and multiprocessing's resource tracker beside it).
        assert indexer_processes
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        client.close()
    # The server's children die with it: no orphan keeps embedding.
    deadline = time.monotonic() + 10
    while any(alive(p) for p in indexer_processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in indexer_processes)
    states = chunk_states(database)
    embedded_at_kill = sum(e is not None for e, _ in states)
    assert 0 < embedded_at_kill < len(docs), "the kill was meant to land mid-way"
    assert_nothing_half_indexed(states)

    with serve(database, home, log) as (_proc, base):
        client = HttpMemoryStore(base, None)
        # Found by keyword at once, whether embedded or not.
        for i in range(FILLERS):
            hits = client.search(SPACE, f"kx{i:04d}q", 10)
            found = [h for h in hits if h.path == f"meetings/{i:04d}.md"]
            assert found and "keyword" in found[0].matched, (i, hits)
        assert_nothing_half_indexed(chunk_states(database))

        # The indexer catches up: every chunk carries the model's whole vector.
        deadline = time.monotonic() + CATCH_UP_SECONDS
        while time.monotonic() < deadline:
            states = chunk_states(database)
            if len(states) == len(docs) and all(m == MODEL for _, m in states):
                break
            time.sleep(0.2)
        assert len(states) == len(docs)
        assert all(m == MODEL for _, m in states), log.read_text(errors="replace")[-2000:]
        assert_nothing_half_indexed(states)

        # And now by meaning: paraphrases that share (almost) no word with their document.
        for path, _content, query in TOPICAL:
            hits = client.search(SPACE, query, 10)
            found = [h for h in hits if h.path == path]
            assert found, (query, [h.path for h in hits])
            assert "meaning" in found[0].matched
        client.close()
    logged = log.read_text(errors="replace")
    assert "Traceback" not in logged
