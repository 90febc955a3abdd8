"""A member's own API keys ("Your API keys") and the page of a password-reset link.

Over :class:`~keepstone.service.own_keys.OwnKeys` (a signed-in session's own keys, each
for a team the user acts in; the key is shown once, on the page that answers its
creation) and :class:`~keepstone.service.admin.AdminService`'s reset-link use-cases (the
link's token is the credential: its page needs no session).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from keepstone.errors import CsrfRequired, KeepstoneError, Unauthenticated
from keepstone.principal import Principal
from keepstone.service.own_keys import OwnKeys
from keepstone.web.admin import admin_of, shown_once
from keepstone.web.core import UiRoute, page, posted, see_other, signed_in, text, url
from keepstone.web.pages import off_loop

router = APIRouter(include_in_schema=False, route_class=UiRoute)


def _keys(request: Request) -> OwnKeys:
    service: OwnKeys = request.app.state.own_keys
    return service


def _keys_page(
    request: Request, who: Principal, cursor: str = "", error: str = "", status: int = 200
) -> Response:
    listed = _keys(request).list(who, cursor=cursor or None)
    teams = request.app.state.credentials.teams_of(who)
    names = {t.id: t.name for t in teams}
    return page(
        request,
        "keys.html",
        status,
        keys=listed,
        teams=teams,
        team_names=names,
        error=error,
        next_link=lambda c: url("/keys", cursor=c),
    )


@router.get("/keys")
def keys_page(request: Request, cursor: str = "") -> Response:
    """The user's own keys, revoked ones too, and the form that mints one."""
    return _keys_page(request, signed_in(request), cursor)


@router.post("/keys")
async def create_key(request: Request) -> Response:
    """Mint a key of the user's and show it, once, on the page this POST answers."""
    who, form = await posted(request)
    team_id, name = text(form, "team_id"), text(form, "name")
    try:
        created = await off_loop(lambda: _keys(request).create(who, team_id, name))
    except (Unauthenticated, CsrfRequired):
        raise
    except KeepstoneError as exc:
        message, status = exc.message, exc.status
        return await off_loop(lambda: _keys_page(request, who, error=message, status=status))
    return shown_once(
        request,
        "key_created.html",
        created=created,
        name=name.strip(),
        back="/keys",
        back_label="Back to your API keys",
    )


@router.post("/keys/revoke")
async def revoke_key(request: Request) -> Response:
    who, form = await posted(request)
    key_id = text(form, "key_id")
    try:
        await off_loop(lambda: _keys(request).revoke(who, key_id))
    except (Unauthenticated, CsrfRequired):
        raise
    except KeepstoneError as exc:
        message, status = exc.message, exc.status
        return await off_loop(lambda: _keys_page(request, who, error=message, status=status))
    return see_other("/keys")


# --- a password-reset link's page ---------------------------------------------------------------


@router.get("/reset/{token}")
def reset_form(request: Request, token: str) -> Response:
    """The form that sets a new password through a live link (404 page otherwise)."""
    email = admin_of(request).reset_link_email(token)
    response = shown_once(request, "reset.html", email=email, token=token, error="", who=None)
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


@router.post("/reset/{token}")
async def reset(request: Request, token: str) -> Response:
    """Set the new password (typed twice) and spend the link; then sign in with it."""
    form = await request.form()
    password, again = text(form, "password"), text(form, "again")
    service = admin_of(request)
    if password != again:
        email = await off_loop(lambda: service.reset_link_email(token))
        message = "the two passwords differ; type the same one twice"
        return page(request, "reset.html", 400, email=email, token=token, error=message, who=None)
    try:
        await off_loop(lambda: service.use_reset_link(token, password))
    except KeepstoneError as exc:
        if exc.status == 404:
            raise
        message, status = exc.message, exc.status
        email = await off_loop(lambda: service.reset_link_email(token))
        return page(
            request, "reset.html", status, email=email, token=token, error=message, who=None
        )
    return see_other("/signin?reset=1")
