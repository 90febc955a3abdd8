"""``keepstone records add|purge|enable|disable``: operator commands on team memory
records, on the database named by ``--database`` / ``KEEPSTONE_DATABASE_URL``.

Each calls :class:`~keepstone.service.records.RecordService` as the server's own code:
``add`` goes through the same save as the host application (masking, limits, plan
and on/off gates); ``purge`` removes expired records once (the server also does it
periodically). Output is one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import sys

from keepstone.cli.common import add_database_arg, print_json, required_verbs, runtime_for
from keepstone.errors import InvalidRequest


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("records", help="team memory records (operators)")
    verbs = required_verbs(parser, "records_command")

    add = verbs.add_parser("add", help="save one record for a team")
    add.add_argument("--team", required=True, help="the team id")
    add.add_argument("--repo", default=None, help="a repository id of the team")
    source = add.add_mutually_exclusive_group()
    source.add_argument("--text", default=None, help="the record text (else --file, else stdin)")
    source.add_argument("--file", default=None, help="read the record text from this file")
    add_database_arg(add)
    add.set_defaults(func=_add)

    purge = verbs.add_parser("purge", help="delete every expired record now")
    add_database_arg(purge)
    purge.set_defaults(func=_purge)

    for verb, enabled in (("enable", True), ("disable", False)):
        p = verbs.add_parser(verb, help=f"turn team memory {'on' if enabled else 'off'}")
        p.add_argument("--team", required=True, help="the team id")
        add_database_arg(p)
        p.set_defaults(func=_set_enabled, enabled=enabled)


def _add(args: argparse.Namespace) -> int:
    if args.text is not None:
        text = str(args.text)
    elif args.file is not None:
        try:
            with open(args.file, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidRequest(f"cannot read {args.file!r} as UTF-8 text: {exc}") from exc
    else:
        text = sys.stdin.read()
    with runtime_for(args) as runtime:
        record = runtime.records.save_as_server(args.team, text, repo_id=args.repo)
    from keepstone.service.records import iso

    return print_json({"id": record.id, "expires_at": iso(record.expires_at)})


def _purge(args: argparse.Namespace) -> int:
    with runtime_for(args) as runtime:
        removed = runtime.records.purge_expired()
    return print_json({"purged": removed})


def _set_enabled(args: argparse.Namespace) -> int:
    with runtime_for(args) as runtime:  # an unknown team is a 404
        runtime.records.set_enabled_as_server(args.team, bool(args.enabled))
    return print_json({"team_id": args.team, "enabled": bool(args.enabled)})
