"""The administration pages and "Your API keys" in a real headless Chromium against a real
``keepstone serve``, on SQLite and PostgreSQL (the server, browser and helpers of
tests/web/test_browser.py; one server per database kind for this module).

Every flow is clicked through without typing an id: orgs → teams → members are links and
``<select>``s. Names carry script payloads: a dialog or console error fails the test (the
``people`` fixture), so they must stay inert text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.web import test_browser as shared
from tests.web.test_browser import PASSWORD, Tab, assert_labelled, expect, shot

# The shared module's fixtures, bound here so this module gets a server of its own.
database = shared.database
people = shared.people
site = shared.site

pytestmark = [pytest.mark.browser, pytest.mark.slow]

XSS = "<script>alert(1)</script><img src=x onerror=alert(2)>"


def _works(base: str, key: str) -> int:
    h = {"Authorization": f"Bearer {key}"}
    return httpx.get(f"{base}/api/memory/spaces", headers=h).status_code


def _to_team(page: Any, org: str, team: str) -> None:
    """From anywhere: Administration → the org → the team, by their links."""
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Administration").click()
    page.get_by_role("link", name=org, exact=True).click()
    page.get_by_role("link", name=team, exact=True).click()
    expect(page.get_by_role("heading", name=f"Team {team}", exact=True)).to_be_visible()


def test_super_admin_creates_and_revokes_an_api_key(people: Callable[[], Tab]) -> None:
    tab = people()
    site = tab.site
    page = tab.sign_in("super")
    _to_team(page, "Acme", "core")
    assert_labelled(page)
    page.get_by_label("For member").select_option(label=site.emails["member"])
    page.get_by_label(re.compile("^Name")).fill(f"ui-key {XSS}")
    page.get_by_role("button", name="Create key").click()
    key = page.get_by_label(re.compile("^Key “ui-key")).input_value()
    assert key.startswith("keepstone_"), key
    shot(page, "api-key-created")
    assert _works(site.base, key) == 200
    page.get_by_role("link", name="Back to the team").click()
    revoke = page.get_by_role("button", name=f"Revoke key ui-key {XSS}")
    wrap = revoke.evaluate("b => [getComputedStyle(b).whiteSpace, b.getClientRects().length]")
    assert wrap == ["nowrap", 1], wrap
    revoke.click()
    expect(page.get_by_role("button", name=f"Revoke key ui-key {XSS}")).to_have_count(0)
    shot(page, "admin-team")
    assert _works(site.base, key) == 401


def test_members_added_role_changed_and_removed(people: Callable[[], Tab]) -> None:
    tab = people()
    page = tab.sign_in("super")
    page.get_by_role("link", name="Administration").click()
    email = f"joiner-{re.sub(r'[^0-9]', '', str(id(page)))[-6:]}@example.com"
    page.get_by_label("Email").fill(email)
    page.locator("#user-name").fill(XSS)
    page.get_by_role("button", name="Create user").click()
    expect(page.get_by_role("cell", name=XSS, exact=True)).to_be_visible()
    shot(page, "admin")
    _to_team(page, "Acme", "core")
    page.get_by_label("User", exact=True).select_option(label=email)
    page.get_by_label("Role", exact=True).select_option("viewer")
    page.get_by_role("button", name="Add member").click()
    row = page.get_by_role("row").filter(has_text=email)
    expect(row.get_by_label(f"Role of {email}", exact=True)).to_have_value("viewer")
    row.get_by_label(f"Role of {email}", exact=True).select_option("admin")
    row.get_by_role("button", name=f"Change the role of {email}").click()
    expect(page.get_by_label(f"Role of {email}", exact=True)).to_have_value("admin")
    shot(page, "admin-members")
    page.get_by_role("button", name=f"Remove {email}").click()
    expect(page.get_by_role("row").filter(has_text=email)).to_have_count(0)
    # The navigation stays on the administration pages: the team visited last is one click
    # away (the super-admin joins the team to have one).
    with tab.site.admin() as admin:
        body = {"user_id": tab.site.users["super"], "role": "viewer"}
        assert admin.post(f"/api/admin/teams/{tab.site.team_id}/members", json=body).is_success
    page.goto(f"{tab.site.base}/t/{tab.site.team_id}/spaces")
    page.get_by_role("link", name="Administration").click()
    expect(
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Spaces")
    ).to_be_visible()


def test_disable_user_and_reset_password_by_link(people: Callable[[], Tab]) -> None:
    site = people().site
    with site.admin() as admin:
        email = f"forgetful-{id(site)}@example.com"
        body = {"email": email, "password": PASSWORD, "name": "forgetful"}
        user = admin.post("/api/admin/users", json=body).json()["id"]
        admin.post(
            f"/api/admin/teams/{site.team_id}/members", json={"user_id": user, "role": "member"}
        )
    site.emails["forgetful"] = email
    theirs = people().sign_in("forgetful")
    expect(theirs.get_by_role("heading", name="Spaces")).to_be_visible()
    page = people().sign_in("super")
    page.get_by_role("link", name="Administration").click()
    page.get_by_role("button", name=f"Disable {email}").click()
    expect(page.get_by_role("row").filter(has_text=email)).to_contain_text("disabled")
    theirs.reload()
    expect(theirs.get_by_role("heading", name="Sign in")).to_be_visible()  # the session ended
    page.get_by_role("button", name=f"Enable {email}").click()
    page.get_by_role("button", name=f"Reset the password of {email}").click()
    link = page.get_by_label("Link").input_value()
    assert "/reset/" in link and "expires" not in link
    shot(page, "admin-reset-link")
    fresh = people().open()
    fresh.goto(link)
    assert_labelled(fresh)
    expect(fresh.get_by_text(email)).to_be_visible()
    fresh.get_by_label("New password (at least 8 characters)").fill("a brand new pw")
    fresh.get_by_label("The same again").fill("a brand new pw")
    fresh.get_by_role("button", name="Set password").click()
    expect(fresh.get_by_role("heading", name="Sign in")).to_be_visible()
    fresh.get_by_label("Email").fill(email)
    fresh.get_by_label("Password").fill("a brand new pw")
    fresh.get_by_role("button", name="Sign in").click()
    expect(fresh.get_by_role("heading", name="Spaces")).to_be_visible()
    used = people().open()
    used.goto(link)  # single use
    expect(used.get_by_text(re.compile("unknown, used or expired"))).to_be_visible()


def test_delete_team_by_typed_name_then_the_empty_org(people: Callable[[], Tab]) -> None:
    tab = people()
    page = tab.sign_in("super")
    page.get_by_role("link", name="Administration").click()
    org = f"Doomed {XSS}"
    page.locator("#org-name").fill(org)
    page.get_by_role("button", name="Create org").click()
    expect(page.get_by_role("heading", name=f"Org {org}")).to_be_visible()
    page.get_by_label("Memory quota (blank: the default)", exact=True).fill("1.5")
    page.get_by_label("Unit of Memory quota (blank: the default)").select_option("GiB")
    page.get_by_role("button", name="Set plan and quota").click()
    expect(page.get_by_text("memory quota 1.5 GiB")).to_be_visible()
    team = f"team {XSS}"
    page.get_by_label("Team name").fill(team)
    page.get_by_role("button", name="Create team").click()
    expect(page.get_by_role("heading", name=f"Team {team}")).to_be_visible()
    page.get_by_role("link", name="Org", exact=True).click()
    page.get_by_role("button", name="Delete org").click()
    expect(page.get_by_role("alert")).to_contain_text("delete its teams first")
    page.get_by_role("link", name=team, exact=True).click()
    page.get_by_label(re.compile("to confirm")).fill("not its name")
    page.get_by_role("button", name="Delete team").click()
    expect(page.get_by_role("alert")).to_contain_text("typed exactly")
    page.get_by_label(re.compile("to confirm")).fill(team)
    page.get_by_role("button", name="Delete team").click()
    expect(page.get_by_role("heading", name=f"Org {org}")).to_be_visible()
    expect(page.get_by_text("No team yet.")).to_be_visible()
    page.get_by_role("button", name="Delete org").click()
    expect(page.get_by_role("heading", name="Administration")).to_be_visible()
    expect(page.get_by_role("link", name=org, exact=True)).to_have_count(0)


def test_member_creates_and_revokes_their_own_key(people: Callable[[], Tab]) -> None:
    tab = people()
    page = tab.sign_in("member")
    page.get_by_role("link", name="API keys").click()
    assert_labelled(page)
    page.get_by_label("Team").select_option(label="core")
    page.get_by_role("button", name="Create key").click()  # the name is required
    expect(page.get_by_role("heading", name="Your API keys")).to_be_visible()
    page.get_by_label(re.compile("^Name")).fill(f"laptop {XSS}")
    page.get_by_role("button", name="Create key").click()
    key = page.get_by_label(re.compile("^Key “laptop")).input_value()
    assert _works(tab.site.base, key) == 200
    shot(page, "own-key-created")
    page.get_by_role("link", name="Back to your API keys").click()
    row = page.get_by_role("row").filter(has_text="laptop")
    expect(row).to_contain_text("live")
    expect(row).to_contain_text("core")
    assert key not in page.content()
    shot(page, "own-keys")
    row.get_by_role("button", name=f"Revoke key laptop {XSS}").click()
    expect(page.get_by_role("row").filter(has_text="laptop")).to_contain_text("revoked")
    assert _works(tab.site.base, key) == 401
