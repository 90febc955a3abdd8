"""The ends of things: disabling a user, resetting a password by a one-time link, deleting a
team's identity rows and an empty org.

Functions over an :class:`~keepstone.identity.service.IdentityService` (its engine and
hashers), like :mod:`keepstone.identity.listing`; the admin use-cases
(:class:`keepstone.service.admin.AdminService`) decide who may call them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from keepstone.db import read_transaction, utc, utcnow, write_transaction
from keepstone.errors import Conflict, InvalidRequest, NotFound
from keepstone.identity import schema as t
from keepstone.identity.keys import new_token
from keepstone.identity.standing import is_disabled
from keepstone.identity.validation import row_by_id

if TYPE_CHECKING:
    from keepstone.identity.service import IdentityService

#: How long a password-reset link works: long enough to pass it on, short enough that a
#: forgotten one is soon dead.
RESET_TTL = timedelta(hours=24)


@dataclass(frozen=True, slots=True)
class ResetLink:
    """A one-time password-reset token (shown once; only its hash is kept)."""

    user_id: str
    token: str = field(repr=False)
    expires_at: datetime


def _end_sessions_and_keys(conn: Connection, user_id: str) -> None:
    conn.execute(t.sessions.delete().where(t.sessions.c.user_id == user_id))
    conn.execute(
        t.api_keys.update()
        .where(t.api_keys.c.user_id == user_id, t.api_keys.c.revoked_at.is_(None))
        .values(revoked_at=utcnow())
    )


def disable_user(identity: IdentityService, user_id: str) -> None:
    """The user can no longer sign in; their sessions end and their live keys are revoked,
    in one transaction (a re-enabled user starts with no key)."""
    with write_transaction(identity.engine) as conn:
        row_by_id(conn, t.users, user_id, "user")
        if not is_disabled(conn, user_id):
            conn.execute(t.disabled_users.insert().values(user_id=user_id, disabled_at=utcnow()))
        _end_sessions_and_keys(conn, user_id)


def enable_user(identity: IdentityService, user_id: str) -> None:
    with write_transaction(identity.engine) as conn:
        row_by_id(conn, t.users, user_id, "user")
        conn.execute(t.disabled_users.delete().where(t.disabled_users.c.user_id == user_id))


def new_reset_link(identity: IdentityService, user_id: str) -> ResetLink:
    """A fresh reset token for the user; their earlier unused tokens stop working."""
    token, now = new_token(), utcnow()
    with write_transaction(identity.engine) as conn:
        row_by_id(conn, t.users, user_id, "user")
        if is_disabled(conn, user_id):
            raise Conflict(f"user {user_id!r} is disabled; enable them first", field="user_id")
        resets = t.password_resets
        conn.execute(resets.delete().where(resets.c.user_id == user_id))
        conn.execute(
            resets.insert().values(
                token_hash=identity.hasher.hash(token),
                user_id=user_id,
                created_at=now,
                expires_at=now + RESET_TTL,
                used_at=None,
            )
        )
    return ResetLink(user_id, token, now + RESET_TTL)


def _live_reset(conn: Connection, identity: IdentityService, token: str) -> str:
    """The user id of a live (unused, unexpired) reset token; NotFound otherwise."""
    resets = t.password_resets
    row = conn.execute(
        sa.select(resets.c.user_id, resets.c.expires_at, resets.c.used_at).where(
            resets.c.token_hash == identity.hasher.hash(token)
        )
    ).first()
    if row is None or row.used_at is not None or utc(row.expires_at) <= utcnow():
        raise NotFound("this password-reset link is unknown, used or expired; ask for a new one")
    return str(row.user_id)


def reset_link_email(identity: IdentityService, token: str) -> str:
    """The email of a live reset token's user (what its page shows)."""
    with read_transaction(identity.engine) as conn:
        return str(row_by_id(conn, t.users, _live_reset(conn, identity, token), "user")["email"])


def use_reset_link(identity: IdentityService, token: str, password: str) -> str:
    """Set the password of a live reset token's user and spend the token (single use);
    their other sessions end. Returns the user id."""
    hashed = identity.password_hash(password)
    with write_transaction(identity.engine) as conn:
        user_id = _live_reset(conn, identity, token)
        resets = t.password_resets
        spent = conn.execute(
            resets.update()
            .where(resets.c.token_hash == identity.hasher.hash(token), resets.c.used_at.is_(None))
            .values(used_at=utcnow())
        ).rowcount
        if not spent:  # another request spent it first
            raise NotFound("this password-reset link was just used; ask for a new one")
        conn.execute(t.users.update().where(t.users.c.id == user_id).values(password_hash=hashed))
        conn.execute(t.sessions.delete().where(t.sessions.c.user_id == user_id))
    return user_id


def team_of(identity: IdentityService, team_id: str) -> tuple[str, str]:
    """The team's ``(name, org_id)``; NotFound when there is no such team."""
    with read_transaction(identity.engine) as conn:
        row = row_by_id(conn, t.teams, team_id, "team")
    return str(row["name"]), str(row["org_id"])


def delete_team(identity: IdentityService, team_id: str, confirm: str) -> str:
    """Delete the team's identity rows (keys, memberships, projects, repositories, the
    team) in one transaction, once ``confirm`` is its name; returns the name."""
    with write_transaction(identity.engine) as conn:
        name = row_by_id(conn, t.teams, team_id, "team")["name"]
        if confirm.strip() != name:
            raise InvalidRequest(
                f"confirm must be the team's name, {name!r}, typed exactly", field="confirm"
            )
        for table in (t.api_keys, t.team_member_projects, t.team_members, t.repos, t.projects):
            conn.execute(table.delete().where(table.c.team_id == team_id))
        conn.execute(t.teams.delete().where(t.teams.c.id == team_id))
    return str(name)


def delete_org(identity: IdentityService, org_id: str) -> str:
    """Delete an org that has no team (409 naming how many it has); returns its name."""
    with write_transaction(identity.engine) as conn:
        name = row_by_id(conn, t.orgs, org_id, "org")["name"]
        teams = conn.execute(
            sa.select(sa.func.count()).select_from(t.teams).where(t.teams.c.org_id == org_id)
        ).scalar_one()
        if teams:
            raise Conflict(
                f"org {name!r} still has {teams} team(s); delete its teams first", field="org_id"
            )
        conn.execute(t.org_members.delete().where(t.org_members.c.org_id == org_id))
        conn.execute(t.orgs.delete().where(t.orgs.c.id == org_id))
    return str(name)
