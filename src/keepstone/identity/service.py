"""Identity use-cases: users, orgs, teams, memberships, projects, repositories, API keys,
browser sessions and credential resolution (SPEC §7).

Shared by the admin API (``keepstone.api.routes.admin``) and the operator CLI
(``keepstone admin ...``), so both do exactly the same thing. Memberships are read from
the database on every call: nothing here caches who belongs where.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy.engine import Connection, Engine

from keepstone.db import read_statements, read_transaction, utc, utcnow, write_transaction
from keepstone.errors import Conflict, InvalidRequest, NotFound, TeamNotFound, Unauthenticated
from keepstone.identity import schema as t
from keepstone.identity.keys import KeyHasher, new_api_key, new_id, new_token
from keepstone.identity.standing import (
    KEY_POINT,
    SESSION_FOR_TOKEN,
    TEAMS_AS_MEMBER,
    TEAMS_AS_ORG_ADMIN,
    is_disabled,
    standing_from_row,
    standing_in_team,
)
from keepstone.identity.validation import (
    clean_email,
    clean_ids,
    clean_name,
    parse_org_role,
    parse_plan,
    parse_team_role,
    row_by_id,
)
from keepstone.principal import CredentialKind, Principal, Standing, TeamRole
from keepstone.text import control_in

MIN_PASSWORD_CHARS = 8
_UNSET: Any = object()


def _with_standing(base: Principal, team_id: str, standing: Standing) -> Principal:
    return replace(
        base,
        team_id=team_id,
        org_id=standing.org_id,
        plan=standing.plan,
        team_role=standing.team_role,
        org_role=standing.org_role,
        project_ids=standing.project_ids,
        team_choice_needed=False,
    )


def _in_team(conn: Connection, base: Principal, team_id: str) -> Principal:
    """``base`` acting in ``team_id``, its standing read on ``conn`` (see principal_in_team)."""
    if (
        not base.user_id
        or (base.kind is CredentialKind.API_KEY and base.team_id != team_id)
        or control_in(team_id)  # no team has such an id
    ):
        raise TeamNotFound(f"no team {team_id!r} for this credential")
    standing = standing_in_team(conn, base.user_id, team_id)
    if standing is None or standing.team_role is None:
        raise TeamNotFound(f"no team {team_id!r} for this credential")
    return _with_standing(base, team_id, standing)


def _added_meanwhile(user_id: str, where: str) -> Conflict:
    return Conflict(
        f"user {user_id!r} was added to {where} by another request at the same moment; "
        "retry to apply this role",
        field="user_id",
    )


def _drop_membership(conn: Connection, team_id: str, user_id: str) -> bool:
    """Remove a team membership and its project limit; whether there was one."""
    key = {"team_id": team_id, "user_id": user_id}
    gone = conn.execute(t.team_members.delete().filter_by(**key)).rowcount
    conn.execute(t.team_member_projects.delete().filter_by(**key))
    return gone > 0


@dataclass(frozen=True, slots=True)
class Session:
    """A new browser session: the cookie value and CSRF token are shown once."""

    token: str
    csrf_token: str
    user: dict[str, Any]
    teams: list[dict[str, Any]]


class IdentityService:
    """Identity over the ``keepstone.identity.schema`` tables of one database."""

    def __init__(
        self,
        engine: Engine,
        hasher: KeyHasher,
        *,
        session_ttl_seconds: int = 14 * 24 * 3600,
        passwords: PasswordHasher | None = None,
    ) -> None:
        self.engine = engine
        self.hasher = hasher
        self.session_ttl = timedelta(seconds=session_ttl_seconds)
        self._passwords = passwords or PasswordHasher()
        #: A hash of no one's password, made (at the first sign-in) with the same parameters
        #: as the users': an unknown email is checked against it, so it takes as long to
        #: refuse as a wrong password and the answer's time tells no one which emails exist.
        self._no_one: str | None = None

    # --- users, orgs, teams --------------------------------------------------------------

    def create_user(
        self, email: str, password: str | None = None, name: str = "", super_admin: bool = False
    ) -> str:
        email = clean_email(email)
        if "@" not in email or len(email) > 320 or any(c.isspace() for c in email):
            raise InvalidRequest(f"email {email!r} is not an email address", field="email")
        pw_hash = self.password_hash(password) if password is not None else None
        user_id = new_id("user")
        with write_transaction(self.engine) as conn:
            try:
                conn.execute(
                    t.users.insert().values(
                        id=user_id,
                        email=email,
                        name=clean_name("name", name, required=False),
                        password_hash=pw_hash,
                        super_admin=bool(super_admin),
                        created_at=utcnow(),
                    )
                )
            except sa.exc.IntegrityError as exc:  # the unique index on email refused it
                raise Conflict(
                    f"a user with email {email!r} already exists", field="email"
                ) from exc
        return user_id

    def password_hash(self, password: str) -> str:
        """The argon2 hash of a new password (refused when too short)."""
        if len(password) < MIN_PASSWORD_CHARS:
            raise InvalidRequest(
                f"password must be at least {MIN_PASSWORD_CHARS} characters", field="password"
            )
        return self._passwords.hash(password)

    def create_org(self, name: str, plan: str = "free") -> str:
        org_id = new_id("org")
        with write_transaction(self.engine) as conn:
            conn.execute(
                t.orgs.insert().values(
                    id=org_id,
                    name=clean_name("name", name),
                    plan=parse_plan(plan).value,
                    memory_quota_bytes=None,
                    created_at=utcnow(),
                )
            )
        return org_id

    def get_org(self, org_id: str) -> dict[str, Any]:
        with read_transaction(self.engine) as conn:
            return self._org(conn, org_id)

    def _org(self, conn: Connection, org_id: str) -> dict[str, Any]:
        org = row_by_id(conn, t.orgs, org_id, "org")
        return {k: org[k] for k in ("id", "name", "plan", "memory_quota_bytes")}

    def update_org(
        self, org_id: str, *, plan: str | None = None, memory_quota_bytes: Any = _UNSET
    ) -> dict[str, Any]:
        """Change the plan and/or the org's memory quota (None = back to the default).

        Re-capping the teams' counters is the caller's job (it needs the store).
        """
        values: dict[str, Any] = {}
        if plan is not None:
            values["plan"] = parse_plan(plan).value
        if memory_quota_bytes is not _UNSET:
            if memory_quota_bytes is not None and (
                not isinstance(memory_quota_bytes, int) or memory_quota_bytes < 0
            ):
                raise InvalidRequest(
                    "memory_quota_bytes must be a whole number of bytes >= 0, or null",
                    field="memory_quota_bytes",
                )
            values["memory_quota_bytes"] = memory_quota_bytes
        clean_ids(org_id=org_id)
        with write_transaction(self.engine) as conn:
            if values:  # an unknown org updates nothing, and _org refuses it below
                conn.execute(t.orgs.update().where(t.orgs.c.id == org_id).values(**values))
            return self._org(conn, org_id)

    def org_team_ids(self, org_id: str) -> list[str]:
        with read_transaction(self.engine) as conn:
            self._org(conn, org_id)
            rows = conn.execute(
                sa.select(t.teams.c.id).where(t.teams.c.org_id == org_id).order_by(t.teams.c.id)
            )
            return [str(r[0]) for r in rows]

    def add_org_member(self, org_id: str, user_id: str, role: str) -> None:
        org_role = parse_org_role(role)
        with write_transaction(self.engine) as conn:
            self._org(conn, org_id)
            row_by_id(conn, t.users, user_id, "user")
            conn.execute(t.org_members.delete().filter_by(org_id=org_id, user_id=user_id))
            try:
                conn.execute(
                    t.org_members.insert().values(
                        org_id=org_id, user_id=user_id, role=org_role.value
                    )
                )
            except sa.exc.IntegrityError as exc:  # a concurrent add of the same member
                raise _added_meanwhile(user_id, f"org {org_id!r}") from exc

    def create_team(self, org_id: str, name: str) -> str:
        team_id = new_id("team")
        with write_transaction(self.engine) as conn:
            self._org(conn, org_id)
            conn.execute(
                t.teams.insert().values(
                    id=team_id, org_id=org_id, name=clean_name("name", name), created_at=utcnow()
                )
            )
        return team_id

    def add_team_member(
        self, team_id: str, user_id: str, role: str, projects: list[str] | None = None
    ) -> None:
        """Add (or update) a membership; ``projects`` limits it to those of the team's projects."""
        team_role = parse_team_role(role)
        with write_transaction(self.engine) as conn:
            row_by_id(conn, t.teams, team_id, "team")
            row_by_id(conn, t.users, user_id, "user")
            if projects is not None:
                known = {
                    str(r[0])
                    for r in conn.execute(
                        sa.select(t.projects.c.id).where(t.projects.c.team_id == team_id)
                    )
                }
                unknown = [p for p in projects if p not in known]
                if unknown:
                    raise InvalidRequest(
                        f"project {unknown[0]!r} is not a project of team {team_id!r}",
                        field="projects",
                    )
            _drop_membership(conn, team_id, user_id)
            try:
                conn.execute(
                    t.team_members.insert().values(
                        team_id=team_id,
                        user_id=user_id,
                        role=team_role.value,
                        projects_limited=projects is not None,
                        created_at=utcnow(),
                    )
                )
                for project_id in sorted(set(projects or [])):
                    conn.execute(
                        t.team_member_projects.insert().values(
                            team_id=team_id, user_id=user_id, project_id=project_id
                        )
                    )
            except sa.exc.IntegrityError as exc:  # a concurrent add of the same member
                raise _added_meanwhile(user_id, f"team {team_id!r}") from exc

    def remove_team_member(self, team_id: str, user_id: str) -> None:
        clean_ids(user_id=user_id)
        with write_transaction(self.engine) as conn:
            row_by_id(conn, t.teams, team_id, "team")
            if not _drop_membership(conn, team_id, user_id):
                raise NotFound(f"user {user_id!r} is not a member of team {team_id!r}")

    def create_project(self, team_id: str, name: str) -> str:
        project_id = new_id("proj")
        with write_transaction(self.engine) as conn:
            row_by_id(conn, t.teams, team_id, "team")
            conn.execute(
                t.projects.insert().values(
                    team_id=team_id,
                    id=project_id,
                    name=clean_name("name", name),
                    created_at=utcnow(),
                )
            )
        return project_id

    def create_repo(self, project_id: str, name: str) -> str:
        repo_id = new_id("repo")
        with write_transaction(self.engine) as conn:
            project = row_by_id(conn, t.projects, project_id, "project")
            conn.execute(
                t.repos.insert().values(
                    team_id=project["team_id"],
                    id=repo_id,
                    project_id=project_id,
                    name=clean_name("name", name),
                    created_at=utcnow(),
                )
            )
        return repo_id

    # --- API keys -----------------------------------------------------------------------

    def create_api_key(self, user_id: str, team_id: str, name: str = "") -> tuple[str, str]:
        """Mint a key for ``user_id`` acting in ``team_id``; return ``(id, key)``.

        The key itself is returned here once and never stored (only its HMAC).
        """
        key = new_api_key()
        key_id = new_id("key")
        with write_transaction(self.engine) as conn:
            row_by_id(conn, t.users, user_id, "user")
            row_by_id(conn, t.teams, team_id, "team")
            if is_disabled(conn, user_id):
                raise Conflict(f"user {user_id!r} is disabled", field="user_id")
            standing = standing_in_team(conn, user_id, team_id)
            if standing is None or standing.team_role is None:
                raise InvalidRequest(
                    f"user {user_id!r} is not a member of team {team_id!r}; add them first",
                    field="team_id",
                )
            conn.execute(
                t.api_keys.insert().values(
                    id=key_id,
                    user_id=user_id,
                    team_id=team_id,
                    name=clean_name("name", name, required=False),
                    key_hash=self.hasher.hash(key),
                    created_at=utcnow(),
                    revoked_at=None,
                )
            )
        return key_id, key

    def revoke_api_key(self, key_id: str, *, user_id: str | None = None) -> None:
        """Revoke a live key (only ``user_id``'s when given: another's is not found)."""
        k = t.api_keys.c
        mine = [] if user_id is None else [k.user_id == user_id]
        with write_transaction(self.engine) as conn:
            clean_ids(id=key_id)
            done = conn.execute(
                t.api_keys.update()
                .where(k.id == key_id, k.revoked_at.is_(None), *mine)
                .values(revoked_at=utcnow())
            ).rowcount
            if not done:
                raise NotFound(f"no active API key with id {key_id!r}")

    # --- resolving credentials ----------------------------------------------------------

    def standing(self, user_id: str, team_id: str) -> Standing | None:
        """The user's standing in ``team_id`` (one query); None when there is no such team."""
        with read_statements(self.engine) as conn:
            return standing_in_team(conn, user_id, team_id)

    def principal_for_api_key(self, key: str) -> Principal | None:
        """The principal of a live API key with its standing in the key's team, or None.

        One query. A key whose user left its team resolves with ``team_role=None``
        (routes then answer ``team_not_found``).
        """
        row = KEY_POINT.first(self.engine, {"h": self.hasher.hash(key)})
        if row is None:
            return None
        user_id, team_id = str(row.user_id), str(row.team_id)
        standing = standing_from_row(lambda: read_statements(self.engine), row, user_id, team_id)
        return _with_standing(
            Principal(
                kind=CredentialKind.API_KEY,
                user_id=user_id,
                super_admin=bool(row.super_admin),
                key_id=str(row.key_id),
            ),
            team_id,
            standing,
        )

    def principal_in_team(self, base: Principal, team_id: str) -> Principal:
        """``base`` (a user credential) acting in ``team_id``.

        Raises TeamNotFound when the team does not exist, the user is not a member
        (nor an owner/admin of its org), or ``base`` is an API key of another team.
        """
        with read_statements(self.engine) as conn:
            return _in_team(conn, base, team_id)

    def _user_teams(self, conn: Connection, user_id: str) -> list[dict[str, Any]]:
        """Every team the user acts in: memberships, plus each team of an org it owns/admins."""
        out: dict[str, dict[str, Any]] = {}
        for r in conn.execute(TEAMS_AS_MEMBER, {"u": user_id}):
            out[r[0]] = {"id": r[0], "name": r[1], "org_id": r[2], "role": r[3]}
        for a in conn.execute(TEAMS_AS_ORG_ADMIN, {"u": user_id}):
            out[a[0]] = {"id": a[0], "name": a[1], "org_id": a[2], "role": TeamRole.ADMIN.value}
        return [out[k] for k in sorted(out)]

    def user_teams(self, user_id: str) -> list[dict[str, Any]]:
        """Every team the user acts in, by id (what signing in answers), read anew."""
        with read_statements(self.engine) as conn:
            return self._user_teams(conn, user_id)

    # --- browser sessions ---------------------------------------------------------------

    def login(self, email: str, password: str) -> Session:
        """Check a password and open a session; Unauthenticated when either is wrong."""
        wrong = Unauthenticated("the email or password is wrong")
        email = clean_email(email)
        with read_transaction(self.engine) as conn:
            row = (
                conn.execute(sa.select(t.users).where(t.users.c.email == email)).mappings().first()
            )
        stored = row["password_hash"] if row is not None else None
        try:
            self._passwords.verify(stored or self._no_ones_hash(), password)
        except (VerificationError, InvalidHashError):
            raise wrong from None
        if row is None or not stored:  # no one's hash: no password may open it
            raise wrong
        with read_transaction(self.engine) as conn:
            if is_disabled(conn, row["id"]):  # checked after the hash: the same time
                raise wrong
        token, csrf = new_token(), new_token()
        now = utcnow()
        with write_transaction(self.engine) as conn:
            conn.execute(
                t.sessions.insert().values(
                    id_hash=self.hasher.hash(token),
                    user_id=row["id"],
                    csrf_hash=self.hasher.hash(csrf),
                    created_at=now,
                    expires_at=now + self.session_ttl,
                )
            )
            # Expired sessions are dropped on the way, so the table does not grow forever.
            conn.execute(t.sessions.delete().where(t.sessions.c.expires_at < now))
            teams = self._user_teams(conn, row["id"])
        user = {k: row[k] for k in ("id", "email", "name")}
        user["super_admin"] = bool(row["super_admin"])
        return Session(token=token, csrf_token=csrf, user=user, teams=teams)

    def _no_ones_hash(self) -> str:
        if self._no_one is None:
            self._no_one = self._passwords.hash(new_token())
        return self._no_one

    def logout(self, token: str) -> None:
        with write_transaction(self.engine) as conn:
            conn.execute(t.sessions.delete().where(t.sessions.c.id_hash == self.hasher.hash(token)))

    def principal_for_session(
        self, token: str, *, csrf_token: str | None, mutating: bool, team_header: str | None
    ) -> Principal | None:
        """The principal of a live session cookie, or None.

        ``csrf_ok`` is False when a mutating request lacks the session's CSRF token.
        The active team is ``team_header`` (TeamNotFound when the user cannot act in it),
        else the user's only team; with several and no header, ``team_choice_needed``.
        """
        # One connection: the session, then the user's teams or standing in the team.
        with read_statements(self.engine) as conn:
            row = conn.execute(SESSION_FOR_TOKEN, {"h": self.hasher.hash(token)}).first()
            if row is None or utc(row[2]) <= utcnow():
                return None
            user_id = str(row[0])
            csrf_ok = not mutating or (
                csrf_token is not None and self.hasher.matches(csrf_token, str(row[1]))
            )
            base = Principal(
                kind=CredentialKind.SESSION,
                user_id=user_id,
                super_admin=bool(row[3]),
                csrf_ok=csrf_ok,
            )
            if team_header:
                return _in_team(conn, base, team_header)
            teams = [x["id"] for x in self._user_teams(conn, user_id)]
            if len(teams) == 1:
                return _in_team(conn, base, teams[0])
        return replace(base, team_choice_needed=True) if teams else base

    def is_org_member(self, user_id: str, org_id: str) -> bool:
        """Whether the user is a member of ``org_id`` (any role) or of one of its teams."""
        if control_in(org_id):  # no org has such an id
            return False
        in_org = sa.select(t.org_members.c.role).where(
            t.org_members.c.org_id == org_id, t.org_members.c.user_id == user_id
        )
        in_team = (
            sa.select(t.team_members.c.team_id)
            .join(t.teams, t.teams.c.id == t.team_members.c.team_id)
            .where(t.teams.c.org_id == org_id, t.team_members.c.user_id == user_id)
        )
        with read_transaction(self.engine) as conn:
            return any(conn.execute(q).first() is not None for q in (in_org, in_team))
