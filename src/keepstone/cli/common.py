"""Shared command-line plumbing: space flags, store selection, progress, output.

Every command that addresses a space takes the same flags under the same rules (SPEC §8),
so ``keepstone memory``, ``keepstone mcp`` and ``keepstone run`` agree: :func:`add_space_args` and
:func:`space_ref_from_args` name the space; :func:`add_server_args` and :func:`spaces_for`
pick the store (``--server`` / ``--token``, else the filesystem store under
``$KEEPSTONE_HOME/spaces``). The commands on the server's database (``serve``, ``admin``,
``db``, ``records``) take :func:`add_database_arg`. A :class:`UsageError` is one line on
stderr and exit status 2 (:func:`cli_command`); any other
:class:`~keepstone.errors.KeepstoneError` is left to ``keepstone.cli.main`` (one line, exit 1).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import json
import os
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from keepstone import runtime
from keepstone.config import Config
from keepstone.errors import InvalidRequest, InvalidSpaceRef
from keepstone.principal import Principal
from keepstone.quota import KiB, Limits
from keepstone.service.access import console_principal, remote_principal
from keepstone.service.spaces import SpaceService
from keepstone.spaces import (
    ALLOWED_VISIBILITIES,
    SpaceRef,
    Visibility,
    login_name,
    project_key,
)
from keepstone.text import is_whole_number

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from keepstone.runtime import MemoryStore

DEFAULT_SPACE_NAME = "default"

Handler = Callable[[argparse.Namespace], int]


class UsageError(InvalidRequest):
    """A command line that cannot be run as given: exit status 2 (see :func:`cli_command`)."""


#: Where the parser that met an unrecognized argument leaves its option strings, so the
#: top-level parser (which reports them) suggests from the right command's flags.
_OPTIONS_SEEN = "_keepstone_option_strings"


class KeepstoneArgumentParser(argparse.ArgumentParser):
    """argparse's parser, with a suggestion for a mistyped flag or verb.

    ``keepstone memory ls --projct web`` says ``unrecognized arguments: --projct (did you mean
    --project?)``; an invalid choice (a verb, ``--visibility``) names the closest one.
    ``keepstone.cli.main`` builds every parser with this class (subparsers inherit it)."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and not hasattr(parsed, _OPTIONS_SEEN):
            # The innermost parser returns first; its namespace is copied into its parent's.
            setattr(parsed, _OPTIONS_SEEN, list(self._option_string_actions))
        return parsed, extras

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        options: list[str] = getattr(parsed, _OPTIONS_SEEN, list(self._option_string_actions))
        if hasattr(parsed, _OPTIONS_SEEN):
            delattr(parsed, _OPTIONS_SEEN)
        if extras:
            message = f"unrecognized arguments: {' '.join(extras)}"
            for extra in extras:
                if extra.startswith("-"):
                    guess = _closest(extra.split("=", 1)[0], options)
                    if guess:
                        message += f" (did you mean {guess}?)"
                        break
            self.error(message)
        return parsed

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            guess = _closest(str(value), [str(c) for c in action.choices or ()])
            if guess is None:
                raise
            raise argparse.ArgumentError(action, f"{exc.message} (did you mean {guess}?)") from None


def _closest(word: str, candidates: list[str]) -> str | None:
    found = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return found[0] if found else None


def cli_config(args: argparse.Namespace | None = None) -> Config:
    """The environment's configuration, with the command's ``--database`` when it has one."""
    return Config.from_env(database_url=getattr(args, "database", None))


def keepstone_home() -> Path:
    """``$KEEPSTONE_HOME``, default ``~/.keepstone`` (not created here)."""
    return cli_config().home


def local_store(limits: Limits | None = None) -> MemoryStore:
    """The filesystem store under ``$KEEPSTONE_HOME/spaces``.

    ``limits`` None takes the configured ``KEEPSTONE_MEMORY_*`` overrides; a home that is
    a file (or lies under one) is refused first (:func:`keepstone.runtime.check_home`).
    """
    return runtime.open_local_store(cli_config(), limits)


def required_verbs(
    parser: argparse.ArgumentParser, dest: str, metavar: str = "VERB"
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """The sub-commands of ``parser``, one of which must be given (its name in
    ``args.<dest>``)."""
    verbs = parser.add_subparsers(dest=dest, metavar=metavar)
    verbs.required = True
    return verbs


def add_database_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--database URL``, read by :func:`cli_config`."""
    parser.add_argument(
        "--database",
        metavar="URL",
        default=None,
        help="sqlite:///path or postgresql://... (default $KEEPSTONE_DATABASE_URL, else "
        "sqlite:///$KEEPSTONE_HOME/keepstone.db)",
    )


def runtime_for(args: argparse.Namespace) -> contextlib.closing[runtime.Runtime]:
    """The runtime on the database of :func:`cli_config` (migrated first), closed on exit."""
    return contextlib.closing(runtime.open_runtime(cli_config(args)))


@contextlib.contextmanager
def open_engine(args: argparse.Namespace, *, upgrade: bool = True) -> Iterator[Engine]:
    """An engine on the database of :func:`cli_config`, disposed on exit.

    With ``upgrade`` (the default) every pending schema migration is applied first, so
    a command can run on a new database.
    """
    engine = runtime.open_engine(cli_config(args), migrate=upgrade)
    try:
        yield engine
    finally:
        engine.dispose()


#: Something that adds arguments to a parser (or to a group of one): :func:`arg`,
#: :func:`one_of`, or a helper such as :func:`add_server_args`.
AddArgs = Callable[[Any], object]


def arg(*flags: str, **options: Any) -> AddArgs:
    """One ``add_argument`` call, kept as data: a command's flags then read as a table."""
    return lambda parser: parser.add_argument(*flags, **options)


def one_of(*args: AddArgs) -> AddArgs:
    """``args`` as a group of which exactly one must be given."""

    def add(parser: Any) -> None:
        group = parser.add_mutually_exclusive_group(required=True)
        for add_arg in args:
            add_arg(group)

    return add


def add_args(parser: argparse.ArgumentParser, args: Iterable[AddArgs]) -> argparse.ArgumentParser:
    """``parser`` with each of ``args`` added, in order."""
    for add_arg in args:
        add_arg(parser)
    return parser


def print_json(obj: dict[str, Any]) -> int:
    """Print ``obj`` as one JSON line on stdout; exit status 0."""
    print(json.dumps(obj))
    return 0


def add_space_args(parser: argparse.ArgumentParser, default_visibility: str = "bot") -> None:
    """Add the flags that address a space (SPEC §8)."""
    group = parser.add_argument_group("space")
    # None = not given, so a refusal can say when the default is what needs --bot.
    group.add_argument(
        "--visibility",
        default=None,
        choices=list(ALLOWED_VISIBILITIES),
        help=f"the space's visibility (default {default_visibility})",
    )
    parser.set_defaults(default_visibility=default_visibility)
    group.add_argument(
        "--name", default=DEFAULT_SPACE_NAME, help="the space's name (default 'default')"
    )
    group.add_argument(
        "--project",
        default=None,
        metavar="NAME|DIR",
        help="the project of bot/project spaces: a NAME used as given (as the API's "
        "project=NAME), or a directory spelled as one (./web, ~/src/web, /srv/web: "
        "basename + hash of its path); default: the current directory",
    )
    group.add_argument("--bot", default=None, help="the bot id (required for --visibility bot)")
    group.add_argument(
        "--user", default=None, help="the user for --visibility user (default: your login name)"
    )


def add_server_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--server`` / ``--token`` (defaults ``KEEPSTONE_SERVER`` / ``KEEPSTONE_TOKEN``).

    ``--token`` defaults to None, so :func:`resolve_server_args` can tell a token typed
    on the command line (an error without a server) from one kept in the environment."""
    config = cli_config()
    group = parser.add_argument_group("server")
    group.add_argument(
        "--server",
        default=config.server,
        metavar="URL",
        help="talk to a Keepstone server instead of the local store (env KEEPSTONE_SERVER)",
    )
    group.add_argument(
        "--token",
        default=None,
        help="the API key for --server (env KEEPSTONE_TOKEN); an error without a server",
    )


def resolve_server_args(args: argparse.Namespace) -> None:
    """Check ``--token`` against ``--server`` and fill the token from ``KEEPSTONE_TOKEN``.

    A token typed without a server (flag or ``KEEPSTONE_SERVER``) is a :class:`UsageError`:
    the user meant a server and would otherwise silently get the local store. A token
    only in the environment is kept quietly (a user may keep it set)."""
    if not hasattr(args, "token"):
        return
    if args.token is not None and not getattr(args, "server", None):
        raise UsageError(
            "--token is for a server: add --server URL (or set KEEPSTONE_SERVER), "
            "or drop --token to use the local store"
        )
    if args.token is None:
        args.token = cli_config().token


def space_ref_from_args(args: argparse.Namespace, tenant: str) -> SpaceRef:
    """The validated space named by the flags of :func:`add_space_args`.

    ``--project`` is a name or a directory (:func:`keepstone.spaces.project_key`). Raises
    :class:`UsageError` for a missing ``--bot`` or a flag value that is not a valid
    segment (the message names the flag and the rule).
    """
    given: str | None = getattr(args, "visibility", None)
    default: str = getattr(args, "default_visibility", None) or Visibility.BOT.value
    visibility = Visibility(given or default)
    project: str | None = None
    if visibility in (Visibility.BOT, Visibility.PROJECT):
        try:
            project = project_key(args.project)
        except InvalidSpaceRef as exc:
            raise UsageError(f"--project: {exc.message}") from None
    if visibility is Visibility.BOT and not args.bot:
        if given is None:
            raise UsageError(
                "the space defaults to --visibility bot, which needs --bot ID: pass --bot ID "
                "(the bot whose memory this is), or choose another --visibility "
                "(project, user, org, ...)"
            )
        raise UsageError(
            "--visibility bot needs --bot ID (the bot whose memory this is), "
            "or choose another --visibility (project, user, org, ...)"
        )
    user: str | None = None
    if visibility is Visibility.USER:
        user = args.user or login_user()
    try:
        return SpaceRef.build(
            visibility, args.name, tenant=tenant, project=project, bot=args.bot, user=user
        )
    except InvalidSpaceRef as exc:
        field = exc.details.get("field")
        flag = f"--{field}: " if field in ("name", "bot", "user", "project") else ""
        raise UsageError(f"{flag}{exc.message}") from exc


def whole(raw: str) -> int:
    """An argparse type: a whole number in ASCII digits (a leading ``-`` allowed, for the
    range check that follows to name), as every face reads a number; ``int()`` would also
    take ``1_0``, other scripts' digits, ``+5`` and `` 5``."""
    if not is_whole_number(raw, negative=True):
        raise argparse.ArgumentTypeError(f"{raw!r} is not a whole number written in digits 0-9")
    return int(raw)


def check_port(port: int) -> None:
    """Refuse a TCP port outside 1-65535 as a usage error (the system would take it modulo
    65536, or pick one itself for 0, and serve somewhere else than it says)."""
    if not 1 <= port <= 65535:
        raise UsageError("--port must be 1-65535")


def login_user() -> str:
    """The login name, the default ``--user``; a usage error when the system cannot tell."""
    name = login_name()
    if name is None:
        raise UsageError("cannot tell your login name; pass --user NAME")
    return name


def spaces_for(args: argparse.Namespace) -> tuple[SpaceService, Principal]:
    """The space service over the store the flags of :func:`add_server_args` name, and who
    is acting: the local store as the console (team ``local``), or with ``--server`` the
    HTTP client store as a client of the server, which stamps the team from the credential.
    The store stays open."""
    server: str | None = getattr(args, "server", None)
    if not server:
        config, store = cli_config(), local_store()
        search = functools.partial(
            runtime.document_search,
            config,
            store,
            embed_budget=runtime.EMBED_BUDGET_SECONDS,
            notice=_say_on_stderr,
        )
        service = SpaceService(store, search, export_gzip_level=config.export_gzip_level)
        return service, console_principal("local")
    return SpaceService(runtime.open_remote_store(server, args.token)), remote_principal()


def _say_on_stderr(line: str) -> None:
    """A local search's one progress line: on stderr, so ``--json`` stays clean."""
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def open_spaces(args: argparse.Namespace) -> Iterator[tuple[SpaceService, Principal]]:
    """:func:`spaces_for`, the store closed on exit."""
    service, who = spaces_for(args)
    try:
        yield service, who
    finally:
        service.store.close()


def cli_command(func: Handler) -> Handler:
    """Map :class:`UsageError` to one line on stderr and exit status 2; check the server
    flags first (:func:`resolve_server_args`), so every command applies the same rule."""

    @functools.wraps(func)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            resolve_server_args(args)
            return func(args)
        except UsageError as exc:
            print(f"keepstone: usage: {exc.message}", file=sys.stderr)
            return 2

    return wrapper


def is_tty(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (False for a closed or replaced stream)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


#: How much of an input is read at a time while it is measured against a cap.
READ_CHUNK = 64 * KiB


def read_at_most(stream: BinaryIO, limit: int) -> bytes:
    """Up to ``limit`` bytes of ``stream``, a chunk at a time: a caller that asks for one byte
    past its cap learns the input is too large without holding more of it."""
    chunks: list[bytes] = []
    while limit > 0 and (chunk := stream.read(min(limit, READ_CHUNK))):
        chunks.append(chunk)
        limit -= len(chunk)
    return b"".join(chunks)


def size_left(stream: BinaryIO) -> int | None:
    """The bytes left in ``stream`` when it is a regular file (known without reading them);
    None for a pipe, a terminal, a device such as ``/dev/zero``, or an in-memory stream."""
    try:
        info = os.fstat(stream.fileno())
        return info.st_size - stream.tell() if stat.S_ISREG(info.st_mode) else None
    except (OSError, ValueError):
        return None


class Ticker:
    """What :func:`progress` yields: ``ticker(n)`` advances by ``n`` documents and
    ``ticker.set_total(n)`` gives the total once it is known (an import counts its archive
    before writing), so the bar shows ``N/total`` rather than ``N/?``."""

    def __init__(
        self,
        total: int | None,
        on_advance: Callable[[int], None] | None = None,
        on_total: Callable[[int], None] | None = None,
    ) -> None:
        self.total = total
        self.done = 0
        self._on_advance = on_advance
        self._on_total = on_total

    def __call__(self, n: int) -> None:
        self.done += n
        if self._on_advance is not None:
            self._on_advance(n)

    def set_total(self, n: int) -> None:
        self.total = n
        if self._on_total is not None:
            self._on_total(n)


#: Seconds between the plain progress lines written when stderr is not a terminal.
PLAIN_EVERY_SECONDS = 5.0


@contextlib.contextmanager
def progress(
    description: str,
    total: int | None = None,
    *,
    enabled: bool | None = None,
    plain: bool = False,
) -> Iterator[Ticker]:
    """Yield a :class:`Ticker`; show a rich progress bar on stderr when it is a terminal
    (done/total, rate, time left once the total is known).

    ``enabled`` forces the bar on or off (default: whether stderr is a TTY). ``plain``:
    without a bar, a line on stderr every :data:`PLAIN_EVERY_SECONDS` instead (a log, a
    pipe), and one at the end after those.
    """
    show = is_tty(sys.stderr) if enabled is None else enabled
    if not show:
        if not plain:
            yield Ticker(total)
            return
        lines = PlainProgress(description)
        ticker = Ticker(total, on_advance=lambda _: lines.tick(ticker))
        yield ticker
        lines.finish(ticker)
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn()]
    columns += [MofNCompleteColumn(), _rate_column(), TimeElapsedColumn()]
    columns += [TextColumn("left"), TimeRemainingColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield Ticker(
            total,
            on_advance=lambda n: bar.advance(task, n),
            on_total=lambda n: bar.update(task, total=n),
        )


def _rate_column() -> Any:
    """A rich column: the task's items per second ('' until rich has measured it)."""
    from rich.progress import ProgressColumn, Task
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            return Text("" if speed is None else f"{speed:,.1f}/s")

    return Rate()


class PlainProgress:
    """Progress as a line on stderr every :data:`PLAIN_EVERY_SECONDS` (not a terminal):
    done of total, rate, time left."""

    def __init__(self, description: str, every: float | None = None) -> None:
        self.description = description
        self.every = PLAIN_EVERY_SECONDS if every is None else every
        self.started = time.monotonic()
        self.last = self.started

    def tick(self, ticker: Ticker) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self.say(ticker, now)

    def finish(self, ticker: Ticker) -> None:
        """The last line, when earlier ones were said (a short run says nothing)."""
        if self.last > self.started:
            self.say(ticker, time.monotonic())

    def say(self, ticker: Ticker, now: float) -> None:
        spent = max(now - self.started, 1e-9)
        rate = ticker.done / spent
        of = f"/{ticker.total:,}" if ticker.total else ""
        line = f"{self.description}: {ticker.done:,}{of} ({rate:,.1f}/s, {_clock(spent)} spent"
        if ticker.total and rate > 0 and ticker.done < ticker.total:
            line += f", about {_clock((ticker.total - ticker.done) / rate)} left"
        print(line + ")", file=sys.stderr, flush=True)


def _clock(seconds: float) -> str:
    """``75`` → ``1m15s``."""
    whole = int(seconds)
    return f"{whole // 60}m{whole % 60:02d}s" if whole >= 60 else f"{seconds:.0f}s"


def human_bytes(n: int) -> str:
    """``1536`` → ``1.5 KiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns
