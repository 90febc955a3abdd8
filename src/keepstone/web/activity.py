"""The UI's pages of recent changes (docs/ui.md "Activity"): a team's changes, or one
space's, newest first, paged, filtered by space, actor kind and time; each row says who
made the change by name, what it did, when, and the bytes it added or removed, and links to
its diff. The feed is the service's (:meth:`SpaceService.recent`), as the API's."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from keepstone.activity import ACTOR_KINDS, Change
from keepstone.errors import BadRequest
from keepstone.spaces import SpaceRef
from keepstone.web.core import UiRoute, page, signed_in, url
from keepstone.web.pages import spaces_of
from keepstone.web.spaces import fields_of, label_fields, ref_of, space_fields

router = APIRouter(include_in_schema=False, route_class=UiRoute)

#: Changes per page.
PAGE = 50


def fields_of_id(space_id: str) -> dict[str, str]:
    """The fields naming the space of ``space_id`` (``v1:<vis>:<team>:<project>:<bot>:
    <user>:<name>``) within the caller's team, for the links of a change."""
    parts = space_id.split(":")
    if len(parts) != 7:
        return {}
    out = {"name": parts[6], "visibility": parts[1]}
    if parts[3]:
        out["project"] = parts[3]
    if parts[4]:
        out["bot"] = parts[4]
    return out


def change_link(team_id: str, c: Change, space: dict[str, str]) -> str:
    """Where a change is seen: its diff with the version before, the version itself for a
    document's first, its history for a deletion."""
    base = f"/t/{team_id}"
    if c.action == "delete" or (c.action == "move" and c.size_delta == 0 and c.version > 1):
        return url(f"{base}/history", **space, path=c.path)
    if c.version == 1:
        return url(f"{base}/version", **space, path=c.path, version=str(c.version))
    return url(
        f"{base}/diff", **space, path=c.path, **{"from": str(c.version - 1)}, to=str(c.version)
    )


@router.get("/t/{team_id}/activity")
def activity_page(request: Request, team_id: str) -> Response:
    """Recent changes of every space of the team the user may read (or of the space the
    query names, or the one picked in the filter), newest first."""
    who = signed_in(request, team_id)
    query = request.query_params
    service = spaces_of(request)
    listing = service.list_spaces(who)
    choices = [
        label_fields(item.space) for item in listing.spaces if item.space.visibility != "global"
    ]
    picked = query.get("space", "")
    space = space_fields(query)
    if picked and not space:
        space = next((f for f in choices if _id_key(f) == picked), {})
    filters = {
        "since": query.get("since", ""),
        "actor_kind": query.get("actor_kind", ""),
    }
    error, next_cursor, ref = None, None, None
    changes: list[dict[str, Any]] = []
    try:
        ref = ref_of(who, space) if space else None
        found = service.recent(
            who,
            ref,
            since=filters["since"] or None,
            actor_kind=filters["actor_kind"] or None,
            limit=PAGE,
            cursor=query.get("cursor") or None,
        )
    except BadRequest as exc:
        error = exc.message
    else:
        next_cursor = found.next_cursor
        changes = [_row(team_id, ref, c) for c in found.changes]
    # The space the page is of, named from its ref: none where the query's fields named no
    # space (the page says why).
    space = {} if ref is None else fields_of(ref)
    older = None
    if next_cursor:
        older = url(
            f"/t/{team_id}/activity",
            **space,
            **{k: v for k, v in filters.items() if v},
            cursor=next_cursor,
        )
    return page(
        request,
        "activity.html",
        400 if error else 200,
        space=space,
        choices=[(_id_key(f), f) for f in choices],
        picked=_id_key(space) if space else "",
        filters=filters,
        kinds=ACTOR_KINDS,
        changes=changes,
        older=older,
        error=error,
    )


def _row(team_id: str, ref: SpaceRef | None, c: Change) -> dict[str, Any]:
    """One change as the page shows it: the change, its space's fields and its link."""
    fields = fields_of(ref) if ref is not None else fields_of_id(c.space_id)
    return {"c": c, "space": fields, "link": change_link(team_id, c, fields)}


def _id_key(fields: dict[str, str]) -> str:
    """A space's fields as one filter value: ``visibility/project/bot/name``."""
    return "/".join(fields.get(k, "") for k in ("visibility", "project", "bot", "name"))
