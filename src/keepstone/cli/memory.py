"""``keepstone memory du|ls|cat|put|edit|mv|rm|export|import|search``: the CLI over one
space (SPEC §8); the history verbs (``log|show|diff|restore``) are in
:mod:`keepstone.cli.history`. Each verb's help line is its operation's in
:mod:`keepstone.vocabulary`.

Thin: each verb parses its flags, resolves the space with :mod:`keepstone.cli.common`
and calls :class:`~keepstone.service.spaces.SpaceService`. Without ``--server`` the store is the
filesystem store under ``$KEEPSTONE_HOME/spaces`` (tenant ``local``); with it, the HTTP
client store. Exit status: 0 done, 1 refused (one line on stderr), 2 usage.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

from keepstone.cli import reindex
from keepstone.cli.common import (
    AddArgs,
    Handler,
    UsageError,
    add_args,
    add_server_args,
    add_space_args,
    arg,
    cli_command,
    cli_config,
    human_bytes,
    is_tty,
    login_user,
    open_spaces,
    progress,
    read_at_most,
    required_verbs,
    size_left,
    space_ref_from_args,
    whole,
)
from keepstone.cli.history import add_as_of_arg, as_of_arg
from keepstone.cli.history import register_verbs as register_history_verbs
from keepstone.cli.search_flags import search_filter_args, search_filters_of
from keepstone.cli.spaces import register_verb as register_spaces_verb
from keepstone.documents import Edit, ImportReport, ImportStrategy, Insert, Replace
from keepstone.errors import DocumentTooLarge, InvalidDocument
from keepstone.principal import CredentialKind, Principal
from keepstone.service.access import console_principal
from keepstone.service.filters import SearchFilters, empty_hint, search_answer
from keepstone.service.spaces import SpaceLabel, SpaceService
from keepstone.spaces import SpaceRef
from keepstone.vocabulary import cli_help

if TYPE_CHECKING:
    from keepstone.service.search import DocumentHit


def register(subparsers: Any) -> None:
    """Add ``keepstone memory`` and its verbs."""
    memory = subparsers.add_parser(
        "memory",
        help="read, write, export and import a knowledge space",
        description="Work on one knowledge space: the local store, or a server with --server.",
    )
    verbs = required_verbs(memory, "verb")
    verb = functools.partial(_space_verb, verbs)
    for name, help_text, handler, args in _SPACE_VERBS:
        add_args(verb(name, help_text, handler), args)
    reindex_help = "bring the local store's search index in line with its files"
    reindex_verb = verbs.add_parser("reindex", help=reindex_help, description=reindex_help)
    add_args(reindex_verb, _REINDEX_ARGS).set_defaults(func=cli_command(_reindex))
    register_spaces_verb(verbs)
    register_history_verbs(verbs, verb)


def _space_verb(verbs: Any, name: str, help_text: str, handler: Handler) -> Any:
    """A verb on one space, with the space and server flags; the caller adds its own."""
    parser = verbs.add_parser(name, help=help_text, description=help_text)
    add_space_args(parser, "bot")
    add_server_args(parser)
    parser.set_defaults(func=cli_command(handler))
    return parser


@contextlib.contextmanager
def _open(args: argparse.Namespace) -> Iterator[tuple[SpaceService, SpaceRef, Principal]]:
    """(service, space, who is acting) for the flags; the store is closed afterwards."""
    with open_spaces(args) as (service, who):
        yield service, space_ref_from_args(args, who.team_id), who


def _du(args: argparse.Namespace) -> int:
    with _open(args) as (service, ref, _):
        usage = service.usage(ref)
        if args.json:
            print(json.dumps(usage.as_json()))
            return 0
        print(f"space  {usage.space_id}")
        print(f"used   {_of(usage.used_bytes, usage.quota_bytes)}")
        print(f"total  {_of(usage.team_used_bytes, usage.team_quota_bytes)}  (all spaces)")
        if usage.history_quota_bytes or usage.history_used_bytes:
            history = _of(usage.history_used_bytes, usage.history_quota_bytes)
            print(f"history {history}  (replaced versions, all spaces)")
        else:
            print("history not kept by this store")
        print(f"index  {human_bytes(usage.index_bytes)}  (search index of this space, no cap)")
        return 0


def _of(used: int, quota: int) -> str:
    if quota <= 0:
        return f"{human_bytes(used)} (no cap)"
    return f"{human_bytes(used)} of {human_bytes(quota)} ({100 * used / quota:.1f}%)"


def _ls(args: argparse.Namespace) -> int:
    at = as_of_arg(args)
    with _open(args) as (service, ref, _):
        docs = service.list(ref, args.dir) if at is None else service.list_as_of(ref, at, args.dir)
        if args.json:
            print(json.dumps({"documents": [d.as_json() for d in docs], "next_cursor": None}))
            return 0
        for d in docs:
            when = d.updated_at.strftime("%Y-%m-%d %H:%M")
            print(f"{human_bytes(d.size_bytes):>10}  {when}  {d.path}")
        if not docs:
            # stdout stays empty for scripts; the person reading learns where we looked.
            under = f" under {args.dir!r}" if args.dir else ""
            print(f"no documents in {_where(args, ref)}{under}{_SEE_SPACES}", file=sys.stderr)
        return 0


#: Where an empty answer sends the reader: the verb that lists the spaces that exist.
_SEE_SPACES = "; `keepstone memory spaces` lists the spaces that exist"


def _where(args: argparse.Namespace, ref: SpaceRef) -> str:
    """The space looked at, as flags would name it: ``bot space 'default' (project
    myrepo-1a2b3c4d (the current directory), bot b1)``."""
    quals: list[str] = []
    if ref.project:
        given = getattr(args, "project", None)
        origin = " (the current directory)" if not given else ""
        if given and given != ref.project:
            origin = f" (from {given})"
        quals.append(f"project {ref.project}{origin}")
    quals += [f"{k} {v}" for k, v in (("bot", ref.bot), ("user", ref.user)) if v]
    inside = f" ({', '.join(quals)})" if quals else ""
    return f"{ref.visibility.value} space {ref.name!r}{inside}"


def _cat(args: argparse.Namespace) -> int:
    at = as_of_arg(args)
    with _open(args) as (service, ref, _):
        doc = service.read(ref, args.path) if at is None else service.read_as_of(ref, args.path, at)
        sys.stdout.write(doc.content)
        sys.stdout.flush()
        return 0


def _put_content(args: argparse.Namespace, cap: DocumentCap) -> bytes:
    """The bytes ``put`` writes: ``--file``, else stdin; never waits at a terminal, never
    empties a note unless ``--empty`` says so, never reads more than ``cap`` allows."""
    if args.empty:
        if args.file:
            raise UsageError("--empty writes an empty document; drop --file F (or --empty)")
        return b""
    if args.file:
        source = f"--file {args.file!r}"
        try:
            with open(args.file, "rb") as stream:
                raw = cap.read(stream, source)
        except OSError as exc:
            raise UsageError(f"{source}: {exc.strerror or exc}") from None
    else:
        if is_tty(sys.stdin):
            raise UsageError("no content: use --file F or pipe the content into stdin")
        source = "stdin"
        raw = cap.read(sys.stdin.buffer, source)
    if not raw:
        raise UsageError(
            f"no content: {source} is empty; pass --empty to write an empty document on purpose"
        )
    return raw


@dataclass(frozen=True, slots=True)
class DocumentCap:
    """The most bytes ``put`` takes (``limit``) and what its refusal says of them (``why``)."""

    limit: int
    why: str

    def read(self, stream: BinaryIO, source: str) -> bytes:
        """``stream``'s bytes, or DocumentTooLarge past ``limit``: at most ``limit + 1`` bytes
        are read, so a file of gigabytes or an endless stream (``/dev/zero``, ``yes |``) is
        refused in the memory of one document; a regular file's size refuses it unread."""
        left = size_left(stream)
        if left is not None and left > self.limit:
            raise self.refusal(f"is {left} bytes")
        data = read_at_most(stream, self.limit + 1)
        if len(data) > self.limit:
            raise self.refusal(f"is over {self.limit} bytes ({source} was read no further)")
        return data

    def refusal(self, size: str) -> DocumentTooLarge:
        return DocumentTooLarge(
            f"document {size}; {self.why}", limit="document", quota_bytes=self.limit
        )


def _put_cap(service: SpaceService, args: argparse.Namespace) -> DocumentCap:
    """How much ``put`` reads before it refuses: the local store's document cap (the
    configured ``KEEPSTONE_MEMORY_MAX_DOC``, else 2 MiB), or with ``--server`` its
    request-body cap."""
    limits = service.store.limits
    if limits is not None:
        return DocumentCap(limits.max_document, f"the limit is {limits.max_document} bytes")
    # The server's document cap is its own and unknown here. Whatever it is, a server refuses
    # a request body over max_json_bytes (set in code, not by the environment, so the same
    # on every server) before reading it: no more is worth reading. Below that bound the
    # server decides, and its own refusal is the one shown.
    body = cli_config(args).max_json_bytes
    return DocumentCap(body, f"a Keepstone server takes at most {body} bytes in one request")


def _put(args: argparse.Namespace) -> int:
    with _open(args) as (service, ref, who):
        raw = _put_content(args, _put_cap(service, args))
        try:
            content = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidDocument(
                f"the content is not valid UTF-8 (byte {exc.start}); save it as UTF-8 Markdown"
            ) from None
        result = service.write(who, ref, args.path, content, if_match=args.if_match)
        verb = "created" if result.created else "replaced"
        print(f"{verb} {result.path} ({human_bytes(result.size_bytes)}, etag {result.etag})")
        return 0


def _edit(args: argparse.Namespace) -> int:
    change = _edit_flags(args)
    with _open(args) as (service, ref, who):
        result = service.edit(who, ref, args.path, change, if_match=args.if_match)
        print(f"edited {result.path} ({human_bytes(result.size_bytes)}, etag {result.etag})")
        return 0


def _edit_flags(args: argparse.Namespace) -> Edit:
    """The one edit the flags name: ``--old``/``--new`` or ``--insert-line``/``--text``."""
    replace = args.old is not None or args.new is not None
    insert = args.insert_line is not None or args.text is not None
    if replace == insert:
        raise UsageError(
            "give --old OLD --new NEW (replace the one exact occurrence of OLD) or "
            "--insert-line N --text T (insert T after line N), not "
            + ("both" if replace else "neither")
        )
    if replace:
        if args.old is None or args.new is None:
            raise UsageError("--old and --new go together (--new '' cuts the text)")
        return Replace(args.old, args.new)
    if args.insert_line is None or args.text is None:
        raise UsageError("--insert-line and --text go together (--insert-line 0: at the top)")
    return Insert(args.insert_line, args.text)


def _mv(args: argparse.Namespace) -> int:
    with _open(args) as (service, ref, who):
        result = service.move(
            who, ref, args.path, args.to, overwrite=args.overwrite, if_match=args.if_match
        )
        replaced = "" if result.created else ", replacing the document that was there"
        print(f"moved {args.path} to {result.path}{replaced} (etag {result.etag})")
        return 0


def _rm(args: argparse.Namespace) -> int:
    with _open(args) as (service, ref, who):
        service.delete(who, ref, args.path, if_match=args.if_match)
        print(f"removed {args.path}")
        return 0


def _export(args: argparse.Namespace) -> int:
    at = as_of_arg(args)
    with _open(args) as (service, ref, _):
        if not args.out and is_tty(sys.stdout):
            raise UsageError("refusing to write a binary archive to a terminal; use --out FILE")
        total = None
        if is_tty(sys.stderr):
            total = len(service.list(ref) if at is None else service.list_as_of(ref, at))
        with progress("exporting", total) as advance:
            if args.out:
                count = service.export_to(ref, args.out, progress=advance, as_of=at)
            elif at is not None:
                count = service.export_as_of(ref, at, sys.stdout.buffer, progress=advance)
                sys.stdout.buffer.flush()
            else:
                count = service.export(ref, sys.stdout.buffer, progress=advance)
                sys.stdout.buffer.flush()
        where = args.out or "stdout"
        when = "" if at is None else f" as of {at.isoformat()}"
        # The space as the flags name it (over a server the client knows no team id).
        print(
            f"exported {count} document(s) of {_where(args, ref)}{when} to {where}", file=sys.stderr
        )
        return 0


def _import(args: argparse.Namespace) -> int:
    with _open(args) as (service, ref, who):
        if not args.infile and is_tty(sys.stdin):
            raise UsageError("no archive: use --in FILE or pipe a .tar.gz into stdin")
        strategy = ImportStrategy(args.strategy)
        with contextlib.ExitStack() as stack:
            source: BinaryIO
            if args.infile:
                try:
                    source = stack.enter_context(open(args.infile, "rb"))
                except OSError as exc:
                    raise UsageError(f"--in {args.infile!r}: {exc.strerror or exc}") from None
            else:
                source = sys.stdin.buffer
            ticker = stack.enter_context(progress("importing"))
            # At the local console this is the one act with platform authority (a global
            # import, SPEC §5); through --server the server decides. Both give the bar its
            # total before the upload or the first write (through --server, counted here
            # from a file; the members then all count when the server's report comes).
            report = service.import_archive(
                who, ref, source, strategy, progress=ticker, total=ticker.set_total
            )
        _print_report(report, as_json=args.json, quiet=args.quiet)
        return 0


def _search(args: argparse.Namespace) -> int:
    if args.scope == READABLE:
        return _search_all(args)
    filters = search_filters_of(args)
    with _open(args) as (service, ref, who):
        hits = service.search(
            who, ref, args.query, limit=args.limit, path_prefix=args.path_prefix, filters=filters
        )
        if args.json:
            print(json.dumps(search_answer([hit.as_json() for hit in hits], filters, hits.pending)))
            return 0
        where = f" in {_where(args, ref)}{_SEE_SPACES}"
        _print_hits([(hit, None) for hit in hits], where, filters)
        _say_pending(hits.pending)
        return 0


def _search_all(args: argparse.Namespace) -> int:
    """``--scope readable`` (``--all``): every space the caller may read; the space flags
    are not used, but locally ``--user`` (default the login name) says whose user spaces."""
    filters = search_filters_of(args)
    with open_spaces(args) as (service, who):
        if who.kind is CredentialKind.CONSOLE:
            who = console_principal(args.user or login_user())
        found = service.search_readable(
            who, args.query, limit=args.limit, path_prefix=args.path_prefix, filters=filters
        )
        if args.json:
            results = [hit.as_json() for hit in found]
            print(json.dumps(search_answer(results, filters, found.pending)))
            return 0
        pairs: list[tuple[DocumentHit, SpaceLabel | None]] = [
            (found_hit.hit, found_hit.space) for found_hit in found
        ]
        _print_hits(pairs, " in any space you may read", filters)
        _say_pending(found.pending)
        return 0


def _say_pending(pending: int) -> None:
    """On stderr, when some chunks were searched by keyword only."""
    if pending:
        print(
            f"{pending} chunk(s) not yet embedded were searched by keyword only "
            "(`keepstone reindex` embeds them)",
            file=sys.stderr,
        )


def _print_hits(
    hits: list[tuple[DocumentHit, SpaceLabel | None]], where: str, filters: SearchFilters
) -> None:
    for i, (hit, space) in enumerate(hits):
        if i:
            print()
        print(hit.path)
        if space is not None:
            quals = [f"{k} {v}" for k, v in (("project", space.project), ("bot", space.bot)) if v]
            print(
                f"  in {space.visibility} space {space.name!r}" + "".join(f", {q}" for q in quals)
            )
        if hit.heading:
            print(f"  {hit.heading}")
        matched = f"  ({', '.join(hit.matched)})" if hit.matched else ""
        print(f"  score {hit.score:.3f}{matched}")
        for space_id, path in hit.also_in:
            print(f"  also in {path}" + ("" if space_id == hit.space_id else f" ({space_id})"))
        print(f"    {hit.snippet}")
    if not hits:
        print(f"no matches{where}: {empty_hint(filtered=filters.narrows)}", file=sys.stderr)


def _reindex(args: argparse.Namespace) -> int:
    with open_spaces(args) as (service, who):
        with progress("indexing") as advance:
            changed = service.reindex(who, rebuild=args.rebuild, progress=advance)
        print(f"reindexed {changed} document(s)")
        # The chunks to embed are the local store's own (keepstone reindex does the server's).
        reindex.embed_and_report(cli_config(args), service.store, changed)
    return 0


def _print_report(report: ImportReport, *, as_json: bool, quiet: bool = False) -> None:
    if as_json:
        print(json.dumps(report.as_json()))
        return
    print(
        f"written {len(report.written)}, skipped {len(report.skipped)}, "
        f"renamed {len(report.renamed)}, rejected {len(report.rejected)}"
    )
    if not quiet:
        for path in report.written:
            print(f"  written   {path}")
        for path in report.skipped:
            print(f"  skipped   {path} (exists)")
        for old, new in report.renamed.items():
            print(f"  renamed   {old} -> {new}")
    for rejected in report.rejected:
        print(f"  rejected  {rejected.path}: {rejected.reason}")


# --- The verbs, as data -----------------------------------------------------------------------


def _json_flag(what: str) -> AddArgs:
    return arg("--json", action="store_true", help=f"print the {what} as JSON")


#: The scope of a search over every space the caller may read (REST's ``scope=readable``).
READABLE = "readable"

_PATH = arg("path", metavar="PATH")
_IF_MATCH = arg("--if-match", metavar="ETAG", help="only if the document's etag is ETAG")

#: ``keepstone memory``'s verbs on one space, in the order ``--help`` lists them: name, help,
#: handler, and the verb's own arguments (after the space and server flags of every one).
_SPACE_VERBS: tuple[tuple[str, str, Handler, tuple[AddArgs, ...]], ...] = (
    ("du", cli_help("du"), _du, (_json_flag("usage"),)),
    (
        "ls",
        cli_help("ls"),
        _ls,
        (
            arg("dir", nargs="?", default="", metavar="DIR", help="a directory prefix"),
            _json_flag("listing"),
            add_as_of_arg,
        ),
    ),
    ("cat", cli_help("cat"), _cat, (_PATH, add_as_of_arg)),
    (
        "put",
        cli_help("put"),
        _put,
        (
            _PATH,
            arg("--file", metavar="F", help="read the content from F (default: stdin)"),
            arg(
                "--empty",
                action="store_true",
                help="write an empty document on purpose (empty content is refused otherwise)",
            ),
            _IF_MATCH,
        ),
    ),
    (
        "edit",
        cli_help("edit"),
        _edit,
        (
            _PATH,
            arg("--old", metavar="OLD", help="replace form: the exact text to replace (once)"),
            arg("--new", metavar="NEW", help="replace form: the text to put in its place"),
            arg(
                "--insert-line",
                dest="insert_line",
                type=whole,
                metavar="N",
                help="insert form: insert after line N (0 = at the top)",
            ),
            arg("--text", metavar="T", help="insert form: the line(s) to insert"),
            _IF_MATCH,
        ),
    ),
    (
        "mv",
        cli_help("mv"),
        _mv,
        (
            _PATH,
            arg("to", metavar="TO", help="the document's new path"),
            arg("--overwrite", action="store_true", help="replace a document already at TO"),
            _IF_MATCH,
        ),
    ),
    ("rm", cli_help("rm"), _rm, (_PATH, _IF_MATCH)),
    (
        "export",
        cli_help("export"),
        _export,
        (arg("--out", metavar="F", help="the archive to write (default: stdout)"), add_as_of_arg),
    ),
    (
        "import",
        cli_help("import"),
        _import,
        (
            arg("--in", dest="infile", metavar="F", help="the archive (default: stdin)"),
            arg(
                "--strategy",
                default=ImportStrategy.SKIP.value,
                choices=[s.value for s in ImportStrategy],
                help="what to do with a document that exists: skip (default), overwrite, rename",
            ),
            _json_flag("report"),
            arg(
                "-q",
                "--quiet",
                action="store_true",
                help="print only the summary line, and the rejected members (they need action)",
            ),
        ),
    ),
    (
        "search",
        cli_help("search"),
        _search,
        (
            arg("query", metavar="QUERY", help="what to look for"),
            arg(
                "--limit",
                type=whole,
                default=10,
                metavar="N",
                help="at most N hits, 1-50 (default 10)",
            ),
            arg(
                "--path-prefix",
                default="",
                metavar="P",
                help="only documents whose path starts with P",
            ),
            *search_filter_args(tags=True),
            _json_flag("hits"),
            arg(
                "--scope",
                choices=[READABLE],
                default=None,
                help="readable: search every space you may read (your team's, your own user "
                "spaces, global) instead of the one the space flags name; locally, --user "
                "names whose user spaces",
            ),
            arg(
                "--all",
                dest="scope",
                action="store_const",
                const=READABLE,
                help="the same as --scope readable",
            ),
        ),
    ),
)

_REINDEX_ARGS: tuple[AddArgs, ...] = (
    add_server_args,
    arg("--rebuild", action="store_true", help="start from an empty index (re-embeds too)"),
)
