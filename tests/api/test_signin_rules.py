"""Sign-in as an attacker tries it: login CSRF (``Origin: null``, ``Sec-Fetch-Site``), which
emails exist (the time of the answer), password spraying and guessing from rotating
addresses (the throttle's two windows), and ``Retry-After`` on every 429."""

from __future__ import annotations

from typing import Any

import pytest
from argon2 import PasswordHasher
from fastapi import FastAPI
from fastapi.testclient import TestClient
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from keepstone.api.throttle import ADDRESS_FACTOR, LoginThrottle
from keepstone.errors import Unauthenticated
from keepstone.identity.service import IdentityService
from tests.api.world import PASSWORD, World

LIMIT = 3


@pytest.fixture
def throttle(app: FastAPI) -> LoginThrottle:
    """A fresh throttle of :data:`LIMIT` failures a minute for the test."""
    fresh = LoginThrottle(LIMIT, 60.0)
    app.state.login_throttle = fresh
    return fresh


def _form(world: World, headers: dict[str, str], email: str | None = None) -> Any:
    data = {"email": email or world.emails["login"], "password": PASSWORD, "next": "/"}
    world.client.cookies.clear()
    return world.client.post("/signin", data=data, headers=headers, follow_redirects=False)


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "null"},
        {"Origin": "https://evil.example"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site", "Origin": "http://testserver"},
        {"Sec-Fetch-Site": "same-origin", "Origin": "null"},
    ],
)
def test_a_sign_in_form_from_another_site_is_refused(
    world: World, throttle: LoginThrottle, headers: dict[str, str]
) -> None:
    r = _form(world, headers)
    assert r.status_code == 403, r.text
    assert "keepstone_session" not in r.cookies


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Origin": "http://testserver"},
        {"Sec-Fetch-Site": "same-origin", "Origin": "http://testserver"},
        {"Sec-Fetch-Site": "none"},
    ],
)
def test_a_sign_in_form_from_this_site_signs_in(
    world: World, throttle: LoginThrottle, headers: dict[str, str]
) -> None:
    r = _form(world, headers)
    assert r.status_code == 303, r.text
    assert r.cookies.get("keepstone_session")


class CountingHasher(PasswordHasher):
    def __init__(self) -> None:
        super().__init__(time_cost=1, memory_cost=1024)
        self.verified: list[str] = []

    def verify(self, hash: str | bytes, password: str | bytes) -> bool:
        self.verified.append(str(hash))
        return super().verify(hash, password)


def test_an_unknown_email_is_checked_against_a_hash_as_a_known_one_is(world: World) -> None:
    spy = CountingHasher()
    identity = IdentityService(world.identity.engine, world.identity.hasher, passwords=spy)
    with pytest.raises(Unauthenticated) as unknown:
        identity.login("nobody-at-all@example.com", PASSWORD)
    assert len(spy.verified) == 1 and spy.verified[0].startswith("$argon2")
    with pytest.raises(Unauthenticated) as wrong:
        identity.login(world.emails["member"], "not the password")
    assert len(spy.verified) == 2
    assert str(unknown.value) == str(wrong.value)  # one answer for both
    # The dummy hash opens for no password, not even one that matches it.
    with pytest.raises(Unauthenticated):
        identity.login("nobody-at-all@example.com", "")
    assert identity.login(world.emails["member"], PASSWORD).user["email"]


def _api_login(client: Any, email: str, headers: dict[str, str] | None = None) -> Any:
    return client.post(
        "/api/auth/login", json={"email": email, "password": "wrong-password"}, headers=headers
    )


def test_a_spray_over_many_emails_from_one_address_is_throttled(
    world: World, throttle: LoginThrottle
) -> None:
    allowed = LIMIT * ADDRESS_FACTOR
    codes = [_api_login(world.client, f"spray-{i}@example.com").status_code for i in range(allowed)]
    assert codes == [401] * allowed  # no email failed twice: only the address counts
    r = _api_login(world.client, "spray-last@example.com")
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1, r.text
    r = world.client.post(
        "/signin", data={"email": "spray-form@example.com", "password": "x"}, follow_redirects=False
    )
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1  # the UI's too


def test_guessing_one_email_from_rotating_forwarded_addresses_is_throttled(
    app: FastAPI, world: World, throttle: LoginThrottle
) -> None:
    # Behind a trusted proxy (uvicorn's proxy headers, as keepstone serve runs them) the
    # X-Forwarded-For client is the address; rotating it does not escape the email's window.
    proxied = ProxyHeadersMiddleware(app, trusted_hosts="testclient")
    with TestClient(proxied) as client:  # type: ignore[arg-type]
        email = world.emails["viewer"]
        codes = [
            _api_login(client, email, {"X-Forwarded-For": f"203.0.113.{i}"}).status_code
            for i in range(LIMIT + 1)
        ]
        assert codes == [401] * LIMIT + [429], codes
        # Another email from a fresh forwarded address is not refused: the key was the
        # forwarded client, not the proxy's own address.
        r = _api_login(client, "other@example.com", {"X-Forwarded-For": "198.51.100.7"})
        assert r.status_code == 401, r.text


def test_a_success_clears_the_email_but_not_the_address(
    world: World, throttle: LoginThrottle
) -> None:
    email = world.emails["login"]
    for _ in range(LIMIT - 1):
        assert _api_login(world.client, email).status_code == 401
    ok = world.client.post("/api/auth/login", json={"email": email, "password": PASSWORD})
    assert ok.status_code == 200
    for _ in range(LIMIT):  # the email's window starts again
        assert _api_login(world.client, email).status_code == 401
    assert _api_login(world.client, email).status_code == 429
