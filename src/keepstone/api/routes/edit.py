"""Editing one document over REST (docs/api.md "Moving and editing documents"): replace the
one exact occurrence of a text, or insert lines, in one request.

The edit is the service's (:meth:`~keepstone.service.spaces.SpaceService.edit`), the one
``Memory.edit`` and the agent tools call: a read and a write of the whole new text,
conditional on the etag read, so a change made in between is never overwritten: the edit
is applied again to the newer text, or, with ``If-Match``, refused.
The space is named as on every spaces route (:mod:`keepstone.api.routes.spaces`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from keepstone.api.deps import caller_of
from keepstone.api.routes.common import (
    AUTH_ERRORS,
    HandReadRoute,
    error_responses,
    etag_of_if_match,
    required_query,
)
from keepstone.api.routes.spaces import (
    DOC_WRITE_PARAMETERS,
    ETAG_HEADER,
    WriteOut,
    by_hand,
    space_of,
    written,
)
from keepstone.documents import Edit, edit_of
from keepstone.errors import InvalidRequest
from keepstone.jsonbody import parse_json_body
from keepstone.principal import Principal as Who

router = APIRouter(tags=["spaces"], route_class=HandReadRoute)

_FIELDS = ("old", "new", "insert_line", "text")
_HINT = 'send {"old": "<exact text>", "new": "<replacement>"} or {"insert_line": N, "text": "..."}'


def _form(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": required,
        "properties": properties,
        "additionalProperties": False,
    }


_REPLACE = _form(
    ["old", "new"],
    {
        "old": {"type": "string", "minLength": 1, "description": "The exact text to replace."},
        "new": {"type": "string", "description": "The text to put in its place."},
    },
)
_INSERT = _form(
    ["insert_line", "text"],
    {
        "insert_line": {
            "type": "integer",
            "minimum": 0,
            "description": "Insert after this line (0 = at the top).",
        },
        "text": {"type": "string", "description": "The line(s) to insert."},
    },
)
_EDIT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"oneOf": [_REPLACE, _INSERT]}}},
    }
}


def parse_edit_body(raw: bytes) -> Edit:
    """The edit a request's JSON body names, or ``400 invalid_request`` saying which of the
    two forms to send."""
    body = parse_json_body(raw, hint=_HINT)
    if not isinstance(body, dict):
        raise InvalidRequest(f"the body must be a JSON object; {_HINT}", field="body")
    extra = sorted(set(body) - set(_FIELDS))
    if extra:
        raise InvalidRequest(f"field {extra[0]!r} is not accepted; {_HINT}", field=extra[0])
    return edit_of(*(body.get(name) for name in _FIELDS))


@router.post(
    "/api/memory/doc/edit",
    # Answered as a PUT that replaced the document: 200 and its etag (an edit never creates).
    response_model=WriteOut,
    responses={200: {"headers": ETAG_HEADER}, **error_responses(*AUTH_ERRORS, 412, 413, 422)},
    openapi_extra={**_EDIT_BODY, "parameters": by_hand(DOC_WRITE_PARAMETERS)},
    summary="Replace the one exact occurrence of a text, or insert lines, in one document",
)
async def edit_doc(request: Request) -> JSONResponse:
    caller, space = caller_of(request), space_of(request)
    path = required_query(request.query_params, "path")
    if_match = etag_of_if_match(request.headers.get("if-match"))
    raw = await request.body()

    def run(who: Who) -> JSONResponse:
        ref = space.ref(who, "path")
        edit = parse_edit_body(raw)
        return written(caller.state.spaces.edit(who, ref, path, edit, if_match=if_match))

    return await caller.write(run)
