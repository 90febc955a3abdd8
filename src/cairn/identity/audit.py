"""The platform audit log: global-space mutations (SPEC §5 "Global")."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from cairn.identity.keys import new_id
from cairn.identity.schema import audit_events
from cairn.service import AuditEvent
from cairn.store.db import read_transaction, utcnow, write_transaction


def record(engine: Engine, event: AuditEvent) -> None:
    with write_transaction(engine) as conn:
        conn.execute(
            audit_events.insert().values(
                id=new_id("evt"),
                at=utcnow(),
                action=event.action,
                actor=event.actor,
                space_id=event.space_id,
                path=event.path,
            )
        )


def sink(engine: Engine) -> Callable[[AuditEvent], None]:
    """An audit sink for :class:`cairn.service.SpaceService` writing to ``engine``."""

    def _sink(event: AuditEvent) -> None:
        record(engine, event)

    return _sink


def newest_first(engine: Engine, limit: int = 100) -> list[dict[str, Any]]:
    with read_transaction(engine) as conn:
        rows = conn.execute(
            sa.select(audit_events)
            .order_by(audit_events.c.at.desc(), audit_events.c.id.desc())
            .limit(limit)
        ).mappings()
        out = []
        for r in rows:
            at = r["at"] if r["at"].tzinfo else r["at"].replace(tzinfo=UTC)
            out.append(
                {
                    "id": r["id"],
                    "at": at.isoformat(),
                    "action": r["action"],
                    "actor": r["actor"],
                    "space_id": r["space_id"],
                    "path": r["path"],
                }
            )
        return out
