"""The admin API (SPEC §7.3): super-admins and the admin token only.

Thin over :class:`keepstone.service.admin.AdminService` (the operator CLI calls the same
use-cases) and :class:`keepstone.service.audit.AuditService`; each use-case decides
itself who may call it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from keepstone.api.deps import Principal
from keepstone.api.routes.common import AUTH_ERRORS, WholeNumber, error_responses
from keepstone.principal import Principal as Who
from keepstone.quota import MAX_QUOTA_BYTES
from keepstone.service.access import require_platform_authority
from keepstone.service.admin import (
    DEFAULT_PAGE,
    HISTORY_LIMIT_BOUNDS,
    MAX_PAGE,
    AdminService,
    OrgView,
    Page,
)
from keepstone.service.audit import AuditService


def refuse_early(request: Request, who: Principal) -> None:
    """The use-cases' own authority check, run before the body is parsed, so a caller
    without platform authority gets its 403 and never a 400 about a body it may not send."""
    require_platform_authority(who, mutating=request.method not in ("GET", "HEAD"))


router = APIRouter(prefix="/api/admin", tags=["admin"], dependencies=[Depends(refuse_early)])


# Async on purpose: they do no I/O, and a sync dependency costs a threadpool hop.
async def admin_service(request: Request) -> AdminService:
    """``app.state.admin``: every admin use-case."""
    service: AdminService = request.app.state.admin
    return service


async def audit_service(request: Request) -> AuditService:
    """``app.state.audit``: the platform audit log."""
    service: AuditService = request.app.state.audit
    return service


Admin = Annotated[AdminService, Depends(admin_service)]
Audit = Annotated[AuditService, Depends(audit_service)]
ERRORS = error_responses(*AUTH_ERRORS, 409)

Short = Annotated[str, Field(max_length=256)]
Id = Annotated[str, Field(min_length=1, max_length=64)]
# Strict: JSON true/false is not 1/0 and "5" is not 5 (a quota of `false` bytes is a mistake).
QuotaBytes = Annotated[StrictInt, Field(ge=0, le=MAX_QUOTA_BYTES)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UserIn(_Body):
    email: Annotated[str, Field(min_length=3, max_length=320)]
    password: Annotated[str | None, Field(max_length=1024)] = None
    name: Short = ""
    super_admin: StrictBool = False


class OrgIn(_Body):
    name: Annotated[str, Field(min_length=1, max_length=256)]
    plan: str = "free"


# History limits: whole numbers from 1, within the service's bounds.
HistoryDays = Annotated[StrictInt, Field(ge=1, le=HISTORY_LIMIT_BOUNDS["history_days"])]
HistoryVersions = Annotated[StrictInt, Field(ge=1, le=HISTORY_LIMIT_BOUNDS["history_versions"])]
HistoryBytes = Annotated[StrictInt, Field(ge=1, le=HISTORY_LIMIT_BOUNDS["history_quota_bytes"])]


class OrgPatchIn(_Body):
    memory_quota_bytes: QuotaBytes | None = None
    plan: str | None = None
    # History limits, pushed onto each team; null: the default; absent: as is.
    history_days: HistoryDays | None = None
    history_versions: HistoryVersions | None = None
    history_quota_bytes: HistoryBytes | None = None


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
    # Required (blank is refused by the use-case, naming ``name``).
    name: Short


class RoleIn(_Body):
    role: str


class InstanceIn(_Body):
    memory_quota_bytes: QuotaBytes


class IdOut(BaseModel):
    id: str


class KeyOut(BaseModel):
    id: str
    key: str
    name: str


class ResetOut(BaseModel):
    user_id: str
    token: str
    #: Where the token's page is, on this server (shown to the admin to pass on).
    path: str
    expires_at: str


class TeamEntryOut(BaseModel):
    id: str
    org_id: str
    name: str
    created_at: str


class TeamsOut(BaseModel):
    teams: list[TeamEntryOut]
    next_cursor: str | None


class TeamMemberOut(BaseModel):
    user_id: str
    email: str
    role: str
    #: The projects the membership is limited to; null: every project of the team.
    projects: list[str] | None


class TeamMembersOut(BaseModel):
    members: list[TeamMemberOut]


class OrgOut(BaseModel):
    id: str
    name: str
    plan: str
    memory_quota_bytes: int | None
    teams_updated: list[str]
    teams_failed: list[str]
    # Only in the answer of a PATCH that set them: the limits applied (null: the default).
    history_days: int | None = None
    history_versions: int | None = None
    history_quota_bytes: int | None = None


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


class OrgEntryOut(BaseModel):
    id: str
    name: str
    plan: str
    memory_quota_bytes: int | None
    created_at: str


class OrgsOut(BaseModel):
    orgs: list[OrgEntryOut]
    next_cursor: str | None


class UserEntryOut(BaseModel):
    id: str
    email: str
    name: str
    super_admin: bool
    has_password: bool
    created_at: str
    disabled: bool


class UsersOut(BaseModel):
    users: list[UserEntryOut]
    next_cursor: str | None


class ApiKeyEntryOut(BaseModel):
    id: str
    name: str
    user_id: str
    team_id: str
    created_at: str
    revoked_at: str | None
    revoked: bool


class ApiKeysOut(BaseModel):
    api_keys: list[ApiKeyEntryOut]
    next_cursor: str | None


Limit = Annotated[
    WholeNumber, Query(ge=1, le=MAX_PAGE, description=f"At most this many (1-{MAX_PAGE}).")
]
Cursor = Annotated[
    str | None,
    Query(max_length=512, description="The next_cursor of the previous page; omit for the first."),
]


def page_out(key: str, page: Page[Any]) -> dict[str, Any]:
    """A page of a listing as the API answers it: its items under ``key``, and the cursor."""
    return {key: [item.as_json() for item in page.items], "next_cursor": page.next_cursor}


def _org_out(
    org: OrgView, teams_updated: Sequence[str] = (), teams_failed: Sequence[str] = ()
) -> dict[str, Any]:
    return {**asdict(org), "teams_updated": list(teams_updated), "teams_failed": list(teams_failed)}


@router.post("/users", status_code=201, response_model=IdOut, responses=ERRORS)
def create_user(body: UserIn, who: Principal, admin: Admin) -> dict[str, Any]:
    return {"id": admin.create_user(who, body.email, body.password, body.name, body.super_admin)}


@router.get("/orgs", response_model=OrgsOut, responses=ERRORS, summary="List orgs, paged")
def list_orgs(
    who: Principal, admin: Admin, limit: Limit = DEFAULT_PAGE, cursor: Cursor = None
) -> dict[str, Any]:
    return page_out("orgs", admin.list_orgs(who, limit=limit, cursor=cursor))


@router.get("/users", response_model=UsersOut, responses=ERRORS, summary="List users, paged")
def list_users(
    who: Principal, admin: Admin, limit: Limit = DEFAULT_PAGE, cursor: Cursor = None
) -> dict[str, Any]:
    return page_out("users", admin.list_users(who, limit=limit, cursor=cursor))


@router.get(
    "/teams",
    response_model=TeamsOut,
    responses=ERRORS,
    summary="List teams, paged; only one org's with org_id",
)
def list_teams(
    who: Principal,
    admin: Admin,
    limit: Limit = DEFAULT_PAGE,
    cursor: Cursor = None,
    org_id: Annotated[str | None, Query(max_length=64, description="Only this org's.")] = None,
) -> dict[str, Any]:
    return page_out("teams", admin.list_teams(who, limit=limit, cursor=cursor, org_id=org_id))


@router.get(
    "/teams/{id}/members",
    response_model=TeamMembersOut,
    responses=ERRORS,
    summary="A team's members by email, with role and project limit",
)
def team_members(id: str, who: Principal, admin: Admin) -> dict[str, Any]:
    return {"members": [m.as_json() for m in admin.team_members(who, id)]}


@router.patch("/teams/{id}/members/{user_id}", response_model=MemberOut, responses=ERRORS)
def set_team_role(
    id: str, user_id: str, body: RoleIn, who: Principal, admin: Admin
) -> dict[str, Any]:
    admin.set_team_role(who, id, user_id, body.role)
    return {"user_id": user_id, "role": body.role}


@router.delete(
    "/teams/{id}",
    status_code=204,
    response_class=Response,
    responses=ERRORS,
    summary="Delete a team and everything it holds; confirm= its name",
)
def delete_team(
    id: str,
    who: Principal,
    admin: Admin,
    confirm: Annotated[str, Query(max_length=256, description="The team's name, typed.")] = "",
) -> Response:
    admin.delete_team(who, id, confirm)
    return Response(status_code=204)


def _no_content(act: Callable[[AdminService, Who, str], None]) -> Callable[..., Response]:
    """A route that does ``act`` to the id in its path and answers ``204``."""

    def endpoint(id: str, who: Principal, admin: Admin) -> Response:
        act(admin, who, id)
        return Response(status_code=204)

    return endpoint


#: The routes that do one thing to the id in their path and answer ``204``: the method,
#: the path, the use-case (its name is the route's) and, where its name says too little,
#: a summary.
_NO_CONTENT: tuple[tuple[str, str, Callable[[AdminService, Who, str], None], str], ...] = (
    (
        "DELETE",
        "/orgs/{id}",
        AdminService.delete_org,
        "Delete an org that has no team (409 otherwise)",
    ),
    ("POST", "/users/{id}/disable", AdminService.disable_user, ""),
    ("POST", "/users/{id}/enable", AdminService.enable_user, ""),
    ("DELETE", "/api-keys/{id}", AdminService.revoke_api_key, ""),
)
for _method, _path, _act, _summary in _NO_CONTENT:
    router.add_api_route(
        _path,
        _no_content(_act),
        methods=[_method],
        name=_act.__name__,
        status_code=204,
        response_class=Response,
        responses=ERRORS,
        summary=_summary or None,
    )


@router.post(
    "/users/{id}/password-reset",
    status_code=201,
    response_model=ResetOut,
    responses=ERRORS,
    summary="A one-time password-reset link for the user (single use, expiring)",
)
def password_reset(id: str, who: Principal, admin: Admin) -> dict[str, Any]:
    link = admin.reset_password(who, id)
    return {
        "user_id": id,
        "token": link.token,
        "path": f"/reset/{link.token}",
        "expires_at": link.expires_at.isoformat(),
    }


@router.get(
    "/api-keys",
    response_model=ApiKeysOut,
    responses=ERRORS,
    summary="List API keys (never the key), paged; by user_id and/or team_id",
)
def list_api_keys(
    who: Principal,
    admin: Admin,
    limit: Limit = DEFAULT_PAGE,
    cursor: Cursor = None,
    user_id: Annotated[str | None, Query(max_length=64, description="Only this user's.")] = None,
    team_id: Annotated[str | None, Query(max_length=64, description="Only this team's.")] = None,
) -> dict[str, Any]:
    page = admin.list_api_keys(who, limit=limit, cursor=cursor, user_id=user_id, team_id=team_id)
    return page_out("api_keys", page)


@router.post("/orgs", status_code=201, response_model=IdOut, responses=ERRORS)
def create_org(body: OrgIn, who: Principal, admin: Admin) -> dict[str, Any]:
    return {"id": admin.create_org(who, body.name, body.plan)}


_HISTORY_FIELDS = tuple(HISTORY_LIMIT_BOUNDS)


@router.patch(
    "/orgs/{id}", response_model=OrgOut, response_model_exclude_unset=True, responses=ERRORS
)
def patch_org(id: str, body: OrgPatchIn, who: Principal, admin: Admin) -> dict[str, Any]:
    # An explicit null quota puts the org's teams back at the default; absent leaves it.
    if "memory_quota_bytes" in body.model_fields_set:
        done = admin.set_org_quota(who, id, body.memory_quota_bytes, plan=body.plan)
        out = _org_out(done.applied, done.teams_updated, done.teams_failed)
    else:
        out = _org_out(admin.update_org(who, id, plan=body.plan))
    history = {k: getattr(body, k) for k in _HISTORY_FIELDS if k in body.model_fields_set}
    if history:
        applied = admin.set_org_history_limits(who, id, **history)
        failed = set(out["teams_failed"]) | set(applied.teams_failed)
        everyone = [*out["teams_updated"], *applied.teams_updated, *out["teams_failed"]]
        out["teams_updated"] = sorted({t for t in everyone if t not in failed})
        out["teams_failed"] = sorted(failed)
        out.update(history)
    return out


@router.post("/orgs/{id}/members", status_code=201, response_model=MemberOut, responses=ERRORS)
def add_org_member(id: str, body: OrgMemberIn, who: Principal, admin: Admin) -> dict[str, Any]:
    admin.add_org_member(who, id, body.user_id, body.role)
    return {"user_id": body.user_id, "role": body.role}


@router.post("/teams", status_code=201, response_model=IdOut, responses=ERRORS)
def create_team(body: TeamIn, who: Principal, admin: Admin) -> dict[str, Any]:
    return {"id": admin.create_team(who, body.org_id, body.name)}


@router.post("/teams/{id}/members", status_code=201, response_model=MemberOut, responses=ERRORS)
def add_team_member(id: str, body: TeamMemberIn, who: Principal, admin: Admin) -> dict[str, Any]:
    admin.add_team_member(who, id, body.user_id, body.role, body.projects)
    return {"user_id": body.user_id, "role": body.role}


@router.delete(
    "/teams/{id}/members/{user_id}", status_code=204, response_class=Response, responses=ERRORS
)
def remove_team_member(id: str, user_id: str, who: Principal, admin: Admin) -> Response:
    admin.remove_team_member(who, id, user_id)
    return Response(status_code=204)


@router.post("/teams/{id}/projects", status_code=201, response_model=IdOut, responses=ERRORS)
def create_project(id: str, body: NameIn, who: Principal, admin: Admin) -> dict[str, Any]:
    return {"id": admin.create_project(who, id, body.name)}


@router.post("/projects/{id}/repos", status_code=201, response_model=IdOut, responses=ERRORS)
def create_repo(id: str, body: NameIn, who: Principal, admin: Admin) -> dict[str, Any]:
    return {"id": admin.create_repo(who, id, body.name)}


@router.post("/api-keys", status_code=201, response_model=KeyOut, responses=ERRORS)
def create_api_key(body: ApiKeyIn, who: Principal, admin: Admin) -> dict[str, Any]:
    created = admin.create_api_key(who, body.user_id, body.team_id, body.name)
    return {"id": created.id, "key": created.key, "name": body.name.strip()}


@router.patch("/instance", response_model=InstanceOut, responses=ERRORS)
def patch_instance(body: InstanceIn, who: Principal, admin: Admin) -> dict[str, Any]:
    admin.set_instance_quota(who, body.memory_quota_bytes)
    return {"memory_quota_bytes": body.memory_quota_bytes}


@router.get("/audit", response_model=AuditOut, responses=ERRORS)
def audit(
    who: Principal,
    audit_log: Audit,
    limit: Annotated[
        WholeNumber, Query(ge=1, le=1000, description="At most this many events.")
    ] = 100,
) -> dict[str, Any]:
    events = audit_log.newest_first(who, limit)
    return {"events": [{**asdict(e), "at": e.at.isoformat()} for e in events]}
