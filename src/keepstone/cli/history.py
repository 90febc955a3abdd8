"""``keepstone memory log|show|diff|restore`` and the ``--as-of TIME`` flag (docs/history.md).

Thin like :mod:`keepstone.cli.memory`: each verb parses its flags and calls the history verbs
of :class:`~keepstone.service.spaces.SpaceService`. :func:`parse_time` is the one reading of a
``--as-of`` value, shared by ``ls``/``cat``/``export``, ``keepstone run`` and ``keepstone mcp``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from keepstone.activity import ACTOR_KINDS, DEFAULT_LIMIT
from keepstone.cli.common import (
    UsageError,
    human_bytes,
    open_spaces,
    space_ref_from_args,
    whole,
)
from keepstone.cli.search_flags import time_ago
from keepstone.documents import VersionInfo
from keepstone.vocabulary import cli_help

AS_OF_HELP = (
    "the space as it was at TIME: ISO 8601 (2026-11-30T14:00:00Z, an offset such as +02:00, "
    "a date alone = its midnight; no zone = UTC) or a time ago (90s, 15m, 2h, 3d, 1w)"
)


def parse_time(value: str, *, flag: str = "--as-of", now: datetime | None = None) -> datetime:
    """``value`` as an aware instant: ISO 8601 (``Z`` or an offset; naive = UTC) or a
    relative ``<n><s|m|h|d|w>`` meaning that long before ``now``. A value that is neither
    is a :class:`UsageError` naming ``flag`` and both forms."""
    ago = time_ago(value, now)
    if ago is not None:
        return ago
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"{flag} {value!r} is not a time: give ISO 8601 (2026-11-30T14:00:00Z, "
            "2026-11-30T16:00+02:00, 2026-11-30) or a time ago (90s, 15m, 2h, 3d, 1w)"
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def add_as_of_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--as-of TIME`` (parsed by the handler with :func:`parse_time`)."""
    parser.add_argument("--as-of", dest="as_of", metavar="TIME", default=None, help=AS_OF_HELP)


def as_of_arg(args: argparse.Namespace) -> datetime | None:
    """The parsed ``--as-of``, None when it was not given."""
    raw: str | None = getattr(args, "as_of", None)
    return None if raw is None else parse_time(raw)


Verb = Callable[[str, str, Callable[[argparse.Namespace], int]], Any]


def register_verbs(verbs: Any, verb: Verb) -> None:
    """Add ``log``, ``show``, ``diff``, ``recent`` and ``restore`` with ``keepstone memory``'s
    ``verb`` (which adds the space and server flags)."""
    del verbs  # the verbs are added through ``verb``, which knows the shared flags
    log = verb("log", cli_help("log"), _log)
    log.add_argument("path", metavar="PATH")
    log.add_argument("--json", action="store_true", help="print the versions as JSON")

    show = verb("show", cli_help("show"), _show)
    show.add_argument("path", metavar="PATH")
    show.add_argument("--version", type=whole, required=True, metavar="N", help="the version")

    diff = verb("diff", cli_help("diff"), _diff)
    diff.add_argument("path", metavar="PATH")
    diff.add_argument("--from", dest="old", type=whole, required=True, metavar="N")
    diff.add_argument(
        "--to",
        dest="new",
        type=whole,
        default=None,
        metavar="M",
        help="the newer version (default: the newest, i.e. the live document)",
    )

    recent = verb("recent", cli_help("recent"), _recent)
    recent.add_argument(
        "--since", metavar="TIME", help="only changes at or after TIME (as --as-of takes it)"
    )
    recent.add_argument("--limit", type=whole, default=DEFAULT_LIMIT, metavar="N", help="1-100")
    recent.add_argument("--actor-kind", choices=ACTOR_KINDS, help="only changes by this kind")
    recent.add_argument("--cursor", help="go on after the page that printed this cursor")
    recent.add_argument(
        "--all", action="store_true", help="every space of the team you may read, not one"
    )
    recent.add_argument("--json", action="store_true", help="print the page as JSON")

    restore = verb("restore", cli_help("restore"), _restore)
    restore.add_argument("path", metavar="PATH")
    restore.add_argument("--version", type=whole, required=True, metavar="N", help="the version")
    restore.add_argument("--if-match", metavar="ETAG", help="only if the document's etag is ETAG")


def _log(args: argparse.Namespace) -> int:
    with open_spaces(args) as (service, who):
        ref = space_ref_from_args(args, who.team_id)
        versions = service.versions(ref, args.path)
        if args.json:
            print(json.dumps({"versions": [v.as_fields() for v in versions]}))
            return 0
        for i, v in enumerate(versions):
            print(_log_line(v, live=i == 0 and not v.deleted))
        return 0


def _log_line(v: VersionInfo, *, live: bool) -> str:
    when = v.at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    what = "deleted" if v.deleted else human_bytes(v.size_bytes)
    mark = "  (live)" if live else ""
    return f"{v.version:>5}  {when}  {what:>10}  {v.actor}{mark}"


def _recent(args: argparse.Namespace) -> int:
    since = None if args.since is None else parse_time(args.since, flag="--since")
    with open_spaces(args) as (service, who):
        ref = None if args.all else space_ref_from_args(args, who.team_id)
        page = service.recent(
            who,
            ref,
            since=since,
            actor_kind=args.actor_kind,
            limit=args.limit,
            cursor=args.cursor,
        )
        if args.json:
            print(json.dumps(page.as_json()))
            return 0
        for c in page.changes:
            when = c.at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
            delta = "" if c.size_delta is None else f"{c.size_delta:+d} B"
            where = f"{c.space_id} {c.path}" if args.all else c.path
            print(f"{when}  {c.action:<7}  {where}  v{c.version}  {delta:>9}  {c.actor.name}")
        if page.next_cursor:
            print(f"more: --cursor {page.next_cursor}", file=sys.stderr)
        return 0


def _show(args: argparse.Namespace) -> int:
    with open_spaces(args) as (service, who):
        ref = space_ref_from_args(args, who.team_id)
        sys.stdout.write(service.read_version(ref, args.path, args.version).content)
        sys.stdout.flush()
        return 0


def _diff(args: argparse.Namespace) -> int:
    with open_spaces(args) as (service, who):
        ref = space_ref_from_args(args, who.team_id)
        new = args.new
        if new is None:
            new = service.versions(ref, args.path)[0].version
        text = service.diff(ref, args.path, args.old, new)
        if not text:
            print(f"versions {args.old} and {new} of {args.path} are identical", file=sys.stderr)
        sys.stdout.write(text)
        sys.stdout.flush()
        return 0


def _restore(args: argparse.Namespace) -> int:
    with open_spaces(args) as (service, who):
        ref = space_ref_from_args(args, who.team_id)
        result = service.restore(who, ref, args.path, args.version, if_match=args.if_match)
        print(
            f"restored {result.path} from version {args.version} "
            f"({human_bytes(result.size_bytes)}, etag {result.etag})"
        )
        return 0
