"""``keepstone reindex``: backfill the search index of the server's database (docs/cli.md).

Chunks every document that has no chunks yet, then embeds every pending chunk and team
record (no vector, or another model's) with the configured embedder — what the
background indexer of ``keepstone serve`` does, all at once, with a progress bar on a
terminal. ``--rebuild`` drops every chunk and vector first. ``keepstone memory reindex``
does the same for the local store and shares :func:`embed_and_report`.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING

from keepstone import runtime
from keepstone.cli.common import add_database_arg, cli_command, cli_config, print_json, progress
from keepstone.config import Config
from keepstone.errors import KeepstoneError

if TYPE_CHECKING:
    from keepstone.service.indexer import ReindexReport

MEANING_OFF = "search by meaning is off (KEEPSTONE_EMBEDDER=none): chunked only, nothing embedded"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    description = (
        "Chunk every unindexed document of the server's database and embed every pending "
        "chunk and team record with the configured embedder (KEEPSTONE_EMBEDDER), as the "
        "background indexer of `keepstone serve` does, all at once."
    )
    parser = subparsers.add_parser(
        "reindex", help="backfill the search index of the database", description=description
    )
    add_database_arg(parser)
    parser.add_argument(
        "--rebuild",
        action="store_true",
        help="drop every chunk and vector first, then index and embed everything again",
    )
    parser.add_argument("--json", action="store_true", help="print a summary as JSON")
    parser.set_defaults(func=cli_command(run))


def run(args: argparse.Namespace) -> int:
    config = cli_config(args)
    # Refuse before touching the database: a model that is not installed says what to do.
    embedder = runtime.open_embedder(config)
    show: bool | None = False if args.json else None  # None: a bar when on a terminal
    with contextlib.closing(runtime.open_runtime(config)) as rt:
        with (
            progress("chunking documents", enabled=show, plain=True) as chunking,
            progress(
                "embedding", enabled=show if embedder else False, plain=embedder is not None
            ) as embedding,
        ):
            report = runtime.reindex_database(
                rt,
                embedder,
                rebuild=args.rebuild,
                chunking=chunking,
                embedding=embedding,
                embedding_total=embedding.set_total,
            )
    return print_report(report, config, as_json=args.json)


def embed_and_report(config: Config, store: runtime.MemoryStore, documents: int) -> ReindexReport:
    """After ``keepstone memory reindex`` chunked ``documents`` documents of the local
    ``store``: embed what it has pending when the configured embedder loads, saying so
    on stderr (stdout keeps the document count), or why search by meaning is off."""
    from keepstone.service.indexer import embed_pending  # the search stack: loaded when used

    embedder: runtime.Embedder | None = None
    if config.embedder != "none":
        try:
            embedder = runtime.open_embedder(config)
        except KeepstoneError as exc:
            print(f"keepstone: search by meaning is off: {exc.message}", file=sys.stderr)
    with progress(
        "embedding", enabled=False if embedder is None else None, plain=embedder is not None
    ) as bar:
        report = embed_pending(
            embedder, store, documents=documents, progress=bar, total=bar.set_total
        )
    if report.model is not None and report.chunks_embedded:
        print(f"embedded {report.chunks_embedded} chunk(s) with {report.model}", file=sys.stderr)
    return report


def print_report(report: ReindexReport, config: Config, *, as_json: bool) -> int:
    """The summary: one JSON object with ``--json``, else a line (and why nothing was
    embedded when the embedder is ``none``)."""
    if as_json:
        return print_json(report.as_json())
    line = f"reindexed {report.documents} document(s)"
    if report.model is not None:
        line += (
            f"; embedded {report.chunks_embedded} chunk(s) and "
            f"{report.records_embedded} record(s) with {report.model}"
        )
    print(line)
    if report.model is None and config.embedder == "none":
        print(f"keepstone: {MEANING_OFF}", file=sys.stderr)
    return 0
