"""A real ``keepstone serve`` on 127.0.0.1 for the benchmarks that drive one over HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx


@dataclass(frozen=True)
class Served:
    base: str
    pid: int

    def peak_rss_mb(self) -> float:
        """The server process's peak resident set (``VmHWM``), in MB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")


@contextmanager
def fresh_postgres(server_url: str, prefix: str = "bench") -> Iterator[str]:
    """A new, empty database ``<prefix>_<hex>`` on ``server_url``'s server, dropped (its
    sessions ended) afterwards."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server_url.rpartition('/')[0]}/{name}"
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(
    database: str,
    home: Path,
    *,
    pin: bool = False,
    workers: int = 1,
    flags: tuple[str, ...] = (),
    **env_extra: str,
) -> Iterator[Served]:
    """``keepstone serve`` on ``database`` with ``KEEPSTONE_HOME=home`` and ``env_extra`` (every
    other ``KEEPSTONE_*`` of this process dropped), ready when this yields; its output goes
    to ``home/serve-PORT.log``. ``pin``: on CPU 1 only (``taskset``); ``workers``:
    ``--workers N``; ``flags``: more of its flags (``--local``)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEPSTONE_")}
    env.update(KEEPSTONE_HOME=str(home), **env_extra)
    home.mkdir(parents=True, exist_ok=True)
    log = home / f"serve-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            (["taskset", "-c", "1"] if pin else [])
            + [sys.executable, "-m", "keepstone.cli.main", "serve"]
            + ["--port", str(port), "--database", database]
            + (["--workers", str(workers)] if workers > 1 else [])
            + list(flags),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(1200):
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                raise SystemExit(f"keepstone serve exited:\n{log.read_text(errors='replace')}")
            time.sleep(0.1)
        yield Served(base, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
