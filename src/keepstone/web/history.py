"""The UI's pages of a document's history (docs/ui.md "History"): its versions,
one version rendered or raw, a diff between two versions, and restoring one.

The same services as the REST history routes (:mod:`keepstone.api.routes.history`): the list
is :meth:`SpaceService.versions`, a version :meth:`~SpaceService.read_version`, a diff
:meth:`~SpaceService.diff` and a restore :meth:`~SpaceService.restore` — a write, so its
refusals (role, quota, secret, a live document changed since the page was opened) are the
service's one-line messages, shown next to the restore control they concern.

A deleted document keeps its history: the history page of a path that holds no document
any more still lists its versions (newest first: its deletion marker), each restorable.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from keepstone.documents import MAX_VERSION, VersionInfo
from keepstone.errors import (
    InvalidRequest,
    KeepstoneError,
    NotFound,
    PreconditionFailed,
)
from keepstone.principal import Principal
from keepstone.service.access import authorize_space_mutation
from keepstone.text import is_whole_number
from keepstone.web.core import WHOLE_REQUEST, UiRoute, page, posted, see_other, text, url
from keepstone.web.markdown import render
from keepstone.web.pages import asked_space, off_loop, spaces_of
from keepstone.web.spaces import fields_of, ref_of, space_fields

router = APIRouter(include_in_schema=False, route_class=UiRoute)


def parse_version(raw: str, field: str = "version") -> int:
    """A version number from a query or form field: a whole number from 1."""
    number = int(raw) if is_whole_number(raw) else 0
    if not 1 <= number <= MAX_VERSION:
        shown = raw.strip() or "nothing"
        raise InvalidRequest(
            f"{field} must be a version number (a whole number from 1), not {shown!r}; "
            "pick one from the document's history page",
            field=field,
        )
    return number


def _versions(request: Request, who: Principal, space: dict[str, str], path: str) -> list[Any]:
    """The document's versions, newest first; 404 when the path never held one."""
    versions = list(spaces_of(request).versions(ref_of(who, space), path))
    if not versions:
        raise NotFound(f"{path!r} has no history in this space: no document was ever kept there")
    return versions


def _live(versions: list[VersionInfo]) -> VersionInfo | None:
    """The live version (the newest, unless it is a deletion marker)."""
    return None if versions[0].deleted else versions[0]


def _history_page(
    request: Request,
    space: dict[str, str],
    path: str,
    versions: list[VersionInfo],
    *,
    error: str | None = None,
    error_version: int | None = None,
    status: int = 200,
) -> Response:
    live = _live(versions)
    readable = [v for v in versions if not v.deleted]
    # The diff form's defaults: the version before the newest readable one, to the newest.
    to = readable[0].version if readable else versions[0].version
    start = readable[1].version if len(readable) > 1 else to
    return page(
        request,
        "history.html",
        status,
        space=space,
        path=path,
        versions=versions,
        names=spaces_of(request).actor_names([v.actor for v in versions]),
        live=live,
        diff_from=start,
        diff_to=to,
        error=error,
        error_version=error_version,
    )


@router.get("/t/{team_id}/history")
def history(request: Request, team_id: str, path: str) -> Response:
    """The document's versions, newest first (the live one marked), each to view, diff
    with the live version, or restore; and a form to diff any two."""
    who, ref = asked_space(request, team_id)
    space = fields_of(ref)
    return _history_page(request, space, path, _versions(request, who, space, path))


@router.get("/t/{team_id}/version")
def version_page(
    request: Request, team_id: str, path: str, version: str = "", raw: str = ""
) -> Response:
    """One version: its Markdown through the same sanitising renderer as the document
    page, or (``raw=1``) its text as text."""
    who, ref = asked_space(request, team_id)
    number = parse_version(version)
    doc = spaces_of(request).read_version(ref, path, number)
    info = next((v for v in spaces_of(request).versions(ref, path) if v.version == number), None)
    # Who by name, as the history table names them (an email, a key's label; never an id).
    by = spaces_of(request).actor_names([info.actor]).get(info.actor, "unknown") if info else ""
    return page(
        request,
        "version.html",
        space=fields_of(ref),
        path=path,
        version=number,
        info=info,
        by=by,
        doc=doc,
        raw=bool(raw),
        html="" if raw else render(doc.content),
    )


def diff_lines(diff: str) -> list[tuple[str, str]]:
    """The lines of a unified diff, each with its CSS class (``add``, ``del``, ``hunk``,
    ``file`` or '' for context): the template writes them as text, never as markup."""
    out: list[tuple[str, str]] = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            kind = "file"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        elif line.startswith("@@"):
            kind = "hunk"
        else:
            kind = ""
        out.append((f"diff-{kind}" if kind else "", line))
    return out


@router.get("/t/{team_id}/diff")
def diff_page(
    request: Request,
    team_id: str,
    path: str,
    old: Annotated[str, Query(alias="from")] = "",
    new: Annotated[str, Query(alias="to")] = "",
) -> Response:
    """A unified diff between two versions (``to`` defaults to the newest), as text."""
    who, ref = asked_space(request, team_id)
    service = spaces_of(request)
    start = parse_version(old, "from")
    if new.strip():
        end = parse_version(new, "to")
    else:
        end = _versions(request, who, fields_of(ref), path)[0].version
    diff = service.diff(ref, path, start, end)
    return page(
        request,
        "diff.html",
        space=fields_of(ref),
        path=path,
        old=start,
        new=end,
        lines=diff_lines(diff),
    )


@router.post("/t/{team_id}/restore")
async def restore(request: Request, team_id: str) -> Response:
    """Make a version current again: a write of its content, on the live etag the history
    page was opened with (``if_match``; a deleted document: only while it stays deleted).
    Success goes to the document with a notice; a refusal is the history page with the
    service's message next to that version's restore button."""
    who, form = await posted(request, team_id)
    space = space_fields(form)
    path = text(form, "path")
    if_match = text(form, "if_match")
    service = spaces_of(request)
    number: int | None = None
    try:
        ref = ref_of(who, space)
        number = parse_version(text(form, "version"))
        # Refused before anything is read, as the API does: a viewer learns nothing more.
        authorize_space_mutation(who, ref)
        wanted = number

        def act() -> None:
            if if_match:
                service.restore(who, ref, path, wanted, if_match=if_match)
                return
            try:  # a deleted document comes back only while its path stays free
                service.restore(who, ref, path, wanted, create_only=True)
            except PreconditionFailed:
                raise PreconditionFailed(
                    f"{path!r} was written again since you opened its history; reload "
                    "the history and restore from there"
                ) from None

        await off_loop(act)
    except WHOLE_REQUEST:
        raise
    except KeepstoneError as exc:
        try:
            fields = fields_of(ref_of(who, space))
            versions = await off_loop(lambda: _versions(request, who, fields, path))
        except WHOLE_REQUEST:
            raise
        except KeepstoneError:
            raise exc from None
        return _history_page(
            request, fields, path, versions, error=exc.message,
            error_version=number, status=exc.status,
        )  # fmt: skip
    return see_other(url(f"/t/{team_id}/doc", **space, path=path, restored=str(number)))
