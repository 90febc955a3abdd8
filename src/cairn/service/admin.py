"""Administration use-cases (SPEC §4, §5, §7.3, §7.6): the admin API and ``cairn admin``.

:class:`AdminService` is the one implementation of every admin operation: creating
users, orgs, teams, projects, repositories and API keys, memberships, an org's plan
and quota, the instance quota, and the org-wide usage figures. Each use-case takes the
caller first and decides itself whether the caller may do it:

* every admin operation needs platform authority (a super-admin or the admin token;
  :func:`~cairn.service.access.require_platform_authority`), plus the CSRF token for a
  browser session's change;
* the org usage (``GET /api/orgs/{id}/usage``) is for the org's members
  (:meth:`~cairn.service.access.Access.may_read_org`); anyone else learns nothing, not
  even that the org exists (``404 not_found``).

The operator CLI (``cairn admin ...``) passes the admin token's principal: the
operator at their own console holds platform authority.

In local mode (``cairn serve --local``) there is no identity store: every use-case
that needs one answers ``404 not_found``; the instance quota still works.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cairn.errors import CairnError, NotFound, StoreUnavailable
from cairn.identity.service import IdentityService
from cairn.principal import Principal
from cairn.quota import DEFAULT_TEAM_AGGREGATE_QUOTA
from cairn.service.access import Access, require_platform_authority, require_user
from cairn.service.audit import AuditService
from cairn.store.base import MemoryStore
from cairn.store.sql import SqlStore

log = logging.getLogger("cairn.admin")


@dataclass(frozen=True, slots=True)
class OrgView:
    """An org as the admin API shows it; ``memory_quota_bytes`` None = the default."""

    id: str
    name: str
    plan: str
    memory_quota_bytes: int | None


@dataclass(frozen=True, slots=True)
class OrgQuotaResult:
    """The org after a quota change, and which of its teams' counters took the ceiling."""

    org: OrgView
    teams_updated: tuple[str, ...]
    teams_failed: tuple[str, ...]


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


def _org_view(org: dict[str, Any]) -> OrgView:
    quota = org["memory_quota_bytes"]
    return OrgView(
        id=str(org["id"]),
        name=str(org["name"]),
        plan=str(org["plan"]),
        memory_quota_bytes=None if quota is None else int(quota),
    )


class AdminService:
    """Every admin use-case, over the identity store and the SQL document store's counters."""

    def __init__(self, identity: IdentityService | None, store: SqlStore) -> None:
        self._identity = identity
        self._store = store
        self._access = Access(identity)

    def _identity_store(self) -> IdentityService:
        if self._identity is None:
            raise NotFound("local mode has no identity store")
        return self._identity

    def _authorized(self, who: Principal, *, mutating: bool = True) -> IdentityService:
        require_platform_authority(who, mutating=mutating)
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
        """Create an org on ``plan``; return its id."""
        return self._authorized(who).create_org(name, plan)

    def update_org(self, who: Principal, org_id: str, *, plan: str | None = None) -> OrgView:
        """Change the org's plan (None leaves it); return the org."""
        return _org_view(self._authorized(who).update_org(org_id, plan=plan))

    def set_org_quota(
        self, who: Principal, org_id: str, quota_bytes: int | None, *, plan: str | None = None
    ) -> OrgQuotaResult:
        """Record the org's quota and write it onto the counter of each of its current teams.

        Best effort per team: the result lists ``teams_updated`` and ``teams_failed``.
        ``None`` puts the teams back at the 1 GiB default. Teams created later start at
        the default (SPEC §4). ``plan`` changes the plan in the same step.
        """
        identity = self._authorized(who)
        org = identity.update_org(org_id, plan=plan, memory_quota_bytes=quota_bytes)
        ceiling = DEFAULT_TEAM_AGGREGATE_QUOTA if quota_bytes is None else quota_bytes
        updated: list[str] = []
        failed: list[str] = []
        for team_id in identity.org_team_ids(org_id):
            try:
                self._store.set_team_quota(team_id, ceiling)
            except CairnError as exc:
                log.warning("team quota not updated", extra={"team": team_id, "code": exc.code})
                failed.append(team_id)
            else:
                updated.append(team_id)
        return OrgQuotaResult(_org_view(org), tuple(updated), tuple(failed))

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
        return self._authorized(who).create_project(team_id, name)

    def create_repo(self, who: Principal, project_id: str, name: str) -> str:
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

    # --- quotas and usage ------------------------------------------------------------------

    def set_instance_quota(self, who: Principal, quota_bytes: int) -> None:
        """Re-cap the tenant-less counter that global writes answer to (SPEC §4)."""
        require_platform_authority(who, mutating=True)
        self._store.set_instance_quota(quota_bytes)

    def org_usage(self, who: Principal, org_id: str) -> OrgUsage:
        """Bytes used by each team of the org, for the org's members (SPEC §5)."""
        require_user(who)
        # A non-member learns nothing, not even that the org exists.
        if not self._access.may_read_org(who, org_id):
            raise NotFound(f"no org with id {org_id!r}")
        identity = self._identity_store()
        org = _org_view(identity.get_org(org_id))
        teams = []
        for team_id in identity.org_team_ids(org_id):
            used, quota = self._store.team_usage(team_id)
            teams.append(TeamUsage(team_id, int(used), int(quota)))
        quota_bytes = org.memory_quota_bytes
        return OrgUsage(
            memory_used_bytes=sum(t.used_bytes for t in teams),
            effective_memory_quota_bytes=(
                DEFAULT_TEAM_AGGREGATE_QUOTA if quota_bytes is None else quota_bytes
            ),
            teams=tuple(teams),
        )


# --- composition ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AdminServices:
    """What the admin faces call: the admin use-cases and the platform audit log."""

    admin: AdminService
    audit: AuditService


def build_admin_services(identity: IdentityService | None, store: MemoryStore) -> AdminServices:
    """The admin services over one identity store (None in local mode) and the SQL store.

    ``store`` must be the SQL document store: the team and instance counters and the
    audit log live in its database.
    """
    if not isinstance(store, SqlStore):
        raise StoreUnavailable(
            "administration needs the SQL document store (its team counters and audit log); "
            f"this server runs on {type(store).__name__}"
        )
    return AdminServices(admin=AdminService(identity, store), audit=AuditService(store))
