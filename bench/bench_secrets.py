"""Throughput of the secret detector (``keepstone.secrets.scan``), printed, never asserted.

    .venv/bin/python bench/bench_secrets.py

Prints MB/s for ordinary Markdown prose (a 2 MiB document, the largest a space takes,
and a record-sized 8,000 characters) and for adversarial inputs at 8k and 64k
characters; then microseconds a scan for the short texts every write scans (a document's
path, a space's name, a 1 KB note with and without a detector's keyword in it). The
adversarial rows are the ones to watch: a pattern that backtracks shows up as a 64k rate
far below its 8k rate (throughput should stay roughly flat, since the scan is linear).

Each row is measured twice in the same run: "before" with the reference engine (every
detector searching the whole text, ``tests/secrets_reference.py``), "after" with the
one-pass trigger search that ``scan`` uses; both return the same findings.
"""

from __future__ import annotations

import random
import string
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from keepstone import secrets
from keepstone.secrets import scan

_WORDS = (
    "the deploy of the orders service failed because the token for the registry expired "
    "we rotated the GitHub token and the AWS keys then reran the pipeline; see "
    "https://example.com/runbooks/deploy and http://localhost:8080/health for details "
    "password = os.environ['DB_PASSWORD'] # read the secret from the vault, never inline "
    "Authorization headers carry a Bearer token; basic auth is disabled "
    "commit 3f786850e387550fdab836ed7e6dc881de23001b run 123e4567-e89b-12d3-a456-426614174000"
).split()


def prose(size: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    out: list[str] = ["# Notes\n\n"]
    total = 0
    while total < size:
        line = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 16)))
        piece = ("- " if rng.random() < 0.3 else "") + line + ".\n"
        if rng.random() < 0.1:
            piece += "\n## " + rng.choice(_WORDS).title() + "\n\n"
        out.append(piece)
        total += len(piece)
    return "".join(out)[:size]


def _b64(n: int, seed: int = 3) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_letters + string.digits + "+/") for _ in range(n))


ADVERSARIAL: dict[str, Callable[[int], str]] = {
    '"A" * n': lambda n: "A" * n,
    '"sk-" repeated': lambda n: ("sk-" * (n // 3 + 1))[:n],
    '"-----BEGIN " repeated': lambda n: ("-----BEGIN " * (n // 11 + 1))[:n],
    "private key headers": lambda n: ("-----BEGIN RSA PRIV" + "ATE KEY-----" * 1) * (n // 31 + 1),
    "base64 run": _b64,
    '"a:" * n/2 + "@"': lambda n: "a:" * (n // 2) + "@",
    '"://" user:pass no "@"': lambda n: "://" + "a" * (n // 2) + ":" + "b" * (n // 2),
    '"eyJ" repeated': lambda n: ("eyJ" * (n // 3 + 1))[:n],
    "digits then :A": lambda n: "1" * (n - 2) + ":A",
}


@contextmanager
def reference_engine() -> Iterator[None]:
    """``scan`` running on the reference engine (for the "before" column)."""
    # The reference engine is a test oracle: it lives in tests/, under the repository root.
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    from tests.secrets_reference import raw_reference

    current = secrets._raw
    secrets._raw = raw_reference
    try:
        yield
    finally:
        secrets._raw = current


def rate(text: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        scan(text)
        best = min(best, time.perf_counter() - t0)
    return len(text.encode()) / best / 1e6


def per_scan_us(text: str, repeat: int, rounds: int = 7) -> float:
    """The best of ``rounds`` means of ``repeat`` scans of ``text``, in microseconds."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(repeat):
            scan(text)
        best = min(best, (time.perf_counter() - t0) / repeat)
    return best * 1e6


SHORT: dict[str, str] = {
    "a document path": "projects/keepstone/notes/deploy-runbook.md",
    "a space name": "deploy-notes",
    "1 KB note, no keyword": (
        "We moved the orders service to the new cluster and kept the old one running for a "
        "day. Latency stayed flat; the queue drained in four minutes. "
    )
    * 7,
    "1 KB note, with keywords": prose(1024),
}


def row(name: str, text: str, repeat: int) -> None:
    with reference_engine():
        before = rate(text, repeat)
    after = rate(text, repeat)
    print(f"{name:40} {len(text):>9} {before:>9.1f} {after:>9.1f} {after / before:>7.1f}x")


def main() -> None:
    print(f"{'input':40} {'size':>9} {'before':>9} {'after':>9} {'speedup':>8}")
    print(f"{'':40} {'(chars)':>9} {'(MB/s)':>9} {'(MB/s)':>9}")
    for size, repeat in ((8_000, 50), (2 * 1024 * 1024, 7)):
        row("markdown prose", prose(size), repeat)
    for name, make in ADVERSARIAL.items():
        for size in (8_000, 64_000):
            row(name, make(size), 7)
    print(f"\n{'short input':40} {'size':>9} {'before':>9} {'after':>9} {'speedup':>8}")
    print(f"{'':40} {'(chars)':>9} {'(µs)':>9} {'(µs)':>9}")
    for name, text in SHORT.items():
        with reference_engine():
            before = per_scan_us(text, 2000)
        after = per_scan_us(text, 2000)
        print(f"{name:40} {len(text):>9} {before:>9.2f} {after:>9.2f} {before / after:>7.1f}x")


if __name__ == "__main__":
    main()
