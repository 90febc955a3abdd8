"""``keepstone mcp``, ``keepstone run``, ``keepstone validate``, ``keepstone auto-memory prompt``
(SPEC §9)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from keepstone.agentconfig import ALL_BACKENDS, AgentConfig, MemoryBlock, Severity, load_config
from keepstone.automemory.prompt import render_prompt
from keepstone.automemory.runner import RunOptions, run_command, run_with_auto_memory
from keepstone.automemory.space import auto_memory_ref, decide_auto_memory, resolve_bot_id
from keepstone.cli.common import (
    UsageError,
    add_server_args,
    add_space_args,
    check_port,
    cli_command,
    cli_config,
    open_spaces,
    required_verbs,
    space_ref_from_args,
    spaces_for,
    whole,
)
from keepstone.cli.history import add_as_of_arg, as_of_arg
from keepstone.errors import InvalidRequest, InvalidSpaceRef, KeepstoneError
from keepstone.spaces import (
    AUTO_MEMORY_SPACE,
    SpaceRef,
    Visibility,
    current_directory,
    is_directory_spelling,
    project_key,
)
from keepstone.tools.dispatch import MemoryTools, RecordsSearcher, ref_for_block
from keepstone.tools.schemas import MUTATING_TOOLS, TOOL_NAMES

DEFAULT_MCP_PORT = 8421


def _warn(message: str) -> None:
    print(f"keepstone: warning: {message}", file=sys.stderr, flush=True)


# --- keepstone validate -----------------------------------------------------------------------


def _validate(args: argparse.Namespace) -> int:
    errors = 0
    for file in args.files:
        try:
            config = load_config(file)
        except KeepstoneError as exc:
            print(f"{file}:1: C100 error: {exc.message}")
            errors += 1
            continue
        for d in config.diagnostics:
            print(d.render())
            if d.severity is Severity.ERROR:
                errors += 1
    return 1 if errors else 0


# --- keepstone mcp ----------------------------------------------------------------------------


def _load_valid_config(path: str) -> AgentConfig:
    config = load_config(path)
    for d in config.diagnostics:
        if d.severity is Severity.WARNING:
            _warn(d.render())
    config.raise_on_errors()
    return config


def _searcher(args: argparse.Namespace) -> RecordsSearcher | None:
    if not args.server:
        return None
    from keepstone.tools.records import HttpRecordsSearcher

    return HttpRecordsSearcher(args.server, args.token, team=args.team)


def build_tools(args: argparse.Namespace) -> MemoryTools:
    """The tools ``keepstone mcp`` serves, from ``--config`` or the space flags."""
    as_of = as_of_arg(args)  # a bad --as-of is refused before the store is opened
    service, who = spaces_for(args)  # open for the life of the process
    tenant = who.team_id
    searcher = _searcher(args)
    if args.config:
        config = _load_valid_config(args.config)
        block = config.memory or MemoryBlock()
        if not block.enabled:
            raise InvalidRequest(
                f"{args.config}: the memory block has enabled: false; nothing to serve"
            )
        # Explicit flags refine the block (so one config can serve several bots).
        overrides: dict[str, Any] = {}
        for flag in ("bot", "user", "name"):
            if getattr(args, flag) is not None:
                overrides[flag] = getattr(args, flag)
        if args.project is not None:
            overrides["project"] = project_override(args.project)
        if args.visibility is not None:
            overrides["visibility"] = _agent_visibility(args.visibility)
        block = replace(block, **overrides)
        ref = ref_for_block(block, tenant=tenant, bot_fallback=config.directory_name)
        return MemoryTools.from_block(
            block, service, ref, read_only=args.read_only, searcher=searcher, who=who, as_of=as_of
        )
    if args.visibility is not None:  # None: the default (bot), named as such in a refusal
        args.visibility = _agent_visibility(args.visibility).value
    args.name = args.name or "default"
    ref = space_ref_from_args(args, tenant)
    return MemoryTools(
        service, ref, write=not args.read_only, searcher=searcher, who=who, as_of=as_of
    )


def project_override(value: str) -> str:
    """``--project`` as a memory block's ``project``: a directory spelling made absolute
    (the block's key is its real path, whatever directory the server runs in), a name
    passed through unchanged. A missing directory is a :class:`UsageError` here, before
    the block is resolved."""
    _project_key_or_usage(value)
    return os.path.abspath(os.path.expanduser(value)) if is_directory_spelling(value) else value


def _project_key_or_usage(value: str) -> str:
    try:
        return project_key(value)
    except InvalidSpaceRef as exc:
        raise UsageError(f"--project: {exc.message}") from None


def _agent_visibility(raw: str) -> Visibility:
    vis = Visibility(raw)
    if vis is Visibility.PRIVATE:
        raise UsageError(
            "--visibility private has no durable home for an agent (C170); "
            "use bot, project, cross_project, user, org or global"
        )
    return vis


def _mcp(args: argparse.Namespace) -> int:
    from keepstone.mcp.server import serve_http, serve_stdio

    check_port(args.port)  # before a store is opened or anything is served
    tools = build_tools(args)
    if tools.as_of is not None:
        # A store that keeps no history is one line now, not an error on every call later.
        tools.service.list_as_of(tools.ref, tools.as_of)
    if args.http:
        print(
            f"keepstone: serving MCP (streamable HTTP) at http://{args.host}:{args.port}/mcp "
            f"with tools: {', '.join(tools.names)}",
            file=sys.stderr,
            flush=True,
        )
        serve_http(tools, args.host, args.port)
    else:
        serve_stdio(tools)
    return 0


# --- keepstone run ----------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("give the command to run after '--', e.g. keepstone run --bot b -- claude")
    if not command[0].strip():
        raise UsageError(f"the command after '--' is blank ({command[0]!r}); give a program")
    config = _load_valid_config(args.config) if args.config else None
    backend = args.backend or (config.backend if config else None)
    env = cli_config()
    switch = {} if env.auto_memory is None else {"KEEPSTONE_AUTO_MEMORY": env.auto_memory}
    as_of = as_of_arg(args)
    # --as-of asks for the auto-memory directory: it turns auto-memory on, unless the same
    # command line turns it off.
    if as_of is not None and args.auto_memory == "off":
        raise UsageError(
            "--as-of hydrates the auto-memory directory, which --auto-memory off turns off: "
            "drop one of the two"
        )
    on = as_of is not None or decide_auto_memory(args.auto_memory, config, switch)
    if not on:
        return run_command(RunOptions(command, backend), _warn)
    bot = _bot_id(args, config)
    with open_spaces(args) as (service, who):
        ref = run_ref(args, bot, who.team_id)
        if as_of is not None:
            print(
                f"keepstone: auto-memory as of {as_of.isoformat()}; the notes the run changes "
                "are saved to the live space",
                file=sys.stderr,
                flush=True,
            )
        return run_with_auto_memory(
            service, ref, RunOptions(command, backend), _warn, who=who, as_of=as_of
        )


def run_ref(args: argparse.Namespace, bot: str, tenant: str) -> SpaceRef:
    """The auto-memory space of ``keepstone run``: keyed on the repository root of the current
    directory, or of ``--project DIR``; ``--project NAME`` names the project as given
    (the same space the API's ``project=NAME`` reaches)."""
    try:
        if args.project is None or is_directory_spelling(args.project):
            if args.project is None:
                where = current_directory()
            else:
                _project_key_or_usage(args.project)  # an existing directory, or exit 2
                where = os.path.expanduser(args.project)
            return auto_memory_ref(bot, where, tenant=tenant)
        return SpaceRef.build(
            Visibility.BOT,
            AUTO_MEMORY_SPACE,
            tenant=tenant,
            project=_project_key_or_usage(args.project),
            bot=bot,
        )
    except InvalidSpaceRef as exc:
        if args.bot:  # else the id came from the config file: its content, exit 1
            raise UsageError(f"--bot {args.bot!r}: {exc.message}") from None
        raise


def _bot_id(args: argparse.Namespace, config: AgentConfig | None) -> str:
    try:
        return resolve_bot_id(args.bot, config)
    except InvalidRequest as exc:  # no --bot, no scope.bot, no config directory
        raise UsageError(exc.message) from None


# --- keepstone auto-memory prompt ---------------------------------------------------------------


def _prompt(args: argparse.Namespace) -> int:
    directory = args.dir or cli_config().auto_memory_dir
    if not directory:
        raise UsageError(
            "give --dir DIR (or run under keepstone run, which sets KEEPSTONE_AUTO_MEMORY_DIR)"
        )
    if not os.path.isdir(directory):
        raise UsageError(f"--dir {directory!r} is not a directory")
    sys.stdout.write(render_prompt(directory))
    return 0


# --- Registration ---------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add ``mcp``, ``run``, ``validate`` and ``auto-memory`` to the ``keepstone`` parser."""
    for register_command in (_register_mcp, _register_run, _register_validate, _register_prompt):
        register_command(subparsers)


def _register_mcp(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "mcp",
        help="serve the memory tools over MCP (stdio, or streamable HTTP with --http)",
        description=f"Serve {_listed(TOOL_NAMES)} over MCP, for one space named by --config "
        "FILE or the space flags (memory_search also searches the team's records with "
        "--server).",
    )
    p.add_argument("--config", metavar="FILE", help="an agent configuration with a memory block")
    add_space_args(p)
    # None = not given, so that with --config only explicit flags refine the block.
    p.set_defaults(visibility=None, name=None)
    withheld = [name for name in TOOL_NAMES if name in MUTATING_TOOLS]
    p.add_argument("--read-only", action="store_true", help=f"withhold {_listed(withheld)}")
    add_as_of_arg(p)
    add_server_args(p)
    p.add_argument(
        "--team",
        default=cli_config().team,
        help="team id for memory_search's records (env KEEPSTONE_TEAM; default: the "
        "credential's team)",
    )
    p.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="--http address (default 127.0.0.1)")
    p.add_argument(
        "--port", type=whole, default=DEFAULT_MCP_PORT, help=f"--http port ({DEFAULT_MCP_PORT})"
    )
    p.set_defaults(func=cli_command(_mcp))


def _listed(names: Sequence[str]) -> str:
    """``a, b and c``."""
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def _register_run(subparsers: Any) -> None:
    r = subparsers.add_parser(
        "run",
        help="run an agent command with auto-memory",
        description="Run COMMAND with its auto-memory directory materialised from the bot's "
        "'auto-memory' space, and fold the edits back afterwards.",
    )
    r.add_argument("--auto-memory", choices=["on", "off"], default=None)
    r.add_argument("--bot", default=None, help="the bot id (else scope.bot, else config dir)")
    r.add_argument(
        "--project",
        default=None,
        metavar="NAME|DIR",
        help="the project of the auto-memory space: a NAME as given, or a directory spelled "
        "as one (./web: its repository root); default: the current directory's repository",
    )
    r.add_argument("--backend", choices=list(ALL_BACKENDS), default=None)
    r.add_argument("--config", metavar="FILE", help="an agent configuration file")
    add_as_of_arg(r)
    add_server_args(r)
    r.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    r.set_defaults(func=cli_command(_run))


def _register_validate(subparsers: Any) -> None:
    v = subparsers.add_parser(
        "validate",
        help="check agent configuration files",
        description="Print FILE:LINE: CODE message for each finding; exit 1 on any error.",
    )
    v.add_argument("files", nargs="+", metavar="FILE")
    v.set_defaults(func=_validate)


def _register_prompt(subparsers: Any) -> None:
    a = subparsers.add_parser("auto-memory", help="auto-memory helpers")
    asub = required_verbs(a, "auto_memory_command", "COMMAND")
    ap = asub.add_parser(
        "prompt",
        help="print the '# Auto memory' system-prompt section for a memory directory",
    )
    ap.add_argument(
        "--dir", default=None, help="the memory directory (default $KEEPSTONE_AUTO_MEMORY_DIR)"
    )
    ap.set_defaults(func=cli_command(_prompt))
