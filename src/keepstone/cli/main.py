"""``keepstone``: the command-line entry point.

Each command family lives in its own module with a ``register(subparsers)``
function that adds its parser and sets ``func`` (a callable taking the parsed
namespace and returning an exit status). Errors from :mod:`keepstone.errors` become one
line on stderr and exit status 1; usage errors exit 2 (argparse's own convention).

This module is the process's entry, so it first caps the native thread pools
(:func:`limit_native_threads`), before the command modules import anything that loads
numpy: OpenBLAS reads its thread count once, when it loads.
"""

from __future__ import annotations

import os

from keepstone import __version__
from keepstone.config import Config
from keepstone.errors import KeepstoneError

#: The thread pools of native code, each capped at ``KEEPSTONE_EMBED_THREADS`` unless its own
#: variable is set: BLAS (OpenBLAS, MKL) and OpenMP under numpy's matrix products, rayon
#: under the tokenizer's batches.
THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "RAYON_NUM_THREADS",
)


def limit_native_threads() -> None:
    """Default each of :data:`THREAD_VARIABLES` to ``KEEPSTONE_EMBED_THREADS`` (default 1), so
    two server processes on one machine do not each start a thread per core for the
    embedder; a value the user set is kept. Child processes inherit the limits."""
    try:
        threads = Config.from_env().embed_threads
    except KeepstoneError:
        threads = 1  # main() reports the configuration's error
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, str(threads))


limit_native_threads()

# The imports below load numpy (through the commands' services): after the limits.
import argparse  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import cast  # noqa: E402

import keepstone.cli.doctor as doctor  # noqa: E402
from keepstone.cli import (  # noqa: E402
    admin,
    agents,
    memory,
    models,
    openapi,
    records,
    reindex,
    serve,
)
from keepstone.cli.common import Handler, KeepstoneArgumentParser  # noqa: E402

#: Command modules, each with ``register(subparsers)``, in the order of ``keepstone --help``.
COMMAND_MODULES = (serve, reindex, memory, admin, records, agents, models, doctor, openapi)


def build_parser() -> argparse.ArgumentParser:
    # One parser class for the whole tree (subparsers are built with ``parser_class``), so
    # every mistyped flag or verb gets a suggestion.
    parser = KeepstoneArgumentParser(
        prog="keepstone",
        description="Keepstone: memory for AI agents.",
    )
    parser.add_argument("--version", action="version", version=f"keepstone {__version__}")
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=KeepstoneArgumentParser
    )
    sub.required = True
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


class WarningLines(logging.Handler):
    """Warnings of Keepstone's own code (a model that does not load, …) as one
    ``keepstone: …`` line each on the standard error of the moment, as the CLI's errors
    are. ``keepstone serve`` replaces it with its JSON log lines."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(logging.Formatter("keepstone: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(self.format(record), file=sys.stderr, flush=True)
        except Exception:
            self.handleError(record)


def main(argv: Sequence[str] | None = None) -> int:
    logger = logging.getLogger("keepstone")
    if not logger.handlers:
        logger.addHandler(WarningLines())
    try:
        # Building the parser reads the configuration (flag defaults), which may be invalid.
        parser = build_parser()
        args = parser.parse_args(argv)
        func = cast(Handler | None, getattr(args, "func", None))
        if func is None:
            parser.print_help(sys.stderr)
            return 2
        return func(args)
    except KeepstoneError as exc:
        print(f"keepstone: {exc.code}: {exc.operator_message or exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("keepstone: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
