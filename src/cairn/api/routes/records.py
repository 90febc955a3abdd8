"""HTTP routes of team memory records (SPEC §6): thin layers over
:mod:`cairn.records.service`.

Bodies and query parameters are parsed *inside* each route, after the caller's team
and role have been checked, so a request failing several checks gets the first in
the contract's order (401 → 404 team → 403 → 400 → 402 → off → 404 repo → 429 →
503) rather than FastAPI's body validation first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, FastAPI, Path, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.engine import Engine

from cairn.api.deps import AnyPrincipal
from cairn.api.routes.common import error_responses
from cairn.errors import StoreUnavailable
from cairn.records import service
from cairn.records.access import Action, TeamAccess, resolve
from cairn.records.models import (
    SaveRequest,
    SearchRequest,
    SettingsRequest,
    check_params,
    parse,
)
from cairn.records.ratelimit import RateLimiter, make_rate_limiter

log = logging.getLogger("cairn.records")

T = TypeVar("T")

DEFAULT_PURGE_INTERVAL_SECONDS = 3600.0

_limiter_lock = threading.Lock()


def _engine(request: Request) -> Engine:
    engine = getattr(request.app.state, "engine", None)
    if engine is None:
        raise StoreUnavailable("this deployment has no records store configured")
    return engine  # type: ignore[no-any-return]


def _limiter(request: Request) -> RateLimiter:
    """The app's search limiter, made on first use from ``CAIRN_REDIS_URL``."""
    state = request.app.state
    limiter = getattr(state, "records_limiter", None)
    if limiter is None:
        with _limiter_lock:
            limiter = getattr(state, "records_limiter", None)
            if limiter is None:
                limiter = make_rate_limiter()
                state.records_limiter = limiter
    return limiter


async def _call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await run_in_threadpool(fn, *args, **kwargs)


async def _access(
    request: Request, who: Any, team: str, action: Action, params: tuple[str, ...] = ()
) -> TeamAccess:
    access = await _call(resolve, _engine(request), who, team, action)
    check_params(request.query_params.keys(), params)
    return access


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Purge expired records periodically (``CAIRN_RECORDS_PURGE_INTERVAL`` seconds,
    default 3600; 0 turns it off) while the app runs."""
    task = asyncio.create_task(purge_periodically(app))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def purge_periodically(app: FastAPI, interval: float | None = None) -> None:
    """Run :func:`cairn.records.service.purge_expired` every ``interval`` seconds."""
    if interval is None:
        raw = os.environ.get("CAIRN_RECORDS_PURGE_INTERVAL", "")
        try:
            interval = float(raw) if raw.strip() else DEFAULT_PURGE_INTERVAL_SECONDS
        except ValueError:
            interval = DEFAULT_PURGE_INTERVAL_SECONDS
    if interval <= 0:
        return
    while True:
        await asyncio.sleep(interval)
        engine = getattr(app.state, "engine", None)
        if engine is None:
            continue
        try:
            removed = await run_in_threadpool(service.purge_expired, engine)
            if removed:
                log.info("purged expired records", extra={"removed": removed})
        except Exception:  # a failed purge is retried next round; never kill the server
            log.exception("purging expired records failed")


router = APIRouter(tags=["records"], lifespan=_lifespan)


def setup(app: FastAPI) -> None:
    """Called by ``create_app``: the search limiter (Redis when ``CAIRN_REDIS_URL``
    is set), made once per app so every request of this replica shares it."""
    if getattr(app.state, "records_limiter", None) is None:
        app.state.records_limiter = make_rate_limiter()


_READ_ERRORS = error_responses(400, 401, 403, 404, 500, 503)


def _body(model: type[Any]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": model.model_json_schema()}},
        }
    }


@router.post(
    "/api/teams/{team}/memory/search",
    openapi_extra=_body(SearchRequest),
    responses=error_responses(400, 401, 402, 403, 404, 429, 500, 503),
    summary="Search the team's memory records",
)
async def search_records(team: str, request: Request, who: AnyPrincipal) -> dict[str, Any]:
    access = await _access(request, who, team, Action.READ)
    body = parse(SearchRequest, await request.body())
    return await _call(
        service.search,
        _engine(request),
        access,
        body.query,
        repo_id=body.repo_id,
        limit=body.limit,
        limiter=_limiter(request),
    )


@router.post(
    "/api/internal/teams/{team}/memory",
    status_code=201,
    openapi_extra=_body(SaveRequest),
    responses=error_responses(400, 401, 402, 403, 404, 409, 500, 503),
    summary="Save a record (the service token only)",
)
async def save_record(team: str, request: Request, who: AnyPrincipal) -> dict[str, Any]:
    access = await _access(request, who, team, Action.SAVE)
    body = parse(SaveRequest, await request.body())
    record = await _call(service.save_for, _engine(request), access, body.text, body.repo_id)
    return {"id": record.id, "expires_at": service.iso(record.expires_at)}


@router.get(
    "/api/teams/{team}/memory", responses=_READ_ERRORS, summary="List the team's memory records"
)
async def list_records(team: str, request: Request, who: AnyPrincipal) -> dict[str, Any]:
    access = await _access(request, who, team, Action.READ, ("repo_id", "next_token"))
    q = request.query_params
    repo_id = q.get("repo_id") or None
    next_token = q.get("next_token") or None
    return await _call(
        service.list_records, _engine(request), access, repo_id=repo_id, next_token=next_token
    )


@router.delete("/api/teams/{team}/memory/{id}", status_code=204, summary="Delete one record")
async def delete_record(
    team: str,
    record_id: Annotated[str, Path(alias="id", description="The record's id")],
    request: Request,
    who: AnyPrincipal,
) -> Response:
    access = await _access(request, who, team, Action.MANAGE)
    await _call(service.delete, _engine(request), access, record_id)
    return Response(status_code=204)


@router.get(
    "/api/teams/{team}/memory-settings",
    responses=_READ_ERRORS,
    summary="The team's memory setting",
)
async def get_memory_settings(team: str, request: Request, who: AnyPrincipal) -> dict[str, bool]:
    access = await _access(request, who, team, Action.READ)
    settings = await _call(service.get_settings, _engine(request), access)
    return settings.to_dict()


@router.put(
    "/api/teams/{team}/memory-settings",
    openapi_extra=_body(SettingsRequest),
    responses=_READ_ERRORS,
    summary="Turn the team's memory on or off",
)
async def put_memory_settings(team: str, request: Request, who: AnyPrincipal) -> dict[str, bool]:
    access = await _access(request, who, team, Action.MANAGE)
    body = parse(SettingsRequest, await request.body())
    engine = _engine(request)
    await _call(service.set_enabled, engine, access.team_id, body.enabled)
    settings = await _call(service.get_settings, engine, access)
    return settings.to_dict()
