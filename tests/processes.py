"""Child processes for the tests that need real ones (file locks, kill -9, writers in
several processes): :func:`child_context` gives the multiprocessing context they start them
with.

A child is forked by multiprocessing's fork server, which imported Keepstone's stores, the
test helpers, pytest and hypothesis once, at its start: a spawned child imported them all
again, about 0.7 CPU-s a child before its first line, on a suite whose two cores are busy
from start to end (docs/performance.md, "The test suite"). As under spawn, a child is a
fresh process of its own: the server that forks it is single-threaded and holds none of the
test's databases, sockets, locks or threads. It inherits the server's environment and
``sys.path``, taken when the first child of a pytest process started: every test passes a
child what it needs (a path, a URL, a store's spec) as arguments, never through
``os.environ``.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import ForkServerContext

#: What the fork server imports before it forks anything.
PRELOAD = [
    "pytest",
    "hypothesis",
    "keepstone.store.fs",
    "keepstone.store.sql",
    "keepstone.store.http",
    "tests.conformance.helpers",
]


def child_context() -> ForkServerContext:
    """The context to start a test's child processes with (see the module's docstring)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context
