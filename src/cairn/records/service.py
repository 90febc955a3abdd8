"""Team memory records: save, search, list, delete, settings, purge (SPEC §6).

Every use-case takes an :class:`~sqlalchemy.engine.Engine` and, for a caller's
request, a :class:`~cairn.records.access.TeamAccess` resolved by
:func:`cairn.records.access.resolve` (membership read fresh from the database).
The HTTP routes and the CLI are thin layers over these functions; the refusal order
of the contract is: team/membership (access) → role/credential (access) → field
limits (:mod:`cairn.records.models`) → plan → on/off → repository → rate → store.

Records are stored masked (:func:`cairn.secrets.mask`) and normalized
(:func:`cairn.records.render.normalize_text`), expire 365 days after saving and are
never returned after that, even before :func:`purge_expired` removes them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import uuid
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from cairn.errors import InvalidRequest, MemoryOff, PlanRequired, RecordNotFound, RepoNotFound
from cairn.identity.schema import repos
from cairn.records.access import TeamAccess, team_for_save
from cairn.records.models import MAX_LIMIT, MAX_QUERY, MAX_TEXT, is_clean_id
from cairn.records.ratelimit import RateLimiter, admitted
from cairn.records.render import NOTICE, normalize_text, render_text
from cairn.records.schema import (
    CURSOR_KEY_NAME,
    record_settings,
    records,
    records_meta,
)
from cairn.records.search import index_terms, query_terms, search_rows, visibility_clause
from cairn.secrets import mask
from cairn.store.db import read_transaction, utcnow, write_transaction

log = logging.getLogger("cairn.records")

RETENTION = timedelta(days=365)
PAGE_SIZE = 50


@dataclass(frozen=True, slots=True)
class Record:
    id: str
    team_id: str
    repo_id: str | None
    text: str
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Settings:
    enabled: bool
    plan_allows: bool
    store_ready: bool
    can_edit: bool

    def to_dict(self) -> dict[str, bool]:
        return {
            "enabled": self.enabled,
            "plan_allows": self.plan_allows,
            "store_ready": self.store_ready,
            "can_edit": self.can_edit,
        }


def _utc(value: datetime) -> datetime:
    # SQLite hands back naive datetimes; every stored time is UTC.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def iso(value: datetime) -> str:
    return _utc(value).isoformat().replace("+00:00", "Z")


# --------------------------------------------------------------------------- gates


def _enabled(conn: Connection, team_id: str) -> bool:
    value = conn.execute(
        sa.select(record_settings.c.enabled).where(record_settings.c.team_id == team_id)
    ).scalar()
    return bool(value)


def _plan_gate(access: TeamAccess) -> None:
    if not access.plan_allows:
        raise PlanRequired(
            f"the plan {access.plan!r} does not include team memory; it comes with "
            "pro_plus and enterprise — change the plan in Billing"
        )


def _check_repo(conn: Connection, access: TeamAccess, repo_id: str) -> None:
    project = (
        conn.execute(
            sa.select(repos.c.project_id).where(
                repos.c.team_id == access.team_id, repos.c.id == repo_id
            )
        ).scalar()
        if is_clean_id(repo_id)
        else None
    )
    if project is None:
        raise RepoNotFound(
            f"repository {repo_id!r} is not a repository of this team; "
            "search without repo_id, or use a repository of this team",
            field="repo_id",
        )
    if access.project_ids is not None and project not in access.project_ids:
        raise RepoNotFound(
            f"repository {repo_id!r} is not in one of your projects; search without "
            "repo_id, or ask a workspace owner or admin for access",
            field="repo_id",
        )


# --------------------------------------------------------------------------- save


def _check_text(text: object) -> None:
    if not isinstance(text, str) or not 1 <= len(text) <= MAX_TEXT:
        raise InvalidRequest(f"field 'text' must be 1 to {MAX_TEXT:,} characters", field="text")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequest("field 'text' must be valid Unicode text", field="text") from exc


def save(
    engine: Engine,
    team_id: str,
    text: str,
    repo_id: str | None = None,
    *,
    now: datetime | None = None,
) -> Record:
    """Save one record for ``team_id`` — for the host application's server code only.

    Refusals, in order: ``404 team_not_found``; ``400 invalid_request`` for a text
    outside 1-8,000 characters; ``402 plan_required`` while the org's plan lacks
    memory; ``409 memory_off`` while the team has it off; ``404 repo_not_found`` for
    a ``repo_id`` that is not a repository of this team. The text is masked before
    it is stored; the record expires 365 days after ``now``.
    """
    access = team_for_save(engine, team_id)
    return save_for(engine, access, text, repo_id, now=now)


def save_for(
    engine: Engine,
    access: TeamAccess,
    text: str,
    repo_id: str | None = None,
    *,
    now: datetime | None = None,
) -> Record:
    """:func:`save` once the caller has been resolved (the internal route's path)."""
    _check_text(text)
    if repo_id is not None and (not isinstance(repo_id, str) or not repo_id):
        raise InvalidRequest("field 'repo_id' must be a non-empty string", field="repo_id")
    _plan_gate(access)
    created = _utc(now) if now is not None else utcnow()
    stored = normalize_text(mask(text))
    record = Record(
        id="rec_" + uuid.uuid4().hex,
        team_id=access.team_id,
        repo_id=repo_id,
        text=stored,
        created_at=created,
        expires_at=created + RETENTION,
    )
    with write_transaction(engine) as conn:
        if not _enabled(conn, access.team_id):
            raise MemoryOff(
                "team memory is off for this team; a workspace owner or admin turns it on"
            )
        if repo_id is not None:
            _check_repo(conn, access, repo_id)
        conn.execute(
            records.insert().values(
                team_id=record.team_id,
                id=record.id,
                repo_id=record.repo_id,
                text=record.text,
                terms=index_terms(record.team_id, record.text),
                created_at=record.created_at,
                expires_at=record.expires_at,
            )
        )
    return record


def save_many(
    engine: Engine,
    team_id: str,
    items: Iterable[tuple[str, str | None]],
    *,
    now: datetime | None = None,
    chunk: int = 2000,
) -> list[str]:
    """Save many ``(text, repo_id)`` records for one team (bulk loads, benchmarks).

    The same gates and masking as :func:`save`, checked once for the team and once
    per distinct repository; written in transactions of ``chunk`` records. Returns
    the new ids in input order.
    """
    access = team_for_save(engine, team_id)
    _plan_gate(access)
    created = _utc(now) if now is not None else utcnow()
    rows: list[dict[str, Any]] = []
    for text, repo_id in items:
        _check_text(text)
        rows.append(
            {
                "team_id": team_id,
                "id": "rec_" + uuid.uuid4().hex,
                "repo_id": repo_id,
                "text": normalize_text(mask(text)),
                "created_at": created,
                "expires_at": created + RETENTION,
            }
        )
    with read_transaction(engine) as conn:
        if not _enabled(conn, team_id):
            raise MemoryOff(
                "team memory is off for this team; a workspace owner or admin turns it on"
            )
        for repo_id in {r["repo_id"] for r in rows if r["repo_id"] is not None}:
            _check_repo(conn, access, repo_id)
    for row in rows:
        row["terms"] = index_terms(team_id, row["text"])
    for start in range(0, len(rows), chunk):
        with write_transaction(engine) as conn:
            conn.execute(records.insert(), rows[start : start + chunk])
    return [r["id"] for r in rows]


# --------------------------------------------------------------------------- search


def search(
    engine: Engine,
    access: TeamAccess,
    query: str,
    *,
    repo_id: str | None = None,
    limit: int = 10,
    limiter: RateLimiter,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Ranked full-text search over the team's records visible to the caller.

    Answers ``{"state": "on", "notice", "results": [{"id", "repo_id", "score",
    "created_at", "text"}]}`` best first (``text`` rendered as a fenced block), or
    ``{"state": "off", "notice", "results": []}`` while memory is off. Refusals after
    the caller's access: ``402``, ``404 repo_not_found``, ``429 rate_limited``,
    ``503 store_unavailable``. The query is masked before it is logged or used.
    """
    if not isinstance(query, str) or not 1 <= len(query) <= MAX_QUERY:
        raise InvalidRequest(f"field 'query' must be 1 to {MAX_QUERY:,} characters", field="query")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"field 'limit' must be 1 to {MAX_LIMIT}", field="limit")
    _plan_gate(access)
    masked = mask(query)
    with read_transaction(engine) as conn:
        if not _enabled(conn, access.team_id):
            return {"state": "off", "notice": NOTICE, "results": []}
        if repo_id is not None:
            _check_repo(conn, access, repo_id)
    with admitted(limiter, access.team_id):
        terms = query_terms(access.team_id, masked)
        with read_transaction(engine) as conn:
            rows = search_rows(
                conn,
                team_id=access.team_id,
                terms=terms,
                repo_id=repo_id,
                project_ids=access.project_ids,
                limit=limit,
                now=_utc(now) if now is not None else utcnow(),
            )
    log.info(
        "records search",
        extra={"team_id": access.team_id, "terms": len(terms), "results": len(rows)},
    )
    return {
        "state": "on",
        "notice": NOTICE,
        "results": [
            {
                "id": r.id,
                "repo_id": r.repo_id,
                "score": r.score,
                "created_at": iso(r.created_at),
                "text": render_text(r.text),
            }
            for r in rows
        ],
    }


# --------------------------------------------------------------------------- list


_cursor_keys: weakref.WeakKeyDictionary[Engine, bytes] = weakref.WeakKeyDictionary()


def _cursor_key(engine: Engine) -> bytes:
    key = _cursor_keys.get(engine)
    if key is None:
        with read_transaction(engine) as conn:
            value = conn.execute(
                sa.select(records_meta.c.value).where(records_meta.c.name == CURSOR_KEY_NAME)
            ).scalar()
        key = bytes.fromhex(str(value))
        _cursor_keys[engine] = key
    return key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign_cursor(key: bytes, payload: dict[str, Any]) -> str:
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode("utf-8")
    mac = hmac.new(key, body, hashlib.sha256).digest()
    return f"{_b64(body)}.{_b64(mac)}"


def _read_cursor(
    key: bytes, token: str, access: TeamAccess, repo_id: str | None
) -> tuple[datetime, str]:
    bad = InvalidRequest(
        "field 'next_token' is not a token this list gave you; start again without next_token",
        field="next_token",
    )
    try:
        body_text, mac_text = token.split(".", 1)
        body, mac = _unb64(body_text), _unb64(mac_text)
    except (ValueError, TypeError) as exc:
        raise bad from exc
    if not hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).digest()):
        raise bad
    try:
        payload = json.loads(body)
        bound = (payload["t"], payload["v"], payload["r"])
        created = datetime.fromisoformat(payload["c"])
        last_id = str(payload["i"])
    except (ValueError, KeyError, TypeError) as exc:
        raise bad from exc
    # Bound to the team, the caller's visibility and the filter it was issued for.
    if bound != (access.team_id, access.visibility_fingerprint, repo_id):
        raise bad
    return _utc(created), last_id


def list_records(
    engine: Engine,
    access: TeamAccess,
    *,
    repo_id: str | None = None,
    next_token: str | None = None,
    now: datetime | None = None,
    page_size: int = PAGE_SIZE,
) -> dict[str, Any]:
    """The team's unexpired records visible to the caller, newest first, a page at a
    time: ``{"state", "notice", "records": [...], "next_token": str | None}``.

    Works whatever the plan and the setting (``state`` reports the setting).
    ``next_token`` is HMAC-signed and bound to the team, the caller's visibility and
    ``repo_id``; anything else → ``400 invalid_request``.
    """
    key = _cursor_key(engine)
    after = _read_cursor(key, next_token, access, repo_id) if next_token else None
    current = _utc(now) if now is not None else utcnow()
    params: dict[str, object] = {"team": access.team_id, "n": page_size + 1}
    where = "r.team_id = :team AND r.expires_at > :now"
    if repo_id is not None:
        where += " AND r.repo_id = :repo"
        params["repo"] = repo_id
    where += visibility_clause(access.project_ids, params)
    if after is not None:
        where += " AND (r.created_at < :ac OR (r.created_at = :ac AND r.id < :ai))"
        params["ac"], params["ai"] = after
    stmt = (
        sa.text(
            "SELECT r.id, r.repo_id, r.text, r.created_at, r.expires_at FROM records AS r"
            f" WHERE {where} ORDER BY r.created_at DESC, r.id DESC LIMIT :n"
        )
        .bindparams(
            sa.bindparam("now", type_=sa.DateTime(timezone=True)),
            *([sa.bindparam("ac", type_=sa.DateTime(timezone=True))] if after is not None else []),
        )
        .columns(
            sa.column("id", sa.String),
            sa.column("repo_id", sa.String),
            sa.column("text", sa.Text),
            sa.column("created_at", sa.DateTime(timezone=True)),
            sa.column("expires_at", sa.DateTime(timezone=True)),
        )
    )
    params["now"] = current
    with read_transaction(engine) as conn:
        if repo_id is not None:
            _check_repo(conn, access, repo_id)
        state = "on" if _enabled(conn, access.team_id) and access.plan_allows else "off"
        rows = conn.execute(stmt, params).all()
    token: str | None = None
    if len(rows) > page_size:
        rows = rows[:page_size]
        last = rows[-1]
        token = _sign_cursor(
            key,
            {
                "t": access.team_id,
                "v": access.visibility_fingerprint,
                "r": repo_id,
                "c": _utc(last.created_at).isoformat(),
                "i": last.id,
            },
        )
    return {
        "state": state,
        "notice": NOTICE,
        "records": [
            {
                "id": r.id,
                "repo_id": r.repo_id,
                "created_at": iso(r.created_at),
                "expires_at": iso(r.expires_at),
                "text": render_text(r.text),
            }
            for r in rows
        ],
        "next_token": token,
    }


# --------------------------------------------------------------------------- delete


def delete(engine: Engine, access: TeamAccess, record_id: str) -> None:
    """Remove one record of the team (``404 record_not_found`` when it is not there).

    The caller must have been resolved with ``Action.MANAGE``.
    """
    with write_transaction(engine) as conn:
        removed = 0
        if is_clean_id(record_id):
            removed = conn.execute(
                records.delete().where(
                    records.c.team_id == access.team_id, records.c.id == record_id
                )
            ).rowcount
        if removed == 0:
            raise RecordNotFound(
                f"record {record_id!r} is not in this team; check the id from the list"
            )


# --------------------------------------------------------------------------- settings


def get_settings(engine: Engine, access: TeamAccess) -> Settings:
    """``{"enabled", "plan_allows", "store_ready", "can_edit"}`` for the team."""
    with read_transaction(engine) as conn:
        enabled = _enabled(conn, access.team_id)
    return Settings(enabled, access.plan_allows, True, access.can_manage)


def set_enabled(engine: Engine, team_id: str, enabled: bool) -> None:
    """Turn memory on or off for ``team_id`` (records are kept either way).

    Routes call it after resolving the caller with ``Action.MANAGE``; operators and
    tests may call it directly.
    """
    with write_transaction(engine) as conn:
        updated = conn.execute(
            record_settings.update()
            .where(record_settings.c.team_id == team_id)
            .values(enabled=enabled, updated_at=utcnow())
        )
        if updated.rowcount == 0:
            conn.execute(
                record_settings.insert().values(
                    team_id=team_id, enabled=enabled, updated_at=utcnow()
                )
            )


# --------------------------------------------------------------------------- purge


def purge_expired(engine: Engine, *, now: datetime | None = None, batch: int = 5000) -> int:
    """Delete every expired record, in batches; return how many were removed.

    The server schedules it periodically; ``cairn records purge`` runs it once.
    Expired records are already invisible to every read, so this only frees space.
    """
    current = _utc(now) if now is not None else utcnow()
    removed = 0
    while True:
        with write_transaction(engine) as conn:
            keys = conn.execute(
                sa.select(records.c.team_id, records.c.id)
                .where(records.c.expires_at <= current)
                .limit(batch)
            ).all()
            for team_id, record_id in keys:
                conn.execute(
                    records.delete().where(records.c.team_id == team_id, records.c.id == record_id)
                )
        removed += len(keys)
        if len(keys) < batch:
            return removed
