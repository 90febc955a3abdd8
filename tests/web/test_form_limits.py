"""The UI's forms at their limits, in-process on SQLite and PostgreSQL: the edit form saves a
document up to the store's cap and names the cap over it (the text kept), a body over the
app's limit is an HTML page on a UI path, and an edit sent after the session ended leads
back to the form, saying it was not saved and showing the text."""

from __future__ import annotations

import base64
import os
import re
from html import unescape

import httpx
from fastapi.testclient import TestClient

from tests.api.world import PASSWORD, SPACE, World, tarball, unique
from tests.web.pages import post_form

MiB = 1 << 20


def _cap(world: World) -> int:
    limits = world.app.state.spaces.store.limits
    cap = (limits or world.app.state.settings.limits()).max_document
    assert isinstance(cap, int) and cap > MiB
    return cap


def _save(
    client: TestClient, world: World, path: str, content: str, etag: str = ""
) -> httpx.Response:
    """The edit form as a browser sends it: multipart, the text a field (no file name)."""
    data = {**SPACE, "path": path, "etag": etag}
    return post_form(
        client, f"/t/{world.team_id}/edit", world, data, files={"content": (None, content)}
    )


def test_the_edit_form_saves_up_to_the_cap_and_names_the_cap_over_it(
    world: World, client: TestClient
) -> None:
    cap = _cap(world)
    # As a browser sends a textarea: CRLF line ends, so the field is longer than the
    # document it saves (exactly the cap once saved with LF).
    line = "a" * 63 + "\r\n"
    at_cap = line * (cap // 64)
    path = f"{unique('big')}.md"
    r = _save(client, world, path, at_cap)
    assert r.status_code == 303, r.text[-400:]
    assert world.store.read(world.team_ref(), path).size_bytes == cap

    over = at_cap + "the end of what I typed"
    r = _save(client, world, f"{unique('over')}.md", over)
    assert r.status_code == 413, r.text[-400:]
    body = unescape(r.text)
    assert f"the limit is {cap} bytes" in body and 'role="alert"' in body
    # The text is back in the form, whole.
    kept = body.split('name="content"', 1)[1]
    assert "the end of what I typed</textarea>" in kept
    assert kept.count("a" * 63) == cap // 64


def test_the_upload_form_takes_an_archive_over_one_mib(world: World, client: TestClient) -> None:
    # Random text barely compresses: the archive's file part is over a MiB.
    text = base64.b64encode(os.urandom(1_200_000)).decode("ascii")
    archive = tarball({"noise.md": f"# noise\n\n{text}\n", "small.md": "# small\n"})
    assert len(archive) > MiB
    space = {"name": unique("upload"), "project": "p1"}
    r = post_form(
        client,
        f"/t/{world.team_id}/import",
        world,
        {**space, "strategy": "skip"},
        files={"archive": ("big.tar.gz", archive, "application/gzip")},
    )
    assert r.status_code == 200 and "Import report" in r.text, r.text[-600:]
    assert "written <code>small.md</code>" in r.text


def test_a_form_over_the_body_limit_is_an_html_page(world: World, client: TestClient) -> None:
    limit = world.app.state.settings.max_json_bytes
    content = "b" * (limit + 100)
    r = _save(client, world, f"{unique('huge')}.md", content)
    assert r.status_code == 413
    assert r.headers["content-type"].startswith("text/html")
    assert "body_too_large" in r.text and "keepstone memory import" in r.text
    assert "content-security-policy" in r.headers

    # Sent without a Content-Length (counted as it arrives): the same page.
    cookie, csrf = world.sessions["member"]
    boundary = "keepstone-test-boundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="csrf"\r\n\r\n{csrf}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="content"\r\n\r\n'
    ).encode()
    chunks = [head] + [b"c" * MiB for _ in range(limit // MiB + 1)]
    r = client.post(
        f"/t/{world.team_id}/import",
        content=iter(chunks),
        headers={
            "Cookie": f"keepstone_session={cookie}; keepstone_csrf={csrf}",
            "Content-Type": f"multipart/form-data; boundary={boundary}",
        },
    )
    client.cookies.clear()
    assert r.status_code == 413 and r.headers["content-type"].startswith("text/html")
    assert "body_too_large" in r.text

    # The JSON API's answer is unchanged.
    api = client.post(
        "/api/memory/docs", content=b"x" * (limit + 1), headers={"Content-Type": "text/plain"}
    )
    assert api.status_code == 413 and api.json()["error"]["code"] == "body_too_large"


def _next_of(body: str) -> str:
    found = re.search(r'name="next" value="([^"]*)"', body)
    assert found, body[-800:]
    return unescape(found.group(1))


def test_an_edit_sent_after_the_session_ended_leads_back_to_the_form(
    world: World, client: TestClient
) -> None:
    path = f"{unique('ended')}.md"
    etag = world.store.write(world.team_ref(), path, "# before\n").etag
    form = {**SPACE, "path": path, "etag": etag, "csrf": "stale-token"}
    typed = "# An hour of typing\r\n\r\n<b>mine</b>\r\n"
    for cookie in ("", "keepstone_session=ended-session; keepstone_csrf=stale-token"):
        r = client.post(
            f"/t/{world.team_id}/edit",
            data=form,
            files={"content": (None, typed)},
            headers={"Cookie": cookie} if cookie else {},
            follow_redirects=False,
        )
        client.cookies.clear()
        assert r.status_code == 401, r.text[-400:]
        assert "your session ended before you saved" in r.text
        assert "your change was not saved" in r.text
        # The text sent, as text, to copy (not kept anywhere, not in the URL).
        assert "# An hour of typing\n\n&lt;b&gt;mine&lt;/b&gt;\n</textarea>" in r.text
        back = _next_of(r.text)
        assert back.startswith(f"/t/{world.team_id}/edit?") and f"path={path}" in back
        assert "typing" not in back
    assert world.store.read(world.team_ref(), path).content == "# before\n"

    # Signing in from that page goes back to the form.
    r = client.post(
        "/signin",
        data={"email": world.emails["member"], "password": PASSWORD, "next": back},
        follow_redirects=False,
    )
    client.cookies.clear()
    assert r.status_code == 303 and r.headers["location"] == back

    # A new document's form comes back empty (its path holds nothing yet to open).
    new = {**SPACE, "path": "new-one.md", "etag": "", "csrf": "x"}
    r = client.post(
        f"/t/{world.team_id}/edit", data=new, files={"content": (None, "new text")},
        follow_redirects=False,
    )  # fmt: skip
    client.cookies.clear()
    assert r.status_code == 401 and "path=" not in _next_of(r.text)

    # A form posted from another site is not echoed.
    r = client.post(
        f"/t/{world.team_id}/edit",
        data=form,
        files={"content": (None, "planted text")},
        headers={"Sec-Fetch-Site": "cross-site"},
        follow_redirects=False,
    )
    client.cookies.clear()
    assert r.status_code == 401 and "planted text" not in r.text
