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
of either mid-batch loses nothing: the claim's transaction rolls back.
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
            process.kill()
            process.join()


def run_child(config: Config, parent: int) -> None:
    """The child's body: log as the server does, die with the server, run the indexer."""
    from keepstone.api import logs

    logs.configure()
    _die_with_parent()
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
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's to handle
        log.info("indexer: embedding with %s", indexer.model)
        indexer.run(until=lambda: os.getppid() != parent)
    finally:
        compute.shutdown()
        runtime.close()


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the server dies, at once (a kill -9 of the
    server must not leave an orphan embedding). Elsewhere the parent check suffices."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
