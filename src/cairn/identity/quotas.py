"""Quota administration that spans identity and the document store (SPEC §4).

Shared by the admin API and ``cairn admin set-quota``.
"""

from __future__ import annotations

import logging
from typing import Any

from cairn.errors import CairnError, StoreUnavailable
from cairn.identity.service import IdentityService
from cairn.quota import DEFAULT_TEAM_AGGREGATE_QUOTA
from cairn.store.base import MemoryStore

log = logging.getLogger("cairn.identity")


def set_org_quota(
    identity: IdentityService,
    store: MemoryStore,
    org_id: str,
    quota_bytes: int | None,
    *,
    plan: str | None = None,
) -> dict[str, Any]:
    """Record the org's quota and write it onto the counter of each of its current teams.

    Best effort per team: the answer lists ``teams_updated`` and ``teams_failed``.
    ``None`` puts the teams back at the 1 GiB default. Teams created later start at
    the default (SPEC §4).
    """
    org = identity.update_org(org_id, plan=plan, memory_quota_bytes=quota_bytes)
    setter = getattr(store, "set_team_quota", None)
    updated: list[str] = []
    failed: list[str] = []
    ceiling = DEFAULT_TEAM_AGGREGATE_QUOTA if quota_bytes is None else quota_bytes
    for team_id in identity.org_team_ids(org_id):
        try:
            if setter is None:
                raise StoreUnavailable("this store keeps no per-team counters")
            setter(team_id, ceiling)
            updated.append(team_id)
        except CairnError as exc:
            log.warning("team quota not updated", extra={"team": team_id, "code": exc.code})
            failed.append(team_id)
    return {**org, "teams_updated": updated, "teams_failed": failed}


def set_instance_quota(store: MemoryStore, quota_bytes: int) -> None:
    """Re-cap the tenant-less counter of global writes."""
    setter = getattr(store, "set_instance_quota", None)
    if setter is None:
        raise StoreUnavailable("this store keeps no instance counter")
    setter(quota_bytes)
