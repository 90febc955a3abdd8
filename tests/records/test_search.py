"""Keyword search of records: analysed terms stored with the record, ranked in the process,
the same on SQLite and PostgreSQL, one team's records never reaching another's search."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from keepstone.db import read_transaction, write_transaction
from keepstone.principal import CredentialKind
from keepstone.records.schema import records
from keepstone.search.text import analyze
from tests.records.conftest import World


def _found(world: World, query: str, user: str | None = None) -> list[str]:
    who = world.principal(user or world.member)
    answer = world.records.search(who, world.team_id, query)
    return [hit.id for hit in answer.hits]


def test_terms_are_the_analysed_text(world: World) -> None:
    rec = world.records.save_as_server(world.team_id, "Deploying the Café service, twice")
    with read_transaction(world.engine) as conn:
        terms = conn.execute(
            sa.select(records.c.terms).where(
                records.c.team_id == world.team_id, records.c.id == rec.id
            )
        ).scalar_one()
    assert terms == " ".join(analyze(rec.text)) == "deploy cafe servic twice"


def test_text_spelling_another_teams_words_does_not_cross(world: World) -> None:
    world.records.save_as_server(world.other_team, "quarterly invoice audit, quarterly")
    mine = world.records.save_as_server(world.team_id, "prepared the quarterly invoice audit")
    assert _found(world, "quarterly invoice audit") == [mine.id]


def test_stemming_accents_and_other_scripts(world: World) -> None:
    save, t = world.records.save_as_server, world.team_id
    stem = save(t, "Deploying the payments service twice a day")
    accent = save(t, "Menu du café traduit en français")
    other = save(t, "修复了 登录 页面的错误")
    assert _found(world, "deployed payment") == [stem.id]
    assert _found(world, "cafe francais") == [accent.id]
    assert _found(world, "登录") == [other.id]


def test_query_of_only_stop_words_finds_nothing(world: World) -> None:
    world.records.save_as_server(world.team_id, "the and of")
    assert _found(world, "the and of") == []


def test_keyword_hits_say_keyword_matched(world: World) -> None:
    rec = world.records.save_as_server(world.team_id, "pinned the flaky e2e runner image")
    answer = world.records.search(world.principal(world.member), world.team_id, "e2e runner")
    assert [(h.id, h.matched) for h in answer.hits] == [(rec.id, ("keyword",))]


def test_a_save_is_searchable_at_once_with_the_cache_warm(world: World) -> None:
    first = world.records.save_as_server(world.team_id, "tuned the kafka consumer lag alert")
    assert _found(world, "kafka consumer") == [first.id]  # the team's index is now cached
    second = world.records.save_as_server(world.team_id, "kafka consumer group rebalanced")
    assert sorted(_found(world, "kafka consumer")) == sorted([first.id, second.id])
    world.records.delete(
        world.principal(world.owner, CredentialKind.SESSION), world.team_id, first.id
    )
    assert _found(world, "kafka consumer") == [second.id]


def test_warm_caches_never_cross_teams_or_projects(world: World) -> None:
    save = world.records.save_as_server
    a = save(world.team_id, "rotated the vault unseal keys", repo_id=world.repo_a)
    b = save(world.team_id, "rotated the vault unseal keys", repo_id=world.repo_b)
    bare = save(world.team_id, "rotated the vault unseal keys")
    theirs = save(world.other_team, "rotated the vault unseal keys", repo_id=world.other_repo)
    # Warm this team's cache, as an unlimited member, then search as everyone else. The
    # three records of one text fold into one hit that lists the other two.
    answer = world.records.search(world.principal(world.member), world.team_id, "vault unseal")
    [hit] = answer.hits
    assert sorted([hit.id, *hit.also_in]) == sorted([a.id, b.id, bare.id])
    assert _found(world, "vault unseal", world.limited) == [a.id]
    outsider = world.principal(world.outsider)
    other = world.records.search(outsider, world.other_team, "vault unseal")
    assert [h.id for h in other.hits] == [theirs.id]
    # And the other way round: their cache warm, ours still ours.
    answer = world.records.search(world.principal(world.member), world.team_id, "vault unseal")
    assert sorted(i for h in answer.hits for i in (h.id, *h.also_in)) == sorted(
        [a.id, b.id, bare.id]
    )


@contextlib.contextmanager
def _ids_read(world: World, ids: set[str]) -> Iterator[list[str]]:
    """The ids of ``ids`` bound into the statements run meanwhile (the records read)."""
    read: list[str] = []

    def bound(_conn: Any, _cursor: Any, _sql: str, params: Any, *_rest: Any) -> None:
        for value in params.values() if isinstance(params, dict) else params:
            if isinstance(value, str) and value.startswith("["):
                value = json.loads(value)  # SQLite: a list of ids as one JSON parameter
            listed = value if isinstance(value, list) else [value]
            read.extend(v for v in listed if isinstance(v, str) and v in ids)

    event.listen(world.engine, "before_cursor_execute", bound)
    try:
        yield read
    finally:
        event.remove(world.engine, "before_cursor_execute", bound)


def test_a_search_folds_by_the_stored_keys_and_reads_only_what_it_returns(world: World) -> None:
    save, t = world.records.save_as_server, world.team_id
    one = save(t, "alpha beta")
    again = save(t, "Alpha, BETA!")  # the same text: folded into the better hit
    longer = save(t, "alpha beta gamma delta")
    longer_again = save(t, "alpha  beta gamma delta.")
    ids = {one.id, again.id, longer.id, longer_again.id}
    who = world.principal(world.member)

    def answer() -> list[tuple[str, tuple[str, ...]]]:
        hits = world.records.search(who, t, "alpha beta", limit=2).hits
        return [(h.id, h.also_in) for h in hits]

    with _ids_read(world, ids) as cold:
        first = answer()
    with _ids_read(world, ids) as warm:
        second = answer()
    assert [sorted([hit, *also]) for hit, also in first] == [
        sorted([one.id, again.id]),
        sorted([longer.id, longer_again.id]),
    ]
    assert second == first
    # The keys come with the team's rows: only the two records returned are read, the
    # first search as every later one.
    assert sorted(cold) == sorted(warm) == sorted(hit for hit, _ in first)


def test_a_record_stored_without_a_key_folds_with_nothing(world: World) -> None:
    save, t = world.records.save_as_server, world.team_id
    one, again = save(t, "alpha beta"), save(t, "alpha beta.")
    with write_transaction(world.engine) as conn:  # as a row written around the product
        conn.execute(sa.update(records).where(records.c.id == again.id).values(dup_key=None))
    hits = world.records.search(world.principal(world.member), t, "alpha beta").hits
    assert sorted((h.id, h.also_in) for h in hits) == sorted([(one.id, ()), (again.id, ())])


def test_a_hit_deleted_after_its_rows_were_cached_gives_way_to_its_duplicate(
    world: World,
) -> None:
    save, t = world.records.save_as_server, world.team_id
    one, again = save(t, "alpha beta"), save(t, "alpha beta.")
    who = world.principal(world.member)
    [hit] = world.records.search(who, t, "alpha beta").hits
    assert (hit.id, hit.also_in) == (one.id, (again.id,))
    # Deleted as a delete racing the next search would be: the team's rows stay cached.
    with write_transaction(world.engine) as conn:
        conn.execute(sa.delete(records).where(records.c.id == one.id))
    [hit] = world.records.search(who, t, "alpha beta").hits
    assert (hit.id, hit.also_in) == (again.id, ())
