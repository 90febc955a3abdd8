"""Benchmark: how long a failed sign-in takes for a known email and for an unknown one.

An identity service over a fresh SQLite database, with argon2's default parameters (the
production ones), one user. ``--rounds`` failed sign-ins of each kind, interleaved (a
known email with a wrong password, then an unknown email), so a noisy moment of a shared
machine moves both sides; prints the median of each and their ratio. Both verify an
argon2 hash — the user's, or a hash of no one's password — so the ratio is near 1 and the
time of the answer does not tell which emails exist. Not a test: it prints figures.

    .venv/bin/python bench/bench_signin.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from keepstone.db import make_engine
from keepstone.db.migrations import upgrade
from keepstone.errors import Unauthenticated
from keepstone.identity.keys import KeyHasher
from keepstone.identity.schema import MIGRATIONS
from keepstone.identity.service import IdentityService


def _failed_sign_in(identity: IdentityService, email: str) -> float:
    started = time.perf_counter()
    try:
        identity.login(email, "not the password")
    except Unauthenticated:
        pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="keepstone-bench-signin-") as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'keepstone.db'}")
        upgrade(engine, MIGRATIONS)
        identity = IdentityService(engine, KeyHasher(b"bench-signin-secret-0123456789"))
        identity.create_user("known@example.com", "the right password")
        _failed_sign_in(identity, "warm-up@example.com")  # makes the dummy hash once
        known: list[float] = []
        unknown: list[float] = []
        for i in range(args.rounds):
            known.append(_failed_sign_in(identity, "known@example.com"))
            unknown.append(_failed_sign_in(identity, f"unknown-{i}@example.com"))
        engine.dispose()
    k, u = statistics.median(known), statistics.median(unknown)
    print(f"failed sign-ins, {args.rounds} rounds each, argon2 defaults")
    print(f"  known email (wrong password): median {k * 1000:8.1f} ms")
    print(f"  unknown email:                median {u * 1000:8.1f} ms")
    print(f"  unknown / known:              {u / k:8.2f}")


if __name__ == "__main__":
    main()
