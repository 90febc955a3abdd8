"""HTTP routes of team memory records (SPEC §6): thin faces over
:class:`keepstone.service.records.RecordService` (``request.app.state.records``).

Each route reads its input, calls one use-case with the caller's principal and the
team, and renders the answer's dataclass as the contract's JSON. The use-case
resolves the caller's access itself, so the refusal order of the contract (401 →
404 team → 403 → 400 → 402 → off → 404 repo → 429 → 503) holds; a body or query
parameter that cannot even be read is a 400 too, but a caller who may not act in the
team hears that first (:func:`_read`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, FastAPI, Path, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from keepstone.api.deps import AnyCaller, CallerCredential, any_caller_of
from keepstone.api.records_bodies import (
    SaveRequest,
    SearchRequest,
    SettingsRequest,
    check_params,
    parse,
)
from keepstone.api.responses import FastJSONResponse
from keepstone.api.routes.common import error_responses
from keepstone.errors import BadRequest, StoreUnavailable
from keepstone.principal import Principal
from keepstone.service.access import Action
from keepstone.service.filters import SearchFilters, search_filters
from keepstone.service.records import (
    ListedRecord,
    Record,
    RecordHit,
    RecordPage,
    RecordService,
    SearchAnswer,
    iso,
)

log = logging.getLogger("keepstone.records")

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


def _records(request: Request) -> RecordService:
    records: RecordService | None = getattr(request.app.state, "records", None)
    if records is None:
        raise StoreUnavailable("this deployment has no records store configured")
    return records


def _read(
    records: RecordService, who: Principal, team: str, action: Action, read: Callable[[], T]
) -> T:
    """``read()`` the request's input; when it cannot be read (400), a caller who may
    not act in the team is refused for that first (404 / 403), as the contract orders.
    On success the use-case resolves the caller once, itself."""
    try:
        return read()
    except BadRequest:
        records.check_access(who, team, action)
        raise


def _params(request: Request, *allowed: str) -> Callable[[], None]:
    """The reading of a route without a body: only the query parameters it takes."""
    return lambda: check_params(request.query_params.keys(), allowed)


def _body(request: Request, raw: bytes, model: type[M]) -> Callable[[], M]:
    """The reading of a route with a body: the JSON body as ``model`` (such a route takes
    no query parameter)."""

    def read() -> M:
        check_params(request.query_params.keys(), ())
        return parse(model, raw)

    return read


async def _serve(
    request: Request, caller: CallerCredential, work: Callable[[RecordService, Principal], T]
) -> T:
    """``work(records, who)`` in one thread-pool hop, the credential resolved there first
    (:data:`~keepstone.api.deps.AnyCaller`): a bad credential is refused before the records
    store is looked for, as before."""
    return await caller.run(lambda who: work(_records(request), who))


@contextlib.asynccontextmanager
async def purging(app: FastAPI) -> AsyncIterator[None]:
    """Purge expired records and prune old document history periodically
    (``KEEPSTONE_RECORDS_PURGE_INTERVAL`` seconds, default 3600; 0 turns it off) while the
    app runs: a part of the app's lifespan (``keepstone.api.app.app_for``), so this router
    has none of its own and its routes can be the app's own.

    On the way out a round under way is let finish, not cancelled: its work runs in a
    thread that a cancel would not stop, so it could go on deleting after the app has
    stopped, on an engine the lifespan is about to close."""
    stop = asyncio.Event()
    task = asyncio.create_task(purge_periodically(app, stop=stop))
    try:
        yield
    finally:
        stop.set()
        await task


async def purge_periodically(
    app: FastAPI, interval: float | None = None, *, stop: asyncio.Event | None = None
) -> None:
    """Every ``interval`` seconds, run :meth:`RecordService.purge_expired` and
    :meth:`AdminService.prune_history` (versions past each team's ``history_days``), until
    ``stop`` is set (between chores: one under way finishes first) or the task is cancelled."""
    if interval is None:
        interval = app.state.settings.records_purge_interval
    if interval <= 0:
        return
    stop = stop or asyncio.Event()
    while not await _set_within(stop, interval):
        for component, method, done, failed in _CHORES:
            service = getattr(app.state, component, None)
            if service is not None and not stop.is_set():
                await _chore(getattr(service, method), done, failed)


async def _set_within(event: asyncio.Event, seconds: float) -> bool:
    """Whether ``event`` is set within ``seconds``."""
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except TimeoutError:
        return False
    return True


#: The periodic chores: the component on ``app.state``, its method, what is logged when it
#: did something (the message, the name of its count) and when it failed.
_CHORES = (
    (
        "records",
        "purge_expired",
        ("purged expired records", "removed"),
        "purging expired records failed",
    ),
    (
        "admin",
        "prune_history",
        ("pruned document history", "versions"),
        "pruning document history failed",
    ),
)


async def _chore(run: Callable[[], int], done: tuple[str, str], failed: str) -> None:
    """One round of a periodic chore, in the threadpool: ``done`` (the message and the name
    of its count) is logged when it did something; a failure is logged as ``failed`` and
    retried next round, never kills the server."""
    try:
        count = await run_in_threadpool(run)
        if count:
            log.info(done[0], extra={done[1]: count})
    except Exception:
        log.exception(failed)


router = APIRouter(tags=["records"])


# --- rendering: the contract's JSON of each answer ------------------------------------------


def _row(item: RecordHit | ListedRecord, *dates: str) -> dict[str, Any]:
    """A record as JSON: its fields in order, ``dates`` in ISO 8601."""
    return {**asdict(item), **{name: iso(getattr(item, name)) for name in dates}}


def _search_json(answer: SearchAnswer) -> dict[str, Any]:
    hits = [_row(hit, "created_at") for hit in answer.hits]
    out: dict[str, Any] = {
        "state": answer.state.value,
        "notice": answer.notice,
        "results": hits,
        "pending": answer.pending,
    }
    if answer.hint is not None:
        out["hint"] = answer.hint
    return out


def _search_body(request: Request, raw: bytes) -> Callable[[], tuple[SearchRequest, SearchFilters]]:
    """The search body and its filters, checked together (a bad one is a 400 of the body)."""
    read = _body(request, raw, SearchRequest)

    def checked() -> tuple[SearchRequest, SearchFilters]:
        body = read()
        filters = search_filters(
            since=body.since,
            until=body.until,
            min_score=body.min_score,
            recency_days=body.recency_days,
        )
        return body, filters

    return checked


def _page_json(page: RecordPage) -> dict[str, Any]:
    return {
        "state": page.state.value,
        "notice": page.notice,
        "records": [_row(r, "created_at", "expires_at") for r in page.records],
        "next_token": page.next_token,
    }


# --- routes ------------------------------------------------------------------------------------


_READ_ERRORS = error_responses(400, 401, 403, 404, 500, 503)


def _schema(model: type[Any], *, by_hand: bool = False) -> dict[str, Any]:
    """The OpenAPI of a route's JSON body ``model``; ``by_hand``: with the team path
    parameter, which such a route reads itself (:func:`_by_hand`)."""
    body = {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": model.model_json_schema()}},
        }
    }
    if by_hand:
        team = {"in": "path", "name": "team", "required": True}
        return {"parameters": [{**team, "schema": {"title": "Team", "type": "string"}}], **body}
    return body


async def _by_hand(request: Request) -> tuple[str, CallerCredential, bytes]:
    """The team, the caller and the body of a record save or search, the first two read as
    FastAPI would resolve ``team: str`` and :data:`AnyCaller` (the credential's presence
    first, refused with no I/O), then the body, on the event loop: the two routes most
    requested take nothing from FastAPI but the request, whose solving of declared
    parameters was a measurable share of a save's CPU (docs/performance.md)."""
    caller = any_caller_of(request)
    return request.path_params["team"], caller, await request.body()


@router.post(
    "/api/teams/{team}/memory/search",
    openapi_extra=_schema(SearchRequest, by_hand=True),
    responses=error_responses(400, 401, 402, 403, 404, 429, 500, 503),
    summary="Search the team's memory records",
)
async def search_records(request: Request) -> Response:
    team, caller, raw = await _by_hand(request)

    def run(records: RecordService, who: Principal) -> Response:
        body, filters = _read(records, who, team, Action.READ, _search_body(request, raw))
        answer = records.search(
            who, team, body.query, repo_id=body.repo_id, limit=body.limit, filters=filters
        )
        return FastJSONResponse(_search_json(answer))

    return await _serve(request, caller, run)


@router.post(
    "/api/internal/teams/{team}/memory",
    status_code=201,
    openapi_extra=_schema(SaveRequest, by_hand=True),
    responses=error_responses(400, 401, 402, 403, 404, 409, 500, 503),
    summary="Save a record (the service token only)",
)
async def save_record(request: Request) -> Response:
    team, caller, raw = await _by_hand(request)
    who = caller.principal_now()
    if who is None:  # a credential read from the database, in a worker thread: refused there

        def run(records: RecordService, who: Principal) -> Response:
            body = _read(records, who, team, Action.SAVE, _body(request, raw, SaveRequest))
            return _saved(records.save(who, team, body.text, body.repo_id))

        return await _serve(request, caller, run)
    # The service token: the save is prepared here, on the event loop, and waits here for
    # its group, which a worker thread writes (RecordService.save_async).
    records = _records(request)
    try:
        body = _body(request, raw, SaveRequest)()
    except BadRequest:
        await caller.run(lambda who: records.check_access(who, team, Action.SAVE))
        raise
    return _saved(await records.save_async(who, team, body.text, body.repo_id))


def _saved(record: Record) -> Response:
    return FastJSONResponse(
        {"id": record.id, "expires_at": iso(record.expires_at)}, status_code=201
    )


@router.get(
    "/api/teams/{team}/memory", responses=_READ_ERRORS, summary="List the team's memory records"
)
async def list_records(team: str, request: Request, caller: AnyCaller) -> Response:
    def run(records: RecordService, who: Principal) -> Response:
        _read(records, who, team, Action.READ, _params(request, "repo_id", "next_token"))
        q = request.query_params
        page = records.list(
            who, team, repo_id=q.get("repo_id") or None, next_token=q.get("next_token") or None
        )
        return FastJSONResponse(_page_json(page))

    return await _serve(request, caller, run)


@router.delete("/api/teams/{team}/memory/{id}", status_code=204, summary="Delete one record")
async def delete_record(
    team: str,
    record_id: Annotated[str, Path(alias="id", description="The record's id")],
    request: Request,
    caller: AnyCaller,
) -> Response:
    def run(records: RecordService, who: Principal) -> Response:
        _read(records, who, team, Action.MANAGE, _params(request))
        records.delete(who, team, record_id)
        return Response(status_code=204)

    return await _serve(request, caller, run)


@router.get(
    "/api/teams/{team}/memory-settings",
    responses=_READ_ERRORS,
    summary="The team's memory setting",
)
async def get_memory_settings(team: str, request: Request, caller: AnyCaller) -> dict[str, bool]:
    def run(records: RecordService, who: Principal) -> dict[str, bool]:
        _read(records, who, team, Action.READ, _params(request))
        return asdict(records.get_settings(who, team))

    return await _serve(request, caller, run)


@router.put(
    "/api/teams/{team}/memory-settings",
    openapi_extra=_schema(SettingsRequest),
    responses=_READ_ERRORS,
    summary="Turn the team's memory on or off",
)
async def put_memory_settings(team: str, request: Request, caller: AnyCaller) -> dict[str, bool]:
    raw = await request.body()

    def run(records: RecordService, who: Principal) -> dict[str, bool]:
        body = _read(records, who, team, Action.MANAGE, _body(request, raw, SettingsRequest))
        return asdict(records.set_enabled(who, team, body.enabled))

    return await _serve(request, caller, run)
