"""Identity tables: orgs, teams, users, memberships, projects, repositories,
credentials and sessions (SPEC §7.1).

Every team-owned row carries ``team_id`` and leads its primary key with it, so the
tables distribute by tenant (SPEC §10). Ids are opaque strings.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from keepstone.db import Steps
from keepstone.db.columns import id_key, timestamp

metadata = sa.MetaData()


def _reference(name: str, table: str, **flags: Any) -> sa.Column[str]:
    """A string column ``name`` holding an id of ``table``'s (a foreign key)."""
    return sa.Column(name, sa.String(64), sa.ForeignKey(f"{table}.id"), **flags)


orgs = sa.Table(
    "orgs",
    metadata,
    id_key(),
    sa.Column("name", sa.String(256), nullable=False),
    sa.Column("plan", sa.String(32), nullable=False, server_default="free"),
    sa.Column("memory_quota_bytes", sa.BigInteger, nullable=True),
    timestamp("created_at"),
)

users = sa.Table(
    "users",
    metadata,
    id_key(),
    sa.Column("email", sa.String(320), nullable=False, unique=True),
    sa.Column("name", sa.String(256), nullable=False, server_default=""),
    sa.Column("password_hash", sa.String(256), nullable=True),
    sa.Column("super_admin", sa.Boolean, nullable=False, server_default=sa.false()),
    timestamp("created_at"),
)


def _members(of: str, *columns: sa.Column[Any]) -> sa.Table:
    """The members of an org or a team (``of``) and their roles: keyed ``(<of>_id, user_id)``."""
    return sa.Table(
        f"{of}_members",
        metadata,
        _reference(f"{of}_id", f"{of}s", primary_key=True),
        _reference("user_id", "users", primary_key=True),
        sa.Column("role", sa.String(32), nullable=False),
        *columns,
    )


org_members = _members("org")

teams = sa.Table(
    "teams",
    metadata,
    id_key(),
    _reference("org_id", "orgs", nullable=False, index=True),
    sa.Column("name", sa.String(256), nullable=False),
    timestamp("created_at"),
)

team_members = _members(
    "team",
    # True when the membership is limited to the projects in team_member_projects.
    sa.Column("projects_limited", sa.Boolean, nullable=False, server_default=sa.false()),
    timestamp("created_at"),
)

team_member_projects = sa.Table(
    "team_member_projects",
    metadata,
    id_key("team_id"),
    id_key("user_id"),
    id_key("project_id"),
)


def _team_owned(name: str, *columns: sa.Column[Any]) -> sa.Table:
    """A named thing of a team: keyed ``(team_id, id)``, its id unique on its own too."""
    return sa.Table(
        name,
        metadata,
        _reference("team_id", "teams", primary_key=True),
        id_key(),
        *columns,
        sa.Column("name", sa.String(256), nullable=False),
        timestamp("created_at"),
        sa.UniqueConstraint("id", name=f"uq_{name}_id"),
    )


projects = _team_owned("projects")
repos = _team_owned("repos", sa.Column("project_id", sa.String(64), nullable=False))

api_keys = sa.Table(
    "api_keys",
    metadata,
    id_key(),
    _reference("user_id", "users", nullable=False),
    _reference("team_id", "teams", nullable=False),
    sa.Column("name", sa.String(256), nullable=False, server_default=""),
    # HMAC-SHA-256 of the key under the server's key-hash secret: a fast keyed hash.
    sa.Column("key_hash", sa.String(128), nullable=False, unique=True),
    timestamp("created_at"),
    timestamp("revoked_at", nullable=True),
)

sessions = sa.Table(
    "sessions",
    metadata,
    # Hash of the cookie value; the cookie itself is never stored.
    sa.Column("id_hash", sa.String(128), primary_key=True),
    _reference("user_id", "users", nullable=False, index=True),
    sa.Column("csrf_hash", sa.String(128), nullable=False),
    timestamp("created_at"),
    timestamp("expires_at"),
)


MIGRATIONS = Steps("identity")


@MIGRATIONS.add(1, "orgs, teams, users, memberships, credentials, audit")
def _create_v1(conn: Connection) -> None:
    metadata.create_all(conn)
    # v1 also created the platform audit log (audit_events); the document store owns
    # that table now, and its own migration 2 creates it where it is missing.


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
    id_key("name"),
    sa.Column("value", sa.String(256), nullable=False),
    timestamp("created_at"),
)


@MIGRATIONS.add(2, "server secrets (key-hash secret)")
def _create_v2(conn: Connection) -> None:
    server_secrets.create(conn, checkfirst=True)


# --- v3: disabled users, password-reset links --------------------------------------------------
#
# A disabled user cannot sign in (their sessions were ended and keys revoked when disabled);
# kept as a table of its own so the users table stays as v1 created it. A password-reset
# link's token is stored only as its keyed hash, like a session's; it is single use.

metadata_v3 = sa.MetaData()

disabled_users = sa.Table(
    "disabled_users",
    metadata_v3,
    id_key("user_id"),
    timestamp("disabled_at"),
)

password_resets = sa.Table(
    "password_resets",
    metadata_v3,
    sa.Column("token_hash", sa.String(128), primary_key=True),
    sa.Column("user_id", sa.String(64), nullable=False, index=True),
    timestamp("created_at"),
    timestamp("expires_at"),
    timestamp("used_at", nullable=True),
)


@MIGRATIONS.add(3, "disabled users, password-reset links")
def _create_v3(conn: Connection) -> None:
    metadata_v3.create_all(conn, checkfirst=True)
