"""``cairn``: the command-line entry point.

Each command family lives in its own module with a ``register(subparsers)``
function that adds its parser and sets ``func`` (a callable taking the parsed
namespace and returning an exit status). Errors from :mod:`cairn.errors` become one
line on stderr and exit status 1; usage errors exit 2 (argparse's own convention).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import cast

from cairn.cli import admin, agents, memory, records, serve
from cairn.cli.common import Handler
from cairn.errors import CairnError

#: Command modules, each with ``register(subparsers)``, in the order of ``cairn --help``.
COMMAND_MODULES = (serve, memory, admin, records, agents)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cairn",
        description="Cairn: memory for AI agents.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        # Building the parser reads the configuration (flag defaults), which may be invalid.
        parser = build_parser()
        args = parser.parse_args(argv)
        func = cast(Handler | None, getattr(args, "func", None))
        if func is None:
            parser.print_help(sys.stderr)
            return 2
        return func(args)
    except CairnError as exc:
        print(f"cairn: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("cairn: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
