"""``GET /api/memory/activity``: what changed lately in the caller's team, newest first
(docs/api.md "Activity", docs/history.md "Activity").

Thin: the space is named as on every spaces route (its query parameters, all optional
here: without them, every space of its team the caller may read), and the filters, the
page's size and the cursor go to the service as sent; the service says what they may be.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from keepstone.activity import ACTOR_KINDS, DEFAULT_LIMIT, MAX_LIMIT
from keepstone.api.deps import Caller
from keepstone.api.responses import FastJSONResponse
from keepstone.api.routes.common import AUTH_ERRORS, HandReadRoute, error_responses
from keepstone.api.routes.maybe_space import MaybeSpace, maybe_space
from keepstone.errors import InvalidSpaceRef
from keepstone.principal import Principal as Who
from keepstone.text import is_whole_number

router = APIRouter(tags=["spaces"], route_class=HandReadRoute)

_FEED_PARAMS = ("since", "actor_kind", "limit", "cursor")


class ActorOut(BaseModel):
    kind: str
    name: str


class ChangeOut(BaseModel):
    at: str
    space_id: str
    path: str
    action: str
    actor: ActorOut
    size_delta: int | None
    version: int


class ActivityOut(BaseModel):
    changes: list[ChangeOut]
    next_cursor: str | None


@router.get(
    "/api/memory/activity",
    response_model=ActivityOut,
    responses=error_responses(*AUTH_ERRORS),
    summary="What changed lately in a space (or every space of your team you may read), "
    "newest first",
)
async def activity(
    caller: Caller,
    space: Annotated[
        MaybeSpace,
        maybe_space(
            "The space's name; leave the space's parameters out for every space of your team "
            "you may read."
        ),
    ],
    since: Annotated[
        str | None, Query(description="ISO 8601: only changes made at or after this.")
    ] = None,
    actor_kind: Annotated[
        str | None,
        Query(
            description="Only changes made by this kind of actor.",
            json_schema_extra={"enum": list(ACTOR_KINDS)},
        ),
    ] = None,
    limit: Annotated[
        str | None,
        Query(
            description=f"How many changes, 1-{MAX_LIMIT} (default {DEFAULT_LIMIT}).",
            json_schema_extra={"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
        ),
    ] = None,
    cursor: Annotated[
        str | None, Query(description="The next_cursor of the page before (opaque).")
    ] = None,
) -> JSONResponse:
    def run(who: Who) -> JSONResponse:
        space.check(*_FEED_PARAMS)
        ref = None
        if space.name is not None:
            ref = space.ref(who)
        elif named := space.sent_without_name():
            raise InvalidSpaceRef(
                f"{named[0]} names a space only with its name: send name=..., or leave "
                f"{', '.join(named)} out for every space you may read",
                field="name",
            )
        page = caller.state.spaces.recent(
            who,
            ref,
            since=since,
            actor_kind=actor_kind,
            limit=_whole(limit),
            cursor=cursor,
        )
        return FastJSONResponse(page.as_json())

    return await caller.run(run)


def _whole(raw: str | None) -> int:
    """``raw`` as sent: a whole number when it is one (the service checks its range), -1
    (refused by the service, naming ``limit``) when it is not, the default when absent."""
    if raw is None:
        return DEFAULT_LIMIT
    return int(raw) if is_whole_number(raw) else -1
