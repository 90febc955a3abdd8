"""The admin API (SPEC §7.3): super-admins and the admin token only.

Thin over :class:`cairn.identity.service.IdentityService` (the operator CLI calls
the same methods) and the store's quota counters.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from cairn.api.deps import State, authenticate, identity_of, require_csrf
from cairn.api.routes.common import AUTH_ERRORS, error_responses
from cairn.errors import Forbidden
from cairn.identity import principal as p
from cairn.identity.quotas import set_instance_quota, set_org_quota

router = APIRouter(prefix="/api/admin", tags=["admin"])


def require_admin(request: Request) -> p.Principal:
    """A super-admin or the admin token; 401 unsigned, 403 forbidden for anyone else."""
    who = authenticate(request)
    if not who.platform_authority:
        raise Forbidden("the admin API is for super-admins and the admin token")
    if request.method not in ("GET", "HEAD"):
        require_csrf(who)
    return who


Admin = Annotated[p.Principal, Depends(require_admin)]
ERRORS = error_responses(*AUTH_ERRORS, 409)

Short = Annotated[str, Field(max_length=256)]
Id = Annotated[str, Field(min_length=1, max_length=64)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UserIn(_Body):
    email: Annotated[str, Field(min_length=3, max_length=320)]
    password: Annotated[str | None, Field(max_length=1024)] = None
    name: Short = ""
    super_admin: bool = False


class OrgIn(_Body):
    name: Annotated[str, Field(min_length=1, max_length=256)]
    plan: str = "free"


class OrgPatchIn(_Body):
    memory_quota_bytes: Annotated[int | None, Field(ge=0, le=2**62)] = None
    plan: str | None = None


class OrgMemberIn(_Body):
    user_id: Id
    role: str


class TeamIn(_Body):
    org_id: Id
    name: Annotated[str, Field(min_length=1, max_length=256)]


class TeamMemberIn(_Body):
    user_id: Id
    role: str
    projects: Annotated[list[Id] | None, Field(max_length=1000)] = None


class NameIn(_Body):
    name: Annotated[str, Field(min_length=1, max_length=256)]


class ApiKeyIn(_Body):
    user_id: Id
    team_id: Id
    name: Short = ""


class InstanceIn(_Body):
    memory_quota_bytes: Annotated[int, Field(ge=0, le=2**62)]


class IdOut(BaseModel):
    id: str


class KeyOut(BaseModel):
    id: str
    key: str


class OrgOut(BaseModel):
    id: str
    name: str
    plan: str
    memory_quota_bytes: int | None
    teams_updated: list[str]
    teams_failed: list[str]


class MemberOut(BaseModel):
    user_id: str
    role: str


class InstanceOut(BaseModel):
    memory_quota_bytes: int


class AuditEventOut(BaseModel):
    id: str
    at: str
    action: str
    actor: str
    space_id: str
    path: str


class AuditOut(BaseModel):
    events: list[AuditEventOut]


@router.post("/users", status_code=201, response_model=IdOut, responses=ERRORS)
def create_user(body: UserIn, who: Admin, state: State) -> dict[str, Any]:
    uid = identity_of(state).create_user(body.email, body.password, body.name, body.super_admin)
    return {"id": uid}


@router.post("/orgs", status_code=201, response_model=IdOut, responses=ERRORS)
def create_org(body: OrgIn, who: Admin, state: State) -> dict[str, Any]:
    return {"id": identity_of(state).create_org(body.name, body.plan)}


@router.patch("/orgs/{id}", response_model=OrgOut, responses=ERRORS)
def patch_org(id: str, body: OrgPatchIn, who: Admin, state: State) -> dict[str, Any]:
    identity = identity_of(state)
    if "memory_quota_bytes" in body.model_fields_set:
        return set_org_quota(identity, state.store, id, body.memory_quota_bytes, plan=body.plan)
    org = identity.update_org(id, plan=body.plan)
    return {**org, "teams_updated": [], "teams_failed": []}


@router.post("/orgs/{id}/members", status_code=201, response_model=MemberOut, responses=ERRORS)
def add_org_member(id: str, body: OrgMemberIn, who: Admin, state: State) -> dict[str, Any]:
    identity_of(state).add_org_member(id, body.user_id, body.role)
    return {"user_id": body.user_id, "role": body.role}


@router.post("/teams", status_code=201, response_model=IdOut, responses=ERRORS)
def create_team(body: TeamIn, who: Admin, state: State) -> dict[str, Any]:
    return {"id": identity_of(state).create_team(body.org_id, body.name)}


@router.post("/teams/{id}/members", status_code=201, response_model=MemberOut, responses=ERRORS)
def add_team_member(id: str, body: TeamMemberIn, who: Admin, state: State) -> dict[str, Any]:
    identity_of(state).add_team_member(id, body.user_id, body.role, body.projects)
    return {"user_id": body.user_id, "role": body.role}


@router.delete(
    "/teams/{id}/members/{user_id}", status_code=204, response_class=Response, responses=ERRORS
)
def remove_team_member(id: str, user_id: str, who: Admin, state: State) -> Response:
    identity_of(state).remove_team_member(id, user_id)
    return Response(status_code=204)


@router.post("/teams/{id}/projects", status_code=201, response_model=IdOut, responses=ERRORS)
def create_project(id: str, body: NameIn, who: Admin, state: State) -> dict[str, Any]:
    return {"id": identity_of(state).create_project(id, body.name)}


@router.post("/projects/{id}/repos", status_code=201, response_model=IdOut, responses=ERRORS)
def create_repo(id: str, body: NameIn, who: Admin, state: State) -> dict[str, Any]:
    return {"id": identity_of(state).create_repo(id, body.name)}


@router.post("/api-keys", status_code=201, response_model=KeyOut, responses=ERRORS)
def create_api_key(body: ApiKeyIn, who: Admin, state: State) -> dict[str, Any]:
    key_id, key = identity_of(state).create_api_key(body.user_id, body.team_id, body.name)
    return {"id": key_id, "key": key}


@router.delete("/api-keys/{id}", status_code=204, response_class=Response, responses=ERRORS)
def revoke_api_key(id: str, who: Admin, state: State) -> Response:
    identity_of(state).revoke_api_key(id)
    return Response(status_code=204)


@router.patch("/instance", response_model=InstanceOut, responses=ERRORS)
def patch_instance(body: InstanceIn, who: Admin, state: State) -> dict[str, Any]:
    set_instance_quota(state.store, body.memory_quota_bytes)
    return {"memory_quota_bytes": body.memory_quota_bytes}


@router.get("/audit", response_model=AuditOut, responses=ERRORS)
def audit(
    who: Admin,
    state: State,
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many events.")] = 100,
) -> dict[str, Any]:
    from cairn.identity import audit as audit_log

    return {"events": audit_log.newest_first(state.engine, limit)}
