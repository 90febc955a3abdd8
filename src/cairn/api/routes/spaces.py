"""Knowledge-space routes (SPEC §5): thin — resolve the space, check the rung, call the service.

The space is named by query parameters only: ``name``, ``visibility`` (default
``project``), ``project``, ``bot``. The tenant (the active team) and the user come
from the credential; a request naming ``tenant``, ``team`` or ``user`` — or any
parameter the route does not take — is refused ``400 unknown_parameter``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

from cairn.api.deps import AppState, Principal, State
from cairn.api.routes.common import AUTH_ERRORS, error_responses
from cairn.api.streams import AsyncBodyReader, iter_export
from cairn.documents import DocumentInfo, ImportStrategy, parse_import_strategy
from cairn.errors import (
    ImportTooLarge,
    InvalidDocument,
    InvalidRequest,
    UnknownParameter,
)
from cairn.principal import Principal as Who
from cairn.service.access import authorize_space_mutation, space_ref
from cairn.spaces import ALLOWED_VISIBILITIES, SpaceRef

router = APIRouter(tags=["spaces"])

SPACE_PARAMS = ("name", "visibility", "project", "bot")
_IDENTITY_PARAMS = {"tenant", "team", "user"}

# Documented constraints only (json_schema_extra): the domain validators check them and
# answer with the domain's codes (invalid_space_ref, invalid_path), not FastAPI's.
_SEGMENT = {"minLength": 1, "maxLength": 128, "pattern": r"^[^/\\:\x00-\x1f\x7f-\x9f]+$"}

Name = Annotated[str, Query(description="The space's name (required).", json_schema_extra=_SEGMENT)]
VisibilityParam = Annotated[
    str,
    Query(
        description="The space's visibility (default project).",
        json_schema_extra={"enum": list(ALLOWED_VISIBILITIES)},
    ),
]
ProjectParam = Annotated[
    str | None,
    Query(description="Project key (visibilities bot, project).", json_schema_extra=_SEGMENT),
]
BotParam = Annotated[
    str | None, Query(description="Bot id (visibility bot).", json_schema_extra=_SEGMENT)
]
PathParam = Annotated[
    str,
    Query(
        description="Document path: relative, canonical, ending in .md (e.g. notes/deploy.md).",
        json_schema_extra={"minLength": 4, "maxLength": 512, "pattern": r"\.md$"},
    ),
]


class DocumentInfoOut(BaseModel):
    path: str
    size_bytes: int
    updated_at: str
    etag: str


class DocsOut(BaseModel):
    documents: list[DocumentInfoOut]


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


class RejectedOut(BaseModel):
    path: str
    reason: str


class ImportOut(BaseModel):
    written: list[str]
    skipped: list[str]
    renamed: dict[str, str]
    rejected: list[RejectedOut]


def check_params(request: Request, allowed: tuple[str, ...]) -> None:
    """Refuse any query parameter the route does not take."""
    for key in request.query_params:
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
    """The query parameters that name a space (tenant and user are never among them)."""

    name: str
    visibility: str
    project: str | None
    bot: str | None


async def space_query(
    name: Name,
    visibility: VisibilityParam = "project",
    project: ProjectParam = None,
    bot: BotParam = None,
) -> SpaceQuery:
    # async on purpose: no I/O, so no threadpool hop.
    return SpaceQuery(name, visibility, project, bot)


Space = Annotated[SpaceQuery, Depends(space_query)]


def resolve_space(
    request: Request, who: Who, allowed: tuple[str, ...], space: SpaceQuery
) -> SpaceRef:
    """The space the request names, stamped with the caller's team and user."""
    check_params(request, allowed)
    return space_ref(who, space.name, space.visibility, project=space.project, bot=space.bot)


def document_info_json(d: DocumentInfo) -> dict[str, Any]:
    """The JSON of one document's metadata (listings, reads)."""
    return {
        "path": d.path,
        "size_bytes": d.size_bytes,
        "updated_at": d.updated_at.isoformat(),
        "etag": d.etag,
    }


IfMatch = Annotated[
    str | None,
    Header(
        alias="If-Match",
        description="Only if the document's etag is still this one (else 412).",
    ),
]


def _if_match(raw: str | None) -> str | None:
    """The etag of an If-Match header: quoted or bare, a weak ``W/`` prefix ignored."""
    if raw is None:
        return None
    raw = raw.strip()
    if raw.startswith("W/"):
        raw = raw[2:]
    return raw.strip('"')


@router.get(
    "/api/memory/usage",
    response_model=UsageOut,
    responses=error_responses(*AUTH_ERRORS),
    summary="Bytes used against quotas for one space",
)
def usage(
    request: Request,
    who: Principal,
    state: State,
    space: Space,
) -> dict[str, Any]:
    ref = resolve_space(request, who, SPACE_PARAMS, space)
    u = state.spaces.usage(ref)
    return {
        "space_id": u.space_id,
        "used_bytes": u.used_bytes,
        "quota_bytes": u.quota_bytes,
        "team_used_bytes": u.team_used_bytes,
        "team_quota_bytes": u.team_quota_bytes,
    }


@router.get(
    "/api/memory/docs",
    response_model=DocsOut,
    responses=error_responses(*AUTH_ERRORS, 422),
    summary="List the documents of a space, sorted by path",
)
def list_docs(
    request: Request,
    who: Principal,
    state: State,
    space: Space,
    dir: Annotated[
        str, Query(description="A canonical directory prefix, e.g. notes (no trailing slash).")
    ] = "",
) -> JSONResponse:
    ref = resolve_space(request, who, (*SPACE_PARAMS, "dir"), space)
    # A JSONResponse skips re-validating every item against DocsOut (which still
    # documents the answer): on a large listing that validation was most of the work.
    return JSONResponse({"documents": [document_info_json(d) for d in state.spaces.list(ref, dir)]})


_ETAG = {"ETag": {"description": "The document's etag, quoted", "schema": {"type": "string"}}}


@router.get(
    "/api/memory/doc",
    response_model=DocOut,
    responses={200: {"headers": _ETAG}, **error_responses(*AUTH_ERRORS, 422)},
    summary="Read one document (ETag header = its etag)",
)
def read_doc(
    request: Request,
    who: Principal,
    state: State,
    space: Space,
    path: PathParam,
) -> JSONResponse:
    ref = resolve_space(request, who, (*SPACE_PARAMS, "path"), space)
    doc = state.spaces.read(ref, path)
    body = {**document_info_json(doc.info), "content": doc.content}
    return JSONResponse(body, headers={"ETag": f'"{doc.etag}"'})


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
    # Imported here, not at the top: this function is edited apart from the rest of the file.
    from cairn.jsonbody import parse_json_body

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
    response_model=WriteOut,
    status_code=200,
    responses={
        200: {"headers": _ETAG},
        201: {"description": "Created", "model": WriteOut, "headers": _ETAG},
        **error_responses(*AUTH_ERRORS, 412, 413, 422),
    },
    openapi_extra=_PUT_BODY,
    summary="Create (201) or replace (200) one document; If-Match for a conditional write",
)
async def write_doc(
    request: Request,
    who: Principal,
    state: State,
    space: Space,
    path: PathParam,
    if_match_header: IfMatch = None,
) -> JSONResponse:
    ref = resolve_space(request, who, (*SPACE_PARAMS, "path"), space)
    content = _parse_put_body(request, await request.body())
    if_match = _if_match(if_match_header)

    def run() -> JSONResponse:
        result = state.spaces.write(who, ref, path, content, if_match=if_match)
        body = {
            "path": result.path,
            "size_bytes": result.size_bytes,
            "etag": result.etag,
            "created": result.created,
        }
        return JSONResponse(
            body, status_code=201 if result.created else 200, headers={"ETag": f'"{result.etag}"'}
        )

    return await anyio.to_thread.run_sync(run)


@router.delete(
    "/api/memory/doc",
    status_code=204,
    response_class=Response,
    responses=error_responses(*AUTH_ERRORS, 412, 422),
    summary="Delete one document",
)
def delete_doc(
    request: Request,
    who: Principal,
    state: State,
    space: Space,
    path: PathParam,
    if_match_header: IfMatch = None,
) -> Response:
    ref = resolve_space(request, who, (*SPACE_PARAMS, "path"), space)
    state.spaces.delete(who, ref, path, if_match=_if_match(if_match_header))
    return Response(status_code=204)


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
    summary="Export a space as a .tar.gz (streamed)",
)
def export_space(
    request: Request,
    who: Principal,
    state: State,
    space: Space,
) -> StreamingResponse:
    ref = resolve_space(request, who, SPACE_PARAMS, space)
    # Touch the store first, so an unreachable database is a clean 503, not a cut stream.
    state.spaces.usage(ref)
    return StreamingResponse(
        iter_export(lambda sink: state.spaces.export(ref, sink)),
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
    who: Principal,
    state: State,
    space: Space,
    strategy: Annotated[str, Query(description="skip (default), overwrite or rename.")] = "skip",
) -> dict[str, Any]:
    ref = resolve_space(request, who, (*SPACE_PARAMS, "strategy"), space)
    how = parse_import_strategy(strategy)
    # Refuse before the upload is read: the caller's rights do not depend on the archive.
    authorize_space_mutation(who, ref)
    return await _run_import(request, who, state, ref, how)


async def _run_import(
    request: Request, who: Who, state: AppState, ref: SpaceRef, how: ImportStrategy
) -> dict[str, Any]:
    reader = AsyncBodyReader(request.stream(), state.settings.max_import_bytes)

    def run() -> dict[str, Any]:
        report = state.spaces.import_archive(who, ref, reader, how)  # type: ignore[arg-type]
        return {
            "written": report.written,
            "skipped": report.skipped,
            "renamed": report.renamed,
            "rejected": [{"path": r.path, "reason": r.reason} for r in report.rejected],
        }

    try:
        return await anyio.to_thread.run_sync(run)
    except Exception:
        if reader.too_large:
            raise ImportTooLarge(
                f"the import upload is over {reader.limit} bytes (CAIRN_MAX_IMPORT_BYTES)",
                quota_bytes=reader.limit,
            ) from None
        raise
