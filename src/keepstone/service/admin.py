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
from typing import Generic, TypeVar

from keepstone.errors import InvalidRequest, KeepstoneError, NotFound
from keepstone.identity import listing

# Re-exported: the faces page through these and may not import keepstone.identity.
from keepstone.identity.listing import DEFAULT_PAGE as DEFAULT_PAGE
from keepstone.identity.listing import MAX_PAGE as MAX_PAGE
from keepstone.identity.listing import ApiKeyEntry as ApiKeyEntry
from keepstone.identity.listing import OrgEntry as OrgEntry
from keepstone.identity.listing import Page as Page
from keepstone.identity.listing import TeamEntry as TeamEntry
from keepstone.identity.listing import UserEntry as UserEntry
from keepstone.identity.service import IdentityService
from keepstone.principal import Principal
from keepstone.quota import DEFAULT_TEAM_AGGREGATE_QUOTA, HistoryLimits
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
    "history_quota_bytes": 2**62,
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
    def __init__(self, identity: IdentityService | None, store: SqlStore) -> None:
        self._identity = identity
        self._store = store
        self._access = Access(identity)

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
        return self._authorized(who).create_user(email, password, name, super_admin)

    def create_org(self, who: Principal, name: str, plan: str = "free") -> str:
        return self._authorized(who).create_org(name, plan)

    def update_org(self, who: Principal, org_id: str, *, plan: str | None = None) -> OrgView:
        """Change the org's plan (None leaves it); return the org."""
        return OrgView(**self._authorized(who).update_org(org_id, plan=plan))

    def set_org_quota(
        self, who: Principal, org_id: str, quota_bytes: int | None, *, plan: str | None = None
    ) -> OrgFanOut[OrgView]:
        """Record the org's quota and write it onto the counter of each of its current teams.

        Best effort per team: the result lists ``teams_updated`` and ``teams_failed``.
        ``None`` puts the teams back at the 1 GiB default. Teams created later start at
        the default (SPEC §4). ``plan`` changes the plan in the same step.
        """
        identity = self._authorized(who)
        org = identity.update_org(org_id, plan=plan, memory_quota_bytes=quota_bytes)
        ceiling = _team_ceiling(quota_bytes)
        updated, failed = _on_each_team(
            identity.org_team_ids(org_id),
            lambda team_id: self._store.set_team_quota(team_id, ceiling),
            "team quota not updated",
        )
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

    def create_team(self, who: Principal, org_id: str, name: str) -> str:
        """Create a team in the org; return its id. Its counter starts at the default."""
        return self._authorized(who).create_team(org_id, name)

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

    def remove_team_member(self, who: Principal, team_id: str, user_id: str) -> None:
        """End a membership; the user's very next request in the team is refused."""
        self._authorized(who).remove_team_member(team_id, user_id)

    def create_project(self, who: Principal, team_id: str, name: str) -> str:
        """A new project of the team; a name holding a credential is refused (spaces are
        named after their project, and names are shown to the whole team)."""
        check_names_free_of_secrets({"name": name})
        return self._authorized(who).create_project(team_id, name)

    def create_repo(self, who: Principal, project_id: str, name: str) -> str:
        check_names_free_of_secrets({"name": name})
        return self._authorized(who).create_repo(project_id, name)

    # --- API keys --------------------------------------------------------------------------

    def create_api_key(
        self, who: Principal, user_id: str, team_id: str, name: str = ""
    ) -> CreatedKey:
        """Mint a key for ``user_id`` acting in ``team_id`` (the user must act there)."""
        key_id, key = self._authorized(who).create_api_key(user_id, team_id, name)
        return CreatedKey(id=key_id, key=key)

    def revoke_api_key(self, who: Principal, key_id: str) -> None:
        """Revoke a live key; ``404 not_found`` when there is none with that id."""
        self._authorized(who).revoke_api_key(key_id)

    # --- lists (paged by an opaque cursor; keepstone.identity.listing) ------------------------

    def _reader(self, who: Principal) -> IdentityService:
        require_platform_authority(who, mutating=False)
        return self._identity_store()

    def list_orgs(
        self, who: Principal, *, limit: int = DEFAULT_PAGE, cursor: str | None = None
    ) -> Page[OrgEntry]:
        """A page of the instance's orgs, by id."""
        return listing.list_orgs(self._reader(who).engine, limit=limit, cursor=cursor)

    def list_teams(
        self, who: Principal, *, limit: int = DEFAULT_PAGE, cursor: str | None = None
    ) -> Page[TeamEntry]:
        """A page of the instance's teams, by id (the web UI's administration page)."""
        return listing.list_teams(self._reader(who).engine, limit=limit, cursor=cursor)

    def list_users(
        self, who: Principal, *, limit: int = DEFAULT_PAGE, cursor: str | None = None
    ) -> Page[UserEntry]:
        """A page of the instance's users, by id (never a password hash)."""
        return listing.list_users(self._reader(who).engine, limit=limit, cursor=cursor)

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
        return listing.list_api_keys(
            engine, limit=limit, cursor=cursor, user_id=user_id, team_id=team_id
        )

    # --- quotas and usage ------------------------------------------------------------------

    def set_instance_quota(self, who: Principal, quota_bytes: int) -> None:
        """Re-cap the tenant-less counter that global writes answer to (SPEC §4)."""
        require_platform_authority(who, mutating=True)
        self._store.set_instance_quota(quota_bytes)

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
