"""Fixtures of the records tests: one engine per backend, and a small team world.

The ``engine`` fixture is parametrized over SQLite and PostgreSQL (a fresh database
per test module); tests share it and isolate themselves by creating their own org
and team ids (:func:`make_world`). :func:`records_of` is the records service over an
engine as the server builds it (with a search limit no test reaches), and
:func:`access_of` the access model it uses.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from keepstone.db import make_engine, upgrade, write_transaction
from keepstone.identity import schema as ids
from keepstone.identity.keys import load_key_hasher
from keepstone.identity.service import IdentityService
from keepstone.principal import CredentialKind, Principal
from keepstone.records import schema as rschema
from keepstone.records.ratelimit import LocalRateLimiter, RateLimiter
from keepstone.schema import upgrade_all
from keepstone.service.access import Access
from keepstone.service.records import RecordService, build_record_service
from tests.conftest import create_postgres_database, drop_postgres_database

MIGRATIONS = [*ids.MIGRATIONS, *rschema.MIGRATIONS]

_identities: weakref.WeakKeyDictionary[Engine, IdentityService] = weakref.WeakKeyDictionary()
_services: weakref.WeakKeyDictionary[Engine, RecordService] = weakref.WeakKeyDictionary()


def identity_of(engine: Engine) -> IdentityService:
    """The identity service over ``engine`` (one per engine: its key hasher is read once)."""
    identity = _identities.get(engine)
    if identity is None:
        identity = _identities[engine] = IdentityService(engine, load_key_hasher(engine, None))
    return identity


def access_of(engine: Engine) -> Access:
    """The access model over ``engine``'s identity tables."""
    return Access(identity_of(engine))


def records_of(engine: Engine, limiter: RateLimiter | None = None) -> RecordService:
    """The records service over ``engine``, as the server builds it; without
    ``limiter``, one shared service whose search limit no test reaches."""
    if limiter is not None:
        return build_record_service(engine, identity_of(engine), limiter)
    service = _services.get(engine)
    if service is None:
        unlimited = LocalRateLimiter(rate=10**9, max_in_flight=10**9)
        service = _services[engine] = build_record_service(engine, identity_of(engine), unlimited)
    return service


def open_engine(backend: str, tmp_dir: str) -> tuple[Engine, str]:
    if backend == "sqlite":
        url = f"sqlite:///{tmp_dir}/records.db"
    else:
        url = create_postgres_database()
    engine = make_engine(url)
    upgrade(engine, MIGRATIONS)
    return engine, url


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    backend = str(request.param)
    eng, url = open_engine(backend, str(tmp_path_factory.mktemp("records")))
    try:
        yield eng
    finally:
        eng.dispose()
        if backend == "postgres":
            drop_postgres_database(url)


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


@dataclass
class World:
    """One org with one team, two projects (one repo each) and a user per role.

    ``limited`` is a team member limited to project A; ``member`` is unlimited;
    ``owner`` and ``admin`` are org owner/admin without a team membership row;
    ``outsider`` belongs to another team of another org.
    """

    engine: Engine
    org_id: str
    team_id: str
    project_a: str
    project_b: str
    repo_a: str
    repo_b: str
    owner: str
    admin: str
    member: str
    limited: str
    viewer: str
    other_team: str
    other_repo: str
    outsider: str

    @property
    def records(self) -> RecordService:
        return records_of(self.engine)

    def principal(
        self, user: str, kind: CredentialKind = CredentialKind.API_KEY, *, csrf_ok: bool = True
    ) -> Principal:
        team = self.other_team if user == self.outsider else self.team_id
        return Principal(kind=kind, user_id=user, team_id=team, csrf_ok=csrf_ok)


def make_world(engine: Engine, *, plan: str = "pro_plus", enabled: bool = True) -> World:
    now = datetime.now(UTC)
    org, other_org = _id("org"), _id("org")
    team, other_team = _id("team"), _id("team")
    pa, pb, po = _id("proj"), _id("proj"), _id("proj")
    ra, rb, ro = _id("repo"), _id("repo"), _id("repo")
    users = {
        name: _id("user") for name in ("owner", "admin", "member", "limited", "viewer", "outsider")
    }
    with write_transaction(engine) as conn:
        conn.execute(
            ids.orgs.insert(),
            [
                {"id": org, "name": "Acme", "plan": plan, "created_at": now},
                {"id": other_org, "name": "Other", "plan": "enterprise", "created_at": now},
            ],
        )
        conn.execute(
            ids.users.insert(),
            [{"id": u, "email": f"{u}@example.com", "created_at": now} for u in users.values()],
        )
        conn.execute(
            ids.teams.insert(),
            [
                {"id": team, "org_id": org, "name": "core", "created_at": now},
                {"id": other_team, "org_id": other_org, "name": "other", "created_at": now},
            ],
        )
        conn.execute(
            ids.org_members.insert(),
            [
                {"org_id": org, "user_id": users["owner"], "role": "owner"},
                {"org_id": org, "user_id": users["admin"], "role": "admin"},
                {"org_id": org, "user_id": users["member"], "role": "member"},
                {"org_id": other_org, "user_id": users["outsider"], "role": "member"},
            ],
        )
        conn.execute(
            ids.team_members.insert(),
            [
                {
                    "team_id": team,
                    "user_id": users["member"],
                    "role": "member",
                    "projects_limited": False,
                    "created_at": now,
                },
                {
                    "team_id": team,
                    "user_id": users["limited"],
                    "role": "member",
                    "projects_limited": True,
                    "created_at": now,
                },
                {
                    "team_id": team,
                    "user_id": users["viewer"],
                    "role": "viewer",
                    "projects_limited": False,
                    "created_at": now,
                },
                {
                    "team_id": other_team,
                    "user_id": users["outsider"],
                    "role": "member",
                    "projects_limited": False,
                    "created_at": now,
                },
            ],
        )
        conn.execute(
            ids.team_member_projects.insert(),
            [{"team_id": team, "user_id": users["limited"], "project_id": pa}],
        )
        conn.execute(
            ids.projects.insert(),
            [
                {"team_id": team, "id": pa, "name": "a", "created_at": now},
                {"team_id": team, "id": pb, "name": "b", "created_at": now},
                {"team_id": other_team, "id": po, "name": "o", "created_at": now},
            ],
        )
        conn.execute(
            ids.repos.insert(),
            [
                {"team_id": team, "id": ra, "project_id": pa, "name": "ra", "created_at": now},
                {"team_id": team, "id": rb, "project_id": pb, "name": "rb", "created_at": now},
                {
                    "team_id": other_team,
                    "id": ro,
                    "project_id": po,
                    "name": "ro",
                    "created_at": now,
                },
            ],
        )
    if enabled:
        records_of(engine).set_enabled_as_server(team, True)
        records_of(engine).set_enabled_as_server(other_team, True)
    return World(
        engine,
        org,
        team,
        pa,
        pb,
        ra,
        rb,
        users["owner"],
        users["admin"],
        users["member"],
        users["limited"],
        users["viewer"],
        other_team,
        ro,
        users["outsider"],
    )


def remove_member(engine: Engine, team_id: str, user_id: str) -> None:
    with write_transaction(engine) as conn:
        conn.execute(
            ids.team_members.delete().where(
                ids.team_members.c.team_id == team_id, ids.team_members.c.user_id == user_id
            )
        )


def set_plan(engine: Engine, org_id: str, plan: str) -> None:
    with write_transaction(engine) as conn:
        conn.execute(sa.update(ids.orgs).where(ids.orgs.c.id == org_id).values(plan=plan))


@pytest.fixture
def world(engine: Engine) -> World:
    return make_world(engine)


def listed_records(url: str, team: str, key: str) -> dict[str, str]:
    """Every record of ``team`` on the server at ``url`` as the member with API ``key``
    lists them, page by page: id -> the listed (fenced) text."""
    import httpx

    stored: dict[str, str] = {}
    token: str | None = None
    with httpx.Client(base_url=url, timeout=30) as http:
        while True:
            r = http.get(
                f"/api/teams/{team}/memory",
                params={"next_token": token} if token else None,
                headers={"Authorization": f"Bearer {key}"},
            )
            assert r.status_code == 200, r.text
            page = r.json()
            stored |= {rec["id"]: rec["text"] for rec in page["records"]}
            token = page["next_token"]
            if token is None:
                return stored


def world_with_key(database: str) -> tuple[World, str]:
    """A :func:`make_world` in the database at ``database`` (migrated first), for a server
    to be started on it, and an API key of its member; the engine is disposed of."""
    engine = make_engine(database)
    upgrade_all(engine)
    world = make_world(engine)
    key = identity_of(engine).create_api_key(world.member, world.team_id)[1]
    engine.dispose()
    return world, key


@contextmanager
def ranking_reads(engine: Engine) -> Iterator[list[str]]:
    """The reads of a team's ranking rows on ``engine`` as they run: ``"whole"``,
    ``"since"`` (the rows stored after a version) and ``"removed"`` (the records removed
    since)."""
    seen: list[str] = []

    def spy(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if "records.terms AS" in statement or "records.terms," in statement:
            seen.append("since" if "records.terms_version >" in statement else "whole")
        elif statement.lstrip().startswith("SELECT") and "FROM record_removals" in statement:
            seen.append("removed")

    event.listen(engine, "before_cursor_execute", spy)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", spy)
