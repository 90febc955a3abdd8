"""Routes across the spaces a caller may read (SPEC §5): ``GET /api/memory/search`` over one
space or, with ``scope=readable``, every space the caller may read; and
``GET /api/memory/spaces``, the spaces it may read that exist.

Thin: the route turns its parameters into the space searched (or none: every readable
one) and passes the query and the limit as sent. What they may be is the search's to say
(their defaults, and :func:`keepstone.service.search.check_query`'s refusals), as it says
it to the CLI and the agent tools.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from keepstone.api.deps import Caller
from keepstone.api.responses import FastJSONResponse
from keepstone.api.routes.common import AUTH_ERRORS, HandReadRoute, error_responses
from keepstone.api.routes.maybe_space import MaybeSpace, maybe_space
from keepstone.errors import InvalidRequest, InvalidSpaceRef, UnknownParameter
from keepstone.principal import Principal as Who
from keepstone.service.filters import FILTER_PARAMS, search_answer, search_filters
from keepstone.spaces import SpaceRef
from keepstone.text import is_whole_number

router = APIRouter(tags=["spaces"], route_class=HandReadRoute)


class SearchSpaceOut(BaseModel):
    id: str
    visibility: str
    name: str
    project: str | None
    bot: str | None
    user: str | None


class AlsoInOut(BaseModel):
    path: str
    space_id: str


class SearchHitOut(BaseModel):
    path: str
    heading: str
    snippet: str
    score: float
    matched: list[str]
    also_in: list[AlsoInOut] = []
    space: SearchSpaceOut | None = None


class SearchOut(BaseModel):
    results: list[SearchHitOut]
    pending: int = Field(
        description="Chunks of the searched spaces not yet embedded, so searched by keyword "
        "only (0 with keyword-only search)."
    )
    hint: str | None = None


class SpaceUsageOut(BaseModel):
    space: SearchSpaceOut
    used_bytes: int
    quota_bytes: int


class SpacesOut(BaseModel):
    spaces: list[SpaceUsageOut]
    truncated: bool


@router.get(
    "/api/memory/spaces",
    response_model=SpacesOut,
    responses=error_responses(*AUTH_ERRORS),
    summary="List the spaces you may read that exist, with their usage (the first 200 by id)",
)
async def list_spaces(request: Request, caller: Caller) -> dict[str, Any]:
    def run(who: Who) -> dict[str, Any]:
        if sent := list(request.query_params):
            raise UnknownParameter(
                f"unknown parameter {sent[0]!r}; this route takes none", field=sent[0]
            )
        return caller.state.spaces.list_spaces(who).as_json()

    return await caller.run(run)


_SEARCH_PARAMS = ("q", "limit", "path_prefix", "scope", *FILTER_PARAMS)
READABLE = "readable"


#: The filters (docs/search.md, "Filters"), as sent: the search checks them.
SinceParam = Annotated[
    str | None, Query(description="ISO 8601: only documents last written at or after this.")
]
UntilParam = Annotated[
    str | None, Query(description="ISO 8601: only documents last written at or before this.")
]
MinScoreParam = Annotated[
    str | None,
    Query(
        description="-1 to 1: only hits whose score reaches this, in place of the relevance floor.",
        json_schema_extra={"type": "number", "minimum": -1, "maximum": 1},
    ),
]
TagsParam = Annotated[
    str | None,
    Query(description="a,b: only documents whose front matter's tags hold all of these."),
]
RecencyParam = Annotated[
    str | None,
    Query(
        description="A recency prior's half-life in days (off unless given): newer "
        "documents rank higher.",
        json_schema_extra={"type": "number", "exclusiveMinimum": 0},
    ),
]


@router.get(
    "/api/memory/search",
    response_model=SearchOut,
    responses=error_responses(*AUTH_ERRORS, 422),
    summary="Search a space's documents (or every space you may read) by keyword and meaning",
)
async def search_docs(
    caller: Caller,
    space: Annotated[MaybeSpace, maybe_space("The space's name (required unless scope=readable).")],
    q: Annotated[str | None, Query(description="The search query (required).")] = None,
    limit: Annotated[
        str | None,
        Query(
            description="How many hits, 1-50 (default 10).",
            json_schema_extra={"type": "integer", "minimum": 1, "maximum": 50},
        ),
    ] = None,
    path_prefix: Annotated[
        str, Query(description="Only documents whose path starts with this, e.g. notes/.")
    ] = "",
    scope: Annotated[
        str | None,
        Query(
            description="readable: every space you may read in your team, and global spaces "
            "(then leave the space's parameters out); omit it to search the space named.",
            json_schema_extra={"enum": [READABLE]},
        ),
    ] = None,
    since: SinceParam = None,
    until: UntilParam = None,
    min_score: MinScoreParam = None,
    tags: TagsParam = None,
    recency_days: RecencyParam = None,
) -> JSONResponse:
    def run(who: Who) -> JSONResponse:
        space.check(*_SEARCH_PARAMS)
        ref = _searched(who, space, scope)
        # The query and the limit as sent: the search owns their default, range and refusals.
        filters = search_filters(
            since=since, until=until, min_score=min_score, tags=tags, recency_days=recency_days
        )
        given: dict[str, Any] = {"path_prefix": path_prefix, "filters": filters}
        if limit is not None:
            given["limit"] = _number_or_text(limit)
        spaces = caller.state.spaces
        try:
            found = (
                spaces.search_readable(who, q or "", **given)
                if ref is None
                else spaces.search(who, ref, q or "", **given)
            )
        except InvalidRequest as exc:
            raise _as_q(exc) from None
        results = [hit.as_json() for hit in found]
        return FastJSONResponse(search_answer(results, filters, found.pending))

    return await caller.run(run)


def _as_q(exc: InvalidRequest) -> InvalidRequest:
    """The search's refusal of its query, naming the parameter as this route takes it
    (``q``; the service and every other face call it ``query``)."""
    if exc.details.get("field") != "query" or not exc.message.startswith("query "):
        return exc
    details = {**exc.details, "field": "q"}
    return InvalidRequest("q " + exc.message.removeprefix("query "), **details)


def _searched(who: Who, space: MaybeSpace, scope: str | None) -> SpaceRef | None:
    """The space a search names, or None for ``scope=readable`` (every space the caller
    may read), which names none."""
    if scope is None:
        if space.name is None:
            raise InvalidSpaceRef(
                "query parameter 'name' is required; name the space, e.g. ?name=notes, or "
                "send scope=readable to search every space you may read",
                field="name",
            )
        return space.ref(who)
    if scope != READABLE:
        raise InvalidRequest(
            f"unknown scope {scope!r}; use scope=readable (every space you may read) or leave "
            "it out to search the space named",
            field="scope",
        )
    if named := space.sent_without_name():
        raise InvalidRequest(
            f"scope=readable searches every space you may read, so it takes no "
            f"{', '.join(named)}: leave those out, or leave scope out to search one space",
            field="scope",
        )
    return None


def _number_or_text(raw: str) -> int | str:
    """``raw`` as a whole number when it is one, else as sent: the search refuses a limit
    that is no whole number as it refuses one out of range."""
    return int(raw) if is_whole_number(raw) else raw
