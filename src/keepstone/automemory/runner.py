"""``keepstone run``: run an agent command with auto-memory, and always fold the notes back.

Exit status: the command's own. A command killed by signal N exits ``128 + N`` (the
shell's convention: 143 for SIGTERM, 130 for SIGINT); a command that cannot be
started exits 127 (not found) or 126 (not executable). Nothing the sync does changes
the status.

Signals: SIGINT, SIGTERM and SIGHUP received while the command runs are forwarded to
it — except a SIGINT typed at a terminal where ``keepstone`` is in the foreground process
group, which the terminal has already delivered to the command (forwarding it again
would count as a second Ctrl-C). Once the command has exited, the same signals are
acknowledged and ignored until the bounded sync has finished.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType

from keepstone.agentconfig import AUTO_MEMORY_BACKENDS, INERT_BACKENDS
from keepstone.automemory.prompt import render_prompt
from keepstone.automemory.sync import (
    Snapshot,
    SyncReport,
    Warn,
    fold_back,
    materialise,
    materialise_as_of,
    sync_deadline,
)
from keepstone.errors import InvalidRequest, KeepstoneError, StoreUnavailable
from keepstone.principal import Principal
from keepstone.service.spaces import SpaceService
from keepstone.spaces import SpaceRef

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(slots=True)
class RunOptions:
    """A command to run and the environment it runs in."""

    command: Sequence[str]
    backend: str | None = None
    cwd: str | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))


def _in_terminal_foreground() -> bool:
    """Whether this process group is the foreground group of a controlling terminal: then
    a Ctrl-C reaches the command straight from the terminal."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


class _Child:
    """The running command, as the signal handler sees it.

    The handler only forwards and records: printing from a signal handler could
    re-enter a write to stderr that the interrupted code was in the middle of.
    """

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.finished = False
        self.pending: list[int] = []
        self.ignored: list[int] = []

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.finished:
            self.ignored.append(signum)
            return
        if signum == signal.SIGINT and _in_terminal_foreground():
            return
        if self.proc is None:
            self.pending.append(signum)  # delivered as soon as the command has started
            return
        self._send(signum)

    def _send(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with suppress(ProcessLookupError):
                self.proc.send_signal(signum)

    def started(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        for signum in self.pending:
            self._send(signum)
        self.pending.clear()


@contextmanager
def _forwarding(child: _Child) -> Iterator[None]:
    previous = {s: signal.signal(s, child.handle) for s in _FORWARDED}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _start_and_wait(child: _Child, opts: RunOptions, env: Mapping[str, str], warn: Warn) -> int:
    argv = list(opts.command)
    try:
        try:
            proc = subprocess.Popen(argv, env=dict(env), cwd=opts.cwd)
        except FileNotFoundError:
            warn(f"command not found: {argv[0]!r}")
            return 127
        except PermissionError:
            warn(f"command not executable: {argv[0]!r}")
            return 126
        except OSError as exc:
            warn(f"cannot start {argv[0]!r}: {exc.strerror}")
            return 126
        child.started(proc)
        rc = proc.wait()
        return 128 - rc if rc < 0 else rc
    finally:
        child.finished = True


def _require_command(command: Sequence[str]) -> None:
    """A missing or blank command is the caller's mistake (400), not a failure (500)."""
    if not command:
        raise InvalidRequest("no command to run; give it after '--', e.g. -- claude")
    if not command[0].strip():
        raise InvalidRequest(
            f"the command to run is blank ({command[0]!r}); give a program after '--'"
        )


def run_command(opts: RunOptions, warn: Warn) -> int:
    """Run the command as it is (auto-memory off), forwarding signals.

    Raises :class:`~keepstone.errors.InvalidRequest` when there is no command to run.
    """
    _require_command(opts.command)
    child = _Child()
    with _forwarding(child):
        return _start_and_wait(child, opts, opts.environ, warn)


def point_backend(
    command: Sequence[str],
    backend: str | None,
    directory: Path,
    prompt_file: Path,
    environ: Mapping[str, str],
    warn: Warn,
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that point ``backend`` at ``directory``.

    Every command gets ``KEEPSTONE_AUTO_MEMORY_DIR``. ``claude_code`` gets
    ``--settings '{"autoMemoryDirectory": DIR}'`` appended; ``claw`` and ``pi`` get the
    rendered ``# Auto memory`` section in ``KEEPSTONE_AUTO_MEMORY_PROMPT`` and, as a file,
    at ``KEEPSTONE_AUTO_MEMORY_PROMPT_FILE``.
    """
    argv = list(command)
    env = dict(environ)
    env["KEEPSTONE_AUTO_MEMORY_DIR"] = str(directory)
    if backend == "claude_code":
        argv += ["--settings", json.dumps({"autoMemoryDirectory": str(directory)})]
    elif backend in ("claw", "pi"):
        prompt = render_prompt(directory)
        prompt_file.write_text(prompt, encoding="utf-8")
        env["KEEPSTONE_AUTO_MEMORY_PROMPT"] = prompt
        env["KEEPSTONE_AUTO_MEMORY_PROMPT_FILE"] = str(prompt_file)
    elif backend in INERT_BACKENDS:
        warn(
            f"backend {backend!r} ignores auto-memory (only "
            f"{', '.join(sorted(AUTO_MEMORY_BACKENDS))} consume it); the directory is still "
            "offered in KEEPSTONE_AUTO_MEMORY_DIR"
        )
    return argv, env


def run_with_auto_memory(
    service: SpaceService,
    ref: SpaceRef,
    opts: RunOptions,
    warn: Warn,
    *,
    who: Principal | None = None,
    as_of: datetime | None = None,
) -> int:
    """Materialise ``ref``, run the command pointed at it, fold the edits back as ``who``
    (default: the local console).

    ``as_of`` materialises the space as it was at that instant (``keepstone run --as-of``);
    the edits still go to the live space, each refused (and kept in the directory) when
    the live document changed after the run loaded it (:func:`materialise_as_of`).

    The materialised directory is removed after a clean sync; when some Markdown
    could not be persisted it is kept, and named, so nothing the agent wrote is lost.
    A failure to load the space before the command starts is an error (the command
    does not run): running an agent on a memory it cannot see would look like an
    empty memory. No command to run is :class:`~keepstone.errors.InvalidRequest`.
    """
    _require_command(opts.command)
    workdir = Path(tempfile.mkdtemp(prefix="keepstone-auto-memory-"))
    directory = workdir / "memory"
    directory.mkdir()
    try:
        if as_of is None:
            snapshot = materialise(service, ref, directory)
        else:
            snapshot = materialise_as_of(service, ref, directory, as_of)
    except (KeepstoneError, OSError) as exc:
        shutil.rmtree(workdir, ignore_errors=True)
        why = f"{exc.code}: {exc.message}" if isinstance(exc, KeepstoneError) else str(exc)
        raise StoreUnavailable(
            f"cannot load the auto-memory space ({why}); "
            "run with --auto-memory off to run without it"
        ) from None
    prompt_file = workdir / "auto-memory-prompt.md"
    argv, env = point_backend(
        opts.command, opts.backend, directory, prompt_file, opts.environ, warn
    )
    child = _Child()
    with _forwarding(child):
        status = _start_and_wait(child, RunOptions(argv, opts.backend, opts.cwd), env, warn)
        report = _sync(service, ref, directory, snapshot, warn, who)
    for signum in child.ignored:
        warn(f"{signal.Signals(signum).name} arrived while saving memory; the sync finished first")
    if report.ok:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        warn(f"{len(report.failed)} note(s) could not be saved; they are kept in {directory}")
    return status


def _sync(
    service: SpaceService,
    ref: SpaceRef,
    directory: Path,
    snapshot: Snapshot,
    warn: Warn,
    who: Principal | None,
) -> SyncReport:
    try:
        deadline = sync_deadline(directory)
        return fold_back(service, ref, directory, snapshot, deadline=deadline, warn=warn, who=who)
    except Exception as exc:  # the sync must never change the command's outcome
        warn(f"saving auto-memory failed: {type(exc).__name__}: {exc}")
        return SyncReport(failed=[(str(directory), "sync failed")])
