"""The records library against real SQLite and PostgreSQL: save, search, list,
delete, settings, purge, visibility and the refusals of SPEC §6."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.engine import Engine

from cairn import records
from cairn.errors import (
    CsrfRequired,
    Forbidden,
    InvalidRequest,
    MemoryOff,
    PlanRequired,
    RecordNotFound,
    RepoNotFound,
    TeamNotFound,
)
from cairn.identity.principal import CredentialKind, Principal
from cairn.records import service
from cairn.records.access import Action, TeamAccess, resolve
from cairn.records.ratelimit import LocalRateLimiter
from cairn.records.render import NOTICE, render_text
from tests.records.conftest import World, make_world, remove_member, set_plan


def _search(world: World, user: str, query: str, **kw: object) -> dict[str, object]:
    access = resolve(world.engine, world.principal(user), world.team_id, Action.READ)
    return service.search(
        world.engine,
        access,
        query,
        limiter=LocalRateLimiter(rate=1000),
        **kw,  # type: ignore[arg-type]
    )


def _ids(answer: dict[str, object], key: str = "results") -> list[str]:
    items = answer[key]
    assert isinstance(items, list)
    return [str(r["id"]) for r in items]


def _access(world: World, user: str, action: Action = Action.READ) -> TeamAccess:
    kind = CredentialKind.SESSION if action is Action.MANAGE else CredentialKind.API_KEY
    return resolve(world.engine, world.principal(user, kind), world.team_id, action)


def test_save_then_search_ranks_best_first(world: World) -> None:
    e, t = world.engine, world.team_id
    best = records.save(e, t, "Fixed the flaky payment webhook retry; webhook retries now back off")
    other = records.save(e, t, "Upgraded the logging library; no webhook changes")
    records.save(e, t, "Rewrote the onboarding email templates")
    answer = _search(world, world.member, "webhook retry")
    assert answer["state"] == "on"
    assert answer["notice"] == NOTICE
    assert _ids(answer) == [best.id, other.id]
    results = answer["results"]
    assert isinstance(results, list)
    assert results[0]["score"] > results[1]["score"]
    assert results[0]["text"] == render_text(best.text)
    assert set(results[0]) == {"id", "repo_id", "score", "created_at", "text"}


def test_search_never_crosses_teams(world: World) -> None:
    mine = records.save(world.engine, world.team_id, "rotated the staging database password")
    records.save(world.engine, world.other_team, "rotated the staging database password")
    assert _ids(_search(world, world.member, "staging database password")) == [mine.id]


def test_search_limit_and_repo_filter(world: World) -> None:
    e, t = world.engine, world.team_id
    in_a = [
        records.save(e, t, f"migration step {i} for orders", repo_id=world.repo_a) for i in range(4)
    ]
    records.save(e, t, "migration step for invoices", repo_id=world.repo_b)
    assert len(_ids(_search(world, world.member, "migration", limit=3))) == 3
    found = _ids(_search(world, world.member, "migration", repo_id=world.repo_a))
    assert sorted(found) == sorted(r.id for r in in_a)


def test_save_masks_secrets_and_normalizes(world: World) -> None:
    rec = records.save(
        world.engine, world.team_id, "deploy key AKIAABCDEFGHIJKLMNOP was rotated\r\ndone"
    )
    assert "AKIA" not in rec.text
    assert "[REDACTED:aws_access_key_id]" in rec.text
    assert rec.text.endswith("rotated\ndone")
    listed = service.list_records(world.engine, _access(world, world.member))
    assert listed["records"][0]["text"] == render_text(rec.text)


def test_search_query_is_masked_before_use(world: World) -> None:
    rec = records.save(world.engine, world.team_id, "leaked AKIAABCDEFGHIJKLMNOP in a log")
    # The key in the query becomes the same redaction marker as in the record.
    found = _ids(_search(world, world.member, "AKIAZZZZZZZZZZZZZZZZ"))
    assert found == [rec.id]


def test_expires_after_365_days(world: World) -> None:
    rec = records.save(world.engine, world.team_id, "the quarterly capacity review")
    assert rec.expires_at - rec.created_at == timedelta(days=365)


def test_expired_records_never_returned_and_purged(world: World) -> None:
    e, t = world.engine, world.team_id
    old = records.save(
        e, t, "ancient cache invalidation fix", now=datetime.now(UTC) - timedelta(days=366)
    )
    fresh = records.save(e, t, "recent cache invalidation fix")
    assert _ids(_search(world, world.member, "cache invalidation")) == [fresh.id]
    assert old.id not in _ids(service.list_records(e, _access(world, world.member)), "records")
    assert records.purge_expired(e) >= 1
    assert records.purge_expired(e) == 0
    with pytest.raises(RecordNotFound):
        service.delete(e, _access(world, world.owner, Action.MANAGE), old.id)
    assert _ids(_search(world, world.member, "cache invalidation")) == [fresh.id]


@pytest.mark.parametrize("text", ["", "x" * 8001])
def test_save_refuses_text_outside_limits(world: World, text: str) -> None:
    with pytest.raises(InvalidRequest, match="'text'"):
        records.save(world.engine, world.team_id, text)


def test_save_accepts_8000_characters(world: World) -> None:
    assert len(records.save(world.engine, world.team_id, "y" * 8000).text) == 8000


def test_save_refusals(engine: Engine) -> None:
    with pytest.raises(TeamNotFound):
        records.save(engine, "team_missing", "text")
    lapsed = make_world(engine, plan="pro", enabled=False)
    with pytest.raises(PlanRequired):  # plan first, even while off
        records.save(engine, lapsed.team_id, "text")
    off = make_world(engine, plan="enterprise", enabled=False)
    with pytest.raises(MemoryOff):
        records.save(engine, off.team_id, "text")
    on = make_world(engine)
    with pytest.raises(RepoNotFound):
        records.save(engine, on.team_id, "text", repo_id=on.other_repo)
    with pytest.raises(RepoNotFound):
        records.save(engine, on.team_id, "text", repo_id="repo_nope")


def test_visibility_limited_member(world: World) -> None:
    e, t = world.engine, world.team_id
    a = records.save(e, t, "tuned the search index", repo_id=world.repo_a)
    b = records.save(e, t, "tuned the search index", repo_id=world.repo_b)
    none = records.save(e, t, "tuned the search index")
    assert _ids(_search(world, world.limited, "search index")) == [a.id]
    assert _ids(service.list_records(e, _access(world, world.limited)), "records") == [a.id]
    with pytest.raises(RepoNotFound, match="not in one of your projects"):
        _search(world, world.limited, "search index", repo_id=world.repo_b)
    with pytest.raises(RepoNotFound):
        service.list_records(e, _access(world, world.limited), repo_id=world.repo_b)
    for user in (world.member, world.owner, world.admin, world.viewer):
        assert sorted(_ids(_search(world, user, "search index"))) == sorted([a.id, b.id, none.id])


def test_membership_and_credentials(world: World) -> None:
    e, t = world.engine, world.team_id
    with pytest.raises(TeamNotFound):
        resolve(e, world.principal(world.outsider), t, Action.READ)
    # An API key of another team is a 404 even for a member of this team.
    key_elsewhere = Principal(kind=CredentialKind.API_KEY, user_id=world.member, team_id="x")
    with pytest.raises(TeamNotFound):
        resolve(e, key_elsewhere, t, Action.READ)
    with pytest.raises(TeamNotFound):
        resolve(e, world.principal(world.member), "team_missing", Action.READ)
    service_token = Principal(kind=CredentialKind.SERVICE_TOKEN)
    with pytest.raises(Forbidden):
        resolve(e, service_token, t, Action.READ)
    assert resolve(e, service_token, t, Action.SAVE).project_ids is None
    with pytest.raises(Forbidden):
        resolve(e, world.principal(world.owner, CredentialKind.SESSION), t, Action.SAVE)


def test_manage_needs_org_admin_in_browser(world: World) -> None:
    e, t = world.engine, world.team_id
    for user in (world.owner, world.admin):
        with pytest.raises(Forbidden, match="API key"):
            resolve(e, world.principal(user, CredentialKind.API_KEY), t, Action.MANAGE)
        with pytest.raises(CsrfRequired):
            resolve(
                e, world.principal(user, CredentialKind.SESSION, csrf_ok=False), t, Action.MANAGE
            )
        assert resolve(e, world.principal(user, CredentialKind.SESSION), t, Action.MANAGE)
    with pytest.raises(Forbidden, match="owner or admin"):
        resolve(e, world.principal(world.member, CredentialKind.SESSION), t, Action.MANAGE)


def test_removed_member_refused_at_once(world: World) -> None:
    records.save(world.engine, world.team_id, "release notes for 4.2")
    assert _search(world, world.member, "release notes")["state"] == "on"
    remove_member(world.engine, world.team_id, world.member)
    with pytest.raises(TeamNotFound):
        _search(world, world.member, "release notes")


def test_off_and_lapsed(world: World) -> None:
    e, t = world.engine, world.team_id
    rec = records.save(e, t, "kept through the switch")
    records.set_enabled(e, t, False)
    off = _search(world, world.member, "switch")
    assert off == {"state": "off", "notice": NOTICE, "results": []}
    listed = service.list_records(e, _access(world, world.member))
    assert listed["state"] == "off" and _ids(listed, "records") == [rec.id]
    with pytest.raises(MemoryOff):
        records.save(e, t, "refused while off")
    set_plan(e, world.org_id, "free")
    with pytest.raises(PlanRequired):
        _search(world, world.member, "switch")
    records.set_enabled(e, t, True)
    with pytest.raises(PlanRequired):
        records.save(e, t, "refused while lapsed")
    assert _ids(service.list_records(e, _access(world, world.member)), "records") == [rec.id]
    service.delete(e, _access(world, world.owner, Action.MANAGE), rec.id)
    assert _ids(service.list_records(e, _access(world, world.member)), "records") == []


def test_delete(world: World) -> None:
    e = world.engine
    rec = records.save(e, world.team_id, "to be removed")
    theirs = records.save(e, world.other_team, "not yours")
    manage = _access(world, world.admin, Action.MANAGE)
    with pytest.raises(RecordNotFound):
        service.delete(e, manage, theirs.id)
    service.delete(e, manage, rec.id)
    with pytest.raises(RecordNotFound):
        service.delete(e, manage, rec.id)


def test_settings(world: World) -> None:
    e, t = world.engine, world.team_id
    got = service.get_settings(e, _access(world, world.member))
    assert got.to_dict() == {
        "enabled": True,
        "plan_allows": True,
        "store_ready": True,
        "can_edit": False,
    }
    assert service.get_settings(e, _access(world, world.owner, Action.MANAGE)).can_edit
    records.set_enabled(e, t, False)
    assert not service.get_settings(e, _access(world, world.member)).enabled
    fresh = make_world(e, plan="free", enabled=False)
    access = resolve(e, fresh.principal(fresh.member), fresh.team_id, Action.READ)
    assert service.get_settings(e, access).to_dict()["plan_allows"] is False


def test_list_pages_newest_first(world: World) -> None:
    e, t = world.engine, world.team_id
    start = datetime.now(UTC) - timedelta(hours=1)
    saved = [records.save(e, t, f"note {i}", now=start + timedelta(seconds=i)) for i in range(120)]
    # Two records at the same instant are ordered by id, and neither is lost.
    twin = records.save(e, t, "twin", now=start + timedelta(seconds=60))
    access = _access(world, world.member)
    seen: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        page = service.list_records(e, access, next_token=token)
        seen += _ids(page, "records")
        pages += 1
        token = page["next_token"]
        if token is None:
            break
    assert pages == 3
    expected = sorted([*saved, twin], key=lambda r: (r.created_at, r.id), reverse=True)
    assert seen == [r.id for r in expected]


def test_list_token_is_bound(world: World) -> None:
    e, t = world.engine, world.team_id
    for i in range(55):
        records.save(e, t, f"entry {i}", repo_id=world.repo_a)
    member = _access(world, world.member)
    token = service.list_records(e, member)["next_token"]
    assert isinstance(token, str)
    body, mac = token.split(".")
    tampered = [
        body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1] + "." + mac,
        "junk",
        token + "x",
    ]
    for bad in tampered:
        with pytest.raises(InvalidRequest, match="next_token"):
            service.list_records(e, member, next_token=bad)
    # Another caller visibility, another filter or another team cannot use it.
    with pytest.raises(InvalidRequest):
        service.list_records(e, _access(world, world.limited), next_token=token)
    with pytest.raises(InvalidRequest):
        service.list_records(e, member, repo_id=world.repo_a, next_token=token)
    other = resolve(e, world.principal(world.outsider), world.other_team, Action.READ)
    with pytest.raises(InvalidRequest):
        service.list_records(e, other, next_token=token)
    assert len(service.list_records(e, member, next_token=token)["records"]) == 5


@pytest.mark.parametrize(("query", "limit"), [("", 10), ("q" * 1001, 10), ("q", 0), ("q", 51)])
def test_library_search_checks_limits(world: World, query: str, limit: int) -> None:
    with pytest.raises(InvalidRequest):
        _search(world, world.member, query, limit=limit)
