"""What changed lately (docs/history.md, "Activity"): the feed of a team's changes, newest
first, that every face shows — the API's ``GET /api/memory/activity``, the ``memory_recent``
agent tool, ``keepstone memory recent``, ``Memory.recent`` and the web UI's activity pages.

The store reads the changes (each with the raw actor its history recorded, ``user:<id>
key:<id>``); this module decides which spaces the caller may see and names each actor as a
person reads it: a user's email, a key's label (``key of <email>`` for a key without
one), ``deleted user`` for a user who is gone — never an internal id.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import replace
from datetime import datetime
from typing import Protocol, runtime_checkable

from keepstone.activity import (
    DEFAULT_LIMIT,
    Actor,
    Change,
    ChangePage,
    FeedQuery,
    check_kind,
    check_limit,
)
from keepstone.principal import CredentialKind, Principal
from keepstone.search.filters import parse_instant
from keepstone.service.access import readable_spaces, reading_team
from keepstone.spaces import SpaceRef
from keepstone.store.base import MemoryStore

#: What a change by a user no longer known is attributed to.
DELETED_USER = "deleted user"
#: Names of the actors a history records without an id.
_NAMED = {
    "admin-token": "platform admin",
    "local": "local",
    "local-cli": "local console",
    "remote": "remote client",
    "hand-edit": "edited on disk",
    "before-history": "before history",
    "unknown": "unknown",
}


@runtime_checkable
class ActorNaming(Protocol):
    """Names the users and API keys a history's actors name by id (the identity's)."""

    def actor_names(
        self, user_ids: Collection[str], key_ids: Collection[str]
    ) -> tuple[dict[str, str], dict[str, tuple[str, str]]]: ...


@runtime_checkable
class ServerListingStore(Protocol):
    """A client of a server: the server decides which spaces the caller sees."""

    def list_readable_spaces(self) -> object: ...


def read_recent(
    store: MemoryStore,
    who: Principal,
    ref: SpaceRef | None,
    names: ActorNaming | None,
    *,
    since: datetime | str | None = None,
    actor_kind: str | None = None,
    limit: int = DEFAULT_LIMIT,
    cursor: str | None = None,
) -> ChangePage:
    """The changes of the space ``ref`` — or, None, of every space of its team ``who`` may
    read (global spaces only when named) — newest first, at or after ``since`` (ISO 8601
    or an instant), made by actors of ``actor_kind`` (None: any), ``limit`` of them after
    ``cursor`` (the ``next_cursor`` of the page before)."""
    kind = check_kind(actor_kind)
    check_limit(limit)
    start = parse_instant(since, "since")
    if cursor is not None and not cursor:
        cursor = None
    if ref is not None:
        refs = [ref]
    elif isinstance(store, ServerListingStore):
        refs = []  # the server's feed: it decides which of the team's spaces are read
    else:
        team = reading_team(who)
        if not team:
            return ChangePage((), None)
        candidates = [r for r in store.list_spaces(team) if not r.is_global]
        refs = (
            candidates if who.kind is CredentialKind.CONSOLE else readable_spaces(who, candidates)
        )
        if not refs:
            return ChangePage((), None)
    page = store.activity(refs, FeedQuery(start, kind, limit, cursor))
    return named(page, names)


def named(page: ChangePage, names: ActorNaming | None) -> ChangePage:
    """``page`` with each change's actor named for a person (see the module doc)."""
    found = name_actors([c.who for c in page.changes if c.who], names)
    return ChangePage(tuple(_with_name(c, found) for c in page.changes), page.next_cursor)


def name_actors(actors: Iterable[str], names: ActorNaming | None) -> dict[str, str]:
    """Each of the raw ``actors`` as a person reads it (see the module doc), the users and
    keys they name read in one query each."""
    wanted = set(actors)
    users, keys = _ids(wanted)
    known_users: dict[str, str] = {}
    known_keys: dict[str, tuple[str, str]] = {}
    if names is not None and (users or keys):
        known_users, known_keys = names.actor_names(users, keys)
    return {actor: actor_name(actor, known_users, known_keys) for actor in wanted}


def _parts(actor: str) -> tuple[str, str]:
    """(user id, key id) an actor ``user:<id> key:<id>`` names ('' for either it lacks)."""
    user = key = ""
    for part in actor.split():
        if part.startswith("user:"):
            user = part[len("user:") :]
        elif part.startswith("key:"):
            key = part[len("key:") :]
    return user, key


def _ids(actors: Iterable[str]) -> tuple[set[str], set[str]]:
    users: set[str] = set()
    keys: set[str] = set()
    for actor in actors:
        user, key = _parts(actor)
        if user:
            users.add(user)
        if key:
            keys.add(key)
    return users, keys


def actor_name(actor: str, users: dict[str, str], keys: dict[str, tuple[str, str]]) -> str:
    """How a person reads the raw ``actor`` of a change, given the names of the users and
    keys it may name (see the module doc)."""
    if actor in _NAMED:
        return _NAMED[actor]
    user, key = _parts(actor)
    if key:
        label, owner = keys.get(key, ("", user))
        return label or f"key of {users.get(owner or user, DELETED_USER)}"
    if user:
        return users.get(user, DELETED_USER)
    return "unknown"


def _with_name(change: Change, found: dict[str, str]) -> Change:
    if not change.who:
        return change  # named already (a server's feed), or never had a raw actor
    return replace(change, actor=Actor(change.actor.kind, found[change.who]), who="")
