"""A form sent after its session ended, carried across signing in again, in-process on SQLite
and PostgreSQL: the sign-in page carries what was typed (the edit's text and the etag it
started from, a new document's path, a rename's new path), and signing in from it opens the
form again filled in and unsaved; a document changed or deleted meanwhile is the conflict
page, never overwritten. A wrong password keeps what is carried; a sign-in posted from
another site, or by someone who cannot act in the team, drops it. Hostile text stays inert
on every page it is echoed on, a document at the cap is carried whole, and nothing carried
is logged. A form opened before the person signed in again (in another tab) and sent with
that earlier sign-in's token opens again filled in, with the live sign-in's token; a post
from another site, or one whose cookie is not its session's token, is refused as it was.

Each test reads the forms off the pages and posts them as a browser would (every control
of the form, those tied to it by ``form=`` too; a textarea's line ends as CRLF)."""

from __future__ import annotations

import logging
from html.parser import HTMLParser

import httpx
import pytest
from fastapi.testclient import TestClient

from keepstone.errors import NotFound
from keepstone.web.core import SECURITY_HEADERS
from tests.api.world import PASSWORD, SPACE, World, unique
from tests.web.conftest import add_outsider
from tests.web.pages import assert_safe_page

HOSTILE = (
    '# Mine\n\n</textarea><script>alert(1)</script><textarea>\n"><img src=x onerror=alert(2)>\n'
)


class _Form(HTMLParser):
    """The controls a browser would send with the form of ``action`` (those inside it and
    those tied to it by ``form=``), as name -> value."""

    def __init__(self, action: str) -> None:
        super().__init__(convert_charrefs=True)
        self.action, self.form_id = action, ""
        self.inside = False
        self.fields: dict[str, str] = {}
        self.textarea: str | None = None
        self.found = False

    def _ours(self, attrs: dict[str, str | None]) -> bool:
        return self.inside or (bool(self.form_id) and attrs.get("form") == self.form_id)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form" and a.get("action") == self.action and not self.found:
            self.inside = self.found = True
            self.form_id = a.get("id") or ""
        elif tag == "input" and self._ours(a) and a.get("name"):
            if a.get("type") == "checkbox" and "checked" not in a:
                return
            self.fields[str(a["name"])] = a.get("value") or ""
        elif tag == "textarea" and self._ours(a) and a.get("name"):
            self.textarea = str(a["name"])
            self.fields[self.textarea] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "textarea" and self.textarea:
            value = self.fields[self.textarea]
            # HTML drops a textarea's first line end; a browser sends its lines as CRLF.
            value = value[1:] if value.startswith("\n") else value
            self.fields[self.textarea] = value.replace("\n", "\r\n")
            self.textarea = None

    def handle_data(self, data: str) -> None:
        if self.textarea:
            self.fields[self.textarea] += data


class _Elements(HTMLParser):
    """Every element of a page, with its attributes, as the browser's parser sees it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.seen: list[tuple[str, list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen.append((tag, [name for name, _ in attrs]))


def assert_inert(r: httpx.Response) -> None:
    """The security headers are on the page, and it holds no script, image, or handler
    attribute: hostile text in it is text (the page shows it escaped)."""
    for name, value in SECURITY_HEADERS:
        assert r.headers.get(name.lower()) == value, name
    parser = _Elements()
    parser.feed(r.text)
    live = [(tag, attrs) for tag, attrs in parser.seen if tag in {"script", "img", "svg"}]
    handlers = [
        (tag, attrs) for tag, attrs in parser.seen if any(a.startswith("on") for a in attrs)
    ]
    assert not live and not handlers, (live, handlers)


def form_of(body: str, action: str) -> dict[str, str]:
    parser = _Form(action)
    parser.feed(body)
    assert parser.found, f"no form posting to {action}: {body[-800:]}"
    return parser.fields


def send(
    client: TestClient,
    url: str,
    fields: dict[str, str],
    cookies: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """``fields`` posted as multipart (the edit and carrying sign-in forms are), with
    ``cookies`` (none: a browser whose session is gone)."""
    sent = dict(headers or {})
    if cookies:
        sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
    r = client.post(
        url,
        files={name: (None, value) for name, value in fields.items()},
        headers=sent,
        follow_redirects=False,
    )
    client.cookies.clear()
    return r


def sign_in_from(
    client: TestClient,
    page: str,
    email: str,
    password: str = PASSWORD,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """The sign-in form of ``page`` filled in and sent."""
    fields = {**form_of(page, "/signin"), "email": email, "password": password}
    return send(client, "/signin", fields, headers=headers)


def session_of(r: httpx.Response) -> dict[str, str]:
    return {name: r.cookies[name] for name in ("keepstone_session", "keepstone_csrf")}


def _doc(world: World, path: str, content: str) -> str:
    return world.store.write(world.team_ref(), path, content).etag


def _ended_edit(client: TestClient, world: World, path: str, etag: str, typed: str) -> str:
    """The edit form sent after its session ended: the sign-in page it answers."""
    form = {**SPACE, "csrf": "stale-token", "path": path, "etag": etag, "content": typed}
    r = send(client, f"/t/{world.team_id}/edit", form)
    assert r.status_code == 401, r.text[-400:]
    assert "your change was not saved" in r.text
    assert_inert(r)
    return r.text


def test_an_edit_opens_again_with_its_text_unsaved_then_saves(
    world: World, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    path = f"{unique('resume')}.md"
    etag = _doc(world, path, "# before\n")
    typed = f"# An hour of typing\r\n\r\n{unique('marker')}\r\n"
    signin = _ended_edit(client, world, path, etag, typed)
    carried = form_of(signin, "/signin")
    assert carried["carried"] == "edit" and carried["carried_etag"] == etag
    assert carried["carried_content"] == typed  # the text, in the sign-in form itself

    r = sign_in_from(client, signin, world.emails["member"])
    assert r.status_code == 200, r.text[-400:]
    assert_safe_page(dict(r.headers), r.text)
    assert "not saved yet" in r.text and f"Edit {path}" in r.text
    edit = form_of(r.text, f"/t/{world.team_id}/edit")
    assert edit["content"] == typed and edit["etag"] == etag and edit["path"] == path
    cookies = session_of(r)
    assert edit["csrf"] == cookies["keepstone_csrf"]  # the new session's form
    assert world.store.read(world.team_ref(), path).content == "# before\n"  # not saved

    saved = send(client, f"/t/{world.team_id}/edit", edit, cookies)
    assert saved.status_code == 303, saved.text[-400:]
    assert world.store.read(world.team_ref(), path).content == typed.replace("\r\n", "\n")
    # Kept nowhere but the pages: no log record holds it.
    marker = typed.split("\r\n")[2]
    assert not [rec for rec in caplog.records if marker in str(rec.__dict__)]


def test_a_change_made_meanwhile_is_a_conflict_never_overwritten(
    world: World, client: TestClient
) -> None:
    path = f"{unique('meanwhile')}.md"
    etag = _doc(world, path, "# before\n")
    typed = "# mine\r\n"
    signin = _ended_edit(client, world, path, etag, typed)
    _doc(world, path, "# theirs, while I was signed out\n")
    r = sign_in_from(client, signin, world.emails["member"])
    assert r.status_code == 200, r.text[-400:]
    assert "changed since you opened it" in r.text and "while you were signed out" in r.text
    assert "# theirs, while I was signed out" in r.text
    mine = form_of(r.text, f"/t/{world.team_id}/edit")
    assert mine["content"] == typed
    assert mine["etag"] == world.store.read(world.team_ref(), path).etag  # theirs, to confirm
    assert world.store.read(world.team_ref(), path).content.startswith("# theirs")

    # Unchanged at sign-in, changed before Save: the save is conditional on the version
    # the edit started from, so it is refused as a conflict too.
    etag = world.store.read(world.team_ref(), path).etag
    signin = _ended_edit(client, world, path, etag, typed)
    r = sign_in_from(client, signin, world.emails["member"])
    edit = form_of(r.text, f"/t/{world.team_id}/edit")
    assert edit["etag"] == etag
    _doc(world, path, "# a third change\n")
    saved = send(client, f"/t/{world.team_id}/edit", edit, session_of(r))
    assert saved.status_code == 412 and "changed since you opened it" in saved.text
    assert world.store.read(world.team_ref(), path).content == "# a third change\n"

    # Deleted meanwhile: the conflict page says so; saving mine would create it again.
    etag = world.store.read(world.team_ref(), path).etag
    signin = _ended_edit(client, world, path, etag, typed)
    world.store.delete(world.team_ref(), path)
    r = sign_in_from(client, signin, world.emails["member"])
    assert r.status_code == 200 and "deleted meanwhile" in r.text
    assert form_of(r.text, f"/t/{world.team_id}/edit")["etag"] == ""


def test_a_new_document_opens_again_with_its_path_and_text(
    world: World, client: TestClient
) -> None:
    path = f"{unique('fresh')}.md"
    signin = _ended_edit(client, world, path, "", "# new\r\n")
    r = sign_in_from(client, signin, world.emails["member"])
    assert r.status_code == 200 and "New document" in r.text, r.text[-400:]
    new = form_of(r.text, f"/t/{world.team_id}/edit")
    assert new["path"] == path and new["content"] == "# new\r\n" and new["etag"] == ""
    with pytest.raises(NotFound):
        world.store.read(world.team_ref(), path)
    # Taken meanwhile: the save is still create-only.
    _doc(world, path, "# someone else's\n")
    saved = send(client, f"/t/{world.team_id}/edit", new, session_of(r))
    assert saved.status_code == 409 and "already exists" in saved.text
    assert world.store.read(world.team_ref(), path).content == "# someone else's\n"


def test_a_rename_opens_again_with_the_new_path(world: World, client: TestClient) -> None:
    path, to = f"{unique('old')}.md", f"{unique('new')}.md"
    _doc(world, path, "# to move\n")
    form = {**SPACE, "csrf": "stale", "path": path, "to": to, "overwrite": "1"}
    r = send(client, f"/t/{world.team_id}/rename", form)
    assert r.status_code == 401 and "was not renamed" in r.text, r.text[-400:]
    carried = form_of(r.text, "/signin")
    assert carried["next"].startswith(f"/t/{world.team_id}/rename?")
    assert carried["carried_to"] == to and carried["carried_overwrite"] == "1"

    r = sign_in_from(client, r.text, world.emails["member"])
    assert r.status_code == 200 and "not done yet" in r.text, r.text[-400:]
    _sending_it_again_moves(client, world, r.text, session_of(r), path, to)


def _sending_it_again_moves(
    client: TestClient, world: World, body: str, cookies: dict[str, str], path: str, to: str
) -> None:
    """``body`` holds the rename form as it was sent (``path`` to ``to``, *Overwrite*) with
    the token of ``cookies``, nothing is moved yet, and sending it moves the document."""
    again = form_of(body, f"/t/{world.team_id}/rename")
    assert again["path"] == path and again["to"] == to and again["overwrite"] == "1"
    assert again["csrf"] == cookies["keepstone_csrf"]
    world.store.read(world.team_ref(), path)  # not moved
    moved = send(client, f"/t/{world.team_id}/rename", again, cookies)
    assert moved.status_code == 303
    assert world.store.read(world.team_ref(), to).content == "# to move\n"


def test_a_wrong_password_keeps_it_another_site_or_team_drops_it(
    world: World, client: TestClient
) -> None:
    path = f"{unique('kept')}.md"
    etag = _doc(world, path, "# before\n")
    typed = f"{unique('typed')}\r\n"
    signin = _ended_edit(client, world, path, etag, typed)

    wrong = sign_in_from(client, signin, world.emails["member"], "not the password")
    assert wrong.status_code == 401
    assert form_of(wrong.text, "/signin")["carried_content"] == typed

    cross_site = {"Sec-Fetch-Site": "cross-site"}
    other_site = sign_in_from(client, signin, world.emails["member"], headers=cross_site)
    assert other_site.status_code == 403 and typed.strip() not in other_site.text

    add_outsider(world)
    outsider = sign_in_from(client, signin, world.emails["outsider"])
    assert outsider.status_code == 303 and typed.strip() not in outsider.text
    assert outsider.headers["location"] == form_of(signin, "/signin")["next"]

    # An edit posted from another site after the session ended carries nothing.
    form = {**SPACE, "csrf": "x", "path": path, "etag": etag, "content": "planted"}
    r = send(client, f"/t/{world.team_id}/edit", form, headers={"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 401 and "planted" not in r.text
    assert "carried" not in form_of(r.text, "/signin")
    assert world.store.read(world.team_ref(), path).content == "# before\n"


def test_hostile_text_is_inert_on_every_page_it_is_echoed_on(
    world: World, client: TestClient
) -> None:
    path = f'{unique("x")}"><script>alert(3)</script>.md'
    signin = _ended_edit(client, world, path, "", HOSTILE.replace("\n", "\r\n"))
    assert "&lt;/textarea&gt;&lt;script&gt;alert(1)" in signin
    r = sign_in_from(client, signin, world.emails["member"])
    assert r.status_code == 200, r.text[-400:]
    assert_inert(r)
    new = form_of(r.text, f"/t/{world.team_id}/edit")
    assert new["content"] == HOSTILE.replace("\n", "\r\n") and new["path"] == path

    doc = f"{unique('plain')}.md"
    _doc(world, doc, "# plain\n")
    to = '"><img src=x onerror=alert(4)>.md'
    form = {**SPACE, "csrf": "stale", "path": doc, "to": to}
    r = send(client, f"/t/{world.team_id}/rename", form)
    assert r.status_code == 401
    assert_inert(r)
    r = sign_in_from(client, r.text, world.emails["member"])
    assert r.status_code == 200
    assert_inert(r)
    assert form_of(r.text, f"/t/{world.team_id}/rename")["to"] == to


def test_a_document_at_the_cap_is_carried_whole(world: World, client: TestClient) -> None:
    limits = world.app.state.spaces.store.limits
    cap = (limits or world.app.state.settings.limits()).max_document
    assert cap > 1 << 20  # over the multipart parser's default part limit
    typed = ("a" * 63 + "\r\n") * (cap // 64)  # exactly the cap once saved with LF
    path = f"{unique('big')}.md"
    etag = _doc(world, path, "# small\n")
    signin = _ended_edit(client, world, path, etag, typed)
    r = sign_in_from(client, signin, world.emails["member"])
    assert r.status_code == 200, r.text[-400:]
    edit = form_of(r.text, f"/t/{world.team_id}/edit")
    assert edit["content"] == typed
    saved = send(client, f"/t/{world.team_id}/edit", edit, session_of(r))
    assert saved.status_code == 303, saved.text[-400:]
    assert world.store.read(world.team_ref(), path).size_bytes == cap


def _stale(world: World) -> tuple[str, dict[str, str]]:
    """The token of an earlier sign-in, and the cookies of the member's latest one (signed
    in again since, as in another tab)."""
    _cookie, old_token = world.login("member")
    cookie, csrf = world.login("member")
    return old_token, {"keepstone_session": cookie, "keepstone_csrf": csrf}


def test_a_form_opened_before_signing_in_again_opens_with_its_text_and_the_new_token(
    world: World, client: TestClient
) -> None:
    path = f"{unique('stale')}.md"
    etag = _doc(world, path, "# before\n")
    typed = f"# typed under the old sign-in\r\n\r\n{unique('marker')}\r\n"
    old_token, cookies = _stale(world)
    form = {**SPACE, "csrf": old_token, "path": path, "etag": etag, "content": typed}
    r = send(client, f"/t/{world.team_id}/edit", form, cookies)
    assert r.status_code == 403 and "csrf_required" in r.text, r.text[-400:]
    assert "opened before your latest sign-in" in r.text and "press Save" in r.text
    assert_safe_page(dict(r.headers), r.text)
    again = form_of(r.text, f"/t/{world.team_id}/edit")
    assert again["content"] == typed and again["etag"] == etag and again["path"] == path
    assert again["csrf"] == cookies["keepstone_csrf"]  # the live sign-in's token
    assert world.store.read(world.team_ref(), path).content == "# before\n"  # not saved
    saved = send(client, f"/t/{world.team_id}/edit", again, cookies)
    assert saved.status_code == 303, saved.text[-400:]
    assert world.store.read(world.team_ref(), path).content == typed.replace("\r\n", "\n")

    # Changed since the form was opened: the conflict page, theirs kept.
    form = {**form, "etag": world.store.read(world.team_ref(), path).etag}
    _doc(world, path, "# theirs\n")
    r = send(client, f"/t/{world.team_id}/edit", form, cookies)
    assert r.status_code == 403 and "changed since you opened it" in r.text, r.text[-400:]
    assert form_of(r.text, f"/t/{world.team_id}/edit")["content"] == typed
    assert world.store.read(world.team_ref(), path).content == "# theirs\n"

    # A new document: its path and text, still created only while the path is free.
    fresh = f"{unique('fresh')}.md"
    new = {**SPACE, "csrf": old_token, "path": fresh, "etag": "", "content": "# new\r\n"}
    r = send(client, f"/t/{world.team_id}/edit", new, cookies)
    assert r.status_code == 403 and "New document" in r.text, r.text[-400:]
    assert form_of(r.text, f"/t/{world.team_id}/edit")["path"] == fresh


def test_a_rename_opened_before_signing_in_again_opens_with_its_new_path(
    world: World, client: TestClient
) -> None:
    path, to = f"{unique('old')}.md", f"{unique('new')}.md"
    _doc(world, path, "# to move\n")
    old_token, cookies = _stale(world)
    form = {**SPACE, "csrf": old_token, "path": path, "to": to, "overwrite": "1"}
    r = send(client, f"/t/{world.team_id}/rename", form, cookies)
    assert r.status_code == 403 and "was not renamed" in r.text, r.text[-400:]
    _sending_it_again_moves(client, world, r.text, cookies, path, to)


def test_a_stale_token_from_another_site_or_a_foreign_cookie_is_only_refused(
    world: World, client: TestClient
) -> None:
    path = f"{unique('refused')}.md"
    etag = _doc(world, path, "# before\n")
    old_token, cookies = _stale(world)
    form = {**SPACE, "csrf": old_token, "path": path, "etag": etag, "content": "planted"}
    for headers in ({"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://elsewhere.example"}):
        r = send(client, f"/t/{world.team_id}/edit", form, cookies, headers)
        assert r.status_code == 403 and "planted" not in r.text, headers
        assert "reload the page" in r.text
    # The cookie is not this session's token (another user's): no form to send again.
    foreign = {**cookies, "keepstone_csrf": world.sessions["admin"][1]}
    r = send(client, f"/t/{world.team_id}/edit", form, foreign)
    assert r.status_code == 403 and "planted" not in r.text
    # No token at all is no form of ours.
    r = send(client, f"/t/{world.team_id}/edit", {**form, "csrf": ""}, cookies)
    assert r.status_code == 403 and "planted" not in r.text
    # The session itself has ended too: the sign-in page, carrying the text.
    ended = {**cookies, "keepstone_session": "ended-session"}
    r = send(client, f"/t/{world.team_id}/edit", form, ended)
    assert r.status_code == 401 and form_of(r.text, "/signin")["carried_content"] == "planted"
    assert world.store.read(world.team_ref(), path).content == "# before\n"
