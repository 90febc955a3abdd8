"""A user's standing in a team, read on every request: one round trip, statements built once.

Membership is never cached (a removed member's very next request is refused); what is
saved is the cost of building the SQL, and the round trips of reading key, team, org
role and team role one by one.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from cairn.identity import schema as t
from cairn.identity.principal import OrgRole, TeamRole

_org = t.org_members.alias("om")
_member = t.team_members.alias("m")

#: A user's standing in one team: the team's org, their org role and their team membership.
ROLE_IN_TEAM = (
    sa.select(
        t.teams.c.org_id,
        _org.c.role.label("org_role"),
        _member.c.role.label("team_role"),
        _member.c.projects_limited,
    )
    .select_from(
        t.teams.outerjoin(
            _org, sa.and_(_org.c.org_id == t.teams.c.org_id, _org.c.user_id == sa.bindparam("u"))
        ).outerjoin(
            _member,
            sa.and_(_member.c.team_id == t.teams.c.id, _member.c.user_id == sa.bindparam("u")),
        )
    )
    .where(t.teams.c.id == sa.bindparam("t"))
)

#: A live API key with its user and that user's standing in the key's team.
PRINCIPAL_FOR_KEY = (
    sa.select(
        t.api_keys.c.user_id,
        t.api_keys.c.team_id,
        t.users.c.super_admin,
        t.teams.c.org_id,
        _org.c.role.label("org_role"),
        _member.c.role.label("team_role"),
        _member.c.projects_limited,
    )
    .select_from(
        t.api_keys.join(t.users, t.users.c.id == t.api_keys.c.user_id)
        .outerjoin(t.teams, t.teams.c.id == t.api_keys.c.team_id)
        .outerjoin(
            _org,
            sa.and_(_org.c.org_id == t.teams.c.org_id, _org.c.user_id == t.api_keys.c.user_id),
        )
        .outerjoin(
            _member,
            sa.and_(
                _member.c.team_id == t.api_keys.c.team_id,
                _member.c.user_id == t.api_keys.c.user_id,
            ),
        )
    )
    .where(t.api_keys.c.key_hash == sa.bindparam("h"), t.api_keys.c.revoked_at.is_(None))
)

PROJECT_LIMIT = sa.select(t.team_member_projects.c.project_id).where(
    t.team_member_projects.c.team_id == sa.bindparam("t"),
    t.team_member_projects.c.user_id == sa.bindparam("u"),
)


def role_from_row(
    conn: Connection, row: Any, user_id: str, team_id: str
) -> tuple[TeamRole | None, str, OrgRole | None, frozenset[str] | None]:
    """Read (team role, org id, org role, project limit) off a ROLE_IN_TEAM-shaped row.

    An org owner/admin ranks as team admin, unlimited; only a limited membership costs
    a second query (its project list).
    """
    if row.org_id is None:
        return None, "", None, None
    org_id = str(row.org_id)
    org_role = OrgRole(row.org_role) if row.org_role else None
    if org_role in (OrgRole.OWNER, OrgRole.ADMIN):
        return TeamRole.ADMIN, org_id, org_role, None
    if row.team_role is None:
        return None, org_id, org_role, None
    limit: frozenset[str] | None = None
    if row.projects_limited:
        rows = conn.execute(PROJECT_LIMIT, {"t": team_id, "u": user_id})
        limit = frozenset(str(r[0]) for r in rows)
    return TeamRole(row.team_role), org_id, org_role, limit
