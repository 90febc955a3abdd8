"""Team records searched through a real ``keepstone serve`` never cross teams or projects, with
every cache warm (SQLite and PostgreSQL).

Two teams of two orgs save records with the same words (the service token, through
``POST /api/internal/teams/{team}/memory``); a member limited to project A, an unlimited
member and the other team's member each search first (warming the server's per-team
BM25 index and vector cache), then the same searches run again, keyword and by meaning
once the indexer has embedded every record: every hit is one of the caller's own team's
records it may see, and each caller finds all of those.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from keepstone.db import make_engine
from keepstone.http_client import tls
from keepstone.identity.keys import load_key_hasher
from keepstone.identity.service import IdentityService
from keepstone.schema import upgrade_all
from tests.api.conftest import database_fixture
from tests.e2e.test_indexer_crash import SERVICE, search_records, serve
from tests.records.conftest import make_world

pytestmark = pytest.mark.slow

database = database_fixture("database")
WORD = "heron"
CATCH_UP_SECONDS = 120


def _save(base: str, team: str, text: str, repo: str | None = None) -> str:
    body: dict[str, str] = {"text": text}
    if repo is not None:
        body["repo_id"] = repo
    r = httpx.post(
        f"{base}/api/internal/teams/{team}/memory",
        json=body,
        headers={"Authorization": f"Bearer {SERVICE}"},
        timeout=30,
        verify=tls(),
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_record_search_never_crosses_teams_or_projects_with_caches_warm(
    database: str, tmp_path: Path
) -> None:
    engine = make_engine(database)
    try:
        upgrade_all(engine)
        w = make_world(engine)
        identity = IdentityService(engine, load_key_hasher(engine, None))
        keys = {
            "member": (w.team_id, identity.create_api_key(w.member, w.team_id)[1]),
            "limited": (w.team_id, identity.create_api_key(w.limited, w.team_id)[1]),
            "outsider": (w.other_team, identity.create_api_key(w.outsider, w.other_team)[1]),
        }
    finally:
        engine.dispose()
    with serve(database, tmp_path / "home", tmp_path / "serve.log") as (_, base):
        in_a = _save(base, w.team_id, f"{WORD} migration fixed in project a", w.repo_a)
        in_b = _save(base, w.team_id, f"{WORD} migration fixed in project b", w.repo_b)
        no_repo = _save(base, w.team_id, f"{WORD} migration fixed without a repository")
        theirs = _save(base, w.other_team, f"{WORD} migration fixed by the other team")
        sees = {
            "member": {in_a, in_b, no_repo},
            "limited": {in_a},
            "outsider": {theirs},
        }
        queries = [WORD, f"{WORD} migration fixed", "a database schema change was repaired"]

        def check(*, by_meaning: bool) -> bool:
            """Every caller's hits are its own; True once every caller found its records
            by meaning too (when ``by_meaning``)."""
            meaning_everywhere = True
            for who, (team, key) in keys.items():
                for query in queries:
                    hits = search_records(base, key, team, query)
                    ids = {str(h["id"]) for h in hits}
                    assert ids <= sees[who], (who, query, ids - sees[who])
                    if query != queries[-1]:
                        assert ids == sees[who], (who, query, ids)
                    if by_meaning and query == queries[1]:
                        # Near the records' own words: every one of them, once embedded.
                        found = {str(h["id"]) for h in hits if "meaning" in h["matched"]}
                        meaning_everywhere &= found == sees[who]
            return meaning_everywhere

        check(by_meaning=False)  # caches cold, then warm
        check(by_meaning=False)
        deadline = time.monotonic() + CATCH_UP_SECONDS
        while not check(by_meaning=True):
            assert time.monotonic() < deadline, "the indexer did not embed every record"
            time.sleep(1)
        check(by_meaning=True)  # vectors cached too
