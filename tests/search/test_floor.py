"""The relevance floor, near-duplicate folding and the search filters (docs/search.md,
"The relevance floor" and "Filters"): the rule and its refusals, then on the labelled
sets (stored vectors, the product's ranking) the floor's cost in recall@10 stays within
0.01 of no floor on every set, and a document search for something no document holds
answers an empty list."""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepstone.embed import MODEL_ID
from keepstone.errors import InvalidRequest
from keepstone.search import floor as floor_module
from keepstone.search.bm25 import BM25Index
from keepstone.search.filters import front_matter_tags, search_filters
from keepstone.search.floor import Floor, check_min_score, duplicate_key, floor_for
from keepstone.search.hybrid import ExactDense, rank
from keepstone.search.text import ANALYZER
from keepstone.service.search import DocumentSearch
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.sql import SqlStore
from tests.search.labelled import EvalSet, K, evaluate, load_sets, load_vectors

FLOOR = Floor(dense=0.3, keyword=0.5, fused=0.6, keyword_only=0.2)


def test_a_hit_qualifies_by_any_one_signal() -> None:
    assert FLOOR.qualifies(0.1, None, 0.31, hybrid=True)  # meaning alone
    assert FLOOR.qualifies(0.1, 0.5, 0.0, hybrid=True)  # keyword alone
    assert FLOOR.qualifies(0.6, 0.1, 0.1, hybrid=True)  # the fusion alone
    assert not FLOOR.qualifies(0.59, 0.49, 0.29, hybrid=True)
    assert not FLOOR.qualifies(0.59, None, None, hybrid=True)


def test_keyword_only_search_is_floored_by_the_keyword_side() -> None:
    assert FLOOR.qualifies(0.2, 0.2, None, hybrid=False)
    assert not FLOOR.qualifies(0.9, 0.19, 0.9, hybrid=False)  # no dense side: cosine unread
    assert not FLOOR.qualifies(0.0, None, None, hybrid=False)


def test_a_row_not_yet_embedded_is_judged_by_the_keyword_only_threshold() -> None:
    assert FLOOR.qualifies(0.1, 0.2, None, hybrid=True)
    assert not FLOOR.qualifies(0.1, 0.19, None, hybrid=True)


def test_min_score_replaces_the_floor() -> None:
    low = FLOOR.overridden(-1.0)
    assert low.qualifies(-0.5, None, None, hybrid=True)
    assert low.qualifies(-0.5, None, None, hybrid=False)
    high = FLOOR.overridden(0.9)
    assert not high.qualifies(0.89, 1.0, 1.0, hybrid=True)
    assert FLOOR.overridden(None) is FLOOR


def test_the_floor_file_holds_every_threshold_per_model() -> None:
    data = json.loads(floor_module.THRESHOLDS_FILE.read_text(encoding="utf-8"))
    assert "default" in data["models"]
    for entry in data["models"].values():
        assert set(entry) == {"dense", "keyword", "fused", "keyword_only"}
    unknown = floor_for("a-model-never-calibrated")
    assert unknown == floor_for("default")
    assert floor_for(None, 0.25).min_score == 0.25


@pytest.mark.parametrize("bad", ["high", "1.5", -1.01, math.nan, True, [0.3]])
def test_min_score_out_of_range_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(InvalidRequest) as caught:
        check_min_score(bad)
    assert caught.value.details.get("field") == "min_score"


def test_min_score_takes_numbers_and_their_text() -> None:
    assert check_min_score("0.25") == 0.25
    assert check_min_score(-1) == -1.0
    assert check_min_score(None) is None


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"since": "last tuesday"}, "since"),
        ({"until": "2025-13-01"}, "until"),
        ({"since": "2025-02-01", "until": "2025-01-01"}, "since"),
        ({"tags": "ok,no spaces"}, "tags"),
        ({"tags": ",".join(f"t{i}" for i in range(21))}, "tags"),
        ({"tags": [1, 2]}, "tags"),
        ({"recency_days": "0"}, "recency_days"),
        ({"min_score": "2"}, "min_score"),
    ],
)
def test_bad_filters_are_refused_naming_the_parameter(given: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        search_filters(**given)
    assert caught.value.details.get("field") == field
    assert field in caught.value.message


def test_filters_read_dates_tags_and_say_when_they_narrow() -> None:
    f = search_filters(since="2025-01-31", until="2025-02-01T10:00:00Z", tags="ops, billing,ops")
    assert f.since == datetime(2025, 1, 31, tzinfo=UTC)
    assert f.until == datetime(2025, 2, 1, 10, tzinfo=UTC)
    assert f.tags == ("ops", "billing")
    assert f.narrows and not search_filters().narrows
    assert f.in_time(datetime(2025, 2, 1, tzinfo=UTC))
    assert not f.in_time(datetime(2025, 2, 2, tzinfo=UTC))
    assert search_filters(**f.as_params()) == f


def test_a_date_alone_is_inclusive_at_both_ends() -> None:
    # until=2025-01-31 keeps what was written on the 31st, as since=2025-01-31 does.
    f = search_filters(since="2025-01-31", until="2025-01-31")
    assert f.in_time(datetime(2025, 1, 31, tzinfo=UTC))
    assert f.in_time(datetime(2025, 1, 31, 23, 59, 59, tzinfo=UTC))
    assert not f.in_time(datetime(2025, 2, 1, tzinfo=UTC))
    assert not f.in_time(datetime(2025, 1, 30, 23, 59, 59, tzinfo=UTC))
    assert search_filters(**f.as_params()) == f  # the same sent on to a server


def test_the_recency_prior_halves_a_score_each_half_life_and_is_off_by_default() -> None:
    now = datetime(2025, 3, 1, tzinfo=UTC)
    prior = search_filters(recency_days=30)
    assert prior.weight(now - timedelta(days=30), now) == pytest.approx(0.5)
    assert prior.weight(now - timedelta(days=60), now) == pytest.approx(0.25)
    assert prior.weight(now + timedelta(days=1), now) == 1.0  # the future is not favoured
    assert search_filters().weight(now - timedelta(days=999), now) == 1.0
    assert prior.prior(0.8, now - timedelta(days=30), now) == pytest.approx(0.4)
    assert prior.prior(-0.2, now - timedelta(days=30), now) == -0.2


def test_front_matter_tags_in_its_usual_spellings() -> None:
    assert front_matter_tags("---\ntags: [ops, billing]\n---\n# T\n") == {"ops", "billing"}
    assert front_matter_tags("---\ntags: ops, billing\n---\n") == {"ops", "billing"}
    assert front_matter_tags("---\ntags:\n  - ops\n  - on call\n---\n") == {"ops", "on call"}
    assert front_matter_tags("# No front matter\ntags: [ops]\n") == frozenset()
    assert front_matter_tags("---\ntags: [unclosed\n") == frozenset()


def test_near_duplicates_share_a_key() -> None:
    assert duplicate_key("Rotated the  vault keys.") == duplicate_key("rotated the vault keys")
    assert duplicate_key("rotated the vault keys") != duplicate_key("rotated the vault key")
    # An ASCII text and a text with other characters take two paths to the same key.
    assert duplicate_key("Rotated\u00a0the vault—keys") == duplicate_key("rotated the vault keys")
    assert duplicate_key("Café_1 done") == duplicate_key("café_1, DONE.")
    assert duplicate_key("cafe done") != duplicate_key("café done")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127)) | st.text())
def test_the_duplicate_key_is_a_digest_of_the_casefolded_words(text: str) -> None:
    words = " ".join(re.findall(r"\w+", text.casefold()))
    digest = hashlib.blake2b(words.encode(), digest_size=8).digest()
    key = duplicate_key(text)
    assert key == (int.from_bytes(digest, "big", signed=True) or 1)
    assert key != 0 and -(2**63) <= key < 2**63  # a BIGINT, never "no key"


# --- on the labelled sets ----------------------------------------------------------------


def _ranked(
    es: EvalSet, units: np.ndarray, queries: np.ndarray, hybrid: bool, floor: Floor
) -> list[list[int]]:
    """The product's ranking of every query (hybrid, or keyword-only), the hits ``floor``
    lets through, as unit indices best first."""
    indexes = {
        g: BM25Index([ANALYZER.terms(es.units[i].text) for i in ix]) for g, ix in es.groups.items()
    }
    out = []
    for q, qv in zip(es.queries, queries, strict=True):
        ix = es.groups[q.group]
        dense = None
        if hybrid:
            matrix = np.ascontiguousarray(units[ix], dtype=np.float32)
            dense = ExactDense(matrix, np.arange(len(ix), dtype=np.int64), qv.astype(np.float32))
        hits = rank(indexes[q.group], ANALYZER.query_terms(q.text), dense=dense)
        out.append(
            [
                int(ix[h.key])
                for h in hits
                if floor.qualifies(h.score, h.keyword, h.meaning, hybrid=hybrid)
            ]
        )
    return out


@pytest.mark.parametrize("hybrid", [True, False], ids=["hybrid", "keyword-only"])
def test_the_floor_costs_at_most_a_hundredth_of_recall_on_every_labelled_set(
    hybrid: bool,
) -> None:
    sets = load_sets()
    vectors = load_vectors(sets)
    calibrated = floor_for(MODEL_ID)  # the default embedder's floor
    nothing = Floor(-math.inf, -math.inf, -math.inf, -math.inf)
    cut = 0
    for name, es in sets.items():
        units, queries = vectors[name]
        floored = _ranked(es, units, queries, hybrid, calibrated)
        whole = _ranked(es, units, queries, hybrid, nothing)
        drop = evaluate(es, whole).recall.mean() - evaluate(es, floored).recall.mean()
        assert drop <= 0.01, (name, hybrid, f"recall@{K} falls by {drop:.3f}")
        cut += sum(len(r[:K]) for r in whole) - sum(len(r[:K]) for r in floored)
    assert cut > 0  # the floor does leave hits out


def test_a_search_for_what_no_document_holds_answers_nothing(tmp_path: Path) -> None:
    store = SqlStore.open(f"sqlite:///{tmp_path}/floor.db")
    try:
        ref = SpaceRef(Visibility.PROJECT, "notes", tenant="t1", project="p")
        store.write(ref, "ops/runbook.md", "# Runbook\n\n## Rollback\n\nRun the rollback script.\n")
        store.write(
            ref, "ops/rollback.md", "# Runbook\n\n## Rollback\n\nRun the rollback script.\n"
        )
        search = DocumentSearch(store)
        nothing = search.search([ref], "boiling point of mercury in kelvin")
        assert nothing == [] and "nothing relevant enough matched" in str(nothing.hint)
        hits = search.search([ref], "rollback script")
        assert hits.hint is None  # a hint only when nothing was found
        # The two sections of one text fold into one hit that names the other.
        assert len(hits) == 1
        assert [path for _, path in hits[0].also_in] == [
            "ops/runbook.md" if hits[0].path == "ops/rollback.md" else "ops/rollback.md"
        ]
        assert search.search([ref], "rollback", filters=search_filters(tags="ops")) == []
        store.write(ref, "ops/tagged.md", "---\ntags: [ops, db]\n---\n# Failover\nrollback db\n")
        tagged = search.search([ref], "rollback", filters=search_filters(tags="db,ops"))
        assert [h.path for h in tagged] == ["ops/tagged.md"]
        assert search.search([ref], "rollback", filters=search_filters(tags="db,web")) == []
        later = search_filters(since=datetime.now(UTC) + timedelta(days=1))
        narrowed = search.search([ref], "rollback", filters=later)
        assert narrowed == [] and narrowed.hint is not None
        assert narrowed.hint != nothing.hint  # it says the filters narrowed the search
        earlier = search_filters(until=datetime.now(UTC) - timedelta(days=1))
        assert search.search([ref], "rollback", filters=earlier) == []
        now = search_filters(since=datetime.now(UTC) - timedelta(days=1))
        assert {h.path for h in search.search([ref], "rollback", filters=now)} >= {"ops/tagged.md"}
    finally:
        store.close()
