"""Paged reads of the identity tables for the instance admin: orgs, teams, users, API keys.

Keyset paging by id: a page holds up to ``limit`` rows with ids above the cursor's, in id
order, so a row created or revoked between two pages never shifts the others. The cursor
is opaque to callers (base64 of the list it belongs to and the last id given): one from
another list, or edited, is refused rather than read as something else. What a row
shows is chosen column by column: never a password hash, a key or a key's hash.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from keepstone.db import read_transaction, utc
from keepstone.identity import schema as t
from keepstone.paging import DEFAULT_PAGE as DEFAULT_PAGE
from keepstone.paging import MAX_PAGE as MAX_PAGE
from keepstone.paging import Page as Page
from keepstone.paging import PageAt as PageAt
from keepstone.paging import bad_cursor, check_limit, decode_cursor, encode_cursor
from keepstone.wire import Jsonable

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class OrgEntry(Jsonable):
    id: str
    name: str
    plan: str
    #: None: the default quota.
    memory_quota_bytes: int | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class TeamEntry(Jsonable):
    id: str
    name: str
    org_id: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class MemberEntry(Jsonable):
    """A team membership: ``projects`` None when it is not limited to some projects."""

    user_id: str
    email: str
    role: str
    projects: list[str] | None


@dataclass(frozen=True, slots=True)
class UserEntry(Jsonable):
    id: str
    email: str
    name: str
    super_admin: bool
    #: Whether the user has a password (can sign in); never the hash itself.
    has_password: bool
    created_at: datetime
    #: Whether an admin disabled the user (no sign-in, no key).
    disabled: bool = False


@dataclass(frozen=True, slots=True)
class ApiKeyEntry(Jsonable):
    """An API key's record. When a key was last used is not recorded, so not shown."""

    id: str
    name: str
    user_id: str
    team_id: str
    created_at: datetime
    revoked_at: datetime | None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def as_json(self) -> dict[str, Any]:
        return {**Jsonable.as_json(self), "revoked": self.revoked}


def _decode_cursor(kind: str, cursor: str) -> str:
    after = decode_cursor(kind, cursor)
    if not isinstance(after, str) or not 0 < len(after) <= 64:
        raise bad_cursor(kind)
    return after


def _page(
    engine: Engine,
    table: sa.Table,
    entry: Callable[..., T],
    columns: Sequence[sa.ColumnElement[Any]],
    at: PageAt,
    where: Sequence[sa.ColumnElement[bool]] = (),
) -> Page[T]:
    """The page ``at`` of ``table``'s rows by id, each made an ``entry`` of ``columns``' values (in
    the entry's field order; a time made timezone-aware UTC)."""
    kind = table.name  # the cursor names the list it belongs to
    limit, cursor = at
    query = sa.select(*columns).where(*where).order_by(table.c.id).limit(check_limit(limit) + 1)
    if cursor:
        query = query.where(table.c.id > _decode_cursor(kind, cursor))
    with read_transaction(engine) as conn:
        rows = conn.execute(query).all()
    items = tuple(entry(*map(_aware, row)) for row in rows[:limit])
    more = len(rows) > limit
    return Page(items, encode_cursor(kind, rows[limit - 1].id) if more else None)


def _aware(value: object) -> object:
    """A time read from the database as timezone-aware UTC; any other value as it is."""
    return utc(value) if isinstance(value, datetime) else value


def list_orgs(engine: Engine, at: PageAt) -> Page[OrgEntry]:
    o = t.orgs.c
    columns = (o.id, o.name, o.plan, o.memory_quota_bytes, o.created_at)
    return _page(engine, t.orgs, OrgEntry, columns, at)


def list_teams(engine: Engine, at: PageAt, org_id: str | None = None) -> Page[TeamEntry]:
    """A page of the teams, only ``org_id``'s when given."""
    c = t.teams.c
    columns = (c.id, c.name, c.org_id, c.created_at)
    where = [] if org_id is None else [c.org_id == org_id]
    return _page(engine, t.teams, TeamEntry, columns, at, where)


def team_members(engine: Engine, team_id: str) -> tuple[MemberEntry, ...]:
    """Every member of the team, by email, with its role and project limit (a team's
    members are few: the list is whole)."""
    m, u, p = t.team_members.c, t.users.c, t.team_member_projects.c
    query = (
        sa.select(m.user_id, u.email, m.role, m.projects_limited)
        .join(t.users, u.id == m.user_id)
        .where(m.team_id == team_id)
        .order_by(u.email)
    )
    limits = sa.select(p.user_id, p.project_id).where(p.team_id == team_id)
    with read_transaction(engine) as conn:
        rows = conn.execute(query).all()
        projects: dict[str, list[str]] = {}
        for user_id, project_id in conn.execute(limits.order_by(p.project_id)):
            projects.setdefault(str(user_id), []).append(str(project_id))
    return tuple(
        MemberEntry(str(r[0]), str(r[1]), str(r[2]), projects.get(str(r[0]), []) if r[3] else None)
        for r in rows
    )


def list_users(engine: Engine, at: PageAt) -> Page[UserEntry]:
    u = t.users.c
    # The hash never leaves the database: only whether there is one.
    has_password = sa.type_coerce(u.password_hash.is_not(None), sa.Boolean)
    off = t.disabled_users.c
    disabled = sa.type_coerce(sa.exists().where(off.user_id == u.id), sa.Boolean)
    columns = (u.id, u.email, u.name, u.super_admin, has_password, u.created_at, disabled)
    return _page(engine, t.users, UserEntry, columns, at)


def list_api_keys(
    engine: Engine, at: PageAt, user_id: str | None = None, team_id: str | None = None
) -> Page[ApiKeyEntry]:
    k = t.api_keys.c
    where: list[sa.ColumnElement[bool]] = []
    if user_id is not None:
        where.append(k.user_id == user_id)
    if team_id is not None:
        where.append(k.team_id == team_id)
    # Never key_hash: the columns are named one by one.
    columns = (k.id, key_label(), k.user_id, k.team_id, k.created_at, k.revoked_at)
    return _page(engine, t.api_keys, ApiKeyEntry, columns, at, where)


def key_label() -> sa.ColumnElement[str]:
    """A key's name, or ``key of <email>`` for a key made before names were required
    (read so, never stored: the label follows its user's email)."""
    k = t.api_keys.c
    email = sa.select(t.users.c.email).where(t.users.c.id == k.user_id).scalar_subquery()
    return sa.case((k.name == "", sa.literal("key of ") + email), else_=k.name).label("name")
