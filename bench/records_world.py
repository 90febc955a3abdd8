"""Shared set-up of the records benchmarks: a migrated database with N teams on a
plan that includes memory, memory switched on."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.engine import Engine

from cairn.identity import schema as ids
from cairn.records import schema as rschema
from cairn.records.access import TeamAccess
from cairn.records.service import set_enabled
from cairn.store.db import upgrade, write_transaction


def bench_world(engine: Engine, teams: int) -> list[tuple[str, TeamAccess]]:
    """Create ``teams`` teams of one enterprise org; return (team id, full access)."""
    upgrade(engine, [*ids.MIGRATIONS, *rschema.MIGRATIONS])
    now = datetime.now(UTC)
    org = "org_bench"
    team_ids = [f"team_{i:05d}" for i in range(teams)]
    with write_transaction(engine) as conn:
        conn.execute(
            ids.orgs.insert().values(id=org, name="bench", plan="enterprise", created_at=now)
        )
        conn.execute(
            ids.teams.insert(),
            [{"id": t, "org_id": org, "name": t, "created_at": now} for t in team_ids],
        )
    for t in team_ids:
        set_enabled(engine, t, True)
    return [(t, TeamAccess(t, org, "enterprise", None, False)) for t in team_ids]
