"""UI test fixtures: the API tests' app and world (one app per module and database kind,
SQLite and PostgreSQL), the cookies a browser signed in to the UI would send, and a
headless Chromium for the browser tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.conftest import app, client, database_url, world
from tests.api.world import World
from tests.conftest import require_chromium

__all__ = ["app", "browser", "client", "database_url", "world", "ui_headers"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium (Playwright) for the module's browser tests."""
    binary = require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=binary, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


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
