"""Operations routes (SPEC §7.5): liveness, readiness, Prometheus metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel, Field

from keepstone.api.deps import State
from keepstone.api.metrics import CONTENT_TYPE_LATEST
from keepstone.api.routes.common import error_responses
from keepstone.errors import KeepstoneError

router = APIRouter(tags=["operations"])


class StatusOut(BaseModel):
    status: str


class BacklogOut(BaseModel):
    model: str | None = Field(description="The configured model (null: keyword-only search).")
    chunks: int | None = Field(description="Document chunks waiting for a vector of it.")
    records: int | None = Field(description="Team records waiting for a vector of it.")


class ReadyOut(StatusOut):
    backlog: BacklogOut
    redis: str | None = Field(
        description="The records search limit's Redis: `ok`, or `unreachable` (record searches "
        "answer 503 meanwhile; nothing else needs it); null without KEEPSTONE_REDIS_URL."
    )


@router.get("/healthz", response_model=StatusOut, summary="The process is alive")
def healthz() -> dict[str, Any]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=ReadyOut,
    responses=error_responses(503),
    summary="The database is reachable; what the indexer has still to embed",
)
def readyz(state: State) -> dict[str, Any]:
    state.runtime.ping()  # StoreUnavailable → 503
    # A backlog does not make the server unready: search answers, by keyword for the rest.
    # Nor does a Redis away: every replica shares it, so taking this one out of rotation
    # would stop documents and records too, for record searches no replica can serve.
    return {
        "status": "ready",
        "backlog": state.runtime.backlog().as_json(),
        "redis": state.runtime.redis_state(),
    }


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"description": "Prometheus text format", "content": {"text/plain": {}}}},
    summary="Prometheus metrics",
)
def metrics(state: State) -> Response:
    try:
        found = state.runtime.backlog()
    except KeepstoneError:  # the database is away: the other metrics still say so
        pass
    else:
        state.metrics.set_backlog({"chunks": found.chunks, "records": found.records})
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
