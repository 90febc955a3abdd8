"""The declared access policy: for every route of the app, what each credential gets.

A :class:`Row` names one route (``method`` and the path *template* exactly as the app
registers it), a ``build`` function that turns a :class:`~tests.api.world.World` into
a concrete request that would succeed for an allowed caller (setting up whatever it
needs), and ``expect``: credential → :data:`OK` or the exact refusal
``(status, code)``. Credentials are :data:`tests.api.world.CREDENTIALS`.

Several rows may name one route (e.g. a team space and a global space). Every route
of the app must appear in at least one row: ``test_policy.test_every_route_is_declared``
fails otherwise. Rows of the records routes live in ``tests/records/policy.py`` (their
owner's module-level ``ROWS: list[Row]``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI

from tests.api.world import (
    CREDENTIALS,
    GLOBAL_SPACE,
    SEED_PATH,
    SPACE,
    World,
    tarball,
    unique,
)

OK = "ok"
Outcome = str | tuple[int, str]

UNAUTH = (401, "unauthenticated")
FORBIDDEN = (403, "forbidden")
MEMBER_REQUIRED = (403, "member_role_required")
PLATFORM_REQUIRED = (403, "platform_authority_required")
CSRF = (403, "csrf_required")


@dataclass(frozen=True)
class Req:
    method: str
    url: str
    params: dict[str, str] = field(default_factory=dict)
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    method: str
    path: str
    build: Callable[[World], Req]
    expect: dict[str, Outcome]
    variant: str = ""
    #: Log in anew for session credentials (the request ends the session).
    fresh_session: bool = False

    @property
    def id(self) -> str:
        return f"{self.method} {self.path}" + (f" [{self.variant}]" if self.variant else "")


def policy(default: Outcome, **overrides: Outcome) -> dict[str, Outcome]:
    """Every credential gets ``default`` unless named in ``overrides``."""
    unknown = set(overrides) - set(CREDENTIALS)
    assert not unknown, f"unknown credentials {unknown}"
    return {cred: overrides.get(cred, default) for cred in CREDENTIALS}


PUBLIC = policy(OK)
READ_TEAM = policy(
    OK, none=UNAUTH, service_token=FORBIDDEN, admin_token=FORBIDDEN, super_admin=FORBIDDEN
)
READ_GLOBAL = policy(OK, none=UNAUTH, service_token=FORBIDDEN)
MUTATE_TEAM = policy(
    OK,
    none=UNAUTH,
    service_token=FORBIDDEN,
    admin_token=FORBIDDEN,
    super_admin=FORBIDDEN,
    viewer=MEMBER_REQUIRED,
    config_editor=MEMBER_REQUIRED,
    session_no_csrf=CSRF,
)
MUTATE_GLOBAL = policy(
    PLATFORM_REQUIRED,
    none=UNAUTH,
    service_token=FORBIDDEN,
    session_no_csrf=CSRF,
    admin_token=OK,
    super_admin=OK,
)
ADMIN_ONLY = policy(FORBIDDEN, none=UNAUTH, admin_token=OK, super_admin=OK)
SIGNED_IN = policy(OK, none=UNAUTH, service_token=FORBIDDEN)
SIGNED_IN_MUTATION = policy(OK, none=UNAUTH, service_token=FORBIDDEN, session_no_csrf=CSRF)


def get(url: str, **params: str) -> Callable[[World], Req]:
    return lambda _w: Req("GET", url, params=dict(params))


def _put(space: dict[str, str]) -> Callable[[World], Req]:
    return lambda _w: Req(
        "PUT", "/api/memory/doc", {**space, "path": f"{unique('put')}.md"}, {"content": "# hi"}
    )


def _delete(global_space: bool) -> Callable[[World], Req]:
    def build(w: World) -> Req:
        path = f"{unique('del')}.md"
        w.seed(path, global_space=global_space)
        return Req(
            "DELETE", "/api/memory/doc", {**(GLOBAL_SPACE if global_space else SPACE), "path": path}
        )

    return build


def _move(global_space: bool) -> Callable[[World], Req]:
    def build(w: World) -> Req:
        path = f"{unique('mv')}.md"
        w.seed(path, global_space=global_space)
        space = GLOBAL_SPACE if global_space else SPACE
        return Req("POST", "/api/memory/doc/move", {**space, "path": path, "to": f"moved-{path}"})

    return build


def _edit(global_space: bool) -> Callable[[World], Req]:
    def build(w: World) -> Req:
        path = f"{unique('ed')}.md"
        w.seed(path, global_space=global_space)
        space = GLOBAL_SPACE if global_space else SPACE
        body = {"old": "seed", "new": "edited"}
        return Req("POST", "/api/memory/doc/edit", {**space, "path": path}, body)

    return build


def _restore(global_space: bool) -> Callable[[World], Req]:
    def build(w: World) -> Req:
        path = f"{unique('rs')}.md"
        w.seed(path, global_space=global_space)
        space = GLOBAL_SPACE if global_space else SPACE
        return Req("POST", "/api/memory/doc/restore", {**space, "path": path, "version": "1"})

    return build


def _import(space: dict[str, str]) -> Callable[[World], Req]:
    return lambda _w: Req(
        "POST",
        "/api/memory/import",
        space,
        content=tarball({f"{unique('imp')}.md": "# imported"}),
        headers={"Content-Type": "application/gzip"},
    )


def _admin(
    method: str, url: Callable[[World], str], body: Callable[[World], Any]
) -> Callable[[World], Req]:
    return lambda w: Req(method, url(w), json=body(w))


def _team_member_body(w: World) -> dict[str, Any]:
    return {"user_id": w.scratch_user(), "role": "viewer"}


def _remove_member(w: World) -> Req:
    user = w.scratch_user()
    w.identity.add_team_member(w.team_id, user, "viewer")
    return Req("DELETE", f"/api/admin/teams/{w.team_id}/members/{user}")


def _api_key_body(w: World) -> dict[str, Any]:
    user = w.scratch_user()
    w.identity.add_team_member(w.team_id, user, "member")
    return {"user_id": user, "team_id": w.team_id, "name": "k"}


def _revoke_key(w: World) -> Req:
    user = w.scratch_user()
    w.identity.add_team_member(w.team_id, user, "member")
    key_id, _ = w.identity.create_api_key(user, w.team_id)
    return Req("DELETE", f"/api/admin/api-keys/{key_id}")


def _member_role(w: World) -> Req:
    user = w.scratch_user()
    w.identity.add_team_member(w.team_id, user, "viewer")
    return Req("PATCH", f"/api/admin/teams/{w.team_id}/members/{user}", json={"role": "member"})


def _delete_team(w: World) -> Req:
    name = unique("doomed")
    team = w.identity.create_team(w.org_id, name)
    return Req("DELETE", f"/api/admin/teams/{team}", params={"confirm": name})


def _on_user(action: str) -> Callable[[World], Req]:
    return lambda w: Req("POST", f"/api/admin/users/{w.scratch_user()}/{action}")


def _own_key(w: World) -> Req:
    """A key of the member's own: only the member may revoke it (another's is not found)."""
    key_id, _ = w.identity.create_api_key(w.users["member"], w.team_id, "own")
    return Req("DELETE", f"/api/me/api-keys/{key_id}")


#: A member's own keys: a browser session only (an API key or a token is refused).
OWN_KEYS = policy(
    OK, none=UNAUTH, admin_token=FORBIDDEN, api_key=FORBIDDEN, service_token=FORBIDDEN
)


def _login(w: World) -> Req:
    from tests.api.world import PASSWORD

    return Req("POST", "/api/auth/login", json={"email": w.emails["login"], "password": PASSWORD})


DOC = {**SPACE, "path": SEED_PATH}
#: An instant after the world's seed documents were written (as_of rows).
NOW = "2999-01-01T00:00:00Z"
GDOC = {**GLOBAL_SPACE, "path": SEED_PATH}

ROWS: list[Row] = [
    Row("GET", "/healthz", get("/healthz"), PUBLIC),
    Row("GET", "/readyz", get("/readyz"), PUBLIC),
    Row("GET", "/metrics", get("/metrics"), PUBLIC),
    Row("GET", "/openapi.json", get("/openapi.json"), PUBLIC),
    Row("GET", "/docs", get("/docs"), PUBLIC),
    Row("GET", "/docs/oauth2-redirect", get("/docs/oauth2-redirect"), PUBLIC),
    Row("GET", "/redoc", get("/redoc"), PUBLIC),
    Row("POST", "/api/auth/login", _login, PUBLIC),
    Row(
        "POST",
        "/api/auth/logout",
        lambda _w: Req("POST", "/api/auth/logout"),
        SIGNED_IN_MUTATION,
        fresh_session=True,
    ),
    Row("GET", "/api/memory/usage", get("/api/memory/usage", **SPACE), READ_TEAM),
    Row(
        "GET", "/api/memory/usage", get("/api/memory/usage", **GLOBAL_SPACE), READ_GLOBAL, "global"
    ),
    # Every credential with a reading standing lists what it may read (the admin token
    # and a super-admin: global spaces); refusals as for a readable search.
    Row("GET", "/api/memory/spaces", get("/api/memory/spaces"), READ_GLOBAL),
    # The team's feed (a credential of no team: an empty one); a space's as its reads.
    Row("GET", "/api/memory/activity", get("/api/memory/activity"), READ_GLOBAL),
    Row("GET", "/api/memory/activity", get("/api/memory/activity", **SPACE), READ_TEAM, "space"),
    Row(
        "GET",
        "/api/memory/activity",
        get("/api/memory/activity", **GLOBAL_SPACE),
        READ_GLOBAL,
        "global",
    ),
    Row("GET", "/api/memory/docs", get("/api/memory/docs", **SPACE), READ_TEAM),
    Row("GET", "/api/memory/docs", get("/api/memory/docs", **GLOBAL_SPACE), READ_GLOBAL, "global"),
    Row("GET", "/api/memory/doc", get("/api/memory/doc", **DOC), READ_TEAM),
    Row("GET", "/api/memory/search", get("/api/memory/search", **SPACE, q="seed"), READ_TEAM),
    Row(
        "GET",
        "/api/memory/search",
        get("/api/memory/search", **GLOBAL_SPACE, q="seed"),
        READ_GLOBAL,
        "global",
    ),
    Row("GET", "/api/memory/doc", get("/api/memory/doc", **GDOC), READ_GLOBAL, "global"),
    Row("PUT", "/api/memory/doc", _put(SPACE), MUTATE_TEAM),
    Row("PUT", "/api/memory/doc", _put(GLOBAL_SPACE), MUTATE_GLOBAL, "global"),
    Row("DELETE", "/api/memory/doc", _delete(False), MUTATE_TEAM),
    Row("DELETE", "/api/memory/doc", _delete(True), MUTATE_GLOBAL, "global"),
    Row("POST", "/api/memory/doc/move", _move(False), MUTATE_TEAM),
    Row("POST", "/api/memory/doc/move", _move(True), MUTATE_GLOBAL, "global"),
    Row("POST", "/api/memory/doc/edit", _edit(False), MUTATE_TEAM),
    Row("POST", "/api/memory/doc/edit", _edit(True), MUTATE_GLOBAL, "global"),
    Row("GET", "/api/memory/export", get("/api/memory/export", **SPACE), READ_TEAM),
    Row(
        "GET",
        "/api/memory/export",
        get("/api/memory/export", **GLOBAL_SPACE),
        READ_GLOBAL,
        "global",
    ),
    # History: the reads of the past as the other reads, a restore as a PUT.
    Row("GET", "/api/memory/doc", get("/api/memory/doc", **DOC, version="1"), READ_TEAM, "v"),
    Row("GET", "/api/memory/doc", get("/api/memory/doc", **DOC, as_of=NOW), READ_TEAM, "as_of"),
    Row(
        "GET",
        "/api/memory/doc",
        get("/api/memory/doc", **GDOC, version="1"),
        READ_GLOBAL,
        "global v",
    ),
    Row("GET", "/api/memory/docs", get("/api/memory/docs", **SPACE, as_of=NOW), READ_TEAM, "as_of"),
    Row(
        "GET",
        "/api/memory/export",
        get("/api/memory/export", **SPACE, as_of=NOW),
        READ_TEAM,
        "as_of",
    ),
    Row("GET", "/api/memory/doc/versions", get("/api/memory/doc/versions", **DOC), READ_TEAM),
    Row(
        "GET",
        "/api/memory/doc/versions",
        get("/api/memory/doc/versions", **GDOC),
        READ_GLOBAL,
        "global",
    ),
    Row(
        "GET",
        "/api/memory/doc/diff",
        get("/api/memory/doc/diff", **DOC, **{"from": "1"}),
        READ_TEAM,
    ),
    Row(
        "GET",
        "/api/memory/doc/diff",
        get("/api/memory/doc/diff", **GDOC, **{"from": "1"}),
        READ_GLOBAL,
        "global",
    ),
    Row("POST", "/api/memory/doc/restore", _restore(False), MUTATE_TEAM),
    Row("POST", "/api/memory/doc/restore", _restore(True), MUTATE_GLOBAL, "global"),
    Row("POST", "/api/memory/import", _import(SPACE), MUTATE_TEAM),
    Row("POST", "/api/memory/import", _import(GLOBAL_SPACE), MUTATE_GLOBAL, "global"),
    Row(
        "GET",
        "/api/orgs/{id}/usage",
        lambda w: Req("GET", f"/api/orgs/{w.org_id}/usage"),
        SIGNED_IN,
    ),
    Row(
        "POST",
        "/api/admin/users",
        _admin(
            "POST",
            lambda _w: "/api/admin/users",
            lambda _w: {"email": f"{unique('u')}@example.com"},
        ),
        ADMIN_ONLY,
    ),
    Row(
        "POST",
        "/api/admin/orgs",
        _admin("POST", lambda _w: "/api/admin/orgs", lambda _w: {"name": "o"}),
        ADMIN_ONLY,
    ),
    Row(
        "PATCH",
        "/api/admin/orgs/{id}",
        _admin("PATCH", lambda w: f"/api/admin/orgs/{w.org_id}", lambda _w: {"plan": "pro_plus"}),
        ADMIN_ONLY,
    ),
    Row(
        "POST",
        "/api/admin/orgs/{id}/members",
        _admin(
            "POST",
            lambda w: f"/api/admin/orgs/{w.org_id}/members",
            lambda w: {"user_id": w.scratch_user(), "role": "member"},
        ),
        ADMIN_ONLY,
    ),
    Row(
        "POST",
        "/api/admin/teams",
        _admin("POST", lambda _w: "/api/admin/teams", lambda w: {"org_id": w.org_id, "name": "t"}),
        ADMIN_ONLY,
    ),
    Row(
        "POST",
        "/api/admin/teams/{id}/members",
        _admin("POST", lambda w: f"/api/admin/teams/{w.team_id}/members", _team_member_body),
        ADMIN_ONLY,
    ),
    Row("DELETE", "/api/admin/teams/{id}/members/{user_id}", _remove_member, ADMIN_ONLY),
    Row(
        "POST",
        "/api/admin/teams/{id}/projects",
        _admin(
            "POST", lambda w: f"/api/admin/teams/{w.team_id}/projects", lambda _w: {"name": "p"}
        ),
        ADMIN_ONLY,
    ),
    Row(
        "POST",
        "/api/admin/projects/{id}/repos",
        _admin(
            "POST", lambda w: f"/api/admin/projects/{w.project_id}/repos", lambda _w: {"name": "r"}
        ),
        ADMIN_ONLY,
    ),
    Row(
        "POST",
        "/api/admin/api-keys",
        _admin("POST", lambda _w: "/api/admin/api-keys", _api_key_body),
        ADMIN_ONLY,
    ),
    Row("DELETE", "/api/admin/api-keys/{id}", _revoke_key, ADMIN_ONLY),
    Row(
        "PATCH",
        "/api/admin/instance",
        _admin(
            "PATCH", lambda _w: "/api/admin/instance", lambda _w: {"memory_quota_bytes": 1 << 30}
        ),
        ADMIN_ONLY,
    ),
    Row("GET", "/api/admin/audit", get("/api/admin/audit"), ADMIN_ONLY),
    Row("GET", "/api/admin/orgs", get("/api/admin/orgs", limit="5"), ADMIN_ONLY),
    Row("GET", "/api/admin/users", get("/api/admin/users", limit="5"), ADMIN_ONLY),
    Row("GET", "/api/admin/api-keys", get("/api/admin/api-keys", limit="5"), ADMIN_ONLY),
    Row("GET", "/api/admin/teams", get("/api/admin/teams", limit="5"), ADMIN_ONLY),
    Row(
        "GET",
        "/api/admin/teams/{id}/members",
        lambda w: Req("GET", f"/api/admin/teams/{w.team_id}/members"),
        ADMIN_ONLY,
    ),
    Row("PATCH", "/api/admin/teams/{id}/members/{user_id}", _member_role, ADMIN_ONLY),
    Row("DELETE", "/api/admin/teams/{id}", _delete_team, ADMIN_ONLY),
    Row(
        "DELETE",
        "/api/admin/orgs/{id}",
        lambda w: Req("DELETE", f"/api/admin/orgs/{w.identity.create_org(unique('o'))}"),
        ADMIN_ONLY,
    ),
    Row("POST", "/api/admin/users/{id}/disable", _on_user("disable"), ADMIN_ONLY),
    Row("POST", "/api/admin/users/{id}/enable", _on_user("enable"), ADMIN_ONLY),
    Row("POST", "/api/admin/users/{id}/password-reset", _on_user("password-reset"), ADMIN_ONLY),
    Row(
        "POST",
        "/api/me/api-keys",
        lambda w: Req("POST", "/api/me/api-keys", json={"team_id": w.team_id, "name": "k"}),
        {**OWN_KEYS, "super_admin": (404, "team_not_found"), "session_no_csrf": CSRF},
    ),
    Row("GET", "/api/me/api-keys", get("/api/me/api-keys", limit="5"), OWN_KEYS),
    Row(
        "DELETE",
        "/api/me/api-keys/{id}",
        _own_key,
        {
            **policy((404, "not_found"), none=UNAUTH, session_no_csrf=CSRF, member=OK),
            **dict.fromkeys(("admin_token", "api_key", "service_token"), FORBIDDEN),
        },
    ),
]


def all_rows() -> list[Row]:
    """These rows plus the records routes' rows (``tests/records/policy.py``, their owner's)."""
    from tests.records import policy as records_policy

    return [*ROWS, *records_policy.ROWS]


# --- the routes the app answers ----------------------------------------------------


def _flatten(routes: list[Any], prefix: str, out: set[tuple[str, str]]) -> None:
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:  # FastAPI keeps included routers nested
            context = getattr(route, "include_context", None)
            _flatten(list(included.routes), prefix + getattr(context, "prefix", ""), out)
            continue
        methods = getattr(route, "methods", None) or ()
        path = prefix + str(getattr(route, "path", ""))
        out.update((m, path) for m in methods if m != "HEAD")


def app_routes(app: FastAPI) -> set[tuple[str, str]]:
    """Every (method, path template) the app answers, HEAD aside."""
    out: set[tuple[str, str]] = set()
    _flatten(list(app.routes), "", out)
    return out
