"""Search-quality measurement over a labelled corpus (recall@k and MRR).

Used by ``bench/bench_search_quality.py`` (prints the figures) and by the test that
holds them above a floor. A corpus is JSON lines ``{"id", "text"}``; queries are JSON
lines ``{"query", "relevant": [corpus ids]}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from cairn.records.access import TeamAccess
from cairn.records.ratelimit import LocalRateLimiter
from cairn.records.service import save_many, search


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@dataclass(frozen=True, slots=True)
class QualityReport:
    queries: int
    recall_at_k: float
    mrr: float
    k: int


def load_corpus(engine: Engine, team_id: str, corpus: list[dict[str, Any]]) -> dict[str, str]:
    """Save the corpus for ``team_id``; return record id → corpus id."""
    ids = save_many(engine, team_id, [(str(item["text"]), None) for item in corpus])
    return {rid: str(item["id"]) for rid, item in zip(ids, corpus, strict=True)}


def evaluate(
    engine: Engine,
    access: TeamAccess,
    id_map: dict[str, str],
    queries: list[dict[str, Any]],
    k: int = 10,
) -> QualityReport:
    """Mean recall@k and mean reciprocal rank of the first relevant hit."""
    limiter = LocalRateLimiter(rate=10**9, max_in_flight=10**9)
    recall_sum = 0.0
    rr_sum = 0.0
    for q in queries:
        relevant = set(q["relevant"])
        answer = search(engine, access, str(q["query"]), limit=k, limiter=limiter)
        ranked = [id_map.get(r["id"], "") for r in answer["results"]]
        recall_sum += len(relevant.intersection(ranked)) / len(relevant)
        for rank, cid in enumerate(ranked, start=1):
            if cid in relevant:
                rr_sum += 1.0 / rank
                break
    n = len(queries)
    return QualityReport(n, recall_sum / n, rr_sum / n, k)
