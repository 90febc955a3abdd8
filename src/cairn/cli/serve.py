"""``cairn serve``: the HTTP service (SPEC §1)."""

from __future__ import annotations

import argparse
import errno
import socket
import sys

from cairn.cli.common import UsageError, add_database_arg, cli_command
from cairn.config import Config
from cairn.errors import Conflict, InvalidRequest


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


@cli_command
def run(args: argparse.Namespace) -> int:
    import uvicorn

    from cairn.api import logs
    from cairn.api.app import create_app

    if not 1 <= args.port <= 65535:
        raise UsageError("--port must be 1-65535")
    logs.configure()
    if args.local and args.host not in ("127.0.0.1", "localhost", "::1"):
        # Local mode has no authentication: on a network address anyone can write.
        print(
            f"cairn: warning: --local serves without authentication on {args.host}; "
            "anyone who can reach it can read and write every space",
            file=sys.stderr,
        )
    config = Config.from_env(database_url=args.database, local=args.local)
    # Bound before anything else, so a port in use is one line and nothing has said
    # "listening" (uvicorn binds only once its app has started, and then logs a traceback).
    with _bind(args.host, args.port) as sock:
        app = create_app(config, indexer=True)
        print(_banner(args, config), file=sys.stderr)
        # Our own access log carries the request id; uvicorn's would duplicate it.
        server_config = uvicorn.Config(app, access_log=False, log_level="warning")
        uvicorn.Server(server_config).run(sockets=[sock])
    return 0


def _bind(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host:port``; a failure is one line saying what to do."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        # As uvicorn does: a port left in TIME_WAIT by a stopped server is free to take.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise Conflict(f"{where} is in use: stop the other server or pass --port N") from None
        if exc.errno == errno.EACCES:
            raise InvalidRequest(
                f"cannot listen on {where}: permission denied; pass --port 1024 or above"
            ) from None
        reason = exc.strerror or str(exc)
        raise InvalidRequest(
            f"cannot listen on {where}: {reason}; check --host and --port"
        ) from None
    return sock


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
