"""The UI's search page and the team memory settings screen.

Search covers documents (one space, or every space the user may read, via
:meth:`SpaceService.search_readable`) and the team's records (the records service's
ranked search); snippets and records are fenced text and shown as text, never as HTML.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from keepstone.errors import InvalidRequest, KeepstoneError
from keepstone.principal import Principal
from keepstone.service.filters import SearchFilters, empty_hint, filters_of
from keepstone.service.records import RecordService
from keepstone.spaces import SpaceRef
from keepstone.web.core import WHOLE_REQUEST, UiRoute, page, posted, see_other, signed_in, text, url
from keepstone.web.pages import off_loop, spaces_of
from keepstone.web.spaces import label_fields, ref_of, space_fields

router = APIRouter(include_in_schema=False, route_class=UiRoute)


def records_of(request: Request) -> RecordService:
    service: RecordService = request.app.state.records
    return service


@router.get("/t/{team_id}/search")
def search(
    request: Request,
    team_id: str,
    q: str = "",
    since: str = "",
    until: str = "",
    tags: str = "",
    min_score: str = "",
) -> Response:
    """Documents (the space named, else every readable space) and the team's records,
    above the relevance floor (or ``min_score``, which the empty answer's hint names),
    narrowed by the optional ``since``/``until`` dates (a date picker's day: ``until``
    takes the whole day) and front-matter ``tags``."""
    who = signed_in(request, team_id)
    space = space_fields(request.query_params)
    shown: dict[str, Any] = {"docs": [], "doc_groups": [], "records": [], "pending": 0}
    shown |= {"doc_error": None, "record_error": None, "record_hint": None}
    try:
        filters = filters_of(
            {
                "since": since,
                "until": _whole_day(until),
                "tags": tags,
                "min_score": min_score.strip() or None,
            }
        )
    except InvalidRequest as exc:
        filters, shown["doc_error"] = None, exc.message
    if q and filters is not None:
        shown |= _search_docs(request, who, team_id, space, q, filters)
        shown |= _search_records(request, who, team_id, q, filters)
    return page(
        request,
        "search.html",
        q=q,
        space=space,
        since=since,
        until=until,
        tags=tags,
        min_score=min_score,
        doc_hint=empty_hint(filtered=filters is not None and filters.narrows),
        **shown,
    )


def _whole_day(until: str) -> str:
    """A bare date (what a date picker sends) as the end of that day: up to and including it."""
    day = until.strip()
    return f"{day}T23:59:59.999999" if len(day) == 10 else day


def _search_docs(
    request: Request,
    who: Principal,
    team_id: str,
    space: dict[str, str],
    q: str,
    filters: SearchFilters,
) -> dict[str, Any]:
    """The document hits as rows (hit, space id, link), and what is still to embed."""
    service = spaces_of(request)
    docs: list[dict[str, Any]] = []
    try:
        if space:
            ref = ref_of(who, space)
            hits = service.search(who, ref, q, limit=20, filters=filters)
            for hit in hits:
                docs.append({"hit": hit, "space": ref, "link": _doc(team_id, space, hit)})
            return {"docs": docs, "doc_groups": by_space(docs), "pending": hits.pending}
        found = service.search_readable(who, q, limit=20, filters=filters)
        for row in found:
            link = _doc(team_id, label_fields(row.space), row.hit)
            docs.append({"hit": row.hit, "space": row.space, "link": link})
        return {"docs": docs, "doc_groups": by_space(docs), "pending": found.pending}
    except WHOLE_REQUEST:
        raise
    except KeepstoneError as exc:
        return {"doc_error": exc.message}


def _search_records(
    request: Request, who: Principal, team_id: str, q: str, filters: SearchFilters
) -> dict[str, Any]:
    """The team's record hits, the empty answer's hint, or why none were searched."""
    try:
        # Records carry no front matter: a tags filter narrows documents only.
        answer = records_of(request).search(
            who, team_id, q, limit=20, filters=replace(filters, tags=())
        )
    except WHOLE_REQUEST:
        raise
    except KeepstoneError as exc:
        return {"record_error": exc.message}
    if answer.state.value == "off":
        return {"record_error": "team memory is off for this team, so no record is searched"}
    return {"records": list(answer.hits), "record_hint": answer.hint}


def by_space(docs: list[dict[str, Any]]) -> list[tuple[SpaceRef, list[dict[str, Any]]]]:
    """The hits grouped by space (shown by its name, the id on hover), the spaces in the
    order of their best hit and the hits of each best first; each row gains ``share``, its
    score over the best hit's (the bar)."""
    best = max((float(row["hit"].score) for row in docs), default=0.0)
    groups: dict[str, tuple[SpaceRef, list[dict[str, Any]]]] = {}
    for row in docs:
        row["share"] = float(row["hit"].score) / best if best > 0 else 0.0
        groups.setdefault(row["space"].id, (row["space"], []))[1].append(row)
    return list(groups.values())


def _doc(team_id: str, fields: dict[str, str], hit: Any) -> str:
    return url(f"/t/{team_id}/doc", **fields, path=str(hit.path))


# --- team memory settings ---------------------------------------------------------------------


def _memory_page(
    request: Request,
    who: Principal,
    team_id: str,
    cursor: str | None,
    *,
    error: str | None = None,
    status: int = 200,
) -> Response:
    service = records_of(request)
    settings = service.get_settings(who, team_id)
    listing = service.list(who, team_id, next_token=cursor or None)
    return page(
        request,
        "memory.html",
        status,
        settings=settings,
        listing=listing,
        cursor=cursor or "",
        error=error,
    )


@router.get("/t/{team_id}/memory")
def memory(request: Request, team_id: str, page: str = "") -> Response:
    """The setting (with why it is what it is) and the records, newest first, paged."""
    who = signed_in(request, team_id)
    return _memory_page(request, who, team_id, page)


@router.post("/t/{team_id}/memory")
async def memory_toggle(request: Request, team_id: str) -> Response:
    """Turn the team's memory on or off (the service lets owners and admins only)."""
    who, form = await posted(request, team_id)
    enabled = text(form, "enabled") == "on"
    service = records_of(request)
    return await _change(
        request, who, team_id, lambda: service.set_enabled(who, team_id, enabled),
        f"/t/{team_id}/memory",
    )  # fmt: skip


@router.post("/t/{team_id}/memory/delete")
async def record_delete(request: Request, team_id: str) -> Response:
    """Remove one record (owners and admins)."""
    who, form = await posted(request, team_id)
    record_id = text(form, "record_id")
    service = records_of(request)
    return await _change(
        request, who, team_id, lambda: service.delete(who, team_id, record_id),
        url(f"/t/{team_id}/memory"),
    )  # fmt: skip


async def _change(
    request: Request, who: Principal, team_id: str, act: Callable[[], object], done: str
) -> Response:
    """Run a change to the team's memory, then go to ``done``; a refusal is the settings
    page with the service's message."""
    try:
        await off_loop(act)
    except WHOLE_REQUEST:
        raise
    except KeepstoneError as exc:
        message, status = exc.message, exc.status
        return await off_loop(
            lambda: _memory_page(request, who, team_id, None, error=message, status=status)
        )
    return see_other(done)
