"""Threads a test runs beside one another: writers to their end while readers go on until
they have, every failure of any thread kept for the test's own thread to report."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence


def run_beside(
    writers: Sequence[Callable[[], object]], readers: Sequence[Callable[[], object]]
) -> list[BaseException]:
    """Run each of ``writers`` once and each of ``readers`` again and again until every
    writer is done, each in a thread of its own; return what any of them raised."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def once(work: Callable[[], object]) -> None:
        try:
            work()
        except BaseException as exc:  # reported by the test's thread
            failures.append(exc)

    def until_stopped(work: Callable[[], object]) -> None:
        try:
            while not stop.is_set():
                work()
        except BaseException as exc:
            failures.append(exc)

    started = [threading.Thread(target=once, args=(w,)) for w in writers]
    going = [threading.Thread(target=until_stopped, args=(r,)) for r in readers]
    for thread in started + going:
        thread.start()
    for thread in started:
        thread.join()
    stop.set()
    for thread in going:
        thread.join()
    return failures
