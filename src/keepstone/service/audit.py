"""The platform audit log (SPEC §5 "Global"): every global mutation and every
administration action, newest first.

The store writes a global mutation's row in the mutation's own transaction, and an
administration action's (``admin.*``, what it acted on in ``path``) once the action is
done (:meth:`keepstone.service.admin.AdminService`); this reads them back for the admin
API and the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from keepstone.principal import Principal
from keepstone.service.access import require_platform_authority
from keepstone.store.sql import SqlStore


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One row: ``memory.global_write|global_delete|global_import`` or ``admin.<action>``
    (``key.create|key.revoke`` for a member's own keys) by ``actor``."""

    id: str
    at: datetime
    action: str
    actor: str
    space_id: str
    path: str


class AuditService:
    def __init__(self, store: SqlStore) -> None:
        self._store = store

    def newest_first(self, who: Principal, limit: int = 100) -> list[AuditEvent]:
        require_platform_authority(who, mutating=False)
        return [AuditEvent(**row) for row in self._store.audit_log(limit)]
