"""The flags that filter a search (docs/search.md, "Filters") and the time ago every time
flag of the CLI takes (``--since 2h``, ``--as-of 3d``)."""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta

from keepstone.cli.common import AddArgs, arg
from keepstone.service.filters import SearchFilters, filters_of

#: A time ago, as every time flag of the CLI takes it: a whole number and a unit.
_AGO = re.compile(r"^\s*(\d{1,9})\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def time_ago(value: str, now: datetime | None = None) -> datetime | None:
    """The instant ``value`` names when it is a time ago (``90s``, ``15m``, ``2h``, ``3d``,
    ``1w``: that long before ``now``); None when it is not one."""
    found = _AGO.match(value)
    if found is None:
        return None
    return (now or datetime.now(UTC)) - timedelta(**{_UNITS[found[2]]: int(found[1])})


def search_filters_of(args: argparse.Namespace) -> SearchFilters:
    """A search's filters from its flags (:func:`search_filter_args`), checked by the
    service as every face's are; ``--since`` and ``--until`` also take a time ago, as the
    history's ``--since`` and ``--as-of`` do."""
    values = dict(vars(args))
    for name in ("since", "until"):
        raw = values.get(name)
        ago = time_ago(raw) if isinstance(raw, str) else None
        if ago is not None:
            values[name] = ago
    return filters_of(values)


def search_filter_args(*, tags: bool) -> tuple[AddArgs, ...]:
    """A search's filter flags (docs/search.md, "Filters"): ``--since``, ``--until``,
    ``--min-score``, ``--recency-days`` and, for documents, ``--tags``; read by
    :func:`search_filters_of`."""
    flags = [
        arg(
            "--since",
            default=None,
            metavar="WHEN",
            help="only what was written at or after WHEN: ISO 8601 (2025-01-31, "
            "2025-01-31T09:00:00Z) or a time ago (90s, 15m, 2h, 3d, 1w)",
        ),
        arg(
            "--until",
            default=None,
            metavar="WHEN",
            help="only what was written at or before WHEN (as --since takes it)",
        ),
        arg(
            "--min-score",
            dest="min_score",
            default=None,
            metavar="S",
            help="only hits scoring at least S (-1 to 1), in place of the relevance floor",
        ),
        arg(
            "--recency-days",
            dest="recency_days",
            default=None,
            metavar="D",
            help="rank newer hits higher: a recency prior, half-life D days (off by default)",
        ),
    ]
    if tags:
        flags.append(
            arg(
                "--tags",
                default=None,
                metavar="A,B",
                help="only documents whose front matter's tags hold all of A,B",
            )
        )
    return tuple(flags)
