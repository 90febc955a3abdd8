"""Identity tables: orgs, teams, users, memberships, projects, repositories,
credentials and sessions (SPEC §7.1).

Every team-owned row carries ``team_id`` and leads its primary key with it, so the
tables distribute by tenant (SPEC §10). Ids are opaque strings.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from keepstone.db import Migration

metadata = sa.MetaData()

TS = sa.DateTime(timezone=True)

orgs = sa.Table(
    "orgs",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(256), nullable=False),
    sa.Column("plan", sa.String(32), nullable=False, server_default="free"),
    sa.Column("memory_quota_bytes", sa.BigInteger, nullable=True),
    sa.Column("created_at", TS, nullable=False),
)

users = sa.Table(
    "users",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("email", sa.String(320), nullable=False, unique=True),
    sa.Column("name", sa.String(256), nullable=False, server_default=""),
    sa.Column("password_hash", sa.String(256), nullable=True),
    sa.Column("super_admin", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("created_at", TS, nullable=False),
)

org_members = sa.Table(
    "org_members",
    metadata,
    sa.Column("org_id", sa.String(64), sa.ForeignKey("orgs.id"), primary_key=True),
    sa.Column("user_id", sa.String(64), sa.ForeignKey("users.id"), primary_key=True),
    sa.Column("role", sa.String(32), nullable=False),
)

teams = sa.Table(
    "teams",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("org_id", sa.String(64), sa.ForeignKey("orgs.id"), nullable=False, index=True),
    sa.Column("name", sa.String(256), nullable=False),
    sa.Column("created_at", TS, nullable=False),
)

team_members = sa.Table(
    "team_members",
    metadata,
    sa.Column("team_id", sa.String(64), sa.ForeignKey("teams.id"), primary_key=True),
    sa.Column("user_id", sa.String(64), sa.ForeignKey("users.id"), primary_key=True),
    sa.Column("role", sa.String(32), nullable=False),
    # True when the membership is limited to the projects in team_member_projects.
    sa.Column("projects_limited", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("created_at", TS, nullable=False),
)

team_member_projects = sa.Table(
    "team_member_projects",
    metadata,
    sa.Column("team_id", sa.String(64), primary_key=True),
    sa.Column("user_id", sa.String(64), primary_key=True),
    sa.Column("project_id", sa.String(64), primary_key=True),
)


def _team_owned(name: str, *columns: sa.Column[Any]) -> sa.Table:
    """A named thing of a team: keyed ``(team_id, id)``, its id unique on its own too."""
    return sa.Table(
        name,
        metadata,
        sa.Column("team_id", sa.String(64), sa.ForeignKey("teams.id"), primary_key=True),
        sa.Column("id", sa.String(64), primary_key=True),
        *columns,
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.UniqueConstraint("id", name=f"uq_{name}_id"),
    )


projects = _team_owned("projects")
repos = _team_owned("repos", sa.Column("project_id", sa.String(64), nullable=False))

api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("user_id", sa.String(64), sa.ForeignKey("users.id"), nullable=False),
    sa.Column("team_id", sa.String(64), sa.ForeignKey("teams.id"), nullable=False),
    sa.Column("name", sa.String(256), nullable=False, server_default=""),
    # HMAC-SHA-256 of the key under the server's key-hash secret: a fast keyed hash.
    sa.Column("key_hash", sa.String(128), nullable=False, unique=True),
    sa.Column("created_at", TS, nullable=False),
    sa.Column("revoked_at", TS, nullable=True),
)

sessions = sa.Table(
    "sessions",
    metadata,
    # Hash of the cookie value; the cookie itself is never stored.
    sa.Column("id_hash", sa.String(128), primary_key=True),
    sa.Column("user_id", sa.String(64), sa.ForeignKey("users.id"), nullable=False, index=True),
    sa.Column("csrf_hash", sa.String(128), nullable=False),
    sa.Column("created_at", TS, nullable=False),
    sa.Column("expires_at", TS, nullable=False),
)


def _create_v1(conn: Connection) -> None:
    metadata.create_all(conn)
    # v1 also created the platform audit log (audit_events); the document store owns
    # that table now, and its own migration 2 creates it where it is missing.


MIGRATIONS = [
    Migration("identity", 1, "orgs, teams, users, memberships, credentials, audit", _create_v1),
]


# --- v2: server secrets ---------------------------------------------------------------------
#
# The key-hash secret of API keys and sessions, when KEEPSTONE_KEY_HASH_SECRET is not set: one
# random value created on first start and kept here so keys survive restarts and replicas
# agree on it.

#: v2 tables live in their own MetaData so v1's create_all stays exactly what v1 created.
metadata_v2 = sa.MetaData()

server_secrets = sa.Table(
    "server_secrets",
    metadata_v2,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(256), nullable=False),
    sa.Column("created_at", TS, nullable=False),
)


def _create_v2(conn: Connection) -> None:
    server_secrets.create(conn, checkfirst=True)


MIGRATIONS.append(Migration("identity", 2, "server secrets (key-hash secret)", _create_v2))
