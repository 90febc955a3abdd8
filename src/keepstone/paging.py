"""Keyset paging shared by every paged listing: the size of a page (what a caller gets
unless it asks, and the most it may ask for; the CLI's flags and the API's query
parameters share them), a page, and its opaque cursor.

A cursor is base64 of the list it belongs to and the key of the last item given: one from
another list, or edited, is refused (``400 invalid_request`` naming ``cursor``) rather
than read as something else."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Final, Generic, NamedTuple, TypeVar

from keepstone.errors import InvalidRequest

T = TypeVar("T")

#: A page's size unless the caller asks.
DEFAULT_PAGE: Final = 50
#: The most a caller may ask for.
MAX_PAGE: Final = 200


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a list; ``next_cursor`` None when it is the last."""

    items: tuple[T, ...]
    next_cursor: str | None


class PageAt(NamedTuple):
    """Which page of a keyset-paged list a caller asks for: its size, and the cursor the
    page before it gave (None: the first page)."""

    limit: int = DEFAULT_PAGE
    cursor: str | None = None


def check_limit(limit: int, unless: str = f"default {DEFAULT_PAGE}") -> int:
    """``limit`` when it is a page size a caller may ask for; ``unless`` says what a
    caller gets who does not ask."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(f"limit must be 1-{MAX_PAGE} ({unless})", field="limit")
    return limit


def encode_cursor(kind: str, after: object) -> str:
    """The cursor of the list ``kind`` after the item whose key is ``after`` (JSON)."""
    raw = json.dumps({"list": kind, "after": after}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def bad_cursor(kind: str) -> InvalidRequest:
    return InvalidRequest(
        f"cursor is not one this list of {kind} gave; pass the next_cursor of the previous "
        "page, or leave it out to start from the first page",
        field="cursor",
    )


def decode_cursor(kind: str, cursor: str) -> object:
    """The key a cursor of the list ``kind`` names, as :func:`encode_cursor` was given it
    (the caller checks its shape, and raises :func:`bad_cursor` when it is wrong)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        body = json.loads(raw)
    except (binascii.Error, ValueError):
        raise bad_cursor(kind) from None
    if not isinstance(body, dict) or body.get("list") != kind or "after" not in body:
        raise bad_cursor(kind)
    return body["after"]
