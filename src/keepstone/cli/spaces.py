"""``keepstone memory spaces``: which spaces exist, with their usage.

Locally it lists the filesystem store's tree under ``$KEEPSTONE_HOME/spaces`` (every login's
user spaces too: the console may name any of them with ``--user``); with ``--server``, the
spaces the credential may read, as the server decides (``GET /api/memory/spaces``).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from keepstone.cli.common import (
    add_server_args,
    cli_command,
    human_bytes,
    keepstone_home,
    open_spaces,
)
from keepstone.service.spaces import SpaceLabel, SpaceList
from keepstone.vocabulary import cli_help


def register_verb(verbs: Any) -> None:
    """Add ``spaces`` to ``keepstone memory``'s verbs."""
    help_text = cli_help("spaces")
    parser = verbs.add_parser("spaces", help=help_text, description=help_text)
    add_server_args(parser)
    parser.add_argument("--json", action="store_true", help="print the spaces as JSON")
    parser.set_defaults(func=cli_command(_spaces))


def _spaces(args: argparse.Namespace) -> int:
    with open_spaces(args) as (service, who):
        listed = service.list_spaces(who)
    if args.json:
        print(json.dumps(listed.as_json()))
        return 0
    where = args.server or str(keepstone_home() / "spaces")
    if not listed.spaces:
        print(f"no spaces with documents in {where}")
        return 0
    for item in listed.spaces:
        quota = f"of {human_bytes(item.quota_bytes)}" if item.quota_bytes > 0 else "(no cap)"
        print(f"{human_bytes(item.used_bytes):>10} {quota:<14} {_flags(item.space)}")
    _footer(listed, where)
    return 0


def _flags(space: SpaceLabel) -> str:
    """The space: its visibility, name and qualifiers."""
    parts = [f"{space.visibility:<13}", space.name]
    for key, value in (("project", space.project), ("bot", space.bot), ("user", space.user)):
        if value is not None:
            parts.append(f"{key}={value}")
    return " ".join(parts)


def _footer(listed: SpaceList, where: str) -> None:
    if listed.truncated:
        print(f"(the first {len(listed.spaces)} spaces of {where} by id; there are more)")
