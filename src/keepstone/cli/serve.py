"""``keepstone serve``: the HTTP service (SPEC §1)."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import socket
import sys
import tempfile
import threading
from typing import Any

from keepstone import runtime
from keepstone.cli.common import UsageError, add_database_arg, check_port, cli_command, whole
from keepstone.config import DEFAULT_KEEP_ALIVE_SECONDS, DEFAULT_WORKER_HEALTHCHECK_SECONDS, Config
from keepstone.errors import Conflict, InvalidRequest


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the HTTP service",
        description="Run the Keepstone HTTP service. Schema migrations run at start.",
    )
    parser.add_argument(
        "--host", default=None, help="address to listen on (KEEPSTONE_HOST, else 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=whole, default=None, help="port to listen on (KEEPSTONE_PORT, else 8420)"
    )
    add_database_arg(parser)
    parser.add_argument(
        "--workers",
        type=whole,
        default=1,
        metavar="N",
        help="worker processes sharing the port (1); see docs/deploy.md",
    )
    parser.add_argument(
        "--local",
        action="store_true",
        help="single-tenant mode: no authentication, one implicit team 'local'",
    )
    parser.set_defaults(func=run)


@cli_command
def run(args: argparse.Namespace) -> int:
    """Serve until a stop signal; exit 0 once the stop has finished cleanly, 1 when it could
    not (docs/operations.md, "Stopping: signals and exit status")."""
    with Starting() as starting:
        try:
            return _serve(args, starting)
        except StopRequested as stop:
            print(f"keepstone serve: stopped by {stop.name} while starting", file=sys.stderr)
            return 0


def _serve(args: argparse.Namespace, starting: Starting) -> int:
    from keepstone.api import logs

    config = Config.from_env(database_url=args.database, local=args.local)
    args.host = config.host if args.host is None else args.host
    args.port = config.port if args.port is None else args.port
    check_port(args.port)
    runtime.check_served_database(config)
    if not 1 <= args.workers <= MAX_WORKERS:
        raise UsageError(f"--workers must be 1-{MAX_WORKERS}")
    logs.configure()
    if args.local and args.host not in ("127.0.0.1", "localhost", "::1"):
        # Local mode has no authentication: on a network address anyone can write.
        print(
            f"keepstone: warning: --local serves without authentication on {args.host}; "
            "anyone who can reach it can read and write every space",
            file=sys.stderr,
        )
    # Bound before anything else, so a port in use is one line and nothing has said
    # "listening" (uvicorn binds only once its app has started, and then logs a traceback).
    with _bind(args.host, args.port) as sock:
        if args.workers == 1:
            problems = _serve_one(config, sock, args, starting)
        else:
            problems = _serve_workers(config, sock, args, starting)
    for problem in problems:
        print(f"keepstone serve: the stop did not finish cleanly: {problem}", file=sys.stderr)
    return 1 if problems else 0


#: The signals that stop ``keepstone serve`` (with ``--workers N``, SIGHUP replaces the
#: workers once they serve: uvicorn's restart).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StopRequested(BaseException):
    """A stop signal late in the start (:meth:`Starting.built`): it unwinds the start, whose
    ``finally`` blocks stop the indexer's process and remove the workers' files. A
    ``BaseException``, as ``KeyboardInterrupt`` is: no ``except Exception`` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.name = signal.Signals(signum).name


def _raise_stop(signum: int, _frame: object) -> None:
    raise StopRequested(signum)


def _noted(_signum: int, _frame: object) -> None:
    """A signal's handler that does nothing: it makes Python catch the signal, and write
    its number to the wakeup fd that :class:`Starting`'s thread reads."""


class Starting:
    """How ``keepstone serve`` meets a stop signal (:data:`STOP_SIGNALS`; a SIGHUP ignored
    already, as under ``nohup``, stays so) while it starts, before uvicorn handles them.

    Until :meth:`built` (the migrations ran, the app is built) the process exits at once
    with status 0: nothing is half-done (a migration's transaction rolls back with its
    connection) and nothing else is started yet. A thread does it, woken by the signal's
    number on a wakeup fd: a signal's own handler runs only between two instructions of
    the main thread, which may be waiting inside SQLite or the database's driver for as
    long as another process holds the database locked. After :meth:`built`, a signal
    raises :class:`StopRequested`. On leaving, the previous handlers are back.
    """

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self._pipe: tuple[int, int] | None = None
        self._watch: threading.Thread | None = None
        self._wakeup = -1

    def __enter__(self) -> Starting:
        if threading.current_thread() is not threading.main_thread():
            return self  # only the main thread sets handlers (an in-process call from a test)
        # The thread and the wakeup fd first: a signal caught before them would be lost.
        self._pipe = os.pipe()
        os.set_blocking(self._pipe[1], False)
        self._watch = threading.Thread(target=_exit_on_signal, args=(self._pipe[0],), daemon=True)
        self._watch.start()
        self._wakeup = signal.set_wakeup_fd(self._pipe[1], warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            if sig != signal.SIGHUP or signal.getsignal(sig) != signal.SIG_IGN:
                self._previous[sig] = signal.signal(sig, _noted)
        return self

    def built(self) -> None:
        """The start has passed the point where exiting at once is safe: from here a
        signal unwinds it (:class:`StopRequested`)."""
        if self._watch is None or self._pipe is None:
            return
        for sig in self._previous:  # first: no signal may fall between the two ways
            signal.signal(sig, _raise_stop)
        signal.set_wakeup_fd(self._wakeup)
        os.write(self._pipe[1], b"\0")  # not a signal's number: the thread ends
        self._watch.join()
        for fd in self._pipe:
            os.close(fd)
        self._watch = self._pipe = None

    def __exit__(self, *_exc: object) -> None:
        self.built()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _exit_on_signal(wakeup: int) -> None:
    """:class:`Starting`'s thread: at a signal's number on ``wakeup``, say so and exit 0."""
    number = os.read(wakeup, 1)
    if number and number[0]:
        name = signal.Signals(number[0]).name
        os.write(2, f"keepstone serve: stopped by {name} while starting\n".encode())
        os._exit(0)


def _serve_one(
    config: Config, sock: socket.socket, args: argparse.Namespace, starting: Starting
) -> list[str]:
    """One worker, in this process, until a stop signal: what kept the stop from finishing
    cleanly, if anything (:class:`keepstone.cli.serve_balance.StoppingServer`)."""
    from keepstone.api.app import create_app, settle_heap
    from keepstone.cli.serve_balance import StoppingServer

    app = create_app(config, indexer=True)
    starting.built()
    settle_heap()
    print(_banner(args, config), file=sys.stderr)
    server = StoppingServer(server_config(app, keep_alive=config.keep_alive_seconds))
    server.run(sockets=[sock])
    return server.problems()


#: A bound on --workers: each is a whole interpreter with its own connection pool.
MAX_WORKERS = 64


def server_config(
    app: Any,
    workers: int = 1,
    *,
    keep_alive: int = DEFAULT_KEEP_ALIVE_SECONDS,
    healthcheck: int = DEFAULT_WORKER_HEALTHCHECK_SECONDS,
) -> Any:
    """uvicorn's settings for ``keepstone serve`` (the benchmark's floor is served with the same).

    ``loop``/``http`` are uvicorn's "auto": uvloop and httptools, which the
    ``uvicorn[standard]`` dependency installs (asyncio and h11 only if they are missing).
    Our own access log carries the request id; uvicorn's would duplicate it.

    ``keep_alive``: seconds an idle connection stays open (``KEEPSTONE_KEEP_ALIVE_SECONDS``),
    and said in every answer's ``Keep-Alive: timeout=N`` so that a client which reads it
    (Node's fetch, Firefox) drops an idle connection before the server does. A server that
    closes first races the client's next request on that connection, which then gets no
    answer at all (docs/deploy.md, "Keep-alive").

    ``healthcheck``: seconds a worker of ``--workers N`` may leave the supervisor's health
    check unanswered before it is killed and replaced (``KEEPSTONE_WORKER_HEALTHCHECK_SECONDS``).
    """
    import uvicorn

    return uvicorn.Config(
        app,
        access_log=False,
        log_level="warning",
        loop="auto",
        http="auto",
        workers=workers,
        timeout_keep_alive=keep_alive,
        timeout_worker_healthcheck=healthcheck,
        headers=[("Keep-Alive", f"timeout={keep_alive}")],
    )


def _serve_workers(
    config: Config, sock: socket.socket, args: argparse.Namespace, starting: Starting
) -> list[str]:
    """``--workers N``: N uvicorn processes accepting on the one socket bound here, each
    taking a new connection only while it holds no more open connections than the least
    loaded of the others (:mod:`keepstone.cli.serve_balance`: otherwise a few keep-alive
    connections that arrive together often all land on one worker).

    This process supervises (uvicorn's ``Multiprocess``: a worker that dies is replaced,
    SIGTERM/SIGINT stop them all, a second SIGINT forces, SIGHUP replaces them one by
    one). It runs the migrations once before any worker starts, and the background
    indexer once, as its own child; each worker builds its app with no migrations and no
    indexer. The periodic purge runs in one worker only: the one holding the lock file's
    ``flock`` (:class:`keepstone.api.app.WorkerApp`).
    """
    from keepstone.api.app import WorkerApp
    from keepstone.api.indexer_process import IndexerProcess
    from keepstone.cli.serve_balance import serve_balanced
    from keepstone.runtime import open_runtime

    open_runtime(config).close()  # migrations (and the key-hash secret), once
    starting.built()
    indexer = IndexerProcess(config)
    handle, lock_path = tempfile.mkstemp(prefix="keepstone-serve-", suffix=".lock")
    os.close(handle)
    try:
        indexer.start()
        print(_banner(args, config), file=sys.stderr)
        app = WorkerApp(config, purge_lock=lock_path)
        uvicorn_config = server_config(
            app,
            args.workers,
            keep_alive=config.keep_alive_seconds,
            healthcheck=config.worker_healthcheck_seconds,
        )
        return serve_balanced(uvicorn_config, sock)
    finally:
        indexer.stop()
        with contextlib.suppress(OSError):
            os.unlink(lock_path)


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
    workers = f", {args.workers} workers" if args.workers > 1 else ""
    lines = [
        f"keepstone serve: listening on http://{args.host}:{args.port} "
        f"(database {shown_db}{workers})"
    ]
    if config.local:
        lines.append("keepstone serve: local mode: no authentication, one team 'local'")
    elif not config.admin_token:
        lines.append(
            "keepstone serve: KEEPSTONE_ADMIN_TOKEN is not set; set it to use the admin API, "
            "or create a super-admin with: "
            "keepstone admin create-user --email E --password P --super-admin"
        )
    return "\n".join(lines)
