"""Who may do what with a team's records, read fresh from the database per call.

Every route resolves a :class:`TeamAccess` first; membership is never cached, so a
member removed a moment ago is refused on the very next request (SPEC §6). The
checks run in the contract's order: no such team / not a member →
``404 team_not_found``; then the credential or role → ``403 forbidden`` /
``403 csrf_required``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from cairn.errors import CsrfRequired, Forbidden, TeamNotFound
from cairn.identity.principal import MEMORY_PLANS, CredentialKind, OrgRole, Plan, Principal
from cairn.identity.schema import org_members, orgs, team_member_projects, team_members, teams
from cairn.records.models import is_clean_id
from cairn.store.db import read_transaction

#: The implicit team of ``cairn serve --local``.
LOCAL_TEAM = "local"


class Action(StrEnum):
    """What the caller wants to do; decides the credential and role check."""

    READ = "read"  # search, list, read settings: any team member
    MANAGE = "manage"  # delete a record, change the setting: org owner/admin, browser
    SAVE = "save"  # save a record: the service token only


@dataclass(frozen=True, slots=True)
class TeamAccess:
    """A caller's standing in one team, as the records service needs it.

    ``project_ids`` is None when the caller sees every record of the team (an
    unlimited member, an org owner or admin, the service token), else the projects
    whose repositories' records it may see. ``plan`` is the org's plan.
    """

    team_id: str
    org_id: str
    plan: str
    project_ids: frozenset[str] | None
    can_manage: bool

    @property
    def plan_allows(self) -> bool:
        return self.plan in MEMORY_PLANS

    @property
    def visibility_fingerprint(self) -> str:
        """Stable text naming what this caller can see (binds list page tokens)."""
        if self.project_ids is None:
            return "all"
        return "p:" + ",".join(sorted(self.project_ids))


def _not_found(team_id: str) -> TeamNotFound:
    return TeamNotFound(
        f"team {team_id!r} was not found, or you are not a member of it; "
        "ask a team member to add you"
    )


def _team_row(conn: Connection, team_id: str) -> tuple[str, str] | None:
    if not is_clean_id(team_id):
        return None  # no team has such an id; don't hand it to the driver
    row = conn.execute(
        sa.select(teams.c.org_id, orgs.c.plan)
        .select_from(teams.join(orgs, orgs.c.id == teams.c.org_id))
        .where(teams.c.id == team_id)
    ).first()
    return None if row is None else (str(row[0]), str(row[1]))


def resolve(engine: Engine, principal: Principal, team_id: str, action: Action) -> TeamAccess:
    """The caller's access to ``team_id`` for ``action``, or the first refusal.

    Raises :class:`TeamNotFound` (no such team, not a member, an API key of another
    team), :class:`Forbidden` (credential or role not allowed for ``action``) or
    :class:`CsrfRequired` (a browser session's mutation without its CSRF token).
    """
    if principal.kind is CredentialKind.LOCAL:
        # Single-tenant mode: one implicit team, everything allowed, no plan gate.
        if team_id != LOCAL_TEAM:
            raise _not_found(team_id)
        return TeamAccess(team_id, "", Plan.ENTERPRISE.value, None, True)

    with read_transaction(engine) as conn:
        team = _team_row(conn, team_id)
        if team is None:
            raise _not_found(team_id)
        org_id, plan = team
        if principal.kind in (CredentialKind.SERVICE_TOKEN, CredentialKind.ADMIN_TOKEN):
            # Token credentials belong to no team: they pass the team check only for
            # a team that exists, then meet the credential check.
            if action is Action.SAVE and principal.kind is CredentialKind.SERVICE_TOKEN:
                return TeamAccess(team_id, org_id, plan, None, False)
            raise Forbidden(
                f"this credential cannot {action.value} team memory records; "
                "use a team member's API key or browser session"
            )
        if principal.kind is CredentialKind.API_KEY and principal.team_id != team_id:
            raise _not_found(team_id)

        member = conn.execute(
            sa.select(team_members.c.projects_limited).where(
                team_members.c.team_id == team_id, team_members.c.user_id == principal.user_id
            )
        ).first()
        org_role_value = conn.execute(
            sa.select(org_members.c.role).where(
                org_members.c.org_id == org_id, org_members.c.user_id == principal.user_id
            )
        ).scalar()
        org_admin = org_role_value in (OrgRole.OWNER.value, OrgRole.ADMIN.value)
        if member is None and not org_admin:
            raise _not_found(team_id)

        project_ids: frozenset[str] | None = None
        if member is not None and bool(member[0]) and not org_admin:
            project_ids = frozenset(
                str(p)
                for p in conn.execute(
                    sa.select(team_member_projects.c.project_id).where(
                        team_member_projects.c.team_id == team_id,
                        team_member_projects.c.user_id == principal.user_id,
                    )
                ).scalars()
            )

    browser = principal.kind is CredentialKind.SESSION
    can_manage = org_admin and browser
    if action is Action.SAVE:
        raise Forbidden(
            "team memory records are saved only by the host application's server "
            "(the service token); no user credential can save one"
        )
    if action is Action.MANAGE:
        if not browser:
            raise Forbidden(
                "an API key cannot delete a record or change the memory setting; "
                "a workspace owner or admin does it signed in, in a browser"
            )
        if not org_admin:
            raise Forbidden(
                "only a workspace owner or admin can delete a record or change the "
                "memory setting; ask one of them"
            )
        if not principal.csrf_ok:
            raise CsrfRequired("this change needs the X-CSRF-Token header of your browser session")
    return TeamAccess(team_id, org_id, plan, project_ids, can_manage)


def team_for_save(engine: Engine, team_id: str) -> TeamAccess:
    """The access the server's own code has when it saves for ``team_id``."""
    with read_transaction(engine) as conn:
        team = _team_row(conn, team_id)
    if team is None:
        raise TeamNotFound(f"team {team_id!r} was not found; check the team id")
    return TeamAccess(team_id, team[0], team[1], None, False)
