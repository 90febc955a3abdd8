"""Failed-login throttling: sliding windows of failures per email and per client address.

Brute-force protection of ``POST /api/auth/login`` and the UI's sign-in form (one throttle
for both, on ``app.state.login_throttle``), so it lives with the HTTP face: the route
checks before signing in and records the outcome after.

Two windows, each refusing with ``429 rate_limited`` and ``Retry-After`` once full:

* per **email**, across addresses: guessing one account's password from many addresses
  (a botnet, or a rotating ``X-Forwarded-For`` behind a trusted proxy) is as slow as from
  one;
* per **client address**, across emails, with :data:`ADDRESS_FACTOR` times the room: one
  password sprayed over many accounts from one address is slowed too, while a few people
  mistyping behind one NAT are not. Behind a trusted proxy the address is the
  ``X-Forwarded-For`` client's (uvicorn's proxy headers, docs/deploy.md).

A success clears its email's window, never the address's (a spray that knows one good
password would otherwise reset its own count).

In-process: each replica counts its own failures, so N replicas allow at most N times
the limit, which still turns password guessing from millions of tries into a trickle.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from keepstone.errors import RateLimited

#: How many more failures a client address may have than one email, per window.
ADDRESS_FACTOR = 4
#: Past this many keys, the empty windows are dropped (memory under a spray of addresses).
_MAX_KEYS = 100_000


class LoginThrottle:
    def __init__(self, max_failures: int = 5, window_seconds: float = 60.0) -> None:
        self.max_failures = max_failures
        self.window = window_seconds
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _keys(email: str, client: str) -> tuple[str, str]:
        return f"email:{email.strip().lower()}", f"addr:{client}"

    def _recent(self, key: str, now: float) -> deque[float]:
        q = self._failures.setdefault(key, deque())
        while q and now - q[0] >= self.window:
            q.popleft()
        return q

    def check(self, email: str, client: str) -> None:
        """Raise RateLimited (with Retry-After) while ``email`` or ``client`` has too many
        recent failures."""
        now = time.monotonic()
        by_email, by_address = self._keys(email, client)
        limits = ((by_email, self.max_failures), (by_address, self.max_failures * ADDRESS_FACTOR))
        with self._lock:
            for key, limit in limits:
                q = self._recent(key, now)
                if len(q) >= limit:
                    retry = max(1.0, self.window - (now - q[len(q) - limit]))
                    raise RateLimited(
                        f"too many failed sign-ins; try again in {int(retry + 0.999)} seconds",
                        retry_after=retry,
                    )

    def failed(self, email: str, client: str) -> None:
        now = time.monotonic()
        with self._lock:
            for key in self._keys(email, client):
                self._recent(key, now).append(now)
            if len(self._failures) > _MAX_KEYS:
                self._failures = {k: v for k, v in self._failures.items() if v}

    def succeeded(self, email: str, client: str) -> None:
        with self._lock:
            self._failures.pop(self._keys(email, client)[0], None)
