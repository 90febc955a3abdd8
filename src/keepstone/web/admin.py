"""Administration for super-admins: orgs, teams, users, API keys, quotas, plans, audit.

Over :class:`~keepstone.service.admin.AdminService` and
:class:`~keepstone.service.audit.AuditService`, which refuse anyone without platform
authority (``403``), so these pages decide nothing themselves. A new API key is shown
once, on the page that answers its creation, and never again.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.datastructures import FormData

from keepstone.errors import CsrfRequired, KeepstoneError, Unauthenticated
from keepstone.principal import Principal
from keepstone.service.admin import AdminService
from keepstone.service.audit import AuditService
from keepstone.text import parse_int
from keepstone.web.core import UiRoute, page, posted, see_other, signed_in, text, url
from keepstone.web.pages import off_loop

router = APIRouter(include_in_schema=False, route_class=UiRoute)

PAGE = 20


def admin_of(request: Request) -> AdminService:
    service: AdminService = request.app.state.admin
    return service


def _admin_page(
    request: Request,
    who: Principal,
    *,
    cursors: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
    status: int = 200,
) -> Response:
    service = admin_of(request)
    cursors = cursors or {}
    orgs = service.list_orgs(who, limit=PAGE, cursor=cursors.get("orgs") or None)
    teams = service.list_teams(who, limit=PAGE, cursor=cursors.get("teams") or None)
    users = service.list_users(who, limit=PAGE, cursor=cursors.get("users") or None)
    keys = service.list_api_keys(who, limit=PAGE, cursor=cursors.get("keys") or None)
    return page(
        request,
        "admin.html",
        status,
        orgs=orgs,
        teams=teams,
        users=users,
        keys=keys,
        cursors=cursors,
        errors=errors or {},
        next_link=lambda name, cursor: url("/admin", **{**cursors, name: cursor}),
    )


@router.get("/admin")
def admin(
    request: Request, orgs: str = "", teams: str = "", users: str = "", keys: str = ""
) -> Response:
    """The instance's orgs, teams, users and API keys, a page each, and the forms that
    change them."""
    who = signed_in(request)
    cursors = {"orgs": orgs, "teams": teams, "users": users, "keys": keys}
    return _admin_page(request, who, cursors=cursors)


@router.get("/admin/audit")
def audit(request: Request) -> Response:
    """The audit log of global writes, newest first (the last 200)."""
    who = signed_in(request)
    service: AuditService = request.app.state.audit
    return page(request, "audit.html", events=service.newest_first(who, limit=200))


def _int(form: FormData, name: str, *, optional: bool = False) -> int | None:
    raw = text(form, name).strip()
    if not raw and optional:
        return None
    return parse_int(name, raw, what="a whole number of bytes")


async def _act(
    request: Request, form_name: str, act: Callable[[Principal, FormData], str | None]
) -> Response:
    """Run ``act`` for a POSTed admin form; a refusal re-renders the page with the message
    next to that form. ``act`` may answer a page to go to."""
    who, form = await posted(request)
    try:
        went = await off_loop(lambda: act(who, form))
    except (Unauthenticated, CsrfRequired):
        raise
    except KeepstoneError as exc:
        message, status = exc.message, exc.status
        return await off_loop(
            lambda: _admin_page(request, who, errors={form_name: message}, status=status)
        )
    return see_other(went or "/admin")


@router.post("/admin/orgs")
async def create_org(request: Request) -> Response:
    def act(who: Principal, form: FormData) -> None:
        admin_of(request).create_org(who, text(form, "name"), text(form, "plan", "free"))

    return await _act(request, "org", act)


@router.post("/admin/orgs/plan")
async def org_plan(request: Request) -> Response:
    """An org's plan and memory quota (blank quota: the default)."""

    def act(who: Principal, form: FormData) -> None:
        quota = _int(form, "quota_bytes", optional=True)
        plan = text(form, "plan") or None
        admin_of(request).set_org_quota(who, text(form, "org_id"), quota, plan=plan)

    return await _act(request, "plan", act)


@router.post("/admin/teams")
async def create_team(request: Request) -> Response:
    def act(who: Principal, form: FormData) -> None:
        admin_of(request).create_team(who, text(form, "org_id"), text(form, "name"))

    return await _act(request, "team", act)


@router.post("/admin/members")
async def add_member(request: Request) -> Response:
    def act(who: Principal, form: FormData) -> None:
        admin_of(request).add_team_member(
            who, text(form, "team_id"), text(form, "user_id"), text(form, "role", "member")
        )

    return await _act(request, "member", act)


@router.post("/admin/users")
async def create_user(request: Request) -> Response:
    def act(who: Principal, form: FormData) -> None:
        admin_of(request).create_user(
            who,
            text(form, "email"),
            text(form, "password") or None,
            text(form, "name"),
            super_admin=text(form, "super_admin") == "on",
        )

    return await _act(request, "user", act)


@router.post("/admin/instance")
async def instance_quota(request: Request) -> Response:
    def act(who: Principal, form: FormData) -> None:
        quota = _int(form, "quota_bytes")
        assert quota is not None
        admin_of(request).set_instance_quota(who, quota)

    return await _act(request, "instance", act)


@router.post("/admin/api-keys")
async def create_key(request: Request) -> Response:
    """Mint a key and show it, once, on the page this POST answers."""
    who, form = await posted(request)
    service = admin_of(request)
    user_id, team_id, name = text(form, "user_id"), text(form, "team_id"), text(form, "name")
    try:
        created = await off_loop(lambda: service.create_api_key(who, user_id, team_id, name))
    except (Unauthenticated, CsrfRequired):
        raise
    except KeepstoneError as exc:
        message, status = exc.message, exc.status
        return await off_loop(
            lambda: _admin_page(request, who, errors={"key": message}, status=status)
        )
    response = page(request, "key_created.html", created=created, user_id=user_id, team_id=team_id)
    response.headers["Cache-Control"] = "no-store"
    return response


@router.post("/admin/api-keys/revoke")
async def revoke_key(request: Request) -> Response:
    def act(who: Principal, form: FormData) -> None:
        admin_of(request).revoke_api_key(who, text(form, "key_id"))

    return await _act(request, "revoke", act)
