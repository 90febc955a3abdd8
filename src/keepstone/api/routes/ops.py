"""Operations routes (SPEC §7.5): liveness, readiness, Prometheus metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel

from keepstone.api.deps import State
from keepstone.api.metrics import CONTENT_TYPE_LATEST
from keepstone.api.routes.common import error_responses

router = APIRouter(tags=["operations"])


class StatusOut(BaseModel):
    status: str


@router.get("/healthz", response_model=StatusOut, summary="The process is alive")
def healthz() -> dict[str, Any]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=StatusOut,
    responses=error_responses(503),
    summary="The database is reachable",
)
def readyz(state: State) -> dict[str, Any]:
    state.runtime.ping()  # StoreUnavailable → 503
    return {"status": "ready"}


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"description": "Prometheus text format", "content": {"text/plain": {}}}},
    summary="Prometheus metrics",
)
def metrics(state: State) -> Response:
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
