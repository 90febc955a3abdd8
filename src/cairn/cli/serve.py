"""``cairn serve``: the HTTP service (SPEC §1)."""

from __future__ import annotations

import argparse
import os
import sys

from cairn.api.settings import Settings, default_database_url


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the HTTP service",
        description="Run the Cairn HTTP service. Schema migrations run at start.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8420, help="port to listen on (8420)")
    parser.add_argument(
        "--database",
        metavar="URL",
        default=None,
        help="sqlite:///path or postgresql://... (default $CAIRN_DATABASE_URL, else "
        "sqlite:///$CAIRN_HOME/cairn.db)",
    )
    parser.add_argument(
        "--local",
        action="store_true",
        help="single-tenant mode: no authentication, one implicit team 'local'",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from cairn.api import logs
    from cairn.api.app import create_app

    logs.configure()
    if args.local and args.host not in ("127.0.0.1", "localhost", "::1"):
        # Local mode has no authentication: on a network address anyone can write.
        print(
            f"cairn: warning: --local serves without authentication on {args.host}; "
            "anyone who can reach it can read and write every space",
            file=sys.stderr,
        )
    settings = Settings.from_env(
        os.environ,
        database_url=args.database or default_database_url(os.environ),
        local=args.local,
    )
    app = create_app(settings)
    # Our own access log carries the request id; uvicorn's would duplicate it.
    uvicorn.run(app, host=args.host, port=args.port, access_log=False, log_level="warning")
    return 0
