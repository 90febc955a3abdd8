"""Search-quality measurement over a labelled corpus (recall@k and MRR).

Used by ``bench/bench_search_quality.py`` (prints the figures) and by the test that
holds them above a floor. It measures a :class:`~cairn.records.store.RecordStore`'s
ranking directly: records are made as every save makes them
(:func:`~cairn.records.store.new_record`) and searched as a member who sees the whole
team. A corpus is JSON lines ``{"id", "text"}``; queries are JSON lines
``{"query", "relevant": [corpus ids]}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn.db import utcnow
from cairn.records.store import RecordStore, Scope, new_record
from cairn.secrets import mask


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@dataclass(frozen=True, slots=True)
class QualityReport:
    queries: int
    recall_at_k: float
    mrr: float
    k: int


def load_corpus(
    store: RecordStore, team_id: str, corpus: list[dict[str, Any]], chunk: int = 2000
) -> dict[str, str]:
    """Store the corpus as ``team_id``'s records; return record id → corpus id."""
    now = utcnow()
    made = [new_record(team_id, str(item["text"]), None, now) for item in corpus]
    for start in range(0, len(made), chunk):
        with store.writing() as tx:
            tx.insert(made[start : start + chunk])
    return {r.id: str(item["id"]) for r, item in zip(made, corpus, strict=True)}


def evaluate(
    store: RecordStore,
    team_id: str,
    id_map: dict[str, str],
    queries: list[dict[str, Any]],
    k: int = 10,
) -> QualityReport:
    """Mean recall@k and mean reciprocal rank of the first relevant hit."""
    recall_sum = 0.0
    rr_sum = 0.0
    scope = Scope(team_id, None, None, utcnow())
    for q in queries:
        relevant = set(q["relevant"])
        query = mask(str(q["query"]))  # as the search use-case does
        with store.reading() as tx:
            hits = tx.search(scope, query, k)
        ranked = [id_map.get(hit.record.id, "") for hit in hits]
        recall_sum += len(relevant.intersection(ranked)) / len(relevant)
        for rank, cid in enumerate(ranked, start=1):
            if cid in relevant:
                rr_sum += 1.0 / rank
                break
    n = len(queries)
    return QualityReport(n, recall_sum / n, rr_sum / n, k)
