"""The background indexer of ``keepstone serve``, in a child process of its own.

Embedding is CPU work with stretches that hold the GIL (the tokenizer's Python side,
numpy's per-operation overhead on short texts): on a thread of the server it would
compete with request handling for the interpreter, and a niced thread holding the GIL
would stall the request threads waiting for it. In a child process the embedder
competes for CPU only, at a lowered priority, so the kernel gives request handling the
first claim on it (docs/search.md, "The background indexer", has the measurements).

Inside the child, the embedding runs on a thread at nice +19, while the thread that
chunks documents and writes vectors keeps the normal priority: SQLite's one writer
lock, which every save needs, is never held by a starved thread. (On PostgreSQL a
claim's row locks are held while its batch embeds; only a write of those very rows
waits for them.)

The child opens its own runtime on the same database (no migrations: the server ran
them), builds the indexer as :func:`keepstone.runtime.open_indexer` does, and runs it until
the server asks it to stop (SIGTERM: it finishes its batch) or the server is gone (it
dies with it: Linux's parent-death signal, and a parent check on every pause). A kill
of either mid-batch loses nothing: the claim's transaction rolls back. SIGINT and SIGHUP,
which a terminal sends to every process of the server, it leaves to the server.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.process import BaseProcess

from keepstone.config import Config
from keepstone.runtime import open_indexer, open_runtime
from keepstone.service.indexer import lower_thread_priority

log = logging.getLogger(__name__)

#: Niceness of the thread that embeds: request handling comes first. The process's
#: database work (claims, the backfill's chunking) keeps the normal priority, so a lock
#: it holds is released promptly.
EMBED_NICENESS = 19
#: Seconds :meth:`IndexerProcess.stop` waits for the batch in hand before a kill.
STOP_SECONDS = 15.0


class IndexerProcess:
    """Starts and stops the indexer's child process for ``config`` (a no-op when
    ``KEEPSTONE_INDEXER=off`` or ``KEEPSTONE_EMBEDDER=none``)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.process: BaseProcess | None = None

    @property
    def wanted(self) -> bool:
        return self.config.indexer and self.config.embedder != "none"

    def start(self) -> None:
        if not self.wanted or self.process is not None:
            return
        # spawn: a fresh interpreter, not a fork of a process with threads and sockets.
        context = multiprocessing.get_context("spawn")
        self.process = context.Process(
            target=run_child,
            args=(self.config, os.getpid()),
            name="keepstone-indexer",
            daemon=True,
        )
        self.process.start()

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()  # SIGTERM: the child finishes its batch, then returns
        process.join(STOP_SECONDS)
        if process.is_alive():
            log.warning("indexer: its batch was not done within %s s; killed", STOP_SECONDS)
            process.kill()
            process.join()
        elif process.exitcode not in (0, -signal.SIGTERM):  # SIGTERM: before its handler
            log.warning("indexer: its process had ended (exit code %s)", process.exitcode)


def run_child(config: Config, parent: int) -> None:
    """The child's body: log as the server does, die with the server, run the indexer.
    SIGINT (Ctrl-C) and SIGHUP (a terminal hanging up) reach every process of the server's
    group, and are the server's to act on: it stops this process with SIGTERM, or keeps it."""
    from keepstone.api import logs

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    logs.configure()
    die_with_parent(signal.SIGKILL)
    runtime = open_runtime(config, migrate=False)
    compute = ThreadPoolExecutor(
        1, "keepstone-embed", initializer=lower_thread_priority, initargs=(EMBED_NICENESS,)
    )
    try:
        indexer = open_indexer(runtime)
        if indexer is None:
            return
        indexer.niceness = 0  # this thread holds the claims and locks: normal priority
        indexer.compute = compute
        signal.signal(signal.SIGTERM, lambda _sig, _frame: indexer.request_stop())
        log.info("indexer: embedding with %s", indexer.model)
        indexer.run(until=lambda: os.getppid() != parent)
    finally:
        compute.shutdown()
        runtime.close()


def die_with_parent(signum: int) -> None:
    """Linux: have the kernel send ``signum`` to this process when its parent dies, at once
    (the indexer takes SIGKILL: a kill -9 of the server must not leave an orphan embedding;
    a worker of ``keepstone serve --workers N`` takes SIGTERM and finishes its requests).
    Elsewhere the caller's own parent check must do. Call it first thing in the child."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signum)
    except (OSError, AttributeError):
        pass
