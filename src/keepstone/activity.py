"""Activity: the changes made to a team's spaces, newest first (docs/history.md, "Activity").

Plain values shared by every layer: what each change of the history records beside its
actor (its :data:`ACTIONS` and the :data:`ACTOR_KINDS` of who made it), one change of the
feed (:class:`Change`) and how a store's stored version reads as one (:class:`StoredChange`),
a page of them, and the feed's opaque cursor. No I/O here.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import contextvars
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from keepstone.errors import InvalidRequest
from keepstone.wire import Jsonable

#: What a change did: ``move`` both ends the old path and makes the new one; ``import`` and
#: ``restore`` are writes made by an archive's import and by restoring an old version.
ACTIONS = ("write", "delete", "move", "import", "restore")
#: Who made a change: a person (browser session, local console), an API key, a service
#: token, ``keepstone run`` folding an agent's files back, the platform (admin token), or
#: ``unknown`` (changes recorded before kinds were, hand edits found on disk).
ACTOR_KINDS = ("user", "api_key", "service", "agent_run", "platform", "unknown")
#: The kind of a change whose maker is not known.
UNKNOWN = "unknown"
#: The kind of ``keepstone run``'s changes, and the request header by which a client of a
#: server says a change is one (a key's holder saying so; it decides nothing).
AGENT_RUN = "agent_run"
AGENT_RUN_HEADER = "X-Keepstone-Agent-Run"

#: A feed page's size unless the caller asks, and the most it may ask for.
DEFAULT_LIMIT = 50
MAX_LIMIT = 100

_KIND: contextvars.ContextVar[str] = contextvars.ContextVar("keepstone_actor_kind", default="")
_ACTION: contextvars.ContextVar[str] = contextvars.ContextVar("keepstone_action", default="")


@contextlib.contextmanager
def changing(*, kind: str | None = None, action: str | None = None) -> Iterator[None]:
    """Record the changes made inside the block with the actor kind ``kind`` and the action
    ``action`` (None: as set around the block). Ambient like
    :func:`keepstone.documents.acting_as`: recorded, never deciding anything."""
    tokens = []
    if kind is not None:
        tokens.append((_KIND, _KIND.set(kind)))
    if action is not None:
        tokens.append((_ACTION, _ACTION.set(action)))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def current_kind() -> str:
    """The actor kind :func:`changing` set (``unknown`` outside any)."""
    return _KIND.get() or UNKNOWN


def current_action(deleted: bool = False) -> str:
    """The action :func:`changing` set, else ``delete`` for a deletion, ``write`` otherwise."""
    return _ACTION.get() or ("delete" if deleted else "write")


def action_of(action: str | None, deleted: bool) -> str:
    """A stored action as the feed says it: a row recorded before actions were has none, and
    is a deletion or a write by its deleted flag."""
    if not action:
        return "delete" if deleted else "write"
    return action


def check_kind(kind: str | None) -> str | None:
    """``kind`` if it is one of :data:`ACTOR_KINDS` (None: any), else 400 naming it."""
    if kind is None or kind in ACTOR_KINDS:
        return kind
    raise InvalidRequest(
        f"actor_kind must be one of {', '.join(ACTOR_KINDS)}, not {kind!r}", field="actor_kind"
    )


def check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(
            f"limit must be a whole number 1-{MAX_LIMIT} (default {DEFAULT_LIMIT})", field="limit"
        )
    return limit


@dataclass(frozen=True, slots=True)
class Actor(Jsonable):
    """Who made a change: its kind and a name a person reads (an email, a key's label)."""

    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class Change(Jsonable):
    """One change of the feed. ``size_delta`` is the bytes it added (negative: removed),
    None when the version it replaced is no longer kept; ``actor.name`` is filled by the
    service from the store's raw ``who`` (``user:<id> key:<id>``), which never leaves it."""

    at: datetime
    space_id: str
    path: str
    action: str
    actor: Actor
    size_delta: int | None
    version: int
    who: str = ""

    wire_names = {"who": None}


@dataclass(frozen=True, slots=True)
class StoredChange:
    """A version as a store's feed reads it: ``action`` and ``kind`` as recorded ('' or
    None on rows recorded before they were), ``who`` the raw actor, ``size`` its bytes
    (none for a deletion), and ``before()`` the size of the version before it (0: a
    deletion; None: no longer kept), asked only where the change's size delta needs it."""

    at: datetime
    space_id: str
    path: str
    version: int
    action: str | None
    kind: str | None
    who: str
    deleted: bool
    size: int | None
    before: Callable[[], int | None]

    def change(self) -> Change:
        """The change of the feed this version made."""
        action = action_of(self.action, self.deleted)
        size = 0 if self.deleted else int(self.size or 0)
        delta: int | None
        if action == "move":
            delta = 0  # the space holds the same bytes, at another path
        elif self.version == 1:
            delta = size
        else:
            prior = self.before()
            delta = None if prior is None else size - prior
        return Change(
            at=self.at,
            space_id=self.space_id,
            path=self.path,
            action=action,
            actor=Actor(self.kind or UNKNOWN, ""),
            size_delta=delta,
            version=self.version,
            who=self.who,
        )


#: A position in the feed: the time of a change, then the rest of its sort key (a store's
#: own: its space, path and version).
Position = tuple[datetime, str, str, int]


@dataclass(frozen=True, slots=True)
class ChangePage:
    """A page of the feed, newest first; ``next_cursor`` None on the last page."""

    changes: tuple[Change, ...]
    next_cursor: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "changes": [c.as_json() for c in self.changes],
            "next_cursor": self.next_cursor,
        }


@dataclass(frozen=True, slots=True)
class FeedQuery:
    """What a store's feed is asked for: the changes made at or after ``since`` (None: any
    time), by actors of ``kind`` (None: any), ``limit`` of them after ``cursor``."""

    since: datetime | None
    kind: str | None
    limit: int
    cursor: str | None

    def position(self) -> Position | None:
        """Where the cursor says the page starts (after it); None: at the newest change."""
        if self.cursor is None:
            return None
        at, key, path, version = decode_cursor(self.cursor, 4)
        return at, key, path, version


def feed_page(stored: Iterable[StoredChange], last: Position | None) -> ChangePage:
    """A page of the changes ``stored`` made; ``last``: the position of the last one when
    more follow it (the next page's cursor names it)."""
    changes = tuple(c.change() for c in stored)
    return ChangePage(changes, None if last is None else encode_cursor(*last))


def encode_cursor(at: datetime, *key: str | int) -> str:
    """The opaque cursor of a feed position: the last change's time and the rest of its
    sort key (each store's own)."""
    raw = json.dumps({"feed": [at.isoformat(), *key]}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, width: int) -> tuple[Any, ...]:
    """The position :func:`encode_cursor` made (its time as an aware datetime), 400 naming
    ``cursor`` when it is not one with ``width`` parts."""
    bad = InvalidRequest(
        "cursor is not one this feed gave; pass the next_cursor of the previous page, or "
        "leave it out to start from the newest change",
        field="cursor",
    )
    try:
        body = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError):
        raise bad from None
    key = body.get("feed") if isinstance(body, dict) else None
    if not isinstance(key, list) or len(key) != width or not isinstance(key[0], str):
        raise bad
    if not all(isinstance(part, (str, int)) and not isinstance(part, bool) for part in key):
        raise bad
    try:
        at = datetime.fromisoformat(key[0])
    except ValueError:
        raise bad from None
    if at.tzinfo is None:
        raise bad
    return (at.astimezone(UTC), *key[1:])
