"""Print recall@10 and MRR of records search over the fixed labelled corpus.

    python bench/bench_search_quality.py            # SQLite (a temporary file)
    CAIRN_TEST_POSTGRES_URL=postgresql://... python bench/bench_search_quality.py

The corpus is ``tests/data/records_corpus.jsonl`` with the queries of
``tests/data/records_queries.jsonl`` (regenerate with bench/make_records_corpus.py).
It measures the SQL store's ranking (``cairn.records.quality``): the records are
stored and searched as a member who sees the whole team.
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import psycopg  # noqa: E402

from cairn.db import make_engine  # noqa: E402
from cairn.records.quality import evaluate, load_corpus, load_jsonl  # noqa: E402
from records_world import bench_world  # noqa: E402


def run(url: str, label: str) -> None:
    engine = make_engine(url)
    world = bench_world(engine, teams=1)
    team = world.teams[0][0]
    corpus = load_jsonl(ROOT / "tests" / "data" / "records_corpus.jsonl")
    queries = load_jsonl(ROOT / "tests" / "data" / "records_queries.jsonl")
    id_map = load_corpus(world.store, team, corpus)
    member = world.teams[0][1]

    def search(query: str, k: int) -> list[str]:
        return [hit.id for hit in world.records.search(member, team, query, limit=k).hits]

    report = evaluate(search, id_map, queries)
    print(
        f"{label:10s} records={len(corpus)} queries={report.queries} "
        f"recall@{report.k}={report.recall_at_k:.3f} MRR={report.mrr:.3f}"
    )
    engine.dispose()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run(f"sqlite:///{tmp}/quality.db", "sqlite")
    pg = os.environ.get("CAIRN_TEST_POSTGRES_URL")
    if pg:
        base, _, admin_db = pg.rpartition("/")
        name = f"bench_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        try:
            run(f"{base}/{name}", "postgres")
        finally:
            with psycopg.connect(pg, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
