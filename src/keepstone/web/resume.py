"""A form sent after its session ended, carried across signing in again (docs/ui.md).

Saving the edit form (a new document's too) or the rename form without a live session
answers the sign-in page (``401``): it says nothing was saved and shows what was typed. Its
sign-in form carries that back: the text (the read-only textarea belongs to the form), the
etag of the version the edit started from, the path typed for a new document, a rename's
new path and *Overwrite*. Signed in, the answer to the sign-in post is that form again,
filled in with what was carried and a notice that nothing is saved yet: the person checks
it and presses *Save* (or *Rename*) themselves; the UI never writes on their behalf. The
edit keeps the etag it started from as its ``If-Match``; a document changed or deleted
meanwhile opens as the conflict page at once, so nothing is overwritten unseen.

What is carried is the browser's own post echoed back as escaped text: never put in a URL,
never kept on the server nor logged, never echoed to a post from another site, and
dropped when whoever signs in cannot act in the form's team.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio.to_thread
from fastapi import Request
from fastapi.responses import Response
from starlette.datastructures import FormData, QueryParams

from keepstone.documents import Document
from keepstone.errors import CsrfRequired, KeepstoneError, NotFound, Unauthenticated
from keepstone.principal import Principal
from keepstone.service.spaces import SpaceService
from keepstone.web.core import (
    CSRF_COOKIE,
    CSRF_FIELD,
    from_another_site,
    page,
    signed_in_with,
    signed_in_with_cookie_token,
    text,
    url,
)
from keepstone.web.spaces import fields_of, ref_of, space_fields

#: The forms whose post is carried across the sign-in, as named in their path.
EDIT, RENAME = "edit", "rename"

#: What the sign-in page says when a form was sent after its session ended.
SESSION_ENDED = {
    EDIT: (
        "your session ended before you saved, so your change was not saved; sign in again "
        "and the form opens with your text in it, to check and save"
    ),
    RENAME: (
        "your session ended before the rename, so the document was not renamed; sign in "
        "again and the rename form opens with the new path you typed, to check and send"
    ),
}

#: What the form says once it is opened again with what was carried.
RESUMED = {
    EDIT: (
        "You are signed in again. This is the text you sent when your session ended: it is "
        "not saved yet. Check it, then press Save."
    ),
    RENAME: (
        "You are signed in again. This is the rename you sent when your session ended: it "
        "is not done yet. Check it, then press Rename."
    ),
}
RESUMED_CONFLICT = (
    "You are signed in again. Your text, sent when your session ended, was not saved, and "
    "the document changed while you were signed out."
)


@dataclass(frozen=True)
class _Again:
    """Why a form opens again filled in: its notice, the conflict page's, its status."""

    notice: str
    conflict: str = ""
    status: int = 200


_SIGNED_IN_AGAIN = {EDIT: _Again(RESUMED[EDIT], RESUMED_CONFLICT), RENAME: _Again(RESUMED[RENAME])}
#: What the form says when it was sent with the token of an earlier sign-in (``403``).
_STALE_TOKEN = {
    EDIT: _Again(
        "This form was opened before your latest sign-in, so it carried an old token "
        "(csrf_required) and your change was not saved. This is the text you sent: check "
        "it, then press Save.",
        "This form was opened before your latest sign-in, so your text was not saved, and "
        "the document changed since you opened it.",
        403,
    ),
    RENAME: _Again(
        "This form was opened before your latest sign-in, so it carried an old token "
        "(csrf_required) and the document was not renamed. This is the rename you sent: "
        "check it, then press Rename.",
        status=403,
    ),
}

_FORM_PATH = re.compile(r"/t/(?P<team>[^/?#]+)/(?P<kind>edit|rename)")


def safe_next(value: str) -> str:
    """A local path to go to after signing in ('/' for anything else: no open redirect)."""
    if not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


@dataclass(frozen=True)
class Carried:
    """What a form sent after its session ended carries across the sign-in."""

    kind: str  #: EDIT or RENAME: the form it goes back to
    content: str = ""  #: edit: the text typed (line ends as LF)
    etag: str = ""  #: edit: the version it started from ('' for a new document)
    path: str = ""  #: edit of a new document: the path typed
    to: str = ""  #: rename: the new path typed
    overwrite: bool = False  #: rename: *Overwrite* ticked

    @classmethod
    def of_form(cls, form: FormData, kind: str) -> Carried:
        """What the edit or rename form (``kind``) sent."""
        if kind == RENAME:
            return cls(RENAME, to=text(form, "to"), overwrite=bool(text(form, "overwrite")))
        etag = text(form, "etag")
        content = text(form, "content").replace("\r\n", "\n")
        return cls(EDIT, content=content, etag=etag, path="" if etag else text(form, "path"))

    @classmethod
    def of_signin(cls, form: FormData) -> Carried | None:
        """What the sign-in form carries (its ``carried_*`` fields), if anything."""
        kind = text(form, "carried")
        if kind not in SESSION_ENDED:
            return None
        return cls(
            kind,
            content=text(form, "carried_content").replace("\r\n", "\n"),
            etag=text(form, "carried_etag"),
            path=text(form, "carried_path"),
            to=text(form, "carried_to"),
            overwrite=bool(text(form, "carried_overwrite")),
        )


def session_ended(request: Request, team_id: str, kind: str, form: FormData) -> Response:
    """The sign-in page (``401``) for the ``kind`` form sent after its session ended
    (expired, or signed out in another tab): it says nothing was done, and its sign-in
    form leads back to the form and carries what was sent (not when another site posted
    it: then it only leads back)."""
    etag = text(form, "etag")
    doc = text(form, "path") if kind == RENAME or etag else None
    back = url(f"/t/{team_id}/{kind}", **space_fields(form), path=doc)
    carried = None if from_another_site(request) else Carried.of_form(form, kind)
    return page(
        request, "signin.html", 401, next=safe_next(back), email="", error=None,
        notice=SESSION_ENDED[kind], carried=carried,
    )  # fmt: skip


async def resumed(
    request: Request, target: str, carried: Carried | None, session: str, csrf: str
) -> Response | None:
    """The form ``target`` names, filled in with what ``carried`` holds, for the session
    just opened (its cookies are set on the answer by the caller); None when there is
    nothing to carry back there (then the caller redirects to ``target``)."""
    found = _FORM_PATH.fullmatch(urlsplit(target).path)
    if carried is None or found is None or found["kind"] != carried.kind:
        return None
    team_id = found["team"]
    query = QueryParams(urlsplit(target).query)
    try:
        who = await anyio.to_thread.run_sync(lambda: signed_in_with(request, session, team_id))
        return await _again(request, who, query, carried, csrf, _SIGNED_IN_AGAIN[carried.kind])
    except KeepstoneError:
        # Whoever signed in cannot act in the team or open the form: the redirect shows why.
        return None


async def token_stale(
    request: Request, team_id: str, kind: str, form: FormData, refusal: CsrfRequired
) -> Response:
    """The ``kind`` form again (``403``), filled in with what was sent, when it was refused
    for a CSRF token that is not its session's while the CSRF cookie is: it was opened
    under an earlier sign-in (the person signed in again since, in another tab). Nothing is
    written; the form now carries this sign-in's token, to check and send again. A post
    without a token, another site's, or one whose cookie is not its session's token gets
    ``refusal`` itself; one whose session has ended, :func:`session_ended`."""
    if not text(form, CSRF_FIELD) or from_another_site(request):
        raise refusal
    try:
        who = await anyio.to_thread.run_sync(lambda: signed_in_with_cookie_token(request, team_id))
    except Unauthenticated:
        return session_ended(request, team_id, kind, form)
    if who is None:
        raise refusal
    query = QueryParams({**space_fields(form), "path": text(form, "path")})
    csrf = request.cookies.get(CSRF_COOKIE, "")
    return await _again(request, who, query, Carried.of_form(form, kind), csrf, _STALE_TOKEN[kind])


async def _again(
    request: Request,
    who: Principal,
    query: QueryParams,
    carried: Carried,
    csrf: str,
    why: _Again,
) -> Response:
    if carried.kind == RENAME:
        return await _rename_again(request, who, query, carried, csrf, why)
    return await _edit_again(request, who, query, carried, csrf, why)


def _spaces(request: Request) -> SpaceService:
    service: SpaceService = request.app.state.spaces
    return service


async def _read(request: Request, who: Principal, fields: dict[str, str], path: str) -> Document:
    service, ref = _spaces(request), ref_of(who, fields)
    return await anyio.to_thread.run_sync(lambda: service.read(ref, path))


async def _edit_again(
    request: Request, who: Principal, query: QueryParams, carried: Carried, csrf: str, why: _Again
) -> Response:
    """The edit form with the carried text, on the etag it started from; the conflict page
    when the document changed or went meanwhile."""
    fields = fields_of(ref_of(who, space_fields(query)))
    team_id = who.team_id
    if not carried.etag:  # a new document: still written only if its path is free
        return page(
            request, "edit.html", why.status, space=fields, path=carried.path,
            content=carried.content, etag="", new=True, error=None, notice=why.notice,
            csrf=csrf, team_id=team_id,
        )  # fmt: skip
    path = query.get("path", "")
    try:
        doc: Document | None = await _read(request, who, fields, path)
    except NotFound:
        doc = None
    if doc is None or doc.etag != carried.etag:
        return page(
            request, "conflict.html", why.status, space=fields, path=path,
            mine=carried.content, theirs=doc, notice=why.conflict, csrf=csrf, team_id=team_id,
        )  # fmt: skip
    return page(
        request, "edit.html", why.status, space=fields, path=doc.path, content=carried.content,
        etag=carried.etag, new=False, error=None, notice=why.notice, csrf=csrf,
        team_id=team_id,
    )  # fmt: skip


async def _rename_again(
    request: Request, who: Principal, query: QueryParams, carried: Carried, csrf: str, why: _Again
) -> Response:
    """The rename form with the new path and *Overwrite* as they were sent."""
    fields = fields_of(ref_of(who, space_fields(query)))
    doc = await _read(request, who, fields, query.get("path", ""))
    return page(
        request, "rename.html", why.status, space=fields, path=doc.path, to=carried.to,
        overwrite=carried.overwrite, error=None, notice=why.notice, csrf=csrf,
        team_id=who.team_id,
    )  # fmt: skip
