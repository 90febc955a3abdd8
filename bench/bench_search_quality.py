"""Print recall@10 and MRR@10 of Keepstone's search, through the product's search path, on
the labelled records and documents sets, keyword-only and hybrid, on SQLite and
PostgreSQL::

    python bench/bench_search_quality.py                     # SQLite; PostgreSQL too
    python bench/bench_search_quality.py --postgres URL      # when KEEPSTONE_TEST_POSTGRES_URL
                                                             # or --postgres is given

Runs without the model, on the stored vectors of the quality floors
(tests/data/search_vectors.npz, loaded by :mod:`tests.search.labelled`):

* *records*: the 2,057 records of tests/data/records_corpus.jsonl stored in one team
  through the records store, their vectors through its indexer API, and searched with
  ``RecordService.search`` as a member who sees the whole team (keyword-only: no
  ``RecordSearch`` embedder; hybrid: ``RecordSearch(embedder, VectorCache())``).
* *docs*: every document of tests/data/docs_corpus.jsonl written into its space (one
  project space per space of the set, one team) through ``SqlStore.write``, reconciled,
  each chunk given the stored vector of the labelled unit of its text, and every query
  searched over all twelve spaces with ``DocumentSearch.search`` (keyword-only: no
  embedder; hybrid: the embedder and a ``VectorCache``).

Each ranker runs twice: as the product answers (above the relevance floor,
near-duplicates folded: a hit's ``also_in`` ids count as found) and with ``min_score=-1``
(no floor), so the floor's cost shows side by side.

The queries are embedded by a stored-vector embedder (:mod:`tests.search.stored`): the
stored vector of each known query text. Hits are scored with the labelled sets' scorer
(:func:`tests.search.labelled.score_query`: a document hit is its section
"space/path#heading trail"), so the figures compare with
``tests/search/test_quality_floors.py``, which ranks the same sets outside the product.
SQLite runs in a temporary file; PostgreSQL in a fresh database created on the server
of the URL and dropped afterwards. A dense-only ranking is not a product path and is
not measured. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from keepstone.db import make_engine  # noqa: E402
from keepstone.identity.keys import load_key_hasher  # noqa: E402
from keepstone.identity.service import IdentityService  # noqa: E402
from keepstone.records.ratelimit import LocalRateLimiter  # noqa: E402
from keepstone.search.cache import VectorCache  # noqa: E402
from keepstone.secrets import mask  # noqa: E402
from keepstone.service.filters import NO_FILTERS, search_filters  # noqa: E402
from keepstone.service.record_search import RecordSearch  # noqa: E402
from keepstone.service.records import build_record_service  # noqa: E402
from keepstone.service.search import DocumentSearch  # noqa: E402
from keepstone.store.sql import SqlStore  # noqa: E402
from records_world import bench_world  # noqa: E402
from serving import fresh_postgres  # noqa: E402
from tests.search.labelled import (  # noqa: E402
    KINDS,
    EvalSet,
    K,
    Scores,
    evaluate,
    load_docs,
    load_records,
    load_vectors,
)
from tests.search.stored import StoredEmbedder, store_documents, store_records  # noqa: E402

SETS = ("records", "docs")
#: Each ranker floored (the product's default), and the same with min_score -1 (no floor).
RANKERS = ("keyword", "keyword-nofloor", "hybrid", "hybrid-nofloor")
NO_FLOOR = search_filters(min_score=-1)
#: Both dialects agree when every figure is within this of the other's.
AGREE = 0.01
TENANT = "team_quality"

Results = dict[tuple[str, str], Scores]  # (set, ranker) → per-query scores


def embedder_of(es: EvalSet, queries: np.ndarray, key: Callable[[str], str]) -> StoredEmbedder:
    """The stored vector of each query of ``es``, by the text the search embeds."""
    return StoredEmbedder({key(q.text): v for q, v in zip(es.queries, queries, strict=True)})


def records_scores(url: str, es: EvalSet, units: np.ndarray, queries: np.ndarray) -> Results:
    engine = make_engine(url)
    try:
        world = bench_world(engine, teams=1)
        team, member = world.teams[0]
        store_records(engine, team, es, units)
        position = {u.section: i for i, u in enumerate(es.units)}
        identity = IdentityService(engine, load_key_hasher(engine, None))
        unlimited = LocalRateLimiter(rate=10**9, max_in_flight=10**9)
        # The service masks a query before it embeds it.
        search = RecordSearch(embedder_of(es, queries, mask), VectorCache())
        services = {
            "keyword": world.records,
            "hybrid": build_record_service(engine, identity, unlimited, search),
        }
        out: Results = {}
        for ranker, service in services.items():
            for suffix, filters in (("", NO_FILTERS), ("-nofloor", NO_FLOOR)):
                rankings = []
                for q in es.queries:
                    hits = service.search(member, team, q.text, limit=K, filters=filters).hits
                    # A hit stands for the records of its text too (also_in): all found.
                    rankings.append([position[i] for h in hits for i in (h.id, *h.also_in)])
                out[("records", ranker + suffix)] = evaluate(es, rankings)
        return out
    finally:
        engine.dispose()


def docs_scores(url: str, es: EvalSet, units: np.ndarray, queries: np.ndarray) -> Results:
    store = SqlStore.open(url)
    try:
        refs = store_documents(store, TENANT, es, units)
        space_of = {ref.id: name for name, ref in refs.items()}
        first: dict[str, int] = {}
        for i, u in enumerate(es.units):
            first.setdefault(u.section, i)
        # DocumentSearch embeds the query stripped.
        embedder = embedder_of(es, queries, str.strip)
        searches = {
            "keyword": DocumentSearch(store),
            "hybrid": DocumentSearch(store, embedder, VectorCache()),
        }
        out: Results = {}
        for ranker, search in searches.items():
            for suffix, filters in (("", NO_FILTERS), ("-nofloor", NO_FLOOR)):
                rankings = []
                for q in es.queries:
                    hits = search.search(list(refs.values()), q.text, limit=K, filters=filters)
                    sections = [f"{space_of[h.space_id]}/{h.path}#{h.heading}" for h in hits]
                    unknown = [s for s in sections if s not in first]
                    if unknown:
                        raise RuntimeError(f"hits of no labelled section: {unknown}")
                    rankings.append([first[s] for s in sections])
                out[("docs", ranker + suffix)] = evaluate(es, rankings)
        return out
    finally:
        store.close()


def run(
    url: str, sets: dict[str, EvalSet], vectors: dict[str, tuple[np.ndarray, np.ndarray]]
) -> Results:
    return {
        **records_scores(url, sets["records"], *vectors["records"]),
        **docs_scores(url, sets["docs"], *vectors["docs"]),
    }


def line(set_name: str, dialect: str, ranker: str, summary: dict[str, list[float]]) -> str:
    cells = []
    for part in ["all", *KINDS[set_name]]:
        recall, mrr = summary[part]
        cells.append(f"{part} {recall:.3f}/{mrr:.3f}")
    return f"{set_name:8s} {dialect:10s} {ranker:15s} " + "  ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--postgres",
        default=os.environ.get("KEEPSTONE_TEST_POSTGRES_URL", ""),
        help="a PostgreSQL URL whose server gets a fresh database "
        "(default: KEEPSTONE_TEST_POSTGRES_URL; none: SQLite only)",
    )
    args = parser.parse_args()
    sets = {"records": load_records(), "docs": load_docs()}
    vectors = load_vectors(sets)
    results: dict[str, Results] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = run(f"sqlite:///{tmp}/quality.db", sets, vectors)
    if args.postgres:
        with fresh_postgres(args.postgres) as url:
            results["postgresql"] = run(url, sets, vectors)
    print(f"recall@{K}/MRR@{K} through the product's search (stored MiniLM vectors)")
    print(
        f"records: {len(sets['records'].units)} records, {len(sets['records'].queries)} "
        f"queries; docs: {len(sets['docs'].units)} chunks, {len(sets['docs'].queries)} queries"
    )
    summaries = {
        (s, d, r): results[d][(s, r)].summary(sets[s])
        for s in SETS
        for d in results
        for r in RANKERS
    }
    for s in SETS:
        for d in results:
            for r in RANKERS:
                print(line(s, d, r, summaries[(s, d, r)]))
    print("dense-only: not a product path, not measured")
    for s in SETS:
        if "postgresql" not in results:
            print(f"{s:8s} sqlite vs postgresql: not compared (no PostgreSQL URL given)")
            continue
        diff = max(
            abs(a - b)
            for r in RANKERS
            for part, figs in summaries[(s, "sqlite", r)].items()
            for a, b in zip(figs, summaries[(s, "postgresql", r)][part], strict=True)
        )
        verdict = "agree" if diff <= AGREE else "DISAGREE"
        print(
            f"{s:8s} sqlite vs postgresql: {verdict} within {AGREE} (largest difference {diff:.3f})"
        )
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
