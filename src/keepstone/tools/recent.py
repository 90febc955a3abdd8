"""``memory_recent``: what changed in the memory space lately, newest first, so an agent can
ask what changed since its last run (docs/history.md, "Activity"). The feed is the
service's (:meth:`~keepstone.service.spaces.SpaceService.recent`); this renders it for a
model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from keepstone.activity import DEFAULT_LIMIT, Change
from keepstone.errors import InvalidRequest
from keepstone.principal import Principal
from keepstone.service.spaces import SpaceService
from keepstone.spaces import SpaceRef
from keepstone.tools.args import only_args

#: The arguments ``memory_recent`` takes.
RECENT_ARGS = frozenset({"since", "limit", "actor_kind", "cursor"})


def recent_answer(
    service: SpaceService, who: Principal, ref: SpaceRef, args: Mapping[str, Any]
) -> tuple[str, dict[str, Any]]:
    """(the text a model reads, the page as data) for the call ``args``."""
    only_args(args, "memory_recent", RECENT_ARGS)
    for name in ("since", "actor_kind", "cursor"):
        if args.get(name) is not None and not isinstance(args[name], str):
            raise InvalidRequest(f"{name} must be a string", field=name)
    limit = args.get("limit", DEFAULT_LIMIT)
    page = service.recent(
        who,
        ref,
        since=args.get("since"),
        actor_kind=args.get("actor_kind"),
        limit=limit,
        cursor=args.get("cursor"),
    )
    lines = [change_line(c) for c in page.changes] or ["no changes"]
    if page.next_cursor:
        lines.append(f"more: call memory_recent with cursor={page.next_cursor!r}")
    return "\n".join(lines), page.as_json()


def change_line(c: Change) -> str:
    """One change as a line: when, what, where, who, how much."""
    delta = "" if c.size_delta is None else f" {c.size_delta:+d} bytes"
    return (
        f"{c.at.isoformat()} {c.action} {c.path} (version {c.version}) by {c.actor.name} "
        f"({c.actor.kind}){delta}"
    )
