"""``cairn serve``: the HTTP service (SPEC §1)."""

from __future__ import annotations

import argparse
import sys

from cairn.cli.common import add_database_arg
from cairn.config import Config


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the HTTP service",
        description="Run the Cairn HTTP service. Schema migrations run at start.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8420, help="port to listen on (8420)")
    add_database_arg(parser)
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
    config = Config.from_env(database_url=args.database, local=args.local)
    app = create_app(config, indexer=True)
    print(_banner(args, config), file=sys.stderr)
    # Our own access log carries the request id; uvicorn's would duplicate it.
    uvicorn.run(app, host=args.host, port=args.port, access_log=False, log_level="warning")
    return 0


def _banner(args: argparse.Namespace, config: Config) -> str:
    """What a person starting the server needs to know: where it is and how to get in."""
    url = config.database_url
    shown_db = url.split("@", 1)[-1] if "@" in url else url  # never print a password
    lines = [f"cairn serve: listening on http://{args.host}:{args.port} (database {shown_db})"]
    if config.local:
        lines.append("cairn serve: local mode: no authentication, one team 'local'")
    elif not config.admin_token:
        lines.append(
            "cairn serve: CAIRN_ADMIN_TOKEN is not set; set it to use the admin API, or create "
            "a super-admin with: cairn admin create-user --email E --password P --super-admin"
        )
    return "\n".join(lines)
