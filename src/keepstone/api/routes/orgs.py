"""Org-wide figures for the org's members (SPEC §5).

Thin over :meth:`keepstone.service.admin.AdminService.org_usage`, which decides who may
read them (a non-member gets ``404``, as if the org did not exist).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from keepstone.api.deps import Principal
from keepstone.api.routes.admin import Admin
from keepstone.api.routes.common import AUTH_ERRORS, error_responses

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
def org_usage(id: str, who: Principal, admin: Admin) -> dict[str, Any]:
    return asdict(admin.org_usage(who, id))
