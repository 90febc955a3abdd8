"""The UI's pages for signing in, picking a team, and browsing and editing spaces.

Every page calls the same services as the API (``app.state.spaces``,
``app.state.credentials``); a refusal is the service's one-line message, shown next to
the field it concerns (a form) or as the page (anything else).
"""

from __future__ import annotations

import re
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from keepstone.documents import parse_import_strategy
from keepstone.errors import (
    AlreadyExists,
    CsrfRequired,
    InvalidRequest,
    KeepstoneError,
    NotFound,
    PreconditionFailed,
    Unauthenticated,
    retry_after,
)
from keepstone.principal import Principal
from keepstone.service.spaces import SpaceService
from keepstone.spaces import SpaceRef
from keepstone.web.core import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    WHOLE_REQUEST,
    LoginThrottleLike,
    UiRoute,
    from_another_site,
    page,
    posted,
    see_other,
    signed_in,
    text,
    upload,
    url,
)
from keepstone.web.markdown import render
from keepstone.web.resume import (
    EDIT,
    RENAME,
    Carried,
    resumed,
    safe_next,
    session_ended,
    token_stale,
)
from keepstone.web.spaces import (
    SAVED_NOTICES,
    fields_of,
    label_fields,
    listing,
    ref_of,
    restored_notice,
    space_fields,
)

router = APIRouter(include_in_schema=False, route_class=UiRoute)

T = TypeVar("T")


async def off_loop(fn: Callable[[], T]) -> T:
    """Run a blocking service call in the threadpool."""
    return await anyio.to_thread.run_sync(fn)


def spaces_of(request: Request) -> SpaceService:
    service: SpaceService = request.app.state.spaces
    return service


def max_document(request: Request) -> int:
    """The document cap the store enforces (the settings' when a server behind it does)."""
    limits = spaces_of(request).store.limits
    return (limits or request.app.state.settings.limits()).max_document


#: Room over twice the document cap for the edit form's text: a browser sends each line
#: end of a textarea as CRLF (saved as LF), so a document at the cap may arrive up to
#: twice as long; the service then judges the document's size, and names the cap.
_TEXT_PART_ROOM = 64 * 1024


def _text_part_cap(request: Request) -> int:
    """The longest text field a form may carry: the edit form's (and the sign-in form's,
    which carries an edit's text across a sign-in)."""
    return 2 * max_document(request) + _TEXT_PART_ROOM


def asked_space(request: Request, team_id: str) -> tuple[Principal, SpaceRef]:
    """The signed-in principal and the space the query names: every space page's prelude."""
    who = signed_in(request, team_id)
    return who, ref_of(who, space_fields(request.query_params))


# --- signing in and out -----------------------------------------------------------------------


@router.get("/")
def home(request: Request) -> Response:
    """The team's spaces when the user acts in exactly one team, else the team picker."""
    try:
        who = signed_in(request)
    except Unauthenticated:
        return see_other("/signin")
    teams = request.app.state.credentials.teams_of(who)
    if len(teams) == 1:
        return see_other(f"/t/{teams[0].id}/spaces")
    return see_other("/teams")


#: What the sign-in page says on a ``keepstone serve --local`` server, which has no users.
LOCAL_MODE = (
    "this server runs in local mode, which has no users to sign in: the web UI needs a "
    "server with users (keepstone serve without --local); use the API or the CLI here"
)


@router.get("/signin")
def signin_form(request: Request, next: str = "/") -> Response:
    error = LOCAL_MODE if request.app.state.settings.local else None
    return page(request, "signin.html", next=safe_next(next), email="", error=error)


@router.post("/signin")
async def signin(request: Request) -> Response:
    """Sign in, then go to ``next``; a form sent after its session ended (its text carried
    in the sign-in form: :mod:`keepstone.web.resume`) opens again, filled in, unsaved."""
    form = await request.form(max_part_size=_text_part_cap(request))
    email, password = text(form, "email"), text(form, "password")
    target = safe_next(text(form, "next", "/"))
    if from_another_site(request):
        # A sign-in form posted from another site (login CSRF): refused outright, and
        # nothing it carries is echoed.
        return page(
            request,
            "signin.html",
            403,
            next=target,
            email=email,
            error="this sign-in came from another site; sign in from this page",
        )
    carried = Carried.of_signin(form)
    throttle: LoginThrottleLike = request.app.state.login_throttle
    client = request.client.host if request.client else "unknown"
    credentials = request.app.state.credentials
    try:
        throttle.check(email, client)
        try:
            session = await off_loop(lambda: credentials.sign_in(email, password))
        except Unauthenticated:
            throttle.failed(email, client)
            raise
    except KeepstoneError as exc:
        refused = page(
            request, "signin.html", exc.status, next=target, email=email, error=exc.message,
            carried=carried,
        )  # fmt: skip
        refused.headers.update(retry_after(exc))
        return refused
    throttle.succeeded(email, client)
    again = await resumed(request, target, carried, session.token, session.csrf_token)
    response = again or see_other(target)
    settings = request.app.state.settings
    for name, value in ((SESSION_COOKIE, session.token), (CSRF_COOKIE, session.csrf_token)):
        response.set_cookie(
            name,
            value,
            max_age=settings.session_ttl_seconds,
            httponly=True,
            samesite="lax",
            secure=settings.cookie_secure,
            path="/",
        )
    return response


@router.post("/signout")
async def signout(request: Request) -> Response:
    who, _form = await posted(request)
    credentials = request.app.state.credentials
    await off_loop(lambda: credentials.sign_out(who, request.cookies.get(SESSION_COOKIE)))
    response = see_other("/signin")
    for name in (SESSION_COOKIE, CSRF_COOKIE):
        response.delete_cookie(name, path="/", httponly=True, samesite="lax")
    return response


@router.get("/teams")
def teams(request: Request) -> Response:
    who = signed_in(request)
    found = request.app.state.credentials.teams_of(who)
    return page(request, "teams.html", teams=found)


# --- spaces -----------------------------------------------------------------------------------


@router.get("/t/{team_id}/spaces")
def spaces_page(request: Request, team_id: str) -> Response:
    """Every space the user may read in the team (and global ones), with usage bars."""
    who = signed_in(request, team_id)
    service = spaces_of(request)
    listing = service.list_spaces(who)
    totals: dict[str, int] = defaultdict(int)
    rows: list[dict[str, Any]] = []
    team_usage: tuple[int, int] | None = None
    for item in listing.spaces:
        totals[item.space.visibility] += item.used_bytes
        fields = label_fields(item.space)
        rows.append({"item": item, "link": url(f"/t/{team_id}/space", **fields)})
        if team_usage is None and item.space.visibility != "global":
            usage = service.usage(ref_of(who, fields), index=False)
            team_usage = (usage.team_used_bytes, usage.team_quota_bytes)
    return page(
        request,
        "spaces.html",
        rows=rows,
        truncated=listing.truncated,
        totals=sorted(totals.items()),
        team_usage=team_usage,
        max_document=max_document(request),
    )


@router.get("/t/{team_id}/space")
def space_page(request: Request, team_id: str) -> Response:
    """A page of a space's documents (:func:`keepstone.web.spaces.listing`), and its usage
    against its sub-cap and the team's."""
    who, ref = asked_space(request, team_id)
    service = spaces_of(request)
    return page(
        request,
        "space.html",
        space=fields_of(ref),
        space_id=ref.id,
        **listing(service, ref, request.query_params),
        usage=service.usage(ref),
        max_document=max_document(request),
    )


@router.get("/t/{team_id}/doc")
def doc_page(
    request: Request, team_id: str, path: str, restored: str = "", saved: str = ""
) -> Response:
    """One document, its Markdown rendered and sanitised (with a notice after a restore,
    which redirects here with ``restored=<version>``, and after a save or a rename, with
    ``saved=saved|renamed``)."""
    who, ref = asked_space(request, team_id)
    service = spaces_of(request)
    doc = service.read(ref, path)
    return page(
        request,
        "doc.html",
        space=fields_of(ref),
        space_id=ref.id,
        doc=doc,
        html=render(doc.content),
        restored=restored_notice(service, ref, doc, restored),
        saved=SAVED_NOTICES.get(saved),
    )


# --- editing ----------------------------------------------------------------------------------


@router.get("/t/{team_id}/edit")
def edit_form(request: Request, team_id: str, path: str = "") -> Response:
    """The document in a textarea (its etag kept for the save), or an empty new one."""
    who, ref = asked_space(request, team_id)
    if not path:
        return page(
            request, "edit.html", space=fields_of(ref), path="", content="", etag="",
            new=True, error=None,
        )  # fmt: skip
    doc = spaces_of(request).read(ref, path)
    return page(
        request, "edit.html", space=fields_of(ref), path=doc.path, content=doc.content,
        etag=doc.etag, new=False, error=None,
    )  # fmt: skip


@router.post("/t/{team_id}/edit")
async def edit_save(request: Request, team_id: str) -> Response:
    """Save: a conditional write on the etag the form was opened with (a new document:
    only if the path is free)."""
    try:
        who, form = await posted(request, team_id, max_part_size=_text_part_cap(request))
    except Unauthenticated:
        return session_ended(request, team_id, EDIT, await request.form())
    except CsrfRequired as refusal:
        return await token_stale(request, team_id, EDIT, await request.form(), refusal)
    space = space_fields(form)
    path = text(form, "path").strip()
    # A browser sends a textarea's lines ending in CRLF; documents keep LF.
    content = text(form, "content").replace("\r\n", "\n")
    etag = text(form, "etag")
    service = spaces_of(request)
    try:
        ref = ref_of(who, space)

        def save() -> None:
            if etag:
                service.write(who, ref, path, content, if_match=etag)
                return
            try:  # a new document: written only while the path is free, in one step
                service.write(who, ref, path, content, create_only=True)
            except PreconditionFailed:
                raise AlreadyExists(
                    f"a document already exists at {path!r}; open it to edit it, or "
                    "choose another path"
                ) from None

        await off_loop(save)
    except PreconditionFailed:
        return await _conflict(request, who, space, path, content)
    except WHOLE_REQUEST:
        raise
    except KeepstoneError as exc:
        return page(
            request, "edit.html", exc.status, space=space, path=path, content=content,
            etag=etag, new=not etag, error=exc.message,
        )  # fmt: skip
    return see_other(url(f"/t/{team_id}/doc", **space, path=path, saved="saved"))


async def _conflict(
    request: Request, who: Any, space: dict[str, str], path: str, mine: str
) -> Response:
    """The "changed since you opened it" page: theirs and mine, and a form to save mine
    over theirs (on the etag of theirs) or to drop mine."""
    service = spaces_of(request)
    ref = ref_of(who, space)
    try:
        theirs = await off_loop(lambda: service.read(ref, path))
    except NotFound:
        theirs = None
    return page(
        request,
        "conflict.html",
        412,
        space=space,
        path=path,
        mine=mine,
        theirs=theirs,
    )


@router.get("/t/{team_id}/rename")
def rename_form(request: Request, team_id: str, path: str) -> Response:
    who, ref = asked_space(request, team_id)
    doc = spaces_of(request).read(ref, path)
    return page(
        request, "rename.html", space=fields_of(ref), path=doc.path,
        to=doc.path, overwrite=False, error=None,
    )  # fmt: skip


@router.post("/t/{team_id}/rename")
async def rename(request: Request, team_id: str) -> Response:
    try:
        who, form = await posted(request, team_id)
    except Unauthenticated:
        return session_ended(request, team_id, RENAME, await request.form())
    except CsrfRequired as refusal:
        return await token_stale(request, team_id, RENAME, await request.form(), refusal)
    space = space_fields(form)
    path, to = text(form, "path"), text(form, "to").strip()
    overwrite = bool(text(form, "overwrite"))
    service = spaces_of(request)
    try:
        ref = ref_of(who, space)
        await off_loop(lambda: service.move(who, ref, path, to, overwrite=overwrite))
    except WHOLE_REQUEST:
        raise
    except KeepstoneError as exc:
        return page(
            request, "rename.html", exc.status, space=space, path=path,
            to=to, overwrite=overwrite, error=exc.message,
        )  # fmt: skip
    return see_other(url(f"/t/{team_id}/doc", **space, path=to, saved="renamed"))


@router.get("/t/{team_id}/delete")
def delete_form(request: Request, team_id: str, path: str) -> Response:
    """Asks before deleting: the document's path, size and etag."""
    who, ref = asked_space(request, team_id)
    doc = spaces_of(request).read(ref, path)
    return page(request, "delete.html", space=fields_of(ref), doc=doc, error=None)


@router.post("/t/{team_id}/delete")
async def delete(request: Request, team_id: str) -> Response:
    who, form = await posted(request, team_id)
    space = space_fields(form)
    path, etag = text(form, "path"), text(form, "etag")
    service = spaces_of(request)
    ref = ref_of(who, space)
    await off_loop(lambda: service.delete(who, ref, path, if_match=etag or None))
    return see_other(url(f"/t/{team_id}/space", **space, saved="deleted"))


# --- export and import ------------------------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@router.get("/t/{team_id}/export")
async def export(request: Request, team_id: str) -> Response:
    """The space as a .tar.gz (spooled to disk first: an error is a page, not a cut file)."""
    who, ref = asked_space(request, team_id)
    service = spaces_of(request)
    sink = tempfile.TemporaryFile()  # closed by the stream (or below)
    try:
        await off_loop(lambda: service.export(ref, sink))
    except BaseException:
        sink.close()
        raise
    sink.seek(0)

    def chunks() -> Iterator[bytes]:
        with sink:
            while block := sink.read(1 << 16):
                yield block

    filename = _UNSAFE.sub("-", ref.name).strip("-") or "space"
    return StreamingResponse(
        chunks(),
        media_type="application/gzip",
        headers={"Content-Disposition": f'attachment; filename="{filename}.tar.gz"'},
    )


@router.get("/t/{team_id}/import")
def import_form(request: Request, team_id: str) -> Response:
    who, ref = asked_space(request, team_id)
    return page(
        request, "import.html", space=fields_of(ref), error=None,
        strategy="skip", report=None,
    )  # fmt: skip


@router.post("/t/{team_id}/import")
async def import_upload(request: Request, team_id: str) -> Response:
    """Merge an uploaded .tar.gz under skip|overwrite|rename, and show the report."""
    who, form = await posted(request, team_id)
    space = space_fields(form)
    strategy = text(form, "strategy", "skip")
    archive = upload(form, "archive")
    service = spaces_of(request)
    ref: SpaceRef | None = None
    try:
        ref = named = ref_of(who, space)
        how = parse_import_strategy(strategy)
        if archive is None or not archive.filename:
            raise InvalidRequest("choose a .tar.gz file to upload", field="archive")
        file = archive.file
        report = await off_loop(lambda: service.import_archive(who, named, file, how))
    except WHOLE_REQUEST:
        raise
    except KeepstoneError as exc:
        if ref is None:  # the form named no space: there is no upload form to show again
            raise
        return page(
            request, "import.html", exc.status, space=fields_of(ref),
            error=exc.message, strategy=strategy, report=None,
        )  # fmt: skip
    finally:
        await form.close()  # the upload's spooled file
    return page(
        request, "import.html", space=fields_of(named), error=None,
        strategy=strategy, report=report,
    )  # fmt: skip
