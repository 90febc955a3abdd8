"""Knowledge-space routes (SPEC §5): thin — resolve the space, check the rung, call the service.

The space is named by query parameters only: ``name``, ``visibility`` (default ``project``),
``project``, ``bot``; the tenant (the active team) and the user come from the credential. Any
parameter the route does not take (``tenant``, ``team``, ``user``…) is ``400 unknown_parameter``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, BinaryIO

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field

from keepstone.api.deps import Caller, caller_of
from keepstone.api.responses import FastJSONResponse
from keepstone.api.routes.common import (
    AS_OF_FORM,
    AUTH_ERRORS,
    HandReadRoute,
    error_responses,
    etag_of_if_match,
    parse_as_of,
    parse_limit,
    parse_version,
    query_parameters,
    query_value,
    reads_query,
    required_query,
)
from keepstone.api.streams import AsyncBodyReader, iter_export
from keepstone.documents import WriteResult, parse_import_strategy
from keepstone.errors import InvalidDocument, InvalidRequest, UnknownParameter
from keepstone.jsonbody import parse_json_body
from keepstone.paging import MAX_PAGE
from keepstone.principal import Principal as Who
from keepstone.service.access import authorize_space_mutation, space_ref
from keepstone.spaces import ALLOWED_VISIBILITIES, SpaceRef

router = APIRouter(tags=["spaces"], route_class=HandReadRoute)

SPACE_PARAMS = ("name", "visibility", "project", "bot")
_IDENTITY_PARAMS = {"tenant", "team", "user"}

# Documented constraints only (json_schema_extra): the domain validators check them and
# answer with the domain's codes (invalid_space_ref, invalid_path), not FastAPI's.
SEGMENT_SCHEMA = {"minLength": 1, "maxLength": 128, "pattern": r"^[^/\\:\x00-\x1f\x7f-\x9f]+$"}
PATH_SCHEMA = {"minLength": 4, "maxLength": 512, "pattern": r"\.md$"}

Name = Annotated[
    str, Query(description="The space's name (required).", json_schema_extra=SEGMENT_SCHEMA)
]
VisibilityParam = Annotated[
    str,
    Query(
        description="The space's visibility (default project).",
        json_schema_extra={"enum": list(ALLOWED_VISIBILITIES)},
    ),
]
ProjectParam = Annotated[
    str | None,
    Query(description="Project key (visibilities bot, project).", json_schema_extra=SEGMENT_SCHEMA),
]
BotParam = Annotated[
    str | None, Query(description="Bot id (visibility bot).", json_schema_extra=SEGMENT_SCHEMA)
]
PathParam = Annotated[
    str,
    Query(
        description="Document path: relative, canonical, ending in .md (e.g. notes/deploy.md).",
        json_schema_extra=PATH_SCHEMA,
    ),
]


class DocumentInfoOut(BaseModel):
    path: str
    size_bytes: int
    updated_at: str
    etag: str


class DocsOut(BaseModel):
    documents: list[DocumentInfoOut]
    #: The next page's cursor with ``limit``; null on the last page and for a whole listing.
    next_cursor: str | None = None


class DocOut(DocumentInfoOut):
    content: str


class WriteOut(BaseModel):
    path: str
    size_bytes: int
    etag: str
    created: bool


class UsageOut(BaseModel):
    space_id: str
    used_bytes: int
    quota_bytes: int
    team_used_bytes: int
    team_quota_bytes: int
    history_used_bytes: int
    history_quota_bytes: int
    index_bytes: int = Field(
        description="Bytes the space's search index holds (chunk text, terms, vectors); "
        "counted against no quota."
    )


class RejectedOut(BaseModel):
    path: str
    reason: str


class ImportOut(BaseModel):
    written: list[str]
    skipped: list[str]
    renamed: dict[str, str]
    rejected: list[RejectedOut]


def check_params(sent: tuple[str, ...], allowed: tuple[str, ...]) -> None:
    """Refuse any query parameter the route does not take."""
    for key in sent:
        if key in _IDENTITY_PARAMS:
            raise UnknownParameter(
                f"parameter {key!r} is not accepted: the team and user come from your "
                "credential, never from the request",
                field=key,
            )
        if key not in allowed:
            raise UnknownParameter(
                f"unknown parameter {key!r}; this route takes: {', '.join(allowed)}", field=key
            )


@dataclass(frozen=True, slots=True)
class SpaceQuery:
    """The query parameters that name a space (tenant and user are never among them), and
    the names of every query parameter the request sent."""

    name: str
    visibility: str
    project: str | None
    bot: str | None
    sent: tuple[str, ...]

    def ref(self, who: Who, *extra: str) -> SpaceRef:
        """The space named, stamped with the caller's team and user; a parameter sent that
        is neither the space's nor one of the route's ``extra`` is refused."""
        check_params(self.sent, (*SPACE_PARAMS, *extra))
        return space_ref(who, self.name, self.visibility, project=self.project, bot=self.bot)


@reads_query(
    name=(Name, ...),
    visibility=(VisibilityParam, "project"),
    project=(ProjectParam, None),
    bot=(BotParam, None),
)
async def space_query(request: Request) -> SpaceQuery:
    # async on purpose: no I/O, so no threadpool hop. Read by hand (routes.common): every
    # spaces route takes these four.
    return space_of(request)


def space_of(request: Request) -> SpaceQuery:
    """What :data:`Space` resolves, for a route that takes it by hand (see
    :func:`~keepstone.api.deps.caller_of`)."""
    query = request.query_params
    return SpaceQuery(
        required_query(query, "name"),
        query.get("visibility", "project"),
        query_value(query, "project"),
        query_value(query, "bot"),
        tuple(query),
    )


Space = Annotated[SpaceQuery, Depends(space_query)]


_IF_MATCH_DOC = "Only if the document's etag is still this one (else 412)."


async def _if_match(
    raw: Annotated[str | None, Header(alias="If-Match", description=_IF_MATCH_DOC)] = None,
) -> str | None:
    return etag_of_if_match(raw)


#: The If-Match header of a route that reads it by hand, as FastAPI lists a declared one.
_IF_MATCH_PARAMETER: dict[str, Any] = {
    "name": "If-Match",
    "in": "header",
    "required": False,
    "schema": {
        "anyOf": [{"type": "string"}, {"type": "null"}],
        "description": _IF_MATCH_DOC,
        "title": "If-Match",
    },
    "description": _IF_MATCH_DOC,
}
DOC_WRITE_PARAMETERS = [*query_parameters(path=(PathParam, ...)), _IF_MATCH_PARAMETER]


def by_hand(own: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The OpenAPI parameters of a document route (GET, PUT, DELETE /api/memory/doc): its
    own, then the space's, as FastAPI would list them declared.

    The most requested routes take nothing from FastAPI but the request: their credential
    (:func:`~keepstone.api.deps.caller_of`), space (:func:`space_of`), parameters and headers
    are read by hand, in the order the dependencies would read them. FastAPI's solving of
    declared parameters and dependencies was a measurable share of each request's CPU
    (docs/performance.md)."""
    space: list[dict[str, Any]] = getattr(space_query, "openapi_parameters")  # noqa: B009
    return [*own, *space]


IfMatch = Annotated[str | None, Depends(_if_match)]

#: The history's query parameters, read as text so a bad one is refused with
#: the domain's one-line message (routes.common.parse_*), not a validation dump.
AsOfParam = Annotated[
    str | None,
    Query(
        description=f"Answer as the space was at this instant: {AS_OF_FORM}.",
        json_schema_extra={"format": "date-time"},
    ),
]
VersionParam = Annotated[
    str | None,
    Query(
        description="Read this version of the document (GET /api/memory/doc/versions).",
        json_schema_extra={"type": "integer", "minimum": 1},
    ),
]


@router.get(
    "/api/memory/usage",
    response_model=UsageOut,
    responses=error_responses(*AUTH_ERRORS),
    summary="Bytes used against quotas for one space",
)
async def usage(caller: Caller, space: Space) -> dict[str, Any]:
    return await caller.read(lambda who: caller.state.spaces.usage(space.ref(who)).as_json())


DirParam = Annotated[
    str, Query(description="A canonical directory prefix, e.g. notes (no trailing slash).")
]
LimitParam = Annotated[
    str | None,
    Query(
        description=f"Page the listing: at most this many (1-{MAX_PAGE}), and the answer adds "
        "next_cursor. Without it the listing is whole.",
        json_schema_extra={"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
    ),
]
CursorParam = Annotated[
    str | None, Query(description="The next_cursor of the previous page (with limit).")
]
SortParam = Annotated[
    str | None,
    Query(description="A page's order (with limit): path (default), or updated (newest first)."),
]
#: The most documents a listing may hold to be read on the event loop (SQLite): about as
#: long a read as a document's; a larger listing is read again in a worker thread.
INLINE_LISTING = 200
_LIST_PARAMETERS = query_parameters(
    dir=(DirParam, ""),
    as_of=(AsOfParam, None),
    limit=(LimitParam, None),
    cursor=(CursorParam, None),
    sort=(SortParam, None),
)


@router.get(
    "/api/memory/docs",
    response_model=DocsOut,
    responses=error_responses(*AUTH_ERRORS, 422),
    summary="List the documents of a space (as of an instant with as_of), whole or a page",
    openapi_extra={"parameters": by_hand(_LIST_PARAMETERS)},
)
async def list_docs(request: Request) -> Response:
    caller, space = caller_of(request), space_of(request)
    query = request.query_params
    dir, as_of = query.get("dir", ""), query_value(query, "as_of")
    limit, cursor, sort = (query_value(query, name) for name in ("limit", "cursor", "sort"))

    def run(who: Who, at_most: int | None = None) -> Response | None:
        ref = space.ref(who, "dir", "as_of", "limit", "cursor", "sort")
        spaces = caller.state.spaces
        at = None if as_of is None else parse_as_of(as_of)
        if limit is not None:
            page = spaces.list_page(
                ref, dir, limit=parse_limit(limit), cursor=cursor, sort=sort, at=at
            )
            return FastJSONResponse({"documents": page.items, "next_cursor": page.next_cursor})
        if cursor is not None or sort is not None:
            raise InvalidRequest(
                "cursor and sort page a listing: send limit with them, or neither for the "
                "whole listing",
                field="cursor" if cursor is not None else "sort",
            )
        if at is not None:
            whole = spaces.list_as_of(ref, at, dir)
            return FastJSONResponse({"documents": whole, "next_cursor": None})
        # The store's rendering, not re-validated per document (most of a big listing's cost).
        docs = spaces.list_json(ref, dir, at_most=at_most)
        if docs is None:
            return None
        return Response(
            b'{"documents":' + docs + b',"next_cursor":null}', media_type="application/json"
        )

    if caller.state.inline_reads and limit is None and as_of is None:
        # A small space's whole listing is as short a read as a document's: on SQLite it
        # runs on the loop (as a point read does), and a larger one in a worker thread.
        small = await caller.read(lambda who: run(who, INLINE_LISTING))
        if small is not None:
            return small
    whole = await caller.run(run)
    assert whole is not None  # without at_most a listing always answers
    return whole


ETAG_HEADER = {"ETag": {"description": "The document's etag, quoted", "schema": {"type": "string"}}}


def write_route(created: str, *statuses: int) -> dict[str, Any]:
    """The route arguments of a document write: a :class:`WriteOut` answered 200 (replaced)
    or 201 (``created`` describes it), both with the ETag header, and the given error
    statuses."""
    return {
        "response_model": WriteOut,
        "status_code": 200,
        "responses": {
            200: {"headers": ETAG_HEADER},
            201: {"description": created, "model": WriteOut, "headers": ETAG_HEADER},
            **error_responses(*AUTH_ERRORS, *statuses),
        },
    }


@router.get(
    "/api/memory/doc",
    response_model=DocOut,
    responses={200: {"headers": ETAG_HEADER}, **error_responses(*AUTH_ERRORS, 422)},
    summary="Read one document, or one of its versions, or it as of an instant (ETag header)",
    openapi_extra={
        "parameters": by_hand(
            query_parameters(
                path=(PathParam, ...), version=(VersionParam, None), as_of=(AsOfParam, None)
            )
        )
    },
)
async def read_doc(request: Request) -> JSONResponse:
    caller, space = caller_of(request), space_of(request)
    query = request.query_params
    path = required_query(query, "path")
    version, as_of = query_value(query, "version"), query_value(query, "as_of")

    def run(who: Who) -> JSONResponse:
        ref = space.ref(who, "path", "version", "as_of")
        if version is not None and as_of is not None:
            raise InvalidRequest(
                "send version or as_of, not both: a version already names one moment",
                field="as_of",
            )
        spaces = caller.state.spaces
        if version is not None:
            doc = spaces.read_version(ref, path, parse_version(version))
        elif as_of is not None:
            doc = spaces.read_as_of(ref, path, parse_as_of(as_of))
        else:
            doc = spaces.read(ref, path)
        body = {**doc.info.as_json(), "content": doc.content}
        return FastJSONResponse(body, headers={"ETag": f'"{doc.etag}"'})

    return await caller.read(run)


_PUT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["content"],
                    "properties": {"content": {"type": "string"}},
                    "additionalProperties": False,
                }
            },
            "text/markdown": {"schema": {"type": "string"}},
        },
    }
}


def _parse_put_body(request: Request, raw: bytes) -> str:
    """The document of a PUT: raw text/markdown (or text/plain), else a JSON object
    ``{"content"}`` (also when no Content-Type is sent)."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype in ("text/markdown", "text/plain", "text/x-markdown"):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidDocument("the document body is not valid UTF-8") from None
    if ctype not in ("application/json", ""):
        raise InvalidRequest(
            'send the document as application/json {"content": "..."} or as a raw '
            "text/markdown body",
            field="content-type",
        )
    body = parse_json_body(raw, hint='send {"content": "<markdown>"}')
    if not isinstance(body, dict) or not isinstance(body.get("content"), str):
        raise InvalidRequest('the body must be {"content": "<markdown>"}', field="content")
    extra = sorted(set(body) - {"content"})
    if extra:
        raise InvalidRequest(
            f"field {extra[0]!r} is not accepted; send only content", field=extra[0]
        )
    return str(body["content"])


@router.put(
    "/api/memory/doc",
    **write_route("Created", 412, 413, 422),
    openapi_extra={**_PUT_BODY, "parameters": by_hand(DOC_WRITE_PARAMETERS)},
    summary="Create (201) or replace (200) one document; If-Match for a conditional write",
)
async def write_doc(request: Request) -> JSONResponse:
    caller, space = caller_of(request), space_of(request)
    path = required_query(request.query_params, "path")
    if_match = etag_of_if_match(request.headers.get("if-match"))
    # The body is read on the event loop (no thread waits on the network), parsed with
    # the rest in the one hop, after the credential and the space are checked.
    raw = await request.body()

    def run(who: Who) -> JSONResponse:
        ref = space.ref(who, "path")
        content = _parse_put_body(request, raw)
        result = caller.state.spaces.write(who, ref, path, content, if_match=if_match)
        return written(result)

    return await caller.write(run)


@router.delete(
    "/api/memory/doc",
    status_code=204,
    response_class=Response,
    responses=error_responses(*AUTH_ERRORS, 412, 422),
    summary="Delete one document",
    openapi_extra={"parameters": by_hand(DOC_WRITE_PARAMETERS)},
)
async def delete_doc(request: Request) -> Response:
    caller, space = caller_of(request), space_of(request)
    path = required_query(request.query_params, "path")
    if_match = etag_of_if_match(request.headers.get("if-match"))

    def run(who: Who) -> Response:
        caller.state.spaces.delete(who, space.ref(who, "path"), path, if_match=if_match)
        return Response(status_code=204)

    return await caller.write(run)


@router.post(
    "/api/memory/doc/move",
    **write_route("Moved to a free path", 409, 412, 422),
    summary="Move one document to another path in its space, atomically",
)
async def move_doc(
    caller: Caller,
    space: Space,
    path: PathParam,
    to: Annotated[
        str,
        Query(
            description="The document's new path (canonical, ending in .md).",
            json_schema_extra=PATH_SCHEMA,
        ),
    ],
    overwrite: Annotated[
        bool, Query(description="Replace a document at `to` (else 409 already_exists).")
    ] = False,
    if_match: IfMatch = None,
) -> JSONResponse:
    def run(who: Who) -> JSONResponse:
        ref = space.ref(who, "path", "to", "overwrite")
        spaces = caller.state.spaces
        return written(spaces.move(who, ref, path, to, overwrite=overwrite, if_match=if_match))

    return await caller.run(run)


def written(result: WriteResult) -> JSONResponse:
    """The answer of a write: 201 when it created the document, 200 when it replaced one."""
    return FastJSONResponse(
        result.as_json(),
        status_code=201 if result.created else 200,
        headers={"ETag": f'"{result.etag}"'},
    )


@router.get(
    "/api/memory/export",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "A gzipped tarball of the space's documents",
            "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
        },
        **error_responses(*AUTH_ERRORS),
    },
    summary="Export a space (as of an instant with as_of) as a .tar.gz (streamed)",
)
async def export_space(caller: Caller, space: Space, as_of: AsOfParam = None) -> StreamingResponse:
    def check(who: Who) -> tuple[SpaceRef, datetime | None]:
        ref = space.ref(who, "as_of")
        at = None if as_of is None else parse_as_of(as_of)
        # Touch the store first, so an unreachable database is a clean 503, not a cut stream.
        caller.state.spaces.usage(ref, index=False)
        return ref, at

    # One hop: the credential, the parameters and the store's check in one thread; the
    # archive is then written by the export's own thread (iter_export).
    ref, at = await caller.run(check)
    spaces = caller.state.spaces

    def export(sink: BinaryIO) -> int:
        if at is None:
            return spaces.export(ref, sink)
        return spaces.export_as_of(ref, at, sink)

    return StreamingResponse(
        iter_export(export),
        media_type="application/gzip",
        headers={"Content-Disposition": 'attachment; filename="memory-export.tar.gz"'},
    )


_IMPORT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.post(
    "/api/memory/import",
    response_model=ImportOut,
    responses=error_responses(*AUTH_ERRORS, 413, 422),
    openapi_extra=_IMPORT_BODY,
    summary="Merge a .tar.gz into a space under a strategy (skip|overwrite|rename)",
)
async def import_space(
    request: Request,
    caller: Caller,
    space: Space,
    strategy: Annotated[str, Query(description="skip (default), overwrite or rename.")] = "skip",
) -> dict[str, Any]:
    spaces = caller.state.spaces
    reader = AsyncBodyReader(request.stream(), caller.state.settings.max_import_bytes)

    def run(who: Who) -> dict[str, Any]:
        ref = space.ref(who, "strategy")
        how = parse_import_strategy(strategy)
        # Refused before the upload is read: the caller's rights do not depend on the
        # archive. The same thread then reads it (one hop in all).
        authorize_space_mutation(who, ref)
        report = spaces.import_archive(who, ref, reader, how)  # type: ignore[arg-type]
        return report.as_json()

    try:
        return await caller.run(run)
    except Exception:
        if reader.refused is not None:  # also when the archive parser wrapped it
            raise reader.refused from None
        raise
