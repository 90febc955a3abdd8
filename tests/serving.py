"""Real servers for end-to-end tests: a free loopback port, a process started on it, and a
wait until it answers over HTTP.

:func:`keepstone_serve` runs ``keepstone serve --port P ...`` and yields once ``/readyz``
answers 200; :func:`running_server` does the same for any command line (``keepstone mcp
--http``, the installed wheel's ``keepstone``); :func:`started_server` starts without
waiting, for tests that start several servers together and then wait for each;
:func:`redis_server` starts a ``redis-server`` of the test's own, for tests that kill or
stop it.

A server that exits or never answers fails the test with the tail of its log. On leaving
the ``with`` the process gets SIGTERM (or the ``stop_signal`` given), then SIGKILL if it
lingers; one that already exited (a test killed it) is only reaped.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from keepstone.http_client import tls
from tests.cli_runner import keepstone_argv

#: How long a server may take to answer: generous, for a loaded machine.
READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 20.0


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServerProcess:
    """A server process listening (soon) on ``127.0.0.1:port``, its output in ``log``."""

    argv: list[str]
    port: int
    log: Path
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def fail(self, why: str) -> None:
        """Fail the test, saying ``why`` and showing what the server logged."""
        pytest.fail(f"{self.argv[:4]} {why}:\n{self.log_text()[-6000:]}", pytrace=False)

    def wait_until(
        self, condition: Callable[[], bool], what: str, timeout: float = READY_TIMEOUT_SECONDS
    ) -> None:
        """Until ``condition()`` holds, while the server runs (``what`` names it on failure)."""
        deadline = time.monotonic() + timeout
        while not condition():
            if self.proc.poll() is not None:
                self.fail(f"exited ({self.proc.returncode}) before {what}")
            if time.monotonic() > deadline:
                self.fail(f"did not start: no {what} within {timeout:.0f} s")
            time.sleep(0.1)

    def answers(self, path: str = "/readyz", ok_status: Sequence[int] = (200,)) -> bool:
        try:
            return httpx.get(f"{self.url}{path}", timeout=2, verify=tls()).status_code in ok_status
        except httpx.HTTPError:
            return False

    def wait_ready(
        self,
        path: str = "/readyz",
        ok_status: Sequence[int] = (200,),
        timeout: float = READY_TIMEOUT_SECONDS,
    ) -> None:
        """Until ``GET path`` answers one of ``ok_status``."""
        self.wait_until(lambda: self.answers(path, ok_status), f"answer on {path}", timeout)

    def stop(self, stop_signal: int = signal.SIGTERM) -> None:
        """Send ``stop_signal`` unless it exited already; SIGKILL if it does not exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(stop_signal)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def started_server(
    argv: Sequence[str],
    *,
    port: int,
    env: Mapping[str, str],
    log: Path,
    cwd: Path | None = None,
    new_session: bool = False,
    stop_signal: int = signal.SIGTERM,
) -> Iterator[ServerProcess]:
    """``argv`` started (not waited for), its output appended to ``log``; stopped on exit.
    ``new_session``: a session of its own, so ``os.killpg`` reaches every process of it."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=new_session,
        )
    server = ServerProcess(list(argv), port, log, proc)
    try:
        yield server
    finally:
        server.stop(stop_signal)


@contextlib.contextmanager
def running_server(
    argv: Sequence[str],
    *,
    port: int,
    env: Mapping[str, str],
    log: Path,
    ready: str = "/readyz",
    ok_status: Sequence[int] = (200,),
    timeout: float = READY_TIMEOUT_SECONDS,
    cwd: Path | None = None,
    new_session: bool = False,
    stop_signal: int = signal.SIGTERM,
) -> Iterator[ServerProcess]:
    """``argv`` started and waited for until ``GET ready`` on ``port`` answers one of
    ``ok_status``; stopped on exit (see :func:`started_server`)."""
    with started_server(
        argv,
        port=port,
        env=env,
        log=log,
        cwd=cwd,
        new_session=new_session,
        stop_signal=stop_signal,
    ) as server:
        server.wait_ready(ready, ok_status, timeout)
        yield server


def serve_env(home: Path, admin_token: str, **more: str) -> dict[str, str]:
    """The environment of a test's ``keepstone serve``: this process's, with ``home`` as
    ``KEEPSTONE_HOME``, the admin token, cheap password hashes, and ``more``."""
    import os

    env = dict(os.environ)
    env.update(
        KEEPSTONE_HOME=str(home),
        KEEPSTONE_ADMIN_TOKEN=admin_token,
        KEEPSTONE_ARGON2_TIME_COST="1",
        KEEPSTONE_ARGON2_MEMORY_KIB="1024",
        **more,
    )
    return env


def serve_argv(port: int, *args: str) -> list[str]:
    """The command line of ``keepstone serve --port PORT *args``."""
    return [*keepstone_argv(), "serve", "--port", str(port), *args]


@contextlib.contextmanager
def keepstone_serve(
    *args: str,
    env: Mapping[str, str],
    log: Path,
    port: int | None = None,
    ready: str = "/readyz",
    new_session: bool = False,
    stop_signal: int = signal.SIGTERM,
) -> Iterator[ServerProcess]:
    """``keepstone serve --port PORT *args`` (a free port unless given), answering
    ``ready``; stopped on exit."""
    port = port or free_port()
    with running_server(
        serve_argv(port, *args),
        port=port,
        env=env,
        log=log,
        ready=ready,
        new_session=new_session,
        stop_signal=stop_signal,
    ) as server:
        yield server


@contextlib.contextmanager
def redis_server(port: int, where: Path) -> Iterator[ServerProcess]:
    """A ``redis-server`` of the test's own on ``port`` (never the machine's), without
    persistence, run from ``where`` (its log ``redis.log`` there), answering PING; one a
    test stopped with SIGSTOP is continued first, so that it hears the stop."""
    import os

    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1"]
    argv += ["--save", "", "--appendonly", "no"]
    with started_server(argv, port=port, env=os.environ, log=where / "redis.log", cwd=where) as r:
        r.wait_until(lambda: _pings(port), "PING")
        try:
            yield r
        finally:
            if r.proc.poll() is None:
                r.proc.send_signal(signal.SIGCONT)


def _pings(port: int) -> bool:
    import redis

    client = redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def worker_processes(pid: int) -> list[psutil.Process]:
    """The uvicorn worker processes of the server ``pid`` (``--workers N``), not
    multiprocessing's resource tracker. A child that exits while it is looked at (uvicorn's
    supervisor kills a worker that misses its health check, and replaces it) is left out."""
    workers = []
    for child in psutil.Process(pid).children():
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                workers.append(child)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return workers
