"""The UI's access table: every UI route × credential, like tests/api/policy.py's.

A :class:`UiRow` names one route (method and path template exactly as registered), a
``build`` turning the world into a concrete request that succeeds for an allowed caller,
and ``expect``: credential → :data:`OK`, :data:`SIGN_IN` (a 303 to the sign-in page) or
an exact status. ``tests/web/test_policy.py`` fails on a UI route with no row, and
``tests/api/test_policy.py`` leaves the routes declared here to this table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi.testclient import TestClient

from keepstone.principal import CredentialKind, Principal
from tests.api.world import PASSWORD, SEED_PATH, SPACE, World, tarball, unique

#: The admin token's principal, for a row's set-up that needs an admin use-case.
ADMIN = Principal(kind=CredentialKind.ADMIN_TOKEN)

OK = "ok"
SIGN_IN = "sign-in"
Outcome = str | int

#: The credentials a UI request may carry. ``api_key``: an API key in an Authorization
#: header, which the UI ignores (it signs in by session cookie only); ``no_csrf``: the
#: member's session with its CSRF cookie but no CSRF field in the form; ``outsider``: a
#: member of another team (of another org); ``org_owner``: the owner of the team's org.
UI_CREDENTIALS = ("none", "api_key", "viewer", "member", "admin", "org_owner", "super_admin",
                  "outsider", "no_csrf")  # fmt: skip


@dataclass(frozen=True)
class UiReq:
    method: str
    url: str
    params: dict[str, str] = field(default_factory=dict)
    data: dict[str, str] = field(default_factory=dict)
    files: dict[str, tuple[str, bytes, str]] | None = None


@dataclass(frozen=True)
class UiRow:
    method: str
    path: str
    build: Callable[[World], UiReq]
    expect: dict[str, Outcome]
    variant: str = ""
    #: The request ends the session: sign in anew for it.
    fresh_session: bool = False

    @property
    def id(self) -> str:
        return f"{self.method} {self.path}" + (f" [{self.variant}]" if self.variant else "")


def ui_policy(default: Outcome, **overrides: Outcome) -> dict[str, Outcome]:
    unknown = set(overrides) - set(UI_CREDENTIALS)
    assert not unknown, unknown
    return {cred: overrides.get(cred, default) for cred in UI_CREDENTIALS}


#: A team page: its members read it; anyone else is 404 team_not_found, as in the API.
TEAM_READ = ui_policy(OK, none=SIGN_IN, api_key=SIGN_IN, super_admin=404, outsider=404)
#: A change in a team space: members (not viewers) with the form's CSRF token.
TEAM_WRITE = ui_policy(
    OK, none=SIGN_IN, api_key=SIGN_IN, super_admin=404, outsider=404, viewer=403, no_csrf=403
)
#: Team memory's setting and records: the org's owners and admins only.
TEAM_MANAGE = ui_policy(
    403, none=SIGN_IN, api_key=SIGN_IN, super_admin=404, outsider=404, org_owner=OK
)
#: Saving the edit form or sending the rename form: as :data:`TEAM_WRITE`, but without a
#: session the answer is the sign-in page itself (401), saying nothing was done and
#: carrying what was typed across the sign-in (keepstone.web.resume).
EDIT_SAVE = {**TEAM_WRITE, "none": 401, "api_key": 401}
SIGNED_IN = ui_policy(OK, none=SIGN_IN, api_key=SIGN_IN)
SIGNED_IN_POST = ui_policy(OK, none=SIGN_IN, api_key=SIGN_IN, no_csrf=403)
ADMIN_READ = ui_policy(403, none=SIGN_IN, api_key=SIGN_IN, super_admin=OK)
ADMIN_WRITE = ui_policy(403, none=SIGN_IN, api_key=SIGN_IN, super_admin=OK)
PUBLIC = ui_policy(OK)


def team(suffix: str, /, **params: str) -> Callable[[World], UiReq]:
    return lambda w: UiReq("GET", f"/t/{w.team_id}{suffix}", params=dict(params))


def public(path: str, /, **params: str) -> Callable[[World], UiReq]:
    return lambda _w: UiReq("GET", path, params=dict(params))


DOC = {**SPACE, "path": SEED_PATH}


def _save(w: World) -> UiReq:
    data = {**SPACE, "path": f"{unique('ui')}.md", "content": "# saved", "etag": ""}
    return UiReq("POST", f"/t/{w.team_id}/edit", data=data)


def _seeded(w: World) -> str:
    path = f"{unique('ui')}.md"
    w.seed(path)
    return path


def _rename(w: World) -> UiReq:
    path = _seeded(w)
    data = {**SPACE, "path": path, "to": f"renamed-{path}"}
    return UiReq("POST", f"/t/{w.team_id}/rename", data=data)


def _delete(w: World) -> UiReq:
    return UiReq("POST", f"/t/{w.team_id}/delete", data={**SPACE, "path": _seeded(w)})


def _restore(w: World) -> UiReq:
    """Restore version 1 of a document written twice, on its live etag."""
    path = _seeded(w)
    live = w.store.write(w.team_ref(), path, "seed, edited")
    data = {**SPACE, "path": path, "version": "1", "if_match": live.etag}
    return UiReq("POST", f"/t/{w.team_id}/restore", data=data)


def _import(w: World) -> UiReq:
    archive = tarball({f"{unique('imp')}.md": "# imported"})
    return UiReq(
        "POST",
        f"/t/{w.team_id}/import",
        data={**SPACE, "strategy": "skip"},
        files={"archive": ("a.tar.gz", archive, "application/gzip")},
    )


def _toggle(w: World) -> UiReq:
    return UiReq("POST", f"/t/{w.team_id}/memory", data={"enabled": "on"})


def _record_delete(w: World) -> UiReq:
    records = w.app.state.records
    records.set_enabled_as_server(w.team_id, True)
    saved = records.save_as_server(w.team_id, f"note {unique('r')}")
    return UiReq("POST", f"/t/{w.team_id}/memory/delete", data={"record_id": saved.id})


def _admin_post(path: str, data: Callable[[World], dict[str, str]]) -> Callable[[World], UiReq]:
    return lambda w: UiReq("POST", path, data=data(w))


def _key_body(w: World) -> dict[str, str]:
    user = w.scratch_user()
    w.identity.add_team_member(w.team_id, user, "member")
    return {"user_id": user, "team_id": w.team_id, "name": "k"}


def _revoke(w: World) -> UiReq:
    user = w.scratch_user()
    w.identity.add_team_member(w.team_id, user, "member")
    key_id, _ = w.identity.create_api_key(user, w.team_id)
    return UiReq("POST", "/admin/api-keys/revoke", data={"key_id": key_id})


def _member_of_team(w: World) -> dict[str, str]:
    user = w.scratch_user()
    w.identity.add_team_member(w.team_id, user, "member")
    return {"team_id": w.team_id, "user_id": user}


def _doomed_team(w: World) -> dict[str, str]:
    name = unique("doomed")
    return {"team_id": w.identity.create_team(w.org_id, name), "confirm": name}


def _own_key(w: World) -> UiReq:
    """A key of the member's own: only the member may revoke it (another's is 404)."""
    key_id, _ = w.identity.create_api_key(w.users["member"], w.team_id, "own")
    return UiReq("POST", "/keys/revoke", data={"key_id": key_id})


def _reset(w: World, method: str) -> UiReq:
    token = w.app.state.admin.reset_password(ADMIN, w.scratch_user()).token
    data = {"password": "brand new pw", "again": "brand new pw"} if method == "POST" else {}
    return UiReq(method, f"/reset/{token}", data=data)


def _signin(w: World) -> UiReq:
    return UiReq("POST", "/signin", data={"email": w.emails["login"], "password": PASSWORD})


ROWS: list[UiRow] = [
    UiRow("GET", "/", public("/"), SIGNED_IN),
    UiRow("GET", "/signin", public("/signin"), PUBLIC),
    UiRow("POST", "/signin", _signin, PUBLIC),
    UiRow(
        "POST",
        "/signout",
        lambda _w: UiReq("POST", "/signout"),
        SIGNED_IN_POST,
        fresh_session=True,
    ),
    UiRow("GET", "/teams", public("/teams"), SIGNED_IN),
    UiRow("GET", "/t/{team_id}/spaces", team("/spaces"), TEAM_READ),
    UiRow("GET", "/t/{team_id}/space", team("/space", **SPACE), TEAM_READ),
    UiRow("GET", "/t/{team_id}/doc", team("/doc", **DOC), TEAM_READ),
    UiRow("GET", "/t/{team_id}/edit", team("/edit", **DOC), TEAM_READ),
    UiRow("POST", "/t/{team_id}/edit", _save, EDIT_SAVE),
    UiRow("GET", "/t/{team_id}/rename", team("/rename", **DOC), TEAM_READ),
    UiRow("POST", "/t/{team_id}/rename", _rename, EDIT_SAVE),
    UiRow("GET", "/t/{team_id}/delete", team("/delete", **DOC), TEAM_READ),
    UiRow("POST", "/t/{team_id}/delete", _delete, TEAM_WRITE),
    UiRow("GET", "/t/{team_id}/history", team("/history", **DOC), TEAM_READ),
    UiRow("GET", "/t/{team_id}/version", team("/version", **DOC, version="1"), TEAM_READ),
    UiRow("GET", "/t/{team_id}/diff", team("/diff", **DOC, **{"from": "1", "to": "1"}), TEAM_READ),
    UiRow("POST", "/t/{team_id}/restore", _restore, TEAM_WRITE),
    UiRow("GET", "/t/{team_id}/activity", team("/activity"), TEAM_READ),
    UiRow("GET", "/t/{team_id}/activity", team("/activity", **SPACE), TEAM_READ, "one space"),
    UiRow("GET", "/t/{team_id}/export", team("/export", **SPACE), TEAM_READ),
    UiRow("GET", "/t/{team_id}/import", team("/import", **SPACE), TEAM_READ),
    UiRow("POST", "/t/{team_id}/import", _import, TEAM_WRITE),
    UiRow("GET", "/t/{team_id}/search", team("/search", q="seed"), TEAM_READ),
    UiRow("GET", "/t/{team_id}/memory", team("/memory"), TEAM_READ),
    UiRow("POST", "/t/{team_id}/memory", _toggle, {**TEAM_MANAGE, "no_csrf": 403}),
    UiRow("POST", "/t/{team_id}/memory/delete", _record_delete, {**TEAM_MANAGE, "no_csrf": 403}),
    UiRow("GET", "/admin", public("/admin"), ADMIN_READ),
    UiRow("GET", "/admin/audit", public("/admin/audit"), ADMIN_READ),
    UiRow(
        "POST",
        "/admin/orgs",
        _admin_post("/admin/orgs", lambda _w: {"name": unique("org"), "plan": "free"}),
        ADMIN_WRITE,
    ),
    UiRow(
        "POST",
        "/admin/orgs/plan",
        _admin_post("/admin/orgs/plan", lambda w: {"org_id": w.org_id, "plan": "pro_plus"}),
        ADMIN_WRITE,
    ),
    UiRow(
        "POST",
        "/admin/teams",
        _admin_post("/admin/teams", lambda w: {"org_id": w.org_id, "name": unique("t")}),
        ADMIN_WRITE,
    ),
    UiRow(
        "POST",
        "/admin/members",
        _admin_post(
            "/admin/members",
            lambda w: {"team_id": w.team_id, "user_id": w.scratch_user(), "role": "viewer"},
        ),
        ADMIN_WRITE,
    ),
    UiRow(
        "POST",
        "/admin/users",
        _admin_post("/admin/users", lambda _w: {"email": f"{unique('u')}@example.com"}),
        ADMIN_WRITE,
    ),
    UiRow(
        "POST",
        "/admin/instance",
        _admin_post("/admin/instance", lambda _w: {"quota": "1", "quota_unit": "GiB"}),
        ADMIN_WRITE,
    ),
    UiRow("POST", "/admin/api-keys", _admin_post("/admin/api-keys", _key_body), ADMIN_WRITE),
    UiRow("POST", "/admin/api-keys/revoke", _revoke, ADMIN_WRITE),
    UiRow(
        "GET", "/admin/orgs/{org_id}", lambda w: UiReq("GET", f"/admin/orgs/{w.org_id}"), ADMIN_READ
    ),
    UiRow(
        "GET",
        "/admin/teams/{team_id}",
        lambda w: UiReq("GET", f"/admin/teams/{w.team_id}"),
        ADMIN_READ,
    ),
    UiRow(
        "POST",
        "/admin/orgs/delete",
        _admin_post("/admin/orgs/delete", lambda w: {"org_id": w.identity.create_org(unique("o"))}),
        ADMIN_WRITE,
    ),
    UiRow(
        "POST", "/admin/teams/delete", _admin_post("/admin/teams/delete", _doomed_team), ADMIN_WRITE
    ),
    UiRow(
        "POST",
        "/admin/members/role",
        _admin_post("/admin/members/role", lambda w: {**_member_of_team(w), "role": "viewer"}),
        ADMIN_WRITE,
    ),
    UiRow(
        "POST",
        "/admin/members/remove",
        _admin_post("/admin/members/remove", _member_of_team),
        ADMIN_WRITE,
    ),
    UiRow(
        "POST",
        "/admin/users/disable",
        _admin_post("/admin/users/disable", lambda w: {"user_id": w.scratch_user()}),
        ADMIN_WRITE,
    ),
    UiRow(
        "POST",
        "/admin/users/enable",
        _admin_post("/admin/users/enable", lambda w: {"user_id": w.scratch_user()}),
        ADMIN_WRITE,
    ),
    UiRow(
        "POST",
        "/admin/users/reset",
        _admin_post("/admin/users/reset", lambda w: {"user_id": w.scratch_user()}),
        ADMIN_WRITE,
    ),
    UiRow("GET", "/keys", public("/keys"), SIGNED_IN),
    UiRow(
        "POST",
        "/keys",
        _admin_post("/keys", lambda w: {"team_id": w.team_id, "name": unique("k")}),
        {**SIGNED_IN_POST, "super_admin": 404, "outsider": 404},
    ),
    UiRow(
        "POST",
        "/keys/revoke",
        _own_key,
        ui_policy(404, none=SIGN_IN, api_key=SIGN_IN, no_csrf=403, member=OK),
    ),
    UiRow("GET", "/reset/{token}", lambda w: _reset(w, "GET"), PUBLIC),
    UiRow("POST", "/reset/{token}", lambda w: _reset(w, "POST"), PUBLIC),
]


def ui_routes() -> set[tuple[str, str]]:
    """The (method, path) of every row: what tests/api/test_policy.py leaves to this table."""
    return {(row.method, row.path) for row in ROWS}


def send(
    client: TestClient, world: World, row: UiRow, cred: str, req: UiReq | None = None
) -> tuple[int, str, str]:
    """``row``'s request (or ``req``, one of its route's) as ``cred`` sends it: status,
    Location and body."""
    req = req or row.build(world)
    headers: dict[str, str] = {}
    data = dict(req.data)
    if cred == "api_key":
        headers["Authorization"] = f"Bearer {world.keys['member']}"
    elif cred != "none":
        role = "member" if cred == "no_csrf" else cred
        # A request that ends its session gets a session of its own.
        cookie, csrf = world.login(role) if row.fresh_session else world.sessions[role]
        headers["Cookie"] = f"keepstone_session={cookie}; keepstone_csrf={csrf}"
        if req.method == "POST" and cred != "no_csrf":
            data["csrf"] = csrf
    response = client.request(
        req.method,
        req.url,
        params=req.params,
        data=data or None,
        files=req.files,
        headers=headers,
        follow_redirects=False,
    )
    client.cookies.clear()
    return response.status_code, response.headers.get("location", ""), response.text
