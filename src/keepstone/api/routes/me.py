"""A signed-in member's own API keys (SPEC "Administration"): mint one for a team they
act in (shown once), list theirs (never the key), revoke one.

Thin over :class:`keepstone.service.own_keys.OwnKeys`, which decides who may: a browser
session only; another team is ``404 team_not_found``, another user's key ``404``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict

from keepstone.api.deps import Principal
from keepstone.api.routes.admin import ApiKeysOut, Cursor, Id, KeyOut, Limit, Short, page_out
from keepstone.api.routes.common import AUTH_ERRORS, error_responses
from keepstone.service.admin import DEFAULT_PAGE
from keepstone.service.own_keys import OwnKeys

router = APIRouter(prefix="/api/me", tags=["me"])


async def _own_keys(request: Request) -> OwnKeys:
    # async on purpose: it does no I/O, and a sync dependency costs a threadpool hop.
    service: OwnKeys = request.app.state.own_keys
    return service


Keys = Annotated[OwnKeys, Depends(_own_keys)]
ERRORS = error_responses(*AUTH_ERRORS)


class OwnKeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    team_id: Id
    # Required (blank is refused by the use-case, naming ``name``).
    name: Short


@router.post(
    "/api-keys",
    status_code=201,
    response_model=KeyOut,
    responses=ERRORS,
    summary="Mint an API key of your own for a team you act in (shown once)",
)
def create_key(body: OwnKeyIn, who: Principal, keys: Keys) -> dict[str, Any]:
    created = keys.create(who, body.team_id, body.name)
    return {"id": created.id, "key": created.key, "name": body.name.strip()}


@router.get(
    "/api-keys",
    response_model=ApiKeysOut,
    responses=ERRORS,
    summary="Your API keys, revoked ones too (never the key), paged",
)
def list_keys(
    who: Principal, keys: Keys, limit: Limit = DEFAULT_PAGE, cursor: Cursor = None
) -> dict[str, Any]:
    return page_out("api_keys", keys.list(who, limit=limit, cursor=cursor))


@router.delete(
    "/api-keys/{id}",
    status_code=204,
    response_class=Response,
    responses=ERRORS,
    summary="Revoke one of your API keys",
)
def revoke_key(id: str, who: Principal, keys: Keys) -> Response:
    keys.revoke(who, id)
    return Response(status_code=204)
