"""Org-wide figures for the org's members (SPEC §5)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from cairn.api.deps import Principal, State, identity_of
from cairn.api.routes.common import AUTH_ERRORS, error_responses
from cairn.errors import NotFound, StoreUnavailable
from cairn.quota import DEFAULT_TEAM_AGGREGATE_QUOTA

router = APIRouter(tags=["orgs"])


class TeamUsageOut(BaseModel):
    team_id: str
    used_bytes: int
    quota_bytes: int


class OrgUsageOut(BaseModel):
    memory_used_bytes: int
    effective_memory_quota_bytes: int
    teams: list[TeamUsageOut]


@router.get(
    "/api/orgs/{id}/usage",
    response_model=OrgUsageOut,
    responses=error_responses(*AUTH_ERRORS),
    summary="Memory used by each team of an org",
)
def org_usage(id: str, who: Principal, state: State) -> dict[str, Any]:
    identity = identity_of(state)
    # A non-member learns nothing, not even that the org exists.
    if not (who.platform_authority or identity.is_org_member(who, id)):
        raise NotFound(f"no org with id {id!r}")
    org = identity.get_org(id)
    team_usage = getattr(state.store, "team_usage", None)
    if team_usage is None:
        raise StoreUnavailable("this store keeps no per-team counters")
    teams = []
    for team_id in identity.org_team_ids(id):
        used, quota = team_usage(team_id)
        teams.append({"team_id": team_id, "used_bytes": int(used), "quota_bytes": int(quota)})
    quota = org["memory_quota_bytes"]
    return {
        "memory_used_bytes": sum(t["used_bytes"] for t in teams),
        "effective_memory_quota_bytes": DEFAULT_TEAM_AGGREGATE_QUOTA if quota is None else quota,
        "teams": teams,
    }
