"""UI test fixtures: the API tests' app and world (one app per module and database kind,
SQLite and PostgreSQL), and the cookies a browser signed in to the UI would send."""

from __future__ import annotations

from tests.api.conftest import app, client, database_url, world
from tests.api.world import World

__all__ = ["app", "client", "database_url", "world", "ui_headers"]


def ui_headers(w: World, role: str, *, with_csrf_cookie: bool = True) -> dict[str, str]:
    """The Cookie header of ``role``'s browser session (the one the API's login made: the
    two faces share sessions), with the UI's CSRF cookie unless told otherwise."""
    cookie, csrf = w.sessions[role]
    value = f"keepstone_session={cookie}"
    if with_csrf_cookie:
        value += f"; keepstone_csrf={csrf}"
    return {"Cookie": value}


def csrf_of(w: World, role: str) -> str:
    return w.sessions[role][1]


def add_outsider(w: World) -> str:
    """A member of a team of another org, signed in as ``outsider``; returns its team."""
    import uuid

    from tests.api.world import PASSWORD

    if "outsider" in w.sessions:
        return w.emails["outsider-team"]
    org = str(w.post("/api/admin/orgs", {"name": "Other", "plan": "pro_plus"})["id"])
    team = str(w.post("/api/admin/teams", {"org_id": org, "name": "other"})["id"])
    email = f"outsider-{uuid.uuid4().hex[:6]}@example.com"
    user = str(w.post("/api/admin/users", {"email": email, "password": PASSWORD})["id"])
    w.post(f"/api/admin/teams/{team}/members", {"user_id": user, "role": "member"})
    w.emails["outsider"] = email
    w.emails["outsider-team"] = team
    w.sessions["outsider"] = w.login("outsider")
    return team


# --- browser tests: a screenshot of the page under its test's temp dir on failure ---------


import pytest  # noqa: E402


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Keep each phase's report on the test item, for fixtures that act on a failure."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
