"""Failed-login throttling: a sliding window of failures per (email, client address).

Brute-force protection of ``POST /api/auth/login``, so it lives with the HTTP face: the
route checks the key before signing in and records the outcome after.

In-process: each replica counts its own failures, so N replicas allow at most N times
the limit, which still turns password guessing from millions of tries into a trickle.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from keepstone.errors import RateLimited


class LoginThrottle:
    def __init__(self, max_failures: int = 5, window_seconds: float = 60.0) -> None:
        self.max_failures = max_failures
        self.window = window_seconds
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> deque[float]:
        q = self._failures.setdefault(key, deque())
        while q and now - q[0] >= self.window:
            q.popleft()
        return q

    def check(self, key: str) -> None:
        """Raise RateLimited (with Retry-After) while ``key`` has too many recent failures."""
        now = time.monotonic()
        with self._lock:
            q = self._recent(key, now)
            if len(q) >= self.max_failures:
                retry = max(1.0, self.window - (now - q[0]))
                raise RateLimited(
                    f"too many failed sign-ins; try again in {int(retry + 0.999)} seconds",
                    retry_after=retry,
                )

    def failed(self, key: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._recent(key, now).append(now)
            if len(self._failures) > 100_000:  # bound memory under a spray of addresses
                self._failures = {k: v for k, v in self._failures.items() if v}

    def succeeded(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)
