"""What a search may be narrowed by, on every face (docs/search.md, "Filters"): ``since``
and ``until`` (ISO 8601; a document's last write, a record's creation), ``min_score``
(in place of the relevance floor), front-matter ``tags`` (documents) and an optional
recency prior (``recency_days``: off unless given).

:func:`search_filters` reads them as a face received them (text from a query string or a
command line, values from a body or a Python call) and refuses a bad one with ``400
invalid_request`` naming it. Pure code: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time

import yaml

from keepstone.errors import InvalidRequest
from keepstone.search.floor import check_min_score
from keepstone.text import parse_decimal

#: How many tags one search may name, and what one tag may be.
MAX_TAGS = 20
_TAG = re.compile(r"^[\w][\w./:-]{0,63}$")
#: The longest recency half-life a search may ask for (ten years, in days).
MAX_RECENCY_DAYS = 3650.0


@dataclass(frozen=True, slots=True)
class SearchFilters:
    """A search's filters; the default narrows nothing and keeps the relevance floor."""

    since: datetime | None = None
    until: datetime | None = None
    min_score: float | None = None
    tags: tuple[str, ...] = ()
    #: The recency prior's half-life in days: a hit's score is weighted by
    #: ``0.5 ** (age / half-life)`` before the floor and the order. None: no prior.
    recency_days: float | None = None

    @property
    def narrows(self) -> bool:
        """Whether anything but the floor narrows the search (for the empty answer's hint)."""
        return bool(self.since or self.until or self.tags or self.min_score is not None)

    def in_time(self, when: datetime) -> bool:
        return (self.since is None or when >= self.since) and (
            self.until is None or when <= self.until
        )

    def as_params(self) -> dict[str, str]:
        """The filters as query parameters (what a client sends its server)."""
        out: dict[str, str] = {}
        if self.since is not None:
            out["since"] = self.since.isoformat()
        if self.until is not None:
            out["until"] = self.until.isoformat()
        if self.min_score is not None:
            out["min_score"] = repr(self.min_score)
        if self.tags:
            out["tags"] = ",".join(self.tags)
        if self.recency_days is not None:
            out["recency_days"] = repr(self.recency_days)
        return out

    def weight(self, when: datetime, now: datetime) -> float:
        """The recency prior's weight of something last written at ``when``."""
        if self.recency_days is None:
            return 1.0
        age = max((now - when).total_seconds(), 0.0) / 86400.0
        return float(0.5 ** (age / self.recency_days))

    def prior(self, score: float, when: datetime, now: datetime) -> float:
        """``score`` under the recency prior: a positive score shrinks with age; a score
        at or below 0 (nothing to shrink towards) stays as it is."""
        return score * self.weight(when, now) if score > 0 else score


NO_FILTERS = SearchFilters()
#: The filters' names, as query parameters and fields.
FILTER_PARAMS = ("since", "until", "min_score", "tags", "recency_days")


def _instant(value: object, name: str, *, day_ends: bool = False) -> datetime | None:
    """``value`` as an aware instant (naive is UTC); a date alone is its first instant, or
    with ``day_ends`` its last (``until=2025-01-31`` keeps what was written that day: the
    filters are inclusive)."""
    if value is None or value == "":
        return None
    day: date | None = None
    parsed: datetime | None = None
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, date):
        day = value
    elif isinstance(value, str):
        try:
            day = date.fromisoformat(value.strip())
        except ValueError:
            try:
                parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            except ValueError:
                parsed = None
    if day is not None:
        parsed = datetime.combine(day, time.max if day_ends else time.min)
    if parsed is None:
        raise InvalidRequest(
            f"{name} must be an ISO 8601 date or time, e.g. {name}=2025-01-31 or "
            f"{name}=2025-01-31T09:00:00Z; got {value!r}",
            field=name,
        )
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def parse_instant(value: object, name: str) -> datetime | None:
    """``value`` (ISO 8601 text, a date or a datetime; naive is UTC) as an aware instant,
    None when empty; 400 naming ``name`` otherwise."""
    return _instant(value, name)


def _tags(value: object) -> tuple[str, ...]:
    if value is None or value == "":
        return ()
    items = value.split(",") if isinstance(value, str) else value
    words = [t for t in items if isinstance(t, str)] if isinstance(items, list | tuple) else []
    ok = isinstance(items, list | tuple) and len(words) == len(items)
    tags = tuple(dict.fromkeys(t.strip() for t in words if t.strip()))
    if not ok or len(tags) > MAX_TAGS or not all(_TAG.match(t) for t in tags):
        raise InvalidRequest(
            f"tags must be up to {MAX_TAGS} comma-separated tags of letters, digits and "
            f"._/:- (at most 64 characters each), e.g. tags=ops,billing; got {value!r}",
            field="tags",
        )
    return tags


def _recency(value: object) -> float | None:
    if value is None or value == "":
        return None
    days: float | None = math.nan
    if isinstance(value, str):
        days = parse_decimal(value)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        days = float(value)
    if days is None or not math.isfinite(days) or not 0 < days <= MAX_RECENCY_DAYS:
        raise InvalidRequest(
            f"recency_days must be a half-life in days, above 0 and at most "
            f"{MAX_RECENCY_DAYS:g}, e.g. recency_days=30; got {value!r}",
            field="recency_days",
        )
    return days


def search_filters(
    *,
    since: object = None,
    until: object = None,
    min_score: object = None,
    tags: object = None,
    recency_days: object = None,
) -> SearchFilters:
    """The filters given, checked (``400 invalid_request`` naming the bad one)."""
    start, end = _instant(since, "since"), _instant(until, "until", day_ends=True)
    if start is not None and end is not None and start > end:
        raise InvalidRequest(
            f"since ({start.isoformat()}) is after until ({end.isoformat()}); "
            "send since before until",
            field="since",
        )
    score = check_min_score(min_score)
    return SearchFilters(start, end, score, _tags(tags), _recency(recency_days))


def front_matter_tags(text: str) -> frozenset[str]:
    """The ``tags`` of a document's YAML front matter (``tags: [a, b]``, ``tags: a, b``
    or a list), from the text of its first chunk; none without front matter."""
    if not text.startswith("---"):
        return frozenset()
    lines = text.splitlines()
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() in ("---", "..."))
    except StopIteration:
        return frozenset()
    try:
        data = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError:
        return frozenset()
    found = data.get("tags") if isinstance(data, Mapping) else None
    if isinstance(found, str):
        found = found.split(",")
    if not isinstance(found, list):
        return frozenset()
    return frozenset(str(t).strip() for t in found if str(t).strip())
