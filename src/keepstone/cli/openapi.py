"""``keepstone openapi``: print the REST API's OpenAPI document (what ``/openapi.json`` serves)
without a running server, for client generators (clients/typescript: ``npm run generate``).

The app is built over a throwaway SQLite database in a temporary directory: the document
depends on the routes only, and no configured database is opened or migrated.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from keepstone.cli.common import cli_command
from keepstone.config import Config


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "openapi",
        help="print the REST API's OpenAPI document (JSON)",
        description="Print the OpenAPI document of the REST API, as GET /openapi.json "
        "answers it, without a running server or a database.",
    )
    parser.add_argument(
        "-o", "--output", default=None, metavar="FILE", help="write it to FILE (default: stdout)"
    )
    parser.set_defaults(func=run)


@cli_command
def run(args: argparse.Namespace) -> int:
    from keepstone.api.app import create_app

    with tempfile.TemporaryDirectory(prefix="keepstone-openapi-") as tmp:
        config = Config.from_env(database_url=f"sqlite:///{Path(tmp) / 'openapi.db'}")
        app = create_app(config)
        try:
            text = json.dumps(app.openapi(), indent=2, ensure_ascii=False) + "\n"
        finally:
            app.state.runtime.engine.dispose()
    if args.output is None:
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
    return 0
