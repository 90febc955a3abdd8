"""Shared set-up of the records benchmarks: a migrated database with N teams on a
plan that includes memory, memory switched on, one unlimited member in each, and the
records service as the server builds it (with a search limit no benchmark reaches);
and :func:`save_through`, concurrent saves through a real server."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.engine import Engine

from keepstone.db import upgrade, write_transaction
from keepstone.identity import schema as ids
from keepstone.identity.keys import load_key_hasher
from keepstone.identity.service import IdentityService
from keepstone.principal import CredentialKind, Principal, TeamRole
from keepstone.records import schema as rschema
from keepstone.records.ratelimit import LocalRateLimiter
from keepstone.records.sql import SqlRecordStore
from keepstone.service.records import RecordService, build_record_service

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


# --- saves through a real server ----------------------------------------------------------


async def _saving_client(
    host: str, port: int, path: str, token: str, texts: list[str], latencies: list[float]
) -> None:
    """One keep-alive connection saving ``texts`` one after another, on raw HTTP/1.1 (an
    HTTP library would cost the 2-core machine more CPU than the server's own work)."""
    reader, writer = await asyncio.open_connection(host, port)
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
    try:
        for text in texts:
            body = json.dumps({"text": text}).encode()
            request = f"{head}Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            started = time.perf_counter()
            writer.write(request.encode() + body)
            status = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            answer = await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            if b" 201 " not in status:
                raise SystemExit(f"save answered {status!r}: {answer[:300]!r}")
    finally:
        writer.close()


def save_through(
    base: str, team: str, token: str, texts: list[list[str]]
) -> tuple[float, list[float]]:
    """Save ``texts[i]`` on client ``i``'s connection, all clients at once, through the
    server at ``base``; return (saves per second, sorted latencies in seconds)."""
    host, _, port = base.removeprefix("http://").partition(":")
    path = f"/api/internal/teams/{team}/memory"
    latencies: list[float] = []

    async def run() -> None:
        await asyncio.gather(
            *(_saving_client(host, int(port), path, token, batch, latencies) for batch in texts)
        )

    started = time.perf_counter()
    asyncio.run(run())
    elapsed = time.perf_counter() - started
    return sum(len(batch) for batch in texts) / elapsed, sorted(latencies)
