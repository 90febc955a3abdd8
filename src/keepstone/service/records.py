"""Team memory records (SPEC §6): the use-cases every face shares.

:class:`RecordService` wraps one :class:`~keepstone.records.store.RecordStore`, the one
access model (:class:`~keepstone.service.access.Access`) and the per-team search rate
limit. A use-case acting for a caller takes the caller's
:class:`~keepstone.principal.Principal` and the team id, resolves the caller's access
itself, and refuses in the contract's order::

    404 team_not_found → 403 forbidden / csrf_required     (Access.team_access)
    → 400 invalid_request (a field outside its limit; checked once, record_gates)
    → 402 plan_required → memory off (search: 200 state "off"; save: 409 memory_off)
    → 404 repo_not_found → 429 rate_limited → 503 store_unavailable

(401 comes first, from the face that turns a credential into a principal.) The gates
— the team's setting, the repository — and the search, listing or insert share one
store transaction, so with a credential that resolved its standing as it was read (an
API key), a request costs two transactions in all; a save by the service token costs
one, shared with the saves beside it (its team and plan are read in its group's write,
see :meth:`RecordService.save`).

Answers are frozen dataclasses. Every record text in an answer is already a fenced
block its content cannot close (:func:`keepstone.records.render.render_text`), and every
answer that carries records carries :data:`~keepstone.records.render.NOTICE`; a face only
maps fields. Times are aware UTC datetimes (:func:`iso` is the contract's spelling).

The host application's own server code saves records in-process with
:meth:`RecordService.save_as_server` (SPEC §6's Python API)::

    records = build_record_service(engine, identity, limiter)
    records.save_as_server(team_id, "Fixed the flaky deploy ...", repo_id=repo)
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

import anyio.to_thread
from sqlalchemy.engine import Engine

from keepstone.db import utcnow
from keepstone.db.pgvector import Pgvector
from keepstone.errors import InvalidRequest, KeepstoneError, RecordNotFound
from keepstone.identity.service import IdentityService
from keepstone.principal import Principal
from keepstone.records.group import GroupCommit, Outcome
from keepstone.records.models import DEFAULT_LIMIT as DEFAULT_LIMIT
from keepstone.records.models import MAX_ID as MAX_ID
from keepstone.records.models import MAX_LIMIT as MAX_LIMIT
from keepstone.records.models import MAX_QUERY as MAX_QUERY
from keepstone.records.models import MAX_TEXT as MAX_TEXT
from keepstone.records.models import is_clean_id
from keepstone.records.ratelimit import RateLimiter, admitted
from keepstone.records.render import NOTICE, render_text
from keepstone.records.sql import SqlRecordStore
from keepstone.records.store import (
    REMOVALS_KEPT,
    PagePosition,
    RecordStore,
    Scope,
    new_record,
    utc,
)
from keepstone.records.store import (
    Record as Record,  # what a save answers (re-exported for the faces)
)
from keepstone.search.filters import NO_FILTERS, SearchFilters
from keepstone.search.floor import empty_hint
from keepstone.secrets import mask
from keepstone.service.access import Access, Action, TeamAccess
from keepstone.service.record_gates import (
    check_limit,
    check_memory_on,
    check_plan,
    check_repo,
    check_repo_id,
    check_text,
    memory_off,
)
from keepstone.service.record_tokens import read_page_token, sign_page_token

if TYPE_CHECKING:  # keepstone.service.record_search loads numpy: only processes that search pay
    from keepstone.service.record_search import RecordSearch

log = logging.getLogger("keepstone.records")

#: Records a list page holds.
PAGE_SIZE = 50


class MemoryState(StrEnum):
    """The team's memory as a reader sees it: ``off`` while turned off (and, for a
    listing, while the plan lacks it)."""

    ON = "on"
    OFF = "off"


@dataclass(frozen=True, slots=True)
class RecordHit:
    """A search hit. ``matched`` names the signals that found it: ``"keyword"`` (it
    shares a term with the query), ``"meaning"`` (a search by meaning alone would have
    returned it too)."""

    id: str
    repo_id: str | None
    score: float
    created_at: datetime
    text: str
    matched: tuple[str, ...]
    #: The ids of the records of the same text this hit stands for.
    also_in: tuple[str, ...] = ()


#: The hint of a search while the team's memory is off (every empty answer carries one).
MEMORY_OFF_HINT = (
    "team memory is off for this team, so nothing was searched; an org owner or admin "
    "turns it on in the team's settings"
)


@dataclass(frozen=True, slots=True)
class SearchAnswer:
    """Search results, best first (none while ``state`` is off); ``hint``, when nothing
    came back, says why in one line (memory off, or nothing relevant enough)."""

    state: MemoryState
    notice: str
    hits: tuple[RecordHit, ...]
    #: The team's records not yet embedded by the search's model (searched by keyword only).
    pending: int = 0
    #: One line saying what to try when ``hits`` is empty (None when something was found).
    hint: str | None = None


@dataclass(frozen=True, slots=True)
class ListedRecord:
    id: str
    repo_id: str | None
    created_at: datetime
    expires_at: datetime
    text: str


@dataclass(frozen=True, slots=True)
class RecordPage:
    """One page of a listing, newest first; ``next_token`` fetches the next (None on
    the last page)."""

    state: MemoryState
    notice: str
    records: tuple[ListedRecord, ...]
    next_token: str | None


@dataclass(frozen=True, slots=True)
class MemorySettings:
    """The team's setting as a member sees it. ``can_edit``: the caller may change it."""

    enabled: bool
    plan_allows: bool
    store_ready: bool
    can_edit: bool


@dataclass(frozen=True, slots=True)
class _Save:
    """One save waiting for its group commit: checked but for what the store knows.

    ``access`` None: the team's existence and plan are checked in the group's
    transaction too (:meth:`Access.save_checked_on_write`); ``server`` says which
    ``404`` a missing team gets."""

    access: TeamAccess | None
    record: Record
    server: bool = False


def iso(value: datetime) -> str:
    """A time as the contract spells it: ISO 8601 UTC with ``Z``."""
    return utc(value).isoformat().replace("+00:00", "Z")


class RecordService:
    """``search`` ranks records: a :class:`~keepstone.service.record_search.RecordSearch`, or
    what builds it on first use (the embedder loads a model: only processes that search
    pay); None is keyword-only."""

    def __init__(
        self,
        store: RecordStore,
        access: Access,
        limiter: RateLimiter,
        search: RecordSearch | Callable[[], RecordSearch] | None = None,
    ) -> None:
        self._store = store
        self._access = access
        self._limiter = limiter
        self._search = search
        # Concurrent saves of this process share one write transaction (group commit).
        self._saves: GroupCommit[_Save, Record] = GroupCommit(self._write_saves)

    @property
    def store(self) -> RecordStore:
        """The record store (the background indexer claims its pending records)."""
        return self._store

    def record_search(self) -> RecordSearch:
        """The ranking of records, built on first use."""
        from keepstone.service.record_search import RecordSearch

        found = self._search
        if found is None:
            found = RecordSearch()
        elif not isinstance(found, RecordSearch):
            found = found()
        self._search = found
        return found

    def check_access(self, who: Principal, team_id: str, action: Action) -> None:
        """The refusals that come before a request's fields (``404 team_not_found``,
        ``403``), for a face that could not read its input: a caller who may not act
        in the team hears that first. Every use-case below checks them itself."""
        self._access.team_access(who, team_id, action)

    # --- save -----------------------------------------------------------------------------

    def save(
        self,
        who: Principal,
        team_id: str,
        text: str,
        repo_id: str | None = None,
        *,
        now: datetime | None = None,
    ) -> Record:
        """Save one record for ``team_id`` as ``who`` — only the service token may.

        Refusals, in order: ``404 team_not_found``; ``403 forbidden`` for every user
        credential; ``400`` a text outside 1-8,000 characters or a malformed
        ``repo_id``; ``402 plan_required``; ``409 memory_off``; ``404 repo_not_found``
        for a ``repo_id`` that is not a repository of this team. The text is masked
        before it is stored; the record expires 365 days after ``now``.
        """
        if not self._access.save_checked_on_write(who, team_id):
            access = self._access.team_access(who, team_id, Action.SAVE)
            return self._save_one(access, text, repo_id, now)
        return self._save_checked_on_write(
            team_id, text, repo_id, now, lambda: self.check_access(who, team_id, Action.SAVE)
        )

    def save_as_server(
        self,
        team_id: str,
        text: str,
        repo_id: str | None = None,
        *,
        now: datetime | None = None,
    ) -> Record:
        """:meth:`save` for the host application's own server code, in-process (no
        credential: it is the server). The same refusals, but for ``403``."""
        if not self._access.save_checked_on_write(None, team_id):
            return self._save_one(self._access.team_for_save(team_id), text, repo_id, now)
        return self._save_checked_on_write(
            team_id, text, repo_id, now, lambda: self._access.team_for_save(team_id), server=True
        )

    def save_many(
        self,
        team_id: str,
        items: Iterable[tuple[str, str | None]],
        *,
        now: datetime | None = None,
        chunk: int = 2000,
    ) -> builtins.list[str]:
        """Save many ``(text, repo_id)`` records for one team, as the server's own code
        (bulk loads, benchmarks); return the new ids in input order.

        The refusals of :meth:`save_as_server`, for every item before any is written;
        the setting and each distinct repository are checked once. Written in
        transactions of ``chunk`` records; then the store refreshes what its database
        plans from (:meth:`~keepstone.records.store.RecordStore.loaded`).
        """
        access = self._access.team_for_save(team_id)
        return [r.id for r in self._insert(access, items, now, chunk)]

    def _save_one(
        self, access: TeamAccess, text: str, repo_id: str | None, now: datetime | None
    ) -> Record:
        """One save, committed with the saves waiting beside it (see
        :mod:`keepstone.records.group`): returns once its group's transaction has committed,
        or raises this save's own refusal."""
        check_text(text)
        check_repo_id(repo_id)
        check_plan(access)
        record = new_record(access.team_id, text, repo_id, self._now(now))
        return self._saves.submit(_Save(access, record))

    async def save_async(
        self,
        who: Principal,
        team_id: str,
        text: str,
        repo_id: str | None = None,
        *,
        now: datetime | None = None,
    ) -> Record:
        """:meth:`save`, for a caller on an event loop (the HTTP face): the same refusals
        in the same order, and it returns once the record's group has committed.

        A save by the service token is checked, masked and analysed on the loop and
        waits there for its group, which a worker thread writes: one thread hop per
        group of saves, not one per save (docs/performance.md, "Records"). Any other
        save, and the team's refusals before a field's, run in a worker thread."""
        if not self._access.save_checked_on_write(who, team_id):
            return await anyio.to_thread.run_sync(
                lambda: self.save(who, team_id, text, repo_id, now=now)
            )
        try:
            save = self._checked(team_id, text, repo_id, now)
        except InvalidRequest:
            await anyio.to_thread.run_sync(lambda: self.check_access(who, team_id, Action.SAVE))
            raise
        return await self._saves.submit_async(save)

    def _save_checked_on_write(
        self,
        team_id: str,
        text: str,
        repo_id: str | None,
        now: datetime | None,
        check_team: Callable[[], object],
        *,
        server: bool = False,
    ) -> Record:
        """A save whose team is checked in its group's transaction (no transaction of
        its own before it). A field outside its limits is still refused after the
        team's ``404``: ``check_team()`` reads it then, on that path only."""
        try:
            save = self._checked(team_id, text, repo_id, now, server)
        except InvalidRequest:
            check_team()
            raise
        return self._saves.submit(save)

    def _checked(
        self,
        team_id: str,
        text: str,
        repo_id: str | None,
        now: datetime | None,
        server: bool = False,
    ) -> _Save:
        """A save whose team its group's transaction checks: its fields checked (else
        ``InvalidRequest``), its text masked and analysed."""
        check_text(text)
        check_repo_id(repo_id)
        return _Save(None, new_record(team_id, text, repo_id, self._now(now)), server)

    def _write_saves(self, saves: builtins.list[_Save]) -> builtins.list[Outcome[Record]]:
        """Write a group of saves in one transaction: each passes the gates (the team
        and its plan when not checked before, memory on, the repository) or gets its
        own refusal, in the contract's order; the others are stored."""
        outcomes: builtins.list[Outcome[Record]] = []
        with self._store.writing() as tx:
            enabled: dict[str, bool] = {}
            teams: dict[str, tuple[str, str] | None] = {}
            for save in saves:
                team, repo_id = save.record.team_id, save.record.repo_id
                try:
                    access = save.access
                    if access is None:
                        if team not in teams:
                            teams[team] = tx.team_plan(team)
                        access = self._access.save_access(team, teams[team], server=save.server)
                        check_plan(access)
                    if team not in enabled:
                        enabled[team] = tx.enabled(team)
                    if not enabled[team]:
                        raise memory_off()
                    if repo_id is not None:
                        check_repo(tx, access, repo_id)
                except KeepstoneError as exc:
                    outcomes.append(exc)
                    continue
                outcomes.append(save.record)
            tx.insert([o for o in outcomes if isinstance(o, Record)])
        return outcomes

    def _insert(
        self,
        access: TeamAccess,
        items: Iterable[tuple[str, str | None]],
        now: datetime | None,
        chunk: int = 2000,
    ) -> builtins.list[Record]:
        pairs = list(items)
        for text, repo_id in pairs:
            check_text(text)
            check_repo_id(repo_id)
        check_plan(access)
        created = self._now(now)
        rows = [new_record(access.team_id, text, repo_id, created) for text, repo_id in pairs]
        for start in range(0, len(rows), chunk):
            with self._store.writing() as tx:
                if start == 0:
                    check_memory_on(tx, access.team_id)
                    for repo_id in sorted({r.repo_id for r in rows if r.repo_id is not None}):
                        check_repo(tx, access, repo_id)
                tx.insert(rows[start : start + chunk])
        self._store.loaded(len(rows))
        return rows

    def search(
        self,
        who: Principal,
        team_id: str,
        query: str,
        *,
        repo_id: str | None = None,
        limit: int = DEFAULT_LIMIT,
        now: datetime | None = None,
        filters: SearchFilters = NO_FILTERS,
    ) -> SearchAnswer:
        """Ranked search — by keyword and by meaning — over the team's records that
        ``who`` may see (see :mod:`keepstone.service.record_search`), above the
        relevance floor (or ``filters.min_score``), created within ``filters.since`` /
        ``until`` (:func:`keepstone.search.filters.search_filters` checks them).

        ``query`` 1-1,000 characters, ``limit`` 1-50. While memory is off the answer
        is ``state`` off with no hits. The query is masked before it is used.
        """
        access = self._access.team_access(who, team_id, Action.READ)
        check_text(query, "query", MAX_QUERY)
        check_limit(limit)
        check_repo_id(repo_id)
        check_plan(access)
        masked = mask(query)
        ranking = self.record_search()
        with self._store.reading() as tx:
            state = tx.search_state(access.team_id)
            if not state.enabled:
                return SearchAnswer(MemoryState.OFF, NOTICE, (), hint=MEMORY_OFF_HINT)
            if repo_id is not None:
                check_repo(tx, access, repo_id)
            with admitted(self._limiter, access.team_id):
                scope = Scope(access.team_id, repo_id, access.project_ids, self._now(now))
                found = ranking.rank(tx, scope, masked, limit, state.versions, filters)
                pending = ranking.pending(tx, access.team_id)
        log.info("records search", extra={"team_id": access.team_id, "results": len(found)})
        hits = tuple(
            RecordHit(
                r.id,
                r.repo_id,
                hit.score,
                r.created_at,
                render_text(r.text),
                hit.matched,
                hit.also_in,
            )
            for hit in found
            for r in [hit.record]
        )
        hint = None if hits else empty_hint(filtered=filters.narrows, tags=False)
        return SearchAnswer(MemoryState.ON, NOTICE, hits, pending, hint)

    # --- delete, settings, purge ------------------------------------------------------------

    def delete(
        self, who: Principal, team_id: str, record_id: str, *, now: datetime | None = None
    ) -> None:
        """Remove one record of the team (an org owner or admin, in a browser);
        ``404 record_not_found`` when the team has no such record, or it has expired (no
        reader sees it any more; the purge removes it)."""
        access = self._access.team_access(who, team_id, Action.MANAGE)
        with self._store.writing() as tx:
            # An id no record can have never reaches the driver.
            removed = is_clean_id(record_id) and tx.delete(
                access.team_id, record_id, self._now(now)
            )
        if not removed:
            raise RecordNotFound(
                f"record {record_id!r} is not in this team; check the id from the list"
            )

    def get_settings(self, who: Principal, team_id: str) -> MemorySettings:
        """The team's setting, whatever the plan."""
        access = self._access.team_access(who, team_id, Action.READ)
        with self._store.reading() as tx:
            enabled = tx.enabled(access.team_id)
        return MemorySettings(enabled, access.plan_allows, True, access.can_manage)

    def set_enabled(self, who: Principal, team_id: str, enabled: bool) -> MemorySettings:
        """Turn the team's memory on or off (an org owner or admin, in a browser);
        records are kept either way. Returns the setting as it now is."""
        access = self._access.team_access(who, team_id, Action.MANAGE)
        with self._store.writing() as tx:
            tx.set_enabled(access.team_id, enabled, utcnow())
        return MemorySettings(enabled, access.plan_allows, True, access.can_manage)

    def set_enabled_as_server(self, team_id: str, enabled: bool) -> None:
        """:meth:`set_enabled` for operators and the server's own code (``keepstone records
        enable|disable``); ``404 team_not_found`` for an unknown team."""
        access = self._access.team_for_save(team_id)
        with self._store.writing() as tx:
            tx.set_enabled(access.team_id, enabled, utcnow())

    def purge_expired(self, *, now: datetime | None = None, batch: int = 5000) -> int:
        """Delete every expired record, ``batch`` per transaction; return how many.

        The server runs it periodically; ``keepstone records purge`` runs it once. Expired
        records are already invisible to every read, so this only frees space. It then
        forgets the removals listed more than
        :data:`~keepstone.records.store.REMOVALS_KEPT` ago, in a transaction of its own (a
        search whose cached rows are older than those reads them whole).
        """
        current = self._now(now)
        removed = 0
        while True:
            with self._store.writing() as tx:
                done = tx.purge_expired(current, batch)
            removed += done
            if done < batch:
                break
        with self._store.writing() as tx:
            tx.forget_removals(current - REMOVALS_KEPT)
        return removed

    # --- list (last: its name shadows the builtin in the class body) ---------------------

    def list(
        self,
        who: Principal,
        team_id: str,
        *,
        repo_id: str | None = None,
        next_token: str | None = None,
        now: datetime | None = None,
        page_size: int = PAGE_SIZE,
    ) -> RecordPage:
        """The team's unexpired records that ``who`` may see, newest first, a page at
        a time; whatever the plan and the setting (``state`` reports them).

        ``next_token`` is HMAC-signed and bound to the team, the caller's visibility
        and ``repo_id``; anything else is ``400 invalid_request``.
        """
        access = self._access.team_access(who, team_id, Action.READ)
        with self._store.reading() as tx:
            key = tx.signing_key()
            after = read_page_token(key, next_token, access, repo_id) if next_token else None
            if repo_id is not None:
                check_repo(tx, access, repo_id)
            on = tx.enabled(access.team_id) and access.plan_allows
            scope = Scope(access.team_id, repo_id, access.project_ids, self._now(now))
            rows = tx.page(scope, after, page_size + 1)
        token: str | None = None
        if len(rows) > page_size:
            rows = rows[:page_size]
            last = rows[-1]
            token = sign_page_token(key, access, repo_id, PagePosition(last.created_at, last.id))
        listed = tuple(
            ListedRecord(r.id, r.repo_id, r.created_at, r.expires_at, render_text(r.text))
            for r in rows
        )
        state = MemoryState.ON if on else MemoryState.OFF
        return RecordPage(state, NOTICE, listed, token)

    @staticmethod
    def _now(now: datetime | None) -> datetime:
        return utc(now) if now is not None else utcnow()


def build_record_service(
    engine: Engine,
    identity: IdentityService | None,
    limiter: RateLimiter,
    search: RecordSearch | Callable[[], RecordSearch] | None = None,
    *,
    vectors: Pgvector | None = None,
) -> RecordService:
    """The records service over ``engine``'s database (the composition root calls it;
    ``identity`` is None in local mode; ``search`` None ranks by keyword only;
    ``vectors``: pgvector in the database, :func:`keepstone.db.pgvector.setup`)."""
    store = SqlRecordStore(engine, vectors)
    return RecordService(store, Access(identity), limiter, search)
