"""Index tokens: team-prefixed, so one team's search can only reach its own records."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.records.schema import team_key
from cairn.records.search import index_terms, query_terms
from tests.records.conftest import World


def _found(world: World, query: str) -> list[str]:
    answer = world.records.search(world.principal(world.member), world.team_id, query)
    return [hit.id for hit in answer.hits]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20))
def test_every_token_carries_its_team(text: str, team_a: str, team_b: str) -> None:
    tokens = index_terms(team_a, text).split()
    assert all(t.startswith(team_key(team_a)) and t.isascii() and t.isalnum() for t in tokens)
    assert all(t.startswith(team_key(team_a)) for t in query_terms(team_a, text))
    if team_a != team_b and team_key(team_a) != team_key(team_b):
        assert not set(tokens) & set(index_terms(team_b, text).split())


def test_text_spelling_another_teams_tokens_does_not_cross(world: World) -> None:
    # A record of the other team whose text *is* this team's index tokens.
    forged = index_terms(world.team_id, "quarterly invoice audit")
    world.records.save_as_server(world.other_team, forged)
    mine = world.records.save_as_server(world.team_id, "prepared the quarterly invoice audit")
    assert _found(world, "quarterly invoice audit") == [mine.id]
    assert _found(world, forged) == []


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
