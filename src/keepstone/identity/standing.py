"""A user's standing in a team, read on every request: one round trip, statements built once
(a browser session's, and its user's teams, too).

Membership is never cached (a removed member's very next request is refused); what is
saved is the cost of building the SQL, and the round trips of reading key, team, org
role and team role one by one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from keepstone.db import PointRead
from keepstone.identity import schema as t
from keepstone.principal import (
    TEAM_ADMIN_ORG_ROLES,
    OrgRole,
    Standing,
    TeamRole,
    acts_as_team_admin,
)

_org = t.org_members.alias("om")
_member = t.team_members.alias("m")

#: The standing columns: the team's org and plan, the user's org role and membership.
_STANDING = (
    t.teams.c.org_id,
    t.orgs.c.plan,
    _org.c.role.label("org_role"),
    _member.c.role.label("team_role"),
    _member.c.projects_limited,
)


def _with_memberships(joined: sa.Join, user_id: sa.ColumnElement[Any]) -> sa.Join:
    """``joined`` (a team and its org) with the user's membership of each, if any."""
    in_org = sa.and_(_org.c.org_id == t.teams.c.org_id, _org.c.user_id == user_id)
    in_team = sa.and_(_member.c.team_id == t.teams.c.id, _member.c.user_id == user_id)
    return joined.outerjoin(_org, in_org).outerjoin(_member, in_team)


#: A user's standing in one team.
ROLE_IN_TEAM = (
    sa.select(*_STANDING)
    .select_from(
        _with_memberships(t.teams.join(t.orgs, t.orgs.c.id == t.teams.c.org_id), sa.bindparam("u"))
    )
    .where(t.teams.c.id == sa.bindparam("t"))
)

#: A live API key with its user and that user's standing in the key's team.
PRINCIPAL_FOR_KEY = (
    sa.select(
        t.api_keys.c.id.label("key_id"),
        t.api_keys.c.user_id,
        t.api_keys.c.team_id,
        t.users.c.super_admin,
        *_STANDING,
    )
    .select_from(
        _with_memberships(
            t.api_keys.join(t.users, t.users.c.id == t.api_keys.c.user_id)
            .outerjoin(t.teams, t.teams.c.id == t.api_keys.c.team_id)
            .outerjoin(t.orgs, t.orgs.c.id == t.teams.c.org_id),
            t.api_keys.c.user_id,
        )
    )
    .where(t.api_keys.c.key_hash == sa.bindparam("h"), t.api_keys.c.revoked_at.is_(None))
)

#: The same, as every request with an API key runs it (a point read off the pool).
KEY_POINT = PointRead(PRINCIPAL_FOR_KEY)

#: A live-or-expired browser session (by its token's hash) with its user's standing flag.
SESSION_FOR_TOKEN = (
    sa.select(
        t.sessions.c.user_id,
        t.sessions.c.csrf_hash,
        t.sessions.c.expires_at,
        t.users.c.super_admin,
    )
    .join(t.users, t.users.c.id == t.sessions.c.user_id)
    .where(t.sessions.c.id_hash == sa.bindparam("h"))
)

#: The teams a user (``u``) is a member of, with the membership's role.
TEAMS_AS_MEMBER = (
    sa.select(t.teams.c.id, t.teams.c.name, t.teams.c.org_id, t.team_members.c.role)
    .join(t.team_members, t.team_members.c.team_id == t.teams.c.id)
    .where(t.team_members.c.user_id == sa.bindparam("u"))
)

#: The teams of the orgs a user (``u``) owns or administers: those in which the user acts
#: as team admin (plain comparisons, not an ``IN`` list, which SQLAlchemy expands again at
#: every execution).
TEAMS_AS_ORG_ADMIN = (
    sa.select(t.teams.c.id, t.teams.c.name, t.teams.c.org_id)
    .join(t.org_members, t.org_members.c.org_id == t.teams.c.org_id)
    .where(
        t.org_members.c.user_id == sa.bindparam("u"),
        sa.or_(*(t.org_members.c.role == role.value for role in TEAM_ADMIN_ORG_ROLES)),
    )
)

PROJECT_LIMIT = sa.select(t.team_member_projects.c.project_id).where(
    t.team_member_projects.c.team_id == sa.bindparam("t"),
    t.team_member_projects.c.user_id == sa.bindparam("u"),
)


def standing_from_row(
    conn: Connection | Callable[[], AbstractContextManager[Connection]],
    row: Any,
    user_id: str,
    team_id: str,
) -> Standing:
    """The :class:`Standing` off a ROLE_IN_TEAM- or PRINCIPAL_FOR_KEY-shaped row.

    Only a limited membership costs a second statement (its project list): on ``conn``
    (the row's transaction), or on a connection ``conn()`` opens when the row was a
    :class:`~keepstone.db.PointRead`'s.
    """
    if row is None or row.org_id is None:
        return Standing()
    org_id, plan = str(row.org_id), str(row.plan or "")
    org_role = OrgRole(row.org_role) if row.org_role else None
    if acts_as_team_admin(org_role):
        return Standing(org_id, plan, org_role, TeamRole.ADMIN, None)
    if row.team_role is None:
        return Standing(org_id, plan, org_role, None, None)
    limit: frozenset[str] | None = None
    if row.projects_limited:
        with contextlib.nullcontext(conn) if isinstance(conn, Connection) else conn() as c:
            rows = c.execute(PROJECT_LIMIT, {"t": team_id, "u": user_id})
            limit = frozenset(str(r[0]) for r in rows)
    return Standing(org_id, plan, org_role, TeamRole(row.team_role), limit)


def standing_in_team(conn: Connection, user_id: str, team_id: str) -> Standing | None:
    """The user's standing in ``team_id``; None when there is no such team."""
    row = conn.execute(ROLE_IN_TEAM, {"u": user_id, "t": team_id}).first()
    return None if row is None else standing_from_row(conn, row, user_id, team_id)


def is_disabled(conn: Connection, user_id: str) -> bool:
    """Whether an admin disabled the user (who then cannot sign in)."""
    query = sa.select(t.disabled_users.c.user_id).where(t.disabled_users.c.user_id == user_id)
    return conn.execute(query).first() is not None
