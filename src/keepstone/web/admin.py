"""Administration for super-admins: orgs → teams → members, users, API keys, quotas, plans,
audit.

Over :class:`~keepstone.service.admin.AdminService` and
:class:`~keepstone.service.audit.AuditService`, which refuse anyone without platform
authority (``403``), so these pages decide nothing themselves. Things are picked from
lists (links, ``<select>``s), never typed as ids; every page works without JavaScript.
A new API key and a password-reset link are shown once, on the page that answers their
creation, and never again. Quotas are entered in MiB or GiB (the API takes bytes).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.datastructures import FormData

from keepstone.errors import CsrfRequired, InvalidRequest, KeepstoneError, Unauthenticated
from keepstone.principal import Plan, Principal
from keepstone.service.admin import MAX_PAGE, AdminService, CreatedKey, ResetLink
from keepstone.service.audit import AuditService
from keepstone.web.core import UiRoute, page, posted, see_other, signed_in, text, url
from keepstone.web.pages import off_loop

router = APIRouter(include_in_schema=False, route_class=UiRoute)

PAGE = 20
ROLES = ("viewer", "config_editor", "member", "admin")
PLANS = tuple(plan.value for plan in Plan)
#: The units a quota is entered in.
UNITS = {"MiB": 1 << 20, "GiB": 1 << 30}

Render = Callable[[Principal, dict[str, str], int], Response]
T = TypeVar("T")


def shown_once(request: Request, template: str, **context: object) -> Response:
    """A page showing a secret once (a new key, a reset link): never cached."""
    response = page(request, template, **context)
    response.headers["Cache-Control"] = "no-store"
    return response


def admin_of(request: Request) -> AdminService:
    service: AdminService = request.app.state.admin
    return service


def _index(request: Request, cursors: dict[str, str]) -> Render:
    def render(who: Principal, errors: dict[str, str], status: int) -> Response:
        service = admin_of(request)
        orgs = service.list_orgs(who, limit=PAGE, cursor=cursors.get("orgs") or None)
        users = service.list_users(who, limit=PAGE, cursor=cursors.get("users") or None)
        keys = service.list_api_keys(who, limit=PAGE, cursor=cursors.get("keys") or None)
        team_names = {t: service.team(who, t).name for t in {k.team_id for k in keys.items}}
        return page(
            request,
            "admin.html",
            status,
            orgs=orgs,
            users=users,
            keys=keys,
            team_names=team_names,
            plans=PLANS,
            errors=errors,
            next_link=lambda name, cursor: url("/admin", **{**cursors, name: cursor}),
        )

    return render


def _org(request: Request, org_id: str, cursor: str = "") -> Render:
    def render(who: Principal, errors: dict[str, str], status: int) -> Response:
        service = admin_of(request)
        org = service.org(who, org_id)
        teams = service.list_teams(who, limit=PAGE, cursor=cursor or None, org_id=org_id)
        return page(
            request,
            "admin_org.html",
            status,
            org=org,
            teams=teams,
            plans=PLANS,
            errors=errors,
            units=UNITS,
            next_link=lambda c: url(f"/admin/orgs/{org_id}", cursor=c),
        )

    return render


def _team(request: Request, team_id: str) -> Render:
    def render(who: Principal, errors: dict[str, str], status: int) -> Response:
        service = admin_of(request)
        team = service.team(who, team_id)
        members = service.team_members(who, team_id)
        keys = service.list_api_keys(who, limit=MAX_PAGE, team_id=team_id)
        users = service.list_users(who, limit=MAX_PAGE)
        ids = {m.user_id for m in members}
        return page(
            request,
            "admin_team.html",
            status,
            team=team,
            members=members,
            keys=keys,
            users=[u for u in users.items if u.id not in ids],
            roles=ROLES,
            errors=errors,
        )

    return render


@router.get("/admin")
def admin(request: Request, orgs: str = "", users: str = "", keys: str = "") -> Response:
    """The instance's orgs (each a link to its teams), users and API keys, a page each,
    and the forms that change them."""
    who = signed_in(request)
    return _index(request, {"orgs": orgs, "users": users, "keys": keys})(who, {}, 200)


@router.get("/admin/orgs/{org_id}")
def org_page(request: Request, org_id: str, cursor: str = "") -> Response:
    """An org: its teams (each a link to its members), plan and quota, deleting it."""
    who = signed_in(request)
    return _org(request, org_id, cursor)(who, {}, 200)


@router.get("/admin/teams/{team_id}")
def team_page(request: Request, team_id: str) -> Response:
    """A team: its members and their roles, its keys, deleting it."""
    who = signed_in(request)
    return _team(request, team_id)(who, {}, 200)


@router.get("/admin/audit")
def audit(request: Request) -> Response:
    """The audit log (global writes, administration), newest first (the last 200)."""
    who = signed_in(request)
    service: AuditService = request.app.state.audit
    return page(request, "audit.html", events=service.newest_first(who, limit=200))


_AMOUNT = re.compile(r"[0-9]{1,16}(?:\.[0-9]{1,6})?")


def quota_bytes(form: FormData, name: str, *, optional: bool = False) -> int | None:
    """A quota entered as an amount (``name``) and a unit (``<name>_unit``: MiB or GiB)."""
    raw = text(form, name).strip()
    if not raw and optional:
        return None
    unit = UNITS.get(text(form, f"{name}_unit", "GiB"))
    if unit is None:
        raise InvalidRequest(f"{name}_unit must be one of: {', '.join(UNITS)}", field=name)
    if not _AMOUNT.fullmatch(raw):  # ASCII digits only, as every number (keepstone.text)
        raise InvalidRequest(
            f"{name} must be a number from 0 up of MiB or GiB, such as 512 or 1.5", field=name
        )
    amount = Decimal(raw)
    if amount > 2**40:
        raise InvalidRequest(f"{name} must be a number from 0 up, such as 512 or 1.5", field=name)
    return int(amount * unit)


async def _attempt(
    request: Request,
    form_name: str,
    act: Callable[[Principal, FormData], T],
    back: Callable[[FormData], Render],
    answer: Callable[[FormData, T], Response],
) -> Response:
    """Run ``act`` for a POSTed admin form and ``answer`` with what it made; a refusal
    re-renders the form's page (``back``) with the message next to that form."""
    who, form = await posted(request)
    try:
        made = await off_loop(lambda: act(who, form))
    except (Unauthenticated, CsrfRequired):
        raise
    except KeepstoneError as exc:
        message, status = exc.message, exc.status
        render = back(form)
        return await off_loop(lambda: render(who, {form_name: message}, status))
    return answer(form, made)


async def _act(
    request: Request,
    form_name: str,
    act: Callable[[Principal, FormData], str | None],
    back: Callable[[FormData], Render],
) -> Response:
    """Run ``act`` for a POSTed admin form, then go to the page it answers (or back to
    the admin page); a refusal re-renders the form's page as :func:`_attempt` does."""
    return await _attempt(
        request, form_name, act, back, lambda _form, went: see_other(went or "/admin")
    )


def _to_index(request: Request) -> Callable[[FormData], Render]:
    return lambda _form: _index(request, {})


def _to_org(request: Request) -> Callable[[FormData], Render]:
    return lambda form: _org(request, text(form, "org_id"))


def _to_team(request: Request) -> Callable[[FormData], Render]:
    return lambda form: _team(request, text(form, "team_id"))


@router.post("/admin/orgs")
async def create_org(request: Request) -> Response:
    def act(who: Principal, form: FormData) -> str:
        org_id = admin_of(request).create_org(who, text(form, "name"), text(form, "plan", "free"))
        return f"/admin/orgs/{org_id}"

    return await _act(request, "org", act, _to_index(request))


@router.post("/admin/orgs/plan")
async def org_plan(request: Request) -> Response:
    """An org's plan and memory quota (blank quota: the default)."""

    def act(who: Principal, form: FormData) -> str:
        quota = quota_bytes(form, "quota", optional=True)
        org_id = text(form, "org_id")
        admin_of(request).set_org_quota(who, org_id, quota, plan=text(form, "plan") or None)
        return f"/admin/orgs/{org_id}"

    return await _act(request, "plan", act, _to_org(request))


@router.post("/admin/teams")
async def create_team(request: Request) -> Response:
    def act(who: Principal, form: FormData) -> str:
        team_id = admin_of(request).create_team(who, text(form, "org_id"), text(form, "name"))
        return f"/admin/teams/{team_id}"

    return await _act(request, "team", act, _to_org(request))


@router.post("/admin/teams/delete")
async def delete_team(request: Request) -> Response:
    """Delete a team once its name is typed; back to its org."""

    def act(who: Principal, form: FormData) -> str:
        service, team_id = admin_of(request), text(form, "team_id")
        org_id = service.team(who, team_id).org_id
        service.delete_team(who, team_id, text(form, "confirm"))
        return f"/admin/orgs/{org_id}"

    return await _act(request, "delete-team", act, _to_team(request))


def _to_team_page(form: FormData) -> str:
    return f"/admin/teams/{text(form, 'team_id')}"


@router.post("/admin/members")
async def add_member(request: Request) -> Response:
    def act(who: Principal, form: FormData) -> str:
        admin_of(request).add_team_member(
            who, text(form, "team_id"), text(form, "user_id"), text(form, "role", "member")
        )
        return _to_team_page(form)

    return await _act(request, "member", act, _to_team(request))


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

    return await _act(request, "user", act, _to_index(request))


@router.post("/admin/users/reset")
async def reset_password(request: Request) -> Response:
    """Make a one-time password-reset link and show it, once, on the page this answers."""

    def act(who: Principal, form: FormData) -> ResetLink:
        return admin_of(request).reset_password(who, text(form, "user_id"))

    def answer(_form: FormData, link: ResetLink) -> Response:
        address = str(request.base_url).rstrip("/") + f"/reset/{link.token}"
        return shown_once(request, "admin_reset_link.html", link=link, address=address)

    return await _attempt(request, "users", act, _to_index(request), answer)


@router.post("/admin/instance")
async def instance_quota(request: Request) -> Response:
    def act(who: Principal, form: FormData) -> None:
        quota = quota_bytes(form, "quota")
        assert quota is not None
        admin_of(request).set_instance_quota(who, quota)

    return await _act(request, "instance", act, _to_index(request))


@router.post("/admin/api-keys")
async def create_key(request: Request) -> Response:
    """Mint a key and show it, once, on the page this POST answers."""

    def act(who: Principal, form: FormData) -> CreatedKey:
        return admin_of(request).create_api_key(
            who, text(form, "user_id"), text(form, "team_id"), text(form, "name")
        )

    def answer(form: FormData, created: CreatedKey) -> Response:
        return shown_once(
            request,
            "key_created.html",
            created=created,
            name=text(form, "name").strip(),
            back=_to_team_page(form),
            back_label="Back to the team",
        )

    return await _attempt(request, "key", act, _to_team(request), answer)


@router.post("/admin/api-keys/revoke")
async def revoke_key(request: Request) -> Response:
    def act(who: Principal, form: FormData) -> str | None:
        admin_of(request).revoke_api_key(who, text(form, "key_id"))
        team_id = text(form, "team_id")
        return f"/admin/teams/{team_id}" if team_id else None

    return await _act(request, "revoke", act, _to_index(request))


@dataclass(frozen=True)
class _OneCall:
    """A form that calls one use-case with the fields it posts, in that order, then goes
    to ``then``'s page (None: the admin page); a refusal re-renders ``back``'s page next to
    the form (``form_name``). The use-case's name is the route's."""

    path: str
    form_name: str
    use_case: Callable[..., None]
    fields: tuple[str, ...]
    back: Callable[[Request], Callable[[FormData], Render]]
    then: Callable[[FormData], str] | None = None

    async def endpoint(self, request: Request) -> Response:
        def act(who: Principal, form: FormData) -> str | None:
            self.use_case(admin_of(request), who, *(text(form, name) for name in self.fields))
            return None if self.then is None else self.then(form)

        return await _act(request, self.form_name, act, self.back(request))


_ONE_CALL_FORMS = (
    _OneCall("/admin/orgs/delete", "delete-org", AdminService.delete_org, ("org_id",), _to_org),
    _OneCall("/admin/users/disable", "users", AdminService.disable_user, ("user_id",), _to_index),
    _OneCall("/admin/users/enable", "users", AdminService.enable_user, ("user_id",), _to_index),
    _OneCall(
        "/admin/members/role",
        "members",
        AdminService.set_team_role,
        ("team_id", "user_id", "role"),
        _to_team,
        _to_team_page,
    ),
    _OneCall(
        "/admin/members/remove",
        "members",
        AdminService.remove_team_member,
        ("team_id", "user_id"),
        _to_team,
        _to_team_page,
    ),
)
for _form in _ONE_CALL_FORMS:
    router.add_api_route(_form.path, _form.endpoint, methods=["POST"], name=_form.use_case.__name__)
