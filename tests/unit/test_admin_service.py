"""AdminService and sign-in/out: who may call each use-case, decided by the service itself.

Every admin use-case refuses a caller without platform authority (``403 forbidden``)
and a browser session's change without its CSRF token (``403 csrf_required``); the org
usage is for the org's members, and a non-member learns nothing (``404 not_found``).
Real SQLite underneath (no mocks of storage).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
from argon2 import PasswordHasher

from keepstone.db import make_engine
from keepstone.errors import (
    CsrfRequired,
    Forbidden,
    KeepstoneError,
    NotFound,
    SecretDetected,
    Unauthenticated,
)
from keepstone.identity.keys import KeyHasher
from keepstone.identity.service import IdentityService
from keepstone.principal import CredentialKind, OrgRole, Principal, TeamRole
from keepstone.quota import DEFAULT_TEAM_AGGREGATE_QUOTA
from keepstone.schema import upgrade_all
from keepstone.service.access import LOCAL_PRINCIPAL, Credentials
from keepstone.service.admin import AdminService, CreatedKey
from keepstone.store.sql import SqlStore

PASSWORD = "correct horse battery"
ADMIN_TOKEN = Principal(kind=CredentialKind.ADMIN_TOKEN)


@dataclass
class World:
    identity: IdentityService
    store: SqlStore
    admin: AdminService
    org_id: str
    team_id: str
    project_id: str
    member_id: str
    email: str


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    db = tmp_path_factory.mktemp("admin") / "keepstone.db"
    engine = make_engine(f"sqlite:///{db}")
    upgrade_all(engine)
    identity = IdentityService(
        engine,
        KeyHasher(b"unit-test-key-hash-secret"),
        passwords=PasswordHasher(time_cost=1, memory_cost=1024),
    )
    store = SqlStore(engine)
    admin = AdminService(identity, store)
    org = identity.create_org("Acme", "pro_plus")
    team = identity.create_team(org, "core")
    email = f"member-{uuid.uuid4().hex[:8]}@example.com"
    member = identity.create_user(email, PASSWORD, "Member")
    identity.add_team_member(team, member, "member")
    project = identity.create_project(team, "web")
    try:
        yield World(identity, store, admin, org, team, project, member, email)
    finally:
        engine.dispose()


def _scratch_user(w: World) -> str:
    return w.identity.create_user(f"scratch-{uuid.uuid4().hex[:8]}@example.com")


def _member(w: World, role: str = "member") -> str:
    user = _scratch_user(w)
    w.identity.add_team_member(w.team_id, user, role)
    return user


def _revocable_key(w: World) -> str:
    key_id, _ = w.identity.create_api_key(_member(w), w.team_id)
    return key_id


#: Every mutating admin use-case, with arguments that succeed for a caller with authority.
UseCase = Callable[[AdminService, Principal, World], Any]
MUTATIONS: dict[str, UseCase] = {
    "create_user": lambda a, who, w: a.create_user(who, f"{uuid.uuid4().hex[:8]}@example.com"),
    "create_org": lambda a, who, w: a.create_org(who, "Org", "pro"),
    "update_org": lambda a, who, w: a.update_org(who, w.org_id, plan="pro_plus"),
    "set_org_quota": lambda a, who, w: a.set_org_quota(who, w.org_id, None),
    "add_org_member": lambda a, who, w: a.add_org_member(who, w.org_id, _scratch_user(w), "member"),
    "create_team": lambda a, who, w: a.create_team(who, w.org_id, "t"),
    "add_team_member": lambda a, who, w: a.add_team_member(
        who, w.team_id, _scratch_user(w), "viewer", [w.project_id]
    ),
    "remove_team_member": lambda a, who, w: a.remove_team_member(who, w.team_id, _member(w)),
    "create_project": lambda a, who, w: a.create_project(who, w.team_id, "p"),
    "create_repo": lambda a, who, w: a.create_repo(who, w.project_id, "r"),
    "create_api_key": lambda a, who, w: a.create_api_key(who, _member(w), w.team_id, "k"),
    "revoke_api_key": lambda a, who, w: a.revoke_api_key(who, _revocable_key(w)),
    "set_instance_quota": lambda a, who, w: a.set_instance_quota(who, 1 << 30),
}


def _callers(w: World) -> dict[str, Principal]:
    """Principals without platform authority, each as credential resolution makes it."""
    in_team = Principal(
        kind=CredentialKind.API_KEY,
        user_id=w.member_id,
        team_id=w.team_id,
        org_id=w.org_id,
        plan="pro_plus",
        team_role=TeamRole.ADMIN,
    )
    session = replace(in_team, kind=CredentialKind.SESSION)
    return {
        "api_key_team_admin": in_team,
        "session_member": replace(session, team_role=TeamRole.MEMBER),
        "session_org_owner": replace(session, org_role=OrgRole.OWNER),
        "service_token": Principal(kind=CredentialKind.SERVICE_TOKEN),
    }


CALLERS = ["api_key_team_admin", "session_member", "session_org_owner", "service_token"]


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("use_case", sorted(MUTATIONS))
def test_a_caller_without_platform_authority_is_forbidden(
    world: World, use_case: str, caller: str
) -> None:
    who = _callers(world)[caller]
    with pytest.raises(Forbidden) as refused:
        MUTATIONS[use_case](world.admin, who, world)
    assert refused.value.status == 403 and refused.value.code == "forbidden"


@pytest.mark.parametrize("use_case", sorted(MUTATIONS))
def test_a_super_admin_session_without_csrf_is_refused(world: World, use_case: str) -> None:
    who = Principal(kind=CredentialKind.SESSION, user_id="root", super_admin=True, csrf_ok=False)
    with pytest.raises(CsrfRequired) as refused:
        MUTATIONS[use_case](world.admin, who, world)
    assert refused.value.status == 403 and refused.value.code == "csrf_required"


@pytest.mark.parametrize(
    "who",
    [
        ADMIN_TOKEN,
        Principal(kind=CredentialKind.SESSION, user_id="root", super_admin=True),
        Principal(kind=CredentialKind.API_KEY, user_id="root", super_admin=True),
    ],
    ids=["admin_token", "super_admin_session", "super_admin_api_key"],
)
@pytest.mark.parametrize("use_case", sorted(MUTATIONS))
def test_platform_authority_may_do_every_use_case(
    world: World, use_case: str, who: Principal
) -> None:
    MUTATIONS[use_case](world.admin, who, world)


def test_a_refused_call_changes_nothing(world: World) -> None:
    who = _callers(world)["session_org_owner"]
    before = world.identity.org_team_ids(world.org_id)
    with pytest.raises(Forbidden):
        world.admin.create_team(who, world.org_id, "sneaky")
    with pytest.raises(Forbidden):
        world.admin.set_org_quota(who, world.org_id, 1)
    assert world.identity.org_team_ids(world.org_id) == before
    assert world.identity.get_org(world.org_id)["memory_quota_bytes"] is None


def test_results_are_dataclasses(world: World) -> None:
    org = world.admin.update_org(ADMIN_TOKEN, world.org_id)
    assert (org.id, org.name, org.plan) == (world.org_id, "Acme", "pro_plus")
    user = _member(world)
    created = world.admin.create_api_key(ADMIN_TOKEN, user, world.team_id, "k")
    assert isinstance(created, CreatedKey) and created.key.startswith("keepstone_")
    assert created.key not in repr(created)  # shown once, never in a log line


def test_a_project_or_repository_named_after_a_credential_is_refused(world: World) -> None:
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    with pytest.raises(SecretDetected) as info:
        world.admin.create_project(ADMIN_TOKEN, world.team_id, f"proj-{token}")
    assert info.value.details["field"] == "name" and token not in info.value.message
    project = world.admin.create_project(ADMIN_TOKEN, world.team_id, "clean")
    with pytest.raises(SecretDetected):
        world.admin.create_repo(ADMIN_TOKEN, project, token)


def test_org_quota_is_spread_over_the_org_teams(world: World) -> None:
    org = world.admin.create_org(ADMIN_TOKEN, "spread")
    teams = sorted(world.admin.create_team(ADMIN_TOKEN, org, n) for n in ("a", "b"))
    done = world.admin.set_org_quota(ADMIN_TOKEN, org, 4096, plan="enterprise")
    assert done.applied.memory_quota_bytes == 4096 and done.applied.plan == "enterprise"
    assert sorted(done.teams_updated) == teams and done.teams_failed == ()
    assert {world.store.team_usage(t)[1] for t in teams} == {4096}
    done = world.admin.set_org_quota(ADMIN_TOKEN, org, None)
    assert done.applied.memory_quota_bytes is None
    assert {world.store.team_usage(t)[1] for t in teams} == {DEFAULT_TEAM_AGGREGATE_QUOTA}


def test_a_team_that_refuses_an_org_change_is_listed_failed(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    org = world.admin.create_org(ADMIN_TOKEN, "partial")
    teams = sorted(world.admin.create_team(ADMIN_TOKEN, org, n) for n in ("a", "b"))
    broken = teams[0]

    def refuse(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(team_id: str, *args: Any, **kwargs: Any) -> Any:
            if team_id == broken:
                raise KeepstoneError("the counter cannot be reached")
            return real(team_id, *args, **kwargs)

        return call

    for name in ("set_team_quota", "set_history_limits"):
        monkeypatch.setattr(world.store, name, refuse(getattr(world.store, name)))
    done = world.admin.set_org_quota(ADMIN_TOKEN, org, 4096)
    assert (done.teams_updated, done.teams_failed) == ((teams[1],), (broken,))
    limits = world.admin.set_org_history_limits(ADMIN_TOKEN, org, history_days=7)
    assert (limits.teams_updated, limits.teams_failed) == ((teams[1],), (broken,))
    assert world.store.history_limits(teams[1])[0] == 7


# --- org usage: the org's members only ------------------------------------------------------


def test_org_usage_for_members_and_authority(world: World) -> None:
    callers = _callers(world)
    for who in (ADMIN_TOKEN, callers["api_key_team_admin"], callers["session_member"]):
        usage = world.admin.org_usage(who, world.org_id)
        assert [t.team_id for t in usage.teams] == world.identity.org_team_ids(world.org_id)
        assert usage.memory_used_bytes == sum(t.used_bytes for t in usage.teams)


@pytest.mark.parametrize(
    "who",
    [
        Principal(kind=CredentialKind.SESSION, user_id="stranger"),
        Principal(kind=CredentialKind.API_KEY, user_id="u", team_id="t", org_id="other"),
    ],
    ids=["session_non_member", "api_key_of_another_org"],
)
def test_org_usage_tells_a_non_member_nothing(world: World, who: Principal) -> None:
    for org in (world.org_id, "org_does_not_exist"):
        with pytest.raises(NotFound) as refused:
            world.admin.org_usage(who, org)
        assert refused.value.code == "not_found"
        assert str(refused.value) == f"no org with id {org!r}"


def test_org_usage_refuses_the_service_token(world: World) -> None:
    with pytest.raises(Forbidden):
        world.admin.org_usage(Principal(kind=CredentialKind.SERVICE_TOKEN), world.org_id)


def test_org_usage_without_csrf_is_a_read(world: World) -> None:
    who = Principal(kind=CredentialKind.SESSION, user_id=world.member_id, csrf_ok=False)
    assert world.admin.org_usage(who, world.org_id).teams


# --- local mode: no identity store ------------------------------------------------------------


def test_local_mode_has_no_identity_use_cases(world: World) -> None:
    local = AdminService(None, world.store)
    with pytest.raises(NotFound):
        local.create_user(LOCAL_PRINCIPAL, "a@b.c")
    with pytest.raises(NotFound):
        local.org_usage(LOCAL_PRINCIPAL, world.org_id)
    local.set_instance_quota(LOCAL_PRINCIPAL, 1 << 30)


# --- signing in and out (Credentials) -----------------------------------------------------------


def test_sign_in_answers_the_session_user_and_teams(world: World) -> None:
    credentials = Credentials(world.identity)
    with pytest.raises(Unauthenticated):
        credentials.sign_in(world.email, "wrong password")
    with pytest.raises(Unauthenticated):
        credentials.sign_in("nobody@example.com", PASSWORD)
    signed = credentials.sign_in(world.email.upper(), PASSWORD)
    assert (signed.user.id, signed.user.email, signed.user.super_admin) == (
        world.member_id,
        world.email,
        False,
    )
    assert [(t.id, t.org_id, t.role) for t in signed.teams] == [
        (world.team_id, world.org_id, "member")
    ]
    assert signed.token not in repr(signed) and signed.csrf_token not in repr(signed)


def test_sign_out_needs_the_csrf_token_and_ends_the_session(world: World) -> None:
    credentials = Credentials(world.identity)
    signed = credentials.sign_in(world.email, PASSWORD)

    def session(csrf: str | None) -> Principal:
        who = world.identity.principal_for_session(
            signed.token, csrf_token=csrf, mutating=True, team_header=None
        )
        assert who is not None
        return who

    with pytest.raises(CsrfRequired):
        credentials.sign_out(session(None), signed.token)
    credentials.sign_out(session(signed.csrf_token), signed.token)
    assert (
        world.identity.principal_for_session(
            signed.token, csrf_token=None, mutating=False, team_header=None
        )
        is None
    )


def test_sign_out_of_another_credential_ends_no_session(world: World) -> None:
    credentials = Credentials(world.identity)
    signed = credentials.sign_in(world.email, PASSWORD)
    credentials.sign_out(ADMIN_TOKEN, signed.token)
    live = world.identity.principal_for_session(
        signed.token, csrf_token=None, mutating=False, team_header=None
    )
    assert live is not None
    with pytest.raises(Forbidden):
        credentials.sign_out(Principal(kind=CredentialKind.SERVICE_TOKEN), signed.token)


def test_local_mode_cannot_sign_in() -> None:
    with pytest.raises(NotFound):
        Credentials(None).sign_in("a@b.c", PASSWORD)


def test_every_refusal_is_a_keepstone_error(world: World) -> None:
    # Faces map KeepstoneError to a status; a use-case must never raise anything else.
    for use_case in MUTATIONS.values():
        with pytest.raises(KeepstoneError):
            use_case(world.admin, Principal(kind=CredentialKind.SESSION, user_id="x"), world)
