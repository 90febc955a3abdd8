"""Login CSRF in a real headless Chromium: a page on another site posts the sign-in form
with the attacker's credentials, to sign the victim's browser into the attacker's account.

Two pages an attacker would use, served from a second local server (``localhost`` on its
own port, another site than the ``127.0.0.1`` Keepstone is reached at): one that sends no
referrer (``<meta name="referrer" content="no-referrer">``, so Chromium sends ``Origin:
null``) and one whose form is in a sandboxed iframe (an opaque origin: ``Origin: null``),
posting to the whole tab.
Both must be refused (403) and leave no session cookie; signing in from Keepstone's own
page in the same browser works (so the check is not merely refusing everything).
"""

from __future__ import annotations

import http.server
import threading
import uuid
from collections.abc import Iterator
from html import escape
from typing import Any

import httpx
import pytest

from tests.conftest import require_chromium
from tests.pgvector_server import free_port
from tests.serving import keepstone_serve, serve_env

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ADMIN_TOKEN = "csrf-admin-token-0123456789abcdefghijkl"
PASSWORD = "attacker's own password"


@pytest.fixture(scope="module")
def keepstone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A real ``keepstone serve`` on SQLite with the attacker's account: (base URL, email)."""
    require_chromium()
    home = tmp_path_factory.mktemp("home")
    env = serve_env(home, ADMIN_TOKEN, KEEPSTONE_INDEXER="off")
    log = tmp_path_factory.mktemp("log") / "serve.log"
    database = f"sqlite:///{home / 'keepstone.db'}"
    with keepstone_serve("--database", database, env=env, log=log) as served:
        email = f"attacker-{uuid.uuid4().hex[:6]}@example.com"
        r = httpx.post(
            f"{served.url}/api/admin/users",
            json={"email": email, "password": PASSWORD},
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        )
        assert r.status_code == 201, r.text
        yield served.url, email


def _attack_pages(target: str, email: str) -> dict[str, bytes]:
    # The form navigates the whole tab (target=_top): a session cookie answered to a frame
    # of another site would not be kept anyway, one answered to the tab would.
    form = (
        f'<form id="f" method="post" action="{escape(target)}/signin" target="_top">'
        f'<input name="email" value="{escape(email)}">'
        f'<input name="password" value="{escape(PASSWORD)}">'
        '<input name="next" value="/"></form>'
        "<script>document.getElementById('f').submit()</script>"
    )
    no_referrer = f'<!doctype html><meta name="referrer" content="no-referrer">{form}'
    sandboxed = (
        '<!doctype html><iframe sandbox="allow-forms allow-scripts allow-top-navigation" '
        f'srcdoc="{escape(form)}"></iframe>'
    )
    return {"/no-referrer": no_referrer.encode(), "/sandboxed": sandboxed.encode()}


@pytest.fixture(scope="module")
def attacker(keepstone: tuple[str, str]) -> Iterator[str]:
    """The attacker's site: ``http://localhost:PORT``, serving :func:`_attack_pages`."""
    pages = _attack_pages(*keepstone)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, b"")
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _session_cookies(context: Any) -> list[Any]:
    return [c for c in context.cookies() if c["name"] == "keepstone_session"]


@pytest.mark.parametrize("attack", ["/no-referrer", "/sandboxed"])
def test_a_sign_in_posted_from_another_site_is_refused(
    browser: Any, keepstone: tuple[str, str], attacker: str, attack: str
) -> None:
    target, _ = keepstone
    context = browser.new_context()
    try:
        page = context.new_page()
        posts: list[tuple[int, dict[str, str]]] = []

        def seen(response: Any) -> None:
            if response.url == f"{target}/signin" and response.request.method == "POST":
                posts.append((response.status, response.request.all_headers()))

        page.on("response", seen)
        page.goto(f"{attacker}{attack}")
        for _ in range(300):  # the form posts itself once its page has loaded
            if posts:
                break
            page.wait_for_timeout(100)
        assert posts, "the attacker's form never reached Keepstone"
        status, headers = posts[0]
        assert headers.get("origin") == "null", headers  # what the refusal is about
        assert status == 403, (status, headers)
        assert not _session_cookies(context)
    finally:
        context.close()


def test_signing_in_from_keepstones_own_page_works(
    browser: Any, keepstone: tuple[str, str]
) -> None:
    target, email = keepstone
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(f"{target}/signin")
        page.get_by_label("Email").fill(email)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_load_state()
        assert _session_cookies(context)
    finally:
        context.close()
