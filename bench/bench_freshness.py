"""Freshness under a backlog: how long a note written to a real ``keepstone serve`` takes to
be found by meaning while the indexer drains a 10,000-chunk backlog (docs/search.md,
"Freshness").

For each database (SQLite, and PostgreSQL when ``KEEPSTONE_TEST_POSTGRES_URL`` names a
server: a fresh database is made on it and dropped after; pgvector is not needed):

1. start ``keepstone serve`` (the background indexer on, the default embedder), make an
   org, a team and a member's key through the admin API;
2. import an archive of documents that chunk to at least ``--chunks`` chunks into one
   space (``POST /api/memory/import``), and wait until ``/readyz`` counts them pending:
   the backlog;
3. write one note a second (``PUT /api/memory/doc``) for ``--notes`` seconds while the
   backlog drains, into a space of its own (``--same-space``: the backlog's); one searcher
   (one search in flight, as an agent would) searches each note not yet found for its own
   words, round after round every ``--poll`` seconds, until a hit of it lists ``meaning``
   among its signals (its chunk has a vector of the model: found by meaning), or
   ``--give-up`` seconds passed;
4. print p50 / p95 / max seconds from the write's answer to found-by-meaning, the backlog
   before and after, and what the answers' ``pending`` said.

``--baseline /work/main/src`` also runs a server of another checkout, interleaved, for a
side-by-side comparison on this shared machine.

Run: ``KEEPSTONE_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/test
.venv/bin/python bench/bench_freshness.py --baseline /work/main/src``. The goal is p95 <= 2 s.
Figures of this shared machine vary with its load: compare runs made side by side.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import statistics
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from keepstone.db import make_engine
from keepstone.search.chunking import chunk_markdown
from serving import fresh_postgres, serve

ADMIN_TOKEN = "bench-admin-token-0123456789abcdefghijklmnop"
SPACE = {"visibility": "project", "name": "fresh", "project": "bench"}
#: Where the notes go unless ``--same-space``: a space of their own beside the backlog's.
NOTES = {"visibility": "project", "name": "notes", "project": "bench"}
WORDS = (
    "deploy cache worker latency budget invoice customer refund schema queue replica "
    "migration rollback incident alert dashboard tenant quota backup restore shard "
    "index vector planner statistics vacuum pager runbook release canary traffic"
).split()


def document(i: int, rng: random.Random) -> str:
    """A report of five sections of prose-like words: about ten chunks."""
    parts = [f"# Report {i}\n"]
    for j in range(5):
        words = " ".join(rng.choice(WORDS) for _ in range(120))
        parts.append(f"## Section {j}\n\n{words}.\n")
    return "\n".join(parts)


def backlog_archive(chunks: int) -> tuple[bytes, int, int]:
    """A .tar.gz of documents that chunk to at least ``chunks`` chunks: (bytes,
    documents, chunks)."""
    rng = random.Random(7)
    buffer = io.BytesIO()
    total = docs = 0
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        while total < chunks:
            text = document(docs, rng).encode()
            info = tarfile.TarInfo(f"reports/{docs:05d}.md")
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
            total += len(chunk_markdown(text.decode()))
            docs += 1
    return buffer.getvalue(), docs, total


def member_key(base: str) -> str:
    """An API key of a member of a fresh team, made through the admin API."""
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as admin:

        def make(path: str, body: dict[str, object]) -> dict[str, object]:
            r = admin.post(path, json=body, timeout=60)
            r.raise_for_status()
            return dict(r.json())

        org = make("/api/admin/orgs", {"name": "fresh", "plan": "pro"})["id"]
        team = make("/api/admin/teams", {"org_id": org, "name": "fresh"})["id"]
        admin.patch(f"/api/admin/orgs/{org}", json={"memory_quota_bytes": 2**31}).raise_for_status()
        user = make("/api/admin/users", {"email": "fresh@bench.test"})["id"]
        make(f"/api/admin/teams/{team}/members", {"user_id": user, "role": "member"})
        return str(
            make("/api/admin/api-keys", {"user_id": user, "team_id": team, "name": "bench"})["key"]
        )


def backlog_of(database: str) -> int:
    """Chunks with no vector, read from the database itself (a server of ``--baseline``
    has no backlog on ``/readyz``)."""
    return _count(database, "SELECT count(*) FROM memory_chunks WHERE model IS NULL")


def chunks_of(database: str) -> int:
    """Chunks made so far, embedded or not."""
    return _count(database, "SELECT count(*) FROM memory_chunks")


def _count(database: str, query: str) -> int:
    engine = make_engine(database)
    try:
        with engine.connect() as conn:
            return int(conn.exec_driver_sql(query).scalar() or 0)
    finally:
        engine.dispose()


@dataclass
class Note:
    index: int
    codename: str
    written: float = 0.0
    found: float | None = None
    pending_seen: list[int] = field(default_factory=list)
    searches: list[float] = field(default_factory=list)
    gave_up: bool = False


def watch(
    client: httpx.Client,
    notes: list[Note],
    space: dict[str, str],
    args: argparse.Namespace,
    writing: threading.Event,
) -> None:
    """One searcher, as one agent would be: round after round, search each note not yet
    found by meaning for its own words (one search in flight at a time, so the benchmark
    does not load the server it measures), until every note is found or given up."""
    while writing.is_set() or any(n.found is None and not n.gave_up for n in list(notes)):
        for note in list(notes):
            if note.found is not None or note.gave_up:
                continue
            if time.monotonic() - note.written > args.give_up:
                note.gave_up = True
                continue
            asked = time.monotonic()
            params = {**space, "q": note.codename, "limit": 5}
            r = client.get("/api/memory/search", params=params)
            note.searches.append(time.monotonic() - asked)
            if r.status_code != 200:
                continue
            body = r.json()
            note.pending_seen.append(int(body.get("pending", -1)))
            path = f"notes/{note.index:03d}.md"
            if any(h["path"] == path and "meaning" in h["matched"] for h in body["results"]):
                note.found = time.monotonic()
        time.sleep(args.poll)


def run_one(
    label: str,
    database: str,
    args: argparse.Namespace,
    archive: bytes,
    expected: int,
    source: str | None,
) -> dict[str, object]:
    """One server on ``database``, of this checkout or of the ``src`` directory ``source``
    (``--baseline``), through the whole scenario."""
    extra = {} if source is None else {"PYTHONPATH": source}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        with serve(database, home, KEEPSTONE_ADMIN_TOKEN=ADMIN_TOKEN, **extra) as served:
            key = member_key(served.base)
            client = httpx.Client(
                base_url=served.base, headers={"Authorization": f"Bearer {key}"}, timeout=120
            )
            started = time.monotonic()
            r = client.post(
                "/api/memory/import",
                params=SPACE,
                content=archive,
                headers={"Content-Type": "application/gzip"},
            )
            r.raise_for_status()
            imported = time.monotonic() - started
            # The indexer chunks the imported documents first; then they are pending. (It
            # embeds meanwhile: on an idle machine the backlog never stands whole.)
            while chunks_of(database) < expected:
                time.sleep(0.5)
            chunked = time.monotonic() - started
            before = backlog_of(database)
            notes: list[Note] = []
            space = SPACE if args.same_space else NOTES
            writing = threading.Event()
            writing.set()
            searcher = threading.Thread(
                target=watch, args=(client, notes, space, args, writing), daemon=True
            )
            searcher.start()
            rng = random.Random(11)
            phase = time.monotonic()
            for i in range(args.notes):
                tick = phase + i
                time.sleep(max(0.0, tick - time.monotonic()))
                codename = f"{rng.choice(WORDS)}-{uuid.uuid4().hex[:8]}"
                note = Note(i, codename)
                text = f"# Note {i}\n\nThe {codename} change shipped after the review.\n"
                put = client.put(
                    "/api/memory/doc",
                    params={**space, "path": f"notes/{i:03d}.md"},
                    json={"content": text},
                )
                put.raise_for_status()
                note.written = time.monotonic()
                notes.append(note)
            writing.clear()
            searcher.join()
            drained_for = time.monotonic() - phase
            after = backlog_of(database)
            client.close()
    waits = sorted(n.found - n.written for n in notes if n.found is not None)
    missed = sum(n.found is None for n in notes)
    first_pending = [n.pending_seen[0] for n in notes if n.pending_seen]
    return {
        "label": label,
        "imported_s": imported,
        "chunked_s": chunked,
        "backlog_before": before,
        "backlog_after": after,
        "drain_rate": (before - after) / drained_for if drained_for else 0.0,
        "waits": waits,
        "missed": missed,
        "pending_first": statistics.median(first_pending) if first_pending else None,
        "search_s": sorted(t for n in notes for t in n.searches),
    }


@contextlib.contextmanager
def database_of(kind: str, tmp: str, pg: str) -> Iterator[str]:
    """A fresh database of ``kind``: a SQLite file in ``tmp``, or one on ``pg``'s server."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp}/{uuid.uuid4().hex[:8]}.db"
        return
    with fresh_postgres(pg) as url:
        yield url


def print_row(r: dict[str, object]) -> None:
    waits, searched = r["waits"], r["search_s"]
    assert isinstance(waits, list) and isinstance(searched, list)
    print(
        f"{r['label']:<14} {len(waits):>5} {quantile(waits, 0.5):>6.2f} "
        f"{quantile(waits, 0.95):>6.2f} {max(waits, default=float('nan')):>6.2f} "
        f"{r['missed']:>6} {str(r['backlog_before']) + '→' + str(r['backlog_after']):>22} "
        f"{r['drain_rate']:>7.1f} {str(r['pending_first']):>7} {r['chunked_s']:>9.1f} "
        f"{quantile(searched, 0.5):>7.3f}/{quantile(searched, 0.95):.3f}",
        flush=True,
    )


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=10_000, help="the backlog's size")
    parser.add_argument("--notes", type=int, default=40, help="notes, one a second")
    parser.add_argument("--poll", type=float, default=0.1, help="seconds between searches")
    parser.add_argument("--give-up", type=float, default=60.0, help="seconds per note, at most")
    parser.add_argument("--databases", default="sqlite,postgres", help="comma-separated subset")
    parser.add_argument(
        "--same-space",
        action="store_true",
        help="write the notes into the backlog's space (default: a space of their own)",
    )
    parser.add_argument(
        "--baseline",
        metavar="SRC",
        help="also run a server of another checkout's src/ (e.g. /work/main/src), "
        "interleaved with this one's, on a fresh database each",
    )
    args = parser.parse_args()
    archive, docs, chunks = backlog_archive(args.chunks)
    print(
        f"backlog: {docs} documents, {chunks} chunks ({len(archive) / 2**20:.1f} MiB archive)",
        flush=True,
    )
    only = args.databases.split(",")
    pg = os.environ.get("KEEPSTONE_TEST_POSTGRES_URL", "")
    if "postgres" in only and not pg:
        print("postgres: skipped (set KEEPSTONE_TEST_POSTGRES_URL)")
        only.remove("postgres")
    variants: list[tuple[str, str | None]] = [("", None)]
    if args.baseline:
        variants = [("base ", args.baseline), *variants]
    print(
        f"\n{'database':<14} {'found':>5} {'p50 s':>6} {'p95 s':>6} {'max s':>6} {'missed':>6} "
        f"{'backlog before→after':>22} {'drain/s':>7} {'pending':>7} {'chunked s':>9} "
        f"{'search p50/p95 s':>16}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        for kind in only:  # per database, the baseline then this checkout, side by side
            for prefix, source in variants:
                with database_of(kind, tmp, pg) as url:
                    print_row(run_one(f"{prefix}{kind}", url, args, archive, chunks, source))
    print("\ngoal: p95 <= 2 s while the backlog drains (pending: median of the first answer's)")


if __name__ == "__main__":
    main()
