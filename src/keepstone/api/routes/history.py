"""A document's history over REST (docs/api.md "History"): its versions, a diff
between two of them, and restoring one.

The space is named as on every spaces route (:mod:`keepstone.api.routes.spaces`): its query
parameters, the team and user from the credential, any other parameter refused. Reading
a version or the space as of an instant are the plain read, list and export routes with
``version`` / ``as_of`` (they live with those routes, in ``spaces``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel

from keepstone.api.deps import Caller
from keepstone.api.responses import FastJSONResponse
from keepstone.api.routes.common import AUTH_ERRORS, HandReadRoute, error_responses, parse_version
from keepstone.api.routes.spaces import (
    IfMatch,
    PathParam,
    Space,
    write_route,
    written,
)
from keepstone.principal import Principal as Who
from keepstone.service.access import authorize_space_mutation

router = APIRouter(tags=["spaces"], route_class=HandReadRoute)


class VersionOut(BaseModel):
    version: int
    etag: str
    size: int
    at: str
    actor: str
    deleted: bool


class VersionsOut(BaseModel):
    versions: list[VersionOut]


def _version_query(description: str, alias: str | None = None) -> Any:
    extra = {"type": "integer", "minimum": 1}
    return Query(alias=alias, description=description, json_schema_extra=extra)


@router.get(
    "/api/memory/doc/versions",
    response_model=VersionsOut,
    responses=error_responses(*AUTH_ERRORS, 422),
    summary="A document's versions, newest first, the live one included",
)
async def list_versions(caller: Caller, space: Space, path: PathParam) -> JSONResponse:
    def run(who: Who) -> JSONResponse:
        versions = caller.state.spaces.versions(space.ref(who, "path"), path)
        return FastJSONResponse({"versions": [v.as_json() for v in versions]})

    return await caller.run(run)


@router.get(
    "/api/memory/doc/diff",
    response_class=PlainTextResponse,
    responses={
        200: {
            "description": "A unified diff (empty when the two versions are equal)",
            "content": {"text/x-diff": {"schema": {"type": "string"}}},
        },
        **error_responses(*AUTH_ERRORS, 422),
    },
    summary="A unified diff between two versions of a document (to: default the newest)",
)
async def diff_versions(
    caller: Caller,
    space: Space,
    path: PathParam,
    old: Annotated[str, _version_query("The version to diff from (required).", "from")] = "",
    new: Annotated[
        str | None, _version_query("The version to diff to (default: the newest).", "to")
    ] = None,
) -> PlainTextResponse:
    def run(who: Who) -> PlainTextResponse:
        ref = space.ref(who, "path", "from", "to")
        start = parse_version(old, "from")
        spaces = caller.state.spaces
        end = spaces.versions(ref, path)[0].version if new is None else parse_version(new, "to")
        text = spaces.diff(ref, path, start, end)
        return PlainTextResponse(text, media_type="text/x-diff; charset=utf-8")

    return await caller.run(run)


@router.post(
    "/api/memory/doc/restore",
    **write_route("Restored a deleted document", 412, 413, 422),
    summary="Make a version current again: a new write of its content (as a PUT is checked)",
)
async def restore_version(
    caller: Caller,
    space: Space,
    path: PathParam,
    version: Annotated[str, _version_query("The version to restore (required).")] = "",
    if_match: IfMatch = None,
) -> JSONResponse:
    def run(who: Who) -> JSONResponse:
        ref = space.ref(who, "path", "version")
        # Refused before anything is read: a viewer learns nothing about which versions exist.
        authorize_space_mutation(who, ref)
        number = parse_version(version)
        return written(caller.state.spaces.restore(who, ref, path, number, if_match=if_match))

    return await caller.run(run)
