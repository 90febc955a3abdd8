"""A page of a space's listing (docs/api.md, "Listing documents"): opt-in keyset paging
by path, or by last change (newest first, then by path).

The cursor names the list it belongs to, the order and the directory it was given for,
and the last document given (its path, and its last change when the order is by change):
a document written or removed between two pages never shifts the others. A listing asked
without a ``limit`` is whole, as it always was."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from keepstone.documents import DocumentInfo
from keepstone.errors import InvalidRequest
from keepstone.paging import Page, bad_cursor, check_limit, decode_cursor, encode_cursor

#: The orders a listing may be asked in.
SORTS: Final = ("path", "updated")
_KIND = "documents"


@dataclass(frozen=True, slots=True)
class PageAsk:
    """A page asked for: its size, order and directory, and where the last page ended
    (``after_path``, with ``after_updated`` when the order is by change; None: the
    first page)."""

    limit: int
    sort: str
    dir: str
    #: The cursor as the caller gave it (a store that asks a server passes it on).
    cursor: str | None = None
    after_path: str | None = None
    after_updated: datetime | None = None

    def next_cursor(self, last: DocumentInfo) -> str:
        after = {"sort": self.sort, "dir": self.dir, "path": last.path}
        if self.sort == "updated":
            after["updated"] = last.updated_at.isoformat()
        return encode_cursor(_KIND, after)

    def page(self, rows: Sequence[DocumentInfo]) -> Page[DocumentInfo]:
        """The page of ``rows`` (up to ``limit + 1`` read in order: one more than the
        page says whether there is a next)."""
        items = tuple(rows[: self.limit])
        more = len(rows) > self.limit
        return Page(items, self.next_cursor(items[-1]) if more else None)

    def key(self, info: DocumentInfo) -> tuple[int, str]:
        """The order of the page as a sort key (by change: newest first)."""
        if self.sort != "updated":
            return (0, info.path)
        return (-((info.updated_at - _EPOCH) // _MICROSECOND), info.path)

    def of(self, infos: Sequence[DocumentInfo]) -> Page[DocumentInfo]:
        """The page out of a whole listing ``infos`` (for a store that cannot page)."""
        ordered = sorted(infos, key=self.key)
        if self.after_path is not None:
            last = self.key(DocumentInfo(self.after_path, 0, self.after_updated or _EPOCH, ""))
            ordered = [info for info in ordered if self.key(info) > last]
        return self.page(ordered[: self.limit + 1])


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def page_ask(limit: int, cursor: str | None, sort: str | None, dir: str) -> PageAsk:
    """The page a caller asks for, checked: a ``limit`` of 1 to the most a page holds, a
    known ``sort`` (default by path), and a ``cursor`` this listing gave for the same
    order and directory; ``400 invalid_request`` naming the parameter otherwise."""
    check_limit(limit, "leave it out for the whole listing")
    sort = sort or "path"
    if sort not in SORTS:
        raise InvalidRequest(f"sort must be one of {', '.join(SORTS)} (got {sort!r})", field="sort")
    if not cursor:
        return PageAsk(limit, sort, dir)
    after = decode_cursor(_KIND, cursor)
    if not isinstance(after, dict) or after.get("sort") != sort or after.get("dir") != dir:
        raise bad_cursor(f"{_KIND} in this order under this directory")
    path = after.get("path")
    if not isinstance(path, str) or not path:
        raise bad_cursor(_KIND)
    if sort == "path":
        return PageAsk(limit, sort, dir, cursor, path)
    try:
        updated = datetime.fromisoformat(after["updated"])
    except (KeyError, TypeError, ValueError):
        raise bad_cursor(_KIND) from None
    if updated.tzinfo is None:
        raise bad_cursor(_KIND)
    return PageAsk(limit, sort, dir, cursor, path, updated)


class Listing(list[DocumentInfo]):
    """A listing as the Python API answers it: a list of the documents (as it always
    was), and ``next_cursor``, the cursor of the next page when a page was asked for and
    there is one (None for a whole listing and for the last page)."""

    def __init__(self, items: Iterable[DocumentInfo] = (), next_cursor: str | None = None):
        super().__init__(items)
        self.next_cursor = next_cursor
