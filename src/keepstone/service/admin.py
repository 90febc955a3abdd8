"""Administration use-cases (SPEC §4, §5, §7.3, §7.6): the admin API and ``keepstone admin``.

:class:`AdminService` is the one implementation of every admin operation: creating
users, orgs, teams, projects, repositories and API keys, memberships, an org's plan
and quota, the instance quota, and the org-wide usage figures. Each use-case takes the
caller first and decides itself whether the caller may do it:

* every admin operation needs platform authority (a super-admin or the admin token;
  :func:`~keepstone.service.access.require_platform_authority`), plus the CSRF token for a
  browser session's change;
* the org usage (``GET /api/orgs/{id}/usage``) is for the org's members
  (:meth:`~keepstone.service.access.Access.may_read_org`); anyone else learns nothing, not
  even that the org exists (``404 not_found``).

In local mode (``keepstone serve --local``) there is no identity store: every use-case
that needs one answers ``404 not_found``; the instance quota still works.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from keepstone.errors import Conflict, InvalidRequest, KeepstoneError, NotFound
from keepstone.identity import lifecycle, listing

# Re-exported: the faces page through these and may not import keepstone.identity.
from keepstone.identity.lifecycle import RESET_TTL as RESET_TTL
from keepstone.identity.lifecycle import ResetLink as ResetLink
from keepstone.identity.listing import DEFAULT_PAGE as DEFAULT_PAGE
from keepstone.identity.listing import MAX_PAGE as MAX_PAGE
from keepstone.identity.listing import ApiKeyEntry as ApiKeyEntry
from keepstone.identity.listing import MemberEntry as MemberEntry
from keepstone.identity.listing import OrgEntry as OrgEntry
from keepstone.identity.listing import Page as Page
from keepstone.identity.listing import PageAt
from keepstone.identity.listing import TeamEntry as TeamEntry
from keepstone.identity.listing import UserEntry as UserEntry
from keepstone.identity.service import IdentityService
from keepstone.principal import Principal
from keepstone.quota import (
    DEFAULT_TEAM_AGGREGATE_QUOTA,
    MAX_QUOTA_BYTES,
    HistoryLimits,
    check_quota_bytes,
)
from keepstone.secrets import check_names_free_of_secrets
from keepstone.service.access import Access, require_platform_authority, require_user
from keepstone.store.sql import SqlStore

log = logging.getLogger("keepstone.admin")


@dataclass(frozen=True, slots=True)
class OrgView:
    """An org as the admin API shows it; ``memory_quota_bytes`` None = the default."""

    id: str
    name: str
    plan: str
    memory_quota_bytes: int | None


@dataclass(frozen=True, slots=True)
class TeamView:
    id: str
    name: str
    org_id: str


Applied = TypeVar("Applied")


@dataclass(frozen=True, slots=True)
class OrgFanOut(Generic[Applied]):
    """What an org-wide change set (the org after a quota change, or the history limits
    applied), and which of its teams' counters took it."""

    applied: Applied
    teams_updated: tuple[str, ...]
    teams_failed: tuple[str, ...]


#: The bounds of each history limit (a day count past a century would overflow the
#: purge's cutoff arithmetic; a version count past a million is no bound at all).
HISTORY_LIMIT_BOUNDS = {
    "history_days": 36_500,
    "history_versions": 1_000_000,
    "history_quota_bytes": MAX_QUOTA_BYTES,
}


@dataclass(frozen=True, slots=True)
class TeamUsage:
    team_id: str
    used_bytes: int
    quota_bytes: int


@dataclass(frozen=True, slots=True)
class OrgUsage:
    """The bytes each team of an org uses against its counter's quota (SPEC §5)."""

    memory_used_bytes: int
    effective_memory_quota_bytes: int
    teams: tuple[TeamUsage, ...]


@dataclass(frozen=True, slots=True)
class CreatedKey:
    """A new API key: ``key`` is shown once and never stored (only its hash is)."""

    id: str
    key: str = field(repr=False)


class TeamData(Protocol):
    """A component that keeps rows of a team's and can delete them all (documents,
    records), asked when the team is deleted."""

    def drop_team(self, team_id: str) -> int: ...


def required_key_name(name: str) -> str:
    """A new key's name: required, so every key is told apart in lists and history."""
    if not name.strip():
        raise InvalidRequest(
            "name must not be blank: name the key after where it is used (e.g. 'laptop CLI')",
            field="name",
        )
    return name


def _team_ceiling(quota_bytes: int | None) -> int:
    """An org's quota as its teams' counters hold it: None is SPEC §4's default."""
    return DEFAULT_TEAM_AGGREGATE_QUOTA if quota_bytes is None else int(quota_bytes)


def _on_each_team(
    team_ids: Iterable[str], apply: Callable[[str], object], failure: str
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``apply(team_id)`` to each team, best effort: the teams it updated, and those where
    it raised a KeepstoneError (logged as ``failure``), each in the order given."""
    updated: list[str] = []
    failed: list[str] = []
    for team_id in team_ids:
        try:
            apply(team_id)
        except KeepstoneError as exc:
            log.warning(failure, extra={"team": team_id, "code": exc.code})
            failed.append(team_id)
        else:
            updated.append(team_id)
    return tuple(updated), tuple(failed)


class AdminService:
    """``team_data``: the components besides the document store that keep a team's rows
    (the records); deleting a team deletes its rows in each."""

    def __init__(
        self, identity: IdentityService | None, store: SqlStore, team_data: Sequence[TeamData] = ()
    ) -> None:
        self._identity = identity
        self._store = store
        self._team_data: tuple[TeamData, ...] = (store, *team_data)
        self._access = Access(identity)

    def _audit(self, who: Principal, action: str, subject: str) -> None:
        """The audit row of an administration action, once it is done."""
        self._store.record_audit(f"admin.{action}", who.actor, subject)

    def _identity_store(self) -> IdentityService:
        if self._identity is None:
            raise NotFound("local mode has no identity store")
        return self._identity

    def _authorized(self, who: Principal) -> IdentityService:
        require_platform_authority(who, mutating=True)
        return self._identity_store()

    # --- users, orgs, teams, projects, repositories ------------------------------------

    def create_user(
        self,
        who: Principal,
        email: str,
        password: str | None = None,
        name: str = "",
        super_admin: bool = False,
    ) -> str:
        """Create a user; return its id. ``password`` None: the user cannot sign in."""
        user_id = self._authorized(who).create_user(email, password, name, super_admin)
        self._audit(who, "user_create", f"user {user_id} {email.strip().lower()}")
        return user_id

    def create_org(self, who: Principal, name: str, plan: str = "free") -> str:
        org_id = self._authorized(who).create_org(name, plan)
        self._audit(who, "org_create", f"org {org_id} {name.strip()}")
        return org_id

    def update_org(self, who: Principal, org_id: str, *, plan: str | None = None) -> OrgView:
        """Change the org's plan (None leaves it); return the org."""
        org = OrgView(**self._authorized(who).update_org(org_id, plan=plan))
        if plan is not None:
            self._audit(who, "org_plan", f"org {org_id} plan {org.plan}")
        return org

    def set_org_quota(
        self, who: Principal, org_id: str, quota_bytes: int | None, *, plan: str | None = None
    ) -> OrgFanOut[OrgView]:
        """Record the org's quota and write it onto the counter of each of its current teams.

        Best effort per team: the result lists ``teams_updated`` and ``teams_failed``.
        ``None`` puts the teams back at the 1 GiB default. Teams created later start at
        the default (SPEC §4). ``plan`` changes the plan in the same step.
        """
        identity = self._authorized(who)
        if quota_bytes is not None:
            check_quota_bytes(quota_bytes)
        org = identity.update_org(org_id, plan=plan, memory_quota_bytes=quota_bytes)
        ceiling = _team_ceiling(quota_bytes)
        updated, failed = _on_each_team(
            identity.org_team_ids(org_id),
            lambda team_id: self._store.set_team_quota(team_id, ceiling),
            "team quota not updated",
        )
        quota = "default" if quota_bytes is None else quota_bytes  # never Python's "None"
        self._audit(who, "org_quota", f"org {org_id} quota {quota} plan {org['plan']}")
        return OrgFanOut(OrgView(**org), updated, failed)

    def set_org_history_limits(
        self, who: Principal, org_id: str, **limits: int | None
    ) -> OrgFanOut[HistoryLimits]:
        """Apply history limits (``history_days``, ``history_versions``,
        ``history_quota_bytes``: each a whole number >= 1, or None for the default) to
        every current team of the org; a limit not named keeps each team's own value.

        Best effort per team, as :meth:`set_org_quota`. The limits are the teams' (their
        counters hold them), not the org's: a team created later starts at the defaults,
        like its quota, until the limits are applied again.
        """
        for name, value in limits.items():
            bound = HISTORY_LIMIT_BOUNDS.get(name)
            if bound is None:
                raise InvalidRequest(f"unknown history limit {name!r}", field=name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= bound
            ):
                raise InvalidRequest(
                    f"{name} must be a whole number from 1 to {bound}, or null for the default",
                    field=name,
                )
        identity = self._authorized(who)
        applied = HistoryLimits(**limits)

        def apply(team_id: str) -> None:
            current = self._store.history_limits(team_id)
            self._store.set_history_limits(team_id, current._replace(**limits))

        updated, failed = _on_each_team(
            identity.org_team_ids(org_id), apply, "history limits not updated"
        )
        self._audit(who, "org_history", f"org {org_id} {limits}")
        return OrgFanOut(applied, updated, failed)

    def prune_history(self) -> int:
        """Drop every team's replaced versions older than its ``history_days`` (never a
        document's current version): the purge job's part of the history, which the
        server runs periodically and ``keepstone db prune-history`` once (no route: no caller
        to authorize). Returns how many versions went."""
        return self._store.prune_history()

    def add_org_member(self, who: Principal, org_id: str, user_id: str, role: str) -> None:
        """Add the user to the org as ``role`` (owner|admin|member), or change their role."""
        self._authorized(who).add_org_member(org_id, user_id, role)
        self._audit(who, "org_member", f"org {org_id} user {user_id} role {role}")

    def create_team(self, who: Principal, org_id: str, name: str) -> str:
        """Create a team in the org; return its id. Its counter starts at the default."""
        team_id = self._authorized(who).create_team(org_id, name)
        self._audit(who, "team_create", f"team {team_id} {name.strip()} in org {org_id}")
        return team_id

    def add_team_member(
        self,
        who: Principal,
        team_id: str,
        user_id: str,
        role: str,
        projects: Sequence[str] | None = None,
    ) -> None:
        """Add (or update) a membership; ``projects`` limits it to those team projects."""
        limited = None if projects is None else list(projects)
        self._authorized(who).add_team_member(team_id, user_id, role, limited)
        self._audit(who, "team_member", f"team {team_id} user {user_id} role {role}")

    def set_team_role(self, who: Principal, team_id: str, user_id: str, role: str) -> None:
        """Change a member's role, keeping their project limit; 404 for a non-member."""
        current = {m.user_id: m for m in self.team_members(who, team_id)}.get(user_id)
        if current is None:
            raise NotFound(f"user {user_id!r} is not a member of team {team_id!r}")
        self._authorized(who).add_team_member(team_id, user_id, role, current.projects)
        self._audit(who, "team_role", f"team {team_id} user {user_id} role {role}")

    def remove_team_member(self, who: Principal, team_id: str, user_id: str) -> None:
        """End a membership; the user's very next request in the team is refused."""
        self._authorized(who).remove_team_member(team_id, user_id)
        self._audit(who, "team_member_remove", f"team {team_id} user {user_id}")

    def create_project(self, who: Principal, team_id: str, name: str) -> str:
        """A new project of the team; a name holding a credential is refused (spaces are
        named after their project, and names are shown to the whole team)."""
        check_names_free_of_secrets({"name": name})
        project_id = self._authorized(who).create_project(team_id, name)
        self._audit(who, "project_create", f"project {project_id} in team {team_id}")
        return project_id

    def create_repo(self, who: Principal, project_id: str, name: str) -> str:
        check_names_free_of_secrets({"name": name})
        repo_id = self._authorized(who).create_repo(project_id, name)
        self._audit(who, "repo_create", f"repo {repo_id} in project {project_id}")
        return repo_id

    # --- users: disabling, password resets ----------------------------------------------------

    def disable_user(self, who: Principal, user_id: str) -> None:
        """The user can no longer sign in: their sessions end and their keys are revoked.
        Not oneself (``409``): an admin who did would be locked out mid-way."""
        identity = self._authorized(who)
        if who.user_id == user_id:
            raise Conflict("you cannot disable yourself; ask another admin", field="user_id")
        lifecycle.disable_user(identity, user_id)
        self._audit(who, "user_disable", f"user {user_id}")

    def enable_user(self, who: Principal, user_id: str) -> None:
        """A disabled user may sign in again (their revoked keys stay revoked)."""
        lifecycle.enable_user(self._authorized(who), user_id)
        self._audit(who, "user_enable", f"user {user_id}")

    def reset_password(self, who: Principal, user_id: str) -> ResetLink:
        """A one-time password-reset token for the user (its link is shown to the admin,
        works once, within :data:`RESET_TTL`); earlier ones stop working."""
        link = lifecycle.new_reset_link(self._authorized(who), user_id)
        self._audit(who, "password_reset_link", f"user {user_id}")
        return link

    def reset_link_email(self, token: str) -> str:
        """The email of a live reset link's user; 404 when it is unknown, used or expired.
        The token is the credential: whoever holds it may see this."""
        return lifecycle.reset_link_email(self._identity_store(), token)

    def use_reset_link(self, token: str, password: str) -> None:
        """Set a new password through a live reset link, which is then spent."""
        user_id = lifecycle.use_reset_link(self._identity_store(), token, password)
        self._store.record_audit("admin.password_reset", f"user:{user_id}", f"user {user_id}")

    # --- deleting ------------------------------------------------------------------------------

    def delete_team(self, who: Principal, team_id: str, confirm: str) -> None:
        """Delete the team once ``confirm`` is its name: its spaces, documents and their
        history, records, keys, memberships, projects and repositories.

        The data goes first while the team still exists (so a failure can be retried by
        id), then the identity rows in one transaction (every credential of the team is
        refused from then on), then the data once more for what a member wrote meanwhile.
        """
        identity = self._authorized(who)
        name, _ = lifecycle.team_of(identity, team_id)
        if confirm.strip() != name:
            raise InvalidRequest(
                f"confirm must be the team's name, {name!r}, typed exactly", field="confirm"
            )
        for data in self._team_data:
            data.drop_team(team_id)
        lifecycle.delete_team(identity, team_id, confirm)
        for data in self._team_data:
            data.drop_team(team_id)
        self._audit(who, "team_delete", f"team {team_id} {name}")

    def delete_org(self, who: Principal, org_id: str) -> None:
        """Delete an org that has no team left (``409 conflict`` otherwise)."""
        name = lifecycle.delete_org(self._authorized(who), org_id)
        self._audit(who, "org_delete", f"org {org_id} {name}")

    # --- API keys --------------------------------------------------------------------------

    def create_api_key(
        self, who: Principal, user_id: str, team_id: str, name: str = ""
    ) -> CreatedKey:
        """Mint a key for ``user_id`` acting in ``team_id`` (the user must act there);
        ``name`` is required."""
        identity = self._authorized(who)
        key_id, key = identity.create_api_key(user_id, team_id, required_key_name(name))
        self._audit(who, "key_create", f"key {key_id} of user {user_id} in team {team_id}")
        return CreatedKey(id=key_id, key=key)

    def revoke_api_key(self, who: Principal, key_id: str) -> None:
        """Revoke a live key; ``404 not_found`` when there is none with that id."""
        self._authorized(who).revoke_api_key(key_id)
        self._audit(who, "key_revoke", f"key {key_id}")

    # --- lists (paged by an opaque cursor; keepstone.identity.listing) ------------------------

    def _reader(self, who: Principal) -> IdentityService:
        require_platform_authority(who, mutating=False)
        return self._identity_store()

    def list_orgs(
        self, who: Principal, *, limit: int = DEFAULT_PAGE, cursor: str | None = None
    ) -> Page[OrgEntry]:
        """A page of the instance's orgs, by id."""
        return listing.list_orgs(self._reader(who).engine, PageAt(limit, cursor))

    def list_teams(
        self,
        who: Principal,
        *,
        limit: int = DEFAULT_PAGE,
        cursor: str | None = None,
        org_id: str | None = None,
    ) -> Page[TeamEntry]:
        """A page of the instance's teams by id, only ``org_id``'s when given (``404`` for
        an unknown org)."""
        identity = self._reader(who)
        if org_id is not None:
            identity.get_org(org_id)
        return listing.list_teams(identity.engine, PageAt(limit, cursor), org_id)

    def team_members(self, who: Principal, team_id: str) -> tuple[MemberEntry, ...]:
        """Every member of the team by email (``404`` for an unknown team)."""
        identity = self._reader(who)
        lifecycle.team_of(identity, team_id)
        return listing.team_members(identity.engine, team_id)

    def org(self, who: Principal, org_id: str) -> OrgView:
        """One org (``404`` when there is none)."""
        return OrgView(**self._reader(who).get_org(org_id))

    def team(self, who: Principal, team_id: str) -> TeamView:
        """One team (``404`` when there is none)."""
        name, org_id = lifecycle.team_of(self._reader(who), team_id)
        return TeamView(team_id, name, org_id)

    def list_users(
        self, who: Principal, *, limit: int = DEFAULT_PAGE, cursor: str | None = None
    ) -> Page[UserEntry]:
        """A page of the instance's users, by id (never a password hash)."""
        return listing.list_users(self._reader(who).engine, PageAt(limit, cursor))

    def list_api_keys(
        self,
        who: Principal,
        *,
        limit: int = DEFAULT_PAGE,
        cursor: str | None = None,
        user_id: str | None = None,
        team_id: str | None = None,
    ) -> Page[ApiKeyEntry]:
        """A page of the API keys, revoked ones too, by id; only ``user_id``'s and/or
        ``team_id``'s when given (never a key nor its hash)."""
        engine = self._reader(who).engine
        return listing.list_api_keys(engine, PageAt(limit, cursor), user_id, team_id)

    # --- quotas and usage ------------------------------------------------------------------

    def set_instance_quota(self, who: Principal, quota_bytes: int) -> None:
        """Re-cap the tenant-less counter that global writes answer to (SPEC §4)."""
        require_platform_authority(who, mutating=True)
        self._store.set_instance_quota(check_quota_bytes(quota_bytes))
        self._audit(who, "instance_quota", f"instance quota {quota_bytes}")

    def org_usage(self, who: Principal, org_id: str) -> OrgUsage:
        """Bytes used by each team of the org, for the org's members (SPEC §5)."""
        require_user(who)
        if not self._access.may_read_org(who, org_id):
            raise NotFound(f"no org with id {org_id!r}")
        identity = self._identity_store()
        quota_bytes = identity.get_org(org_id)["memory_quota_bytes"]
        teams = tuple(
            TeamUsage(team_id, *self._store.team_usage(team_id))
            for team_id in identity.org_team_ids(org_id)
        )
        used = sum(t.used_bytes for t in teams)
        return OrgUsage(used, _team_ceiling(quota_bytes), teams)
