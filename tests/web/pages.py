"""What the UI tests do as a signed-in browser, in process (a FastAPI ``TestClient``): get a
page, post a form with its CSRF token, and check a page is safe to show."""

from __future__ import annotations

import re
from typing import Any

import httpx
from fastapi.testclient import TestClient

from keepstone.web.core import SECURITY_HEADERS
from tests.api.world import World


def member_headers(world: World) -> tuple[dict[str, str], str]:
    """The Cookie header of the member's signed-in browser, and its CSRF token."""
    cookie, csrf = world.sessions["member"]
    return {"Cookie": f"keepstone_session={cookie}; keepstone_csrf={csrf}"}, csrf


def get_page(
    client: TestClient, url: str, headers: dict[str, str], **params: str
) -> tuple[int, str, dict[str, str]]:
    """``GET url`` as a browser sends it, not following redirects: status, body, headers."""
    r = client.get(url, params=params, headers=headers, follow_redirects=False)
    client.cookies.clear()
    return r.status_code, r.text, dict(r.headers)


def post_form(
    client: TestClient,
    url: str,
    world: World,
    data: dict[str, str],
    *,
    role: str = "member",
    **kw: Any,
) -> httpx.Response:
    """A form posted by ``role``'s signed-in browser, with its CSRF token."""
    cookie, csrf = world.sessions[role]
    r = client.post(
        url,
        data={"csrf": csrf, **data},
        headers={"Cookie": f"keepstone_session={cookie}; keepstone_csrf={csrf}"},
        follow_redirects=False,
        **kw,
    )
    client.cookies.clear()
    return r


def assert_safe_page(headers: dict[str, str], body: str) -> None:
    """The security headers are set, and an HTML page holds no inline script or style."""
    for name, value in SECURITY_HEADERS:
        assert headers.get(name.lower()) == value, name
    if "text/html" in headers.get("content-type", ""):
        assert "<script" not in body.lower()
        assert "<style" not in body.lower()
        assert not re.search(r"\sstyle\s*=", body, re.IGNORECASE)
        assert not re.search(r"\son[a-z]+\s*=", body, re.IGNORECASE)
