"""Shared set-up of the records benchmarks: a migrated database with N teams on a
plan that includes memory, memory switched on, one unlimited member in each, and the
records service as the server builds it (with a search limit no benchmark reaches)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.engine import Engine

from cairn.db import upgrade, write_transaction
from cairn.identity import schema as ids
from cairn.identity.keys import load_key_hasher
from cairn.identity.service import IdentityService
from cairn.principal import CredentialKind, Principal, TeamRole
from cairn.records import schema as rschema
from cairn.records.ratelimit import LocalRateLimiter
from cairn.records.sql import SqlRecordStore
from cairn.service.records import RecordService, build_record_service

ORG = "org_bench"
PLAN = "enterprise"


@dataclass(frozen=True)
class BenchWorld:
    """The records service, the SQL store under it, and (team id, member) per team.

    Each member is the :class:`Principal` an API key of that team resolves to (its
    standing read with the key), so a search costs what an API request's search
    costs: no further access query.
    """

    records: RecordService
    store: SqlRecordStore
    teams: list[tuple[str, Principal]]


def bench_world(engine: Engine, teams: int) -> BenchWorld:
    """Create ``teams`` teams of one enterprise org, each with memory on and one
    unlimited member."""
    upgrade(engine, [*ids.MIGRATIONS, *rschema.MIGRATIONS])
    now = datetime.now(UTC)
    team_ids = [f"team_{i:05d}" for i in range(teams)]
    members = {t: f"user_{t}" for t in team_ids}
    with write_transaction(engine) as conn:
        conn.execute(ids.orgs.insert().values(id=ORG, name="bench", plan=PLAN, created_at=now))
        conn.execute(
            ids.teams.insert(),
            [{"id": t, "org_id": ORG, "name": t, "created_at": now} for t in team_ids],
        )
        conn.execute(
            ids.users.insert(),
            [{"id": u, "email": f"{u}@example.com", "created_at": now} for u in members.values()],
        )
        conn.execute(
            ids.team_members.insert(),
            [
                {
                    "team_id": t,
                    "user_id": u,
                    "role": "member",
                    "projects_limited": False,
                    "created_at": now,
                }
                for t, u in members.items()
            ],
        )
    identity = IdentityService(engine, load_key_hasher(engine, None))
    unlimited = LocalRateLimiter(rate=10**9, max_in_flight=10**9)
    records = build_record_service(engine, identity, unlimited)
    for t in team_ids:
        records.set_enabled_as_server(t, True)
    principals = [
        (
            t,
            Principal(
                kind=CredentialKind.API_KEY,
                user_id=u,
                team_id=t,
                org_id=ORG,
                plan=PLAN,
                team_role=TeamRole.MEMBER,
            ),
        )
        for t, u in members.items()
    ]
    return BenchWorld(records, SqlRecordStore(engine), principals)
