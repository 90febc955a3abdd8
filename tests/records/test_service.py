"""The records library against real SQLite and PostgreSQL: save, search, list,
delete, settings, purge, visibility and the refusals of SPEC §6."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.engine import Engine

from keepstone.errors import (
    CsrfRequired,
    Forbidden,
    InvalidRequest,
    MemoryOff,
    PlanRequired,
    RecordNotFound,
    RepoNotFound,
    TeamNotFound,
)
from keepstone.principal import CredentialKind, Principal
from keepstone.records.render import NOTICE, render_text
from keepstone.service.access import Action
from keepstone.service.records import MEMORY_OFF_HINT, MemoryState, RecordPage, SearchAnswer
from tests.records.conftest import (
    World,
    access_of,
    make_world,
    records_of,
    remove_member,
    set_plan,
)


def _search(world: World, user: str, query: str, **kw: object) -> SearchAnswer:
    return world.records.search(
        world.principal(user),
        world.team_id,
        query,
        **kw,  # type: ignore[arg-type]
    )


def _ids(answer: SearchAnswer | RecordPage) -> list[str]:
    items = answer.hits if isinstance(answer, SearchAnswer) else answer.records
    return [r.id for r in items]


def _who(world: World, user: str, action: Action = Action.READ) -> Principal:
    kind = CredentialKind.SESSION if action is Action.MANAGE else CredentialKind.API_KEY
    return world.principal(user, kind)


def _list(world: World, user: str, **kw: object) -> RecordPage:
    return world.records.list(_who(world, user), world.team_id, **kw)  # type: ignore[arg-type]


def _delete(world: World, user: str, record_id: str) -> None:
    world.records.delete(_who(world, user, Action.MANAGE), world.team_id, record_id)


def test_save_then_search_ranks_best_first(world: World) -> None:
    t = world.team_id
    best = world.records.save_as_server(
        t, "Fixed the flaky payment webhook retry; webhook retries now back off"
    )
    other = world.records.save_as_server(t, "Upgraded the logging library; no webhook changes")
    world.records.save_as_server(t, "Rewrote the onboarding email templates")
    answer = _search(world, world.member, "webhook retry")
    assert answer.state == "on"
    assert answer.notice == NOTICE
    assert _ids(answer) == [best.id, other.id]
    results = answer.hits
    assert results[0].score > results[1].score
    assert results[0].text == render_text(best.text)
    assert set(asdict(results[0])) == {
        *("id", "repo_id", "score", "created_at", "text", "matched", "also_in")
    }


def test_search_never_crosses_teams(world: World) -> None:
    mine = world.records.save_as_server(world.team_id, "rotated the staging database password")
    world.records.save_as_server(world.other_team, "rotated the staging database password")
    assert _ids(_search(world, world.member, "staging database password")) == [mine.id]


def test_search_limit_and_repo_filter(world: World) -> None:
    t = world.team_id
    in_a = [
        world.records.save_as_server(t, f"migration step {i} for orders", repo_id=world.repo_a)
        for i in range(4)
    ]
    world.records.save_as_server(t, "migration step for invoices", repo_id=world.repo_b)
    assert len(_ids(_search(world, world.member, "migration", limit=3))) == 3
    found = _ids(_search(world, world.member, "migration", repo_id=world.repo_a))
    assert sorted(found) == sorted(r.id for r in in_a)


def test_save_masks_secrets_and_normalizes(world: World) -> None:
    rec = world.records.save_as_server(
        world.team_id, "deploy key AKIAABCDEFGHIJKLMNOP was rotated\r\ndone"
    )
    assert "AKIA" not in rec.text
    assert "[REDACTED:aws_access_key_id]" in rec.text
    assert rec.text.endswith("rotated\ndone")
    listed = _list(world, world.member)
    assert listed.records[0].text == render_text(rec.text)


def test_search_query_is_masked_before_use(world: World) -> None:
    rec = world.records.save_as_server(world.team_id, "leaked AKIAABCDEFGHIJKLMNOP in a log")
    # The key in the query becomes the same redaction marker as in the record.
    found = _ids(_search(world, world.member, "AKIAZZZZZZZZZZZZZZZZ"))
    assert found == [rec.id]


def test_expires_after_365_days(world: World) -> None:
    rec = world.records.save_as_server(world.team_id, "the quarterly capacity review")
    assert rec.expires_at - rec.created_at == timedelta(days=365)


def test_expired_records_never_returned_and_purged(world: World) -> None:
    t = world.team_id
    old = world.records.save_as_server(
        t, "ancient cache invalidation fix", now=datetime.now(UTC) - timedelta(days=366)
    )
    fresh = world.records.save_as_server(t, "recent cache invalidation fix")
    assert _ids(_search(world, world.member, "cache invalidation")) == [fresh.id]
    assert old.id not in _ids(_list(world, world.member))
    assert world.records.purge_expired() >= 1
    assert world.records.purge_expired() == 0
    with pytest.raises(RecordNotFound):
        _delete(world, world.owner, old.id)
    assert _ids(_search(world, world.member, "cache invalidation")) == [fresh.id]


@pytest.mark.parametrize("text", ["", "x" * 8001])
def test_save_refuses_text_outside_limits(world: World, text: str) -> None:
    with pytest.raises(InvalidRequest, match="'text'"):
        world.records.save_as_server(world.team_id, text)


def test_save_accepts_8000_characters(world: World) -> None:
    assert len(world.records.save_as_server(world.team_id, "y" * 8000).text) == 8000


def test_save_refusals(engine: Engine) -> None:
    records = records_of(engine)
    with pytest.raises(TeamNotFound):
        records.save_as_server("team_missing", "text")
    with pytest.raises(TeamNotFound):  # the team before the text
        records.save_as_server("team_missing", "")
    lapsed = make_world(engine, plan="pro", enabled=False)
    with pytest.raises(InvalidRequest):  # the text before the plan
        records.save_as_server(lapsed.team_id, "")
    with pytest.raises(PlanRequired):  # plan first, even while off
        records.save_as_server(lapsed.team_id, "text")
    off = make_world(engine, plan="enterprise", enabled=False)
    with pytest.raises(MemoryOff):
        records.save_as_server(off.team_id, "text")
    on = make_world(engine)
    with pytest.raises(RepoNotFound):
        records.save_as_server(on.team_id, "text", repo_id=on.other_repo)
    with pytest.raises(RepoNotFound):
        records.save_as_server(on.team_id, "text", repo_id="repo_nope")


def test_visibility_limited_member(world: World) -> None:
    t = world.team_id
    a = world.records.save_as_server(t, "tuned the search index", repo_id=world.repo_a)
    b = world.records.save_as_server(t, "tuned the search index", repo_id=world.repo_b)
    none = world.records.save_as_server(t, "tuned the search index")
    assert _ids(_search(world, world.limited, "search index")) == [a.id]
    assert _ids(_list(world, world.limited)) == [a.id]
    with pytest.raises(RepoNotFound, match="not in one of your projects"):
        _search(world, world.limited, "search index", repo_id=world.repo_b)
    with pytest.raises(RepoNotFound):
        _list(world, world.limited, repo_id=world.repo_b)
    for user in (world.member, world.owner, world.admin, world.viewer):
        # The three records of one text are one hit, which names the other two.
        [hit] = _search(world, user, "search index").hits
        assert sorted([hit.id, *hit.also_in]) == sorted([a.id, b.id, none.id])


def test_membership_and_credentials(world: World) -> None:
    t = world.team_id
    access = access_of(world.engine)
    with pytest.raises(TeamNotFound):
        access.team_access(world.principal(world.outsider), t, Action.READ)
    # An API key of another team is a 404 even for a member of this team.
    key_elsewhere = Principal(kind=CredentialKind.API_KEY, user_id=world.member, team_id="x")
    with pytest.raises(TeamNotFound):
        access.team_access(key_elsewhere, t, Action.READ)
    with pytest.raises(TeamNotFound):
        access.team_access(world.principal(world.member), "team_missing", Action.READ)
    service_token = Principal(kind=CredentialKind.SERVICE_TOKEN)
    with pytest.raises(Forbidden):
        access.team_access(service_token, t, Action.READ)
    assert access.team_access(service_token, t, Action.SAVE).project_ids is None
    with pytest.raises(Forbidden):
        access.team_access(world.principal(world.owner, CredentialKind.SESSION), t, Action.SAVE)


def test_manage_needs_org_admin_in_browser(world: World) -> None:
    t = world.team_id
    access = access_of(world.engine)
    for user in (world.owner, world.admin):
        with pytest.raises(Forbidden, match="API key"):
            access.team_access(world.principal(user, CredentialKind.API_KEY), t, Action.MANAGE)
        with pytest.raises(CsrfRequired):
            access.team_access(
                world.principal(user, CredentialKind.SESSION, csrf_ok=False), t, Action.MANAGE
            )
        assert access.team_access(world.principal(user, CredentialKind.SESSION), t, Action.MANAGE)
    with pytest.raises(Forbidden, match="owner or admin"):
        access.team_access(world.principal(world.member, CredentialKind.SESSION), t, Action.MANAGE)


def test_removed_member_refused_at_once(world: World) -> None:
    world.records.save_as_server(world.team_id, "release notes for 4.2")
    assert _search(world, world.member, "release notes").state == "on"
    remove_member(world.engine, world.team_id, world.member)
    with pytest.raises(TeamNotFound):
        _search(world, world.member, "release notes")


def test_off_and_lapsed(world: World) -> None:
    e, t = world.engine, world.team_id
    rec = world.records.save_as_server(t, "kept through the switch")
    world.records.set_enabled_as_server(t, False)
    off = _search(world, world.member, "switch")
    assert off == SearchAnswer(MemoryState.OFF, NOTICE, (), hint=MEMORY_OFF_HINT)
    listed = _list(world, world.member)
    assert listed.state == "off" and _ids(listed) == [rec.id]
    with pytest.raises(MemoryOff):
        world.records.save_as_server(t, "refused while off")
    set_plan(e, world.org_id, "free")
    with pytest.raises(PlanRequired):
        _search(world, world.member, "switch")
    world.records.set_enabled_as_server(t, True)
    with pytest.raises(PlanRequired):
        world.records.save_as_server(t, "refused while lapsed")
    assert _ids(_list(world, world.member)) == [rec.id]
    _delete(world, world.owner, rec.id)
    assert _ids(_list(world, world.member)) == []


def test_delete(world: World) -> None:
    rec = world.records.save_as_server(world.team_id, "to be removed")
    theirs = world.records.save_as_server(world.other_team, "not yours")
    manage = _who(world, world.admin, Action.MANAGE)
    with pytest.raises(RecordNotFound):
        world.records.delete(manage, world.team_id, theirs.id)
    world.records.delete(manage, world.team_id, rec.id)
    with pytest.raises(RecordNotFound):
        world.records.delete(manage, world.team_id, rec.id)


def test_an_expired_record_is_not_found_for_a_delete(world: World) -> None:
    # Expired, it is gone to every reader (search, list) until the purge removes it; a
    # delete answers for what a reader could see, and leaves the purge its work.
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rec = world.records.save_as_server(world.team_id, "expires in a year", now=t0)
    manage = _who(world, world.admin, Action.MANAGE)
    with pytest.raises(RecordNotFound):
        world.records.delete(manage, world.team_id, rec.id, now=t0 + timedelta(days=366))
    world.records.delete(manage, world.team_id, rec.id, now=t0 + timedelta(days=364))


def test_settings(world: World) -> None:
    e, t = world.engine, world.team_id
    got = world.records.get_settings(_who(world, world.member), t)
    assert asdict(got) == {
        "enabled": True,
        "plan_allows": True,
        "store_ready": True,
        "can_edit": False,
    }
    assert world.records.get_settings(_who(world, world.owner, Action.MANAGE), t).can_edit
    world.records.set_enabled_as_server(t, False)
    assert not world.records.get_settings(_who(world, world.member), t).enabled
    fresh = make_world(e, plan="free", enabled=False)
    got = fresh.records.get_settings(fresh.principal(fresh.member), fresh.team_id)
    assert asdict(got)["plan_allows"] is False


def test_list_pages_newest_first(world: World) -> None:
    t = world.team_id
    start = datetime.now(UTC) - timedelta(hours=1)
    saved = [
        world.records.save_as_server(t, f"note {i}", now=start + timedelta(seconds=i))
        for i in range(120)
    ]
    # Two records at the same instant are ordered by id, and neither is lost.
    twin = world.records.save_as_server(t, "twin", now=start + timedelta(seconds=60))
    access = _who(world, world.member)
    seen: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        page = world.records.list(access, t, next_token=token)
        seen += _ids(page)
        pages += 1
        token = page.next_token
        if token is None:
            break
    assert pages == 3
    expected = sorted([*saved, twin], key=lambda r: (r.created_at, r.id), reverse=True)
    assert seen == [r.id for r in expected]


def test_list_token_is_bound(world: World) -> None:
    t = world.team_id
    for i in range(55):
        world.records.save_as_server(t, f"entry {i}", repo_id=world.repo_a)
    member = _who(world, world.member)
    token = world.records.list(member, t).next_token
    assert isinstance(token, str)
    body, mac = token.split(".")
    tampered = [
        body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1] + "." + mac,
        "junk",
        token + "x",
    ]
    for bad in tampered:
        with pytest.raises(InvalidRequest, match="next_token"):
            world.records.list(member, t, next_token=bad)
    # Another caller visibility, another filter or another team cannot use it.
    with pytest.raises(InvalidRequest):
        _list(world, world.limited, next_token=token)
    with pytest.raises(InvalidRequest):
        world.records.list(member, t, repo_id=world.repo_a, next_token=token)
    outsider = world.principal(world.outsider)
    with pytest.raises(InvalidRequest):
        world.records.list(outsider, world.other_team, next_token=token)
    assert len(world.records.list(member, t, next_token=token).records) == 5


@pytest.mark.parametrize(("query", "limit"), [("", 10), ("q" * 1001, 10), ("q", 0), ("q", 51)])
def test_library_search_checks_limits(world: World, query: str, limit: int) -> None:
    with pytest.raises(InvalidRequest):
        _search(world, world.member, query, limit=limit)
