"""Search-quality measurement over a labelled corpus (recall@k and MRR).

Used by ``bench/bench_search_quality.py`` (prints the figures) and by the tests that
hold them above floors. Records are made as every save makes them
(:func:`~keepstone.records.store.new_record`) and stored with :func:`load_corpus`; a search is
any function from a query and ``k`` to ranked record ids (the records service's search,
as a member who sees the whole team). A corpus is JSON lines ``{"id", "text"}``; queries
are JSON lines ``{"query", "kind"?, "relevant": [corpus ids]}``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keepstone.db import utcnow
from keepstone.records.store import RecordStore, new_record

#: A search: (query, k) → the ids of the records found, best first.
Search = Callable[[str, int], Sequence[str]]


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@dataclass(frozen=True, slots=True)
class QualityReport:
    queries: int
    recall_at_k: float
    mrr: float
    k: int
    #: kind → (recall@k, MRR) over the queries of that kind.
    by_kind: dict[str, tuple[float, float]] = field(default_factory=dict)


def load_corpus(
    store: RecordStore, team_id: str, corpus: list[dict[str, Any]], chunk: int = 2000
) -> dict[str, str]:
    """Store the corpus as ``team_id``'s records; return record id → corpus id."""
    now = utcnow()
    made = [new_record(team_id, str(item["text"]), None, now) for item in corpus]
    for start in range(0, len(made), chunk):
        with store.writing() as tx:
            tx.insert(made[start : start + chunk])
    store.loaded(len(made))
    return {r.id: str(item["id"]) for r, item in zip(made, corpus, strict=True)}


def evaluate(
    search: Search,
    id_map: dict[str, str],
    queries: list[dict[str, Any]],
    k: int = 10,
) -> QualityReport:
    """Mean recall@k and mean reciprocal rank of the first relevant hit, overall and per
    query ``kind``."""
    per_kind: dict[str, list[tuple[float, float]]] = defaultdict(list)
    scored: list[tuple[float, float]] = []
    for q in queries:
        relevant = set(q["relevant"])
        ranked = [id_map.get(record_id, "") for record_id in search(str(q["query"]), k)][:k]
        recall = len(relevant.intersection(ranked)) / len(relevant)
        rr = next((1.0 / rank for rank, cid in enumerate(ranked, 1) if cid in relevant), 0.0)
        scored.append((recall, rr))
        per_kind[str(q.get("kind", "all"))].append((recall, rr))
    return QualityReport(
        len(scored),
        _mean([r for r, _ in scored]),
        _mean([rr for _, rr in scored]),
        k,
        {
            kind: (_mean([r for r, _ in v]), _mean([rr for _, rr in v]))
            for kind, v in per_kind.items()
        },
    )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
