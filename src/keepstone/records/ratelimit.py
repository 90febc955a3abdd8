"""Per-team search rate limit: 5 searches a second and at most 10 in flight (SPEC §6).

Two implementations of one small interface:

* :class:`RedisRateLimiter` — shared by every replica pointing at one Redis
  (``KEEPSTONE_REDIS_URL``). One Lua script checks and takes both limits atomically on
  the Redis clock (so replicas' clocks do not matter). The window is a sliding log
  (a sorted set of admission times), so no second ever admits more than 5 across a
  window boundary. In-flight searches are members of a sorted set scored by a
  deadline: a replica that dies mid-search leaves a member that expires after
  ``in_flight_ttl`` seconds instead of wedging the team.
* :class:`LocalRateLimiter` — the same rules in process memory, for a single server.

A refused acquisition takes nothing: it neither counts toward the rate nor holds a
slot. :func:`rate_limiter` picks one for a Redis URL or none.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from keepstone.config import Config
from keepstone.errors import InvalidRequest, RateLimited, StoreUnavailable

if TYPE_CHECKING:
    import redis

SEARCHES_PER_SECOND = 5
MAX_IN_FLIGHT = 10
IN_FLIGHT_TTL_SECONDS = 60.0


def _refusal(retry_after: float, why: str) -> RateLimited:
    seconds = max(1, math.ceil(retry_after))
    return RateLimited(
        f"this team made too many searches ({why}); wait {seconds} s and try again",
        retry_after=seconds,
    )


class RateLimiter(Protocol):
    """Admits one search of a team or raises :class:`~keepstone.errors.RateLimited`."""

    def acquire(self, team_id: str) -> Callable[[], None]:
        """Take a rate slot and an in-flight slot; return the function that frees
        the in-flight slot (call it exactly once, when the search is over)."""
        ...


@contextmanager
def admitted(limiter: RateLimiter, team_id: str) -> Iterator[None]:
    """``with admitted(limiter, team):`` — hold an in-flight slot for the block."""
    release = limiter.acquire(team_id)
    try:
        yield
    finally:
        release()


@dataclass
class _TeamState:
    admitted_at: deque[float] = field(default_factory=deque)
    in_flight: int = 0


class LocalRateLimiter:
    """In-process limiter: correct for one server process, shared by its threads."""

    def __init__(
        self,
        rate: int = SEARCHES_PER_SECOND,
        window: float = 1.0,
        max_in_flight: int = MAX_IN_FLIGHT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = rate
        self.window = window
        self.max_in_flight = max_in_flight
        self._clock = clock
        self._lock = threading.Lock()
        self._teams: dict[str, _TeamState] = {}

    def acquire(self, team_id: str) -> Callable[[], None]:
        with self._lock:
            state = self._teams.setdefault(team_id, _TeamState())
            now = self._clock()
            while state.admitted_at and state.admitted_at[0] <= now - self.window:
                state.admitted_at.popleft()
            if state.in_flight >= self.max_in_flight:
                raise _refusal(1.0, f"at most {self.max_in_flight} at once")
            if len(state.admitted_at) >= self.rate:
                wait = state.admitted_at[0] + self.window - now
                raise _refusal(wait, f"at most {self.rate} a second")
            state.admitted_at.append(now)
            state.in_flight += 1
        released = threading.Event()

        def release() -> None:
            if released.is_set():
                return
            released.set()
            with self._lock:
                state.in_flight = max(0, state.in_flight - 1)

        return release


# KEYS: rate log, in-flight set. ARGV: rate, window ms, max in flight, ttl ms, token.
# Returns {1, 0} when admitted, {0, retry_ms, reason} when refused.
_ACQUIRE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local max_in_flight = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[2]) >= max_in_flight then
  return {0, 1000, 'in_flight'}
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= rate then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, tonumber(oldest[2]) + window - now, 'rate'}
end
redis.call('ZADD', KEYS[1], now, ARGV[5])
redis.call('PEXPIRE', KEYS[1], window * 2)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[5])
redis.call('PEXPIRE', KEYS[2], ttl * 2)
return {1, 0, ''}
"""


def redis_client(url: str) -> redis.Redis:
    """A client of the Redis at ``url``, each call given up after 5 s; InvalidRequest
    without the redis extra, ValueError for a URL that is no Redis URL."""
    try:
        import redis
    except ImportError:
        raise InvalidRequest(
            "KEEPSTONE_REDIS_URL needs the redis extra: pip install 'keepstone[redis]'"
        ) from None
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)


def redis_errors() -> tuple[type[Exception], ...]:
    """What a call of a :func:`redis_client` raises when Redis does not answer."""
    import redis

    return (redis.RedisError, OSError)


class RedisRateLimiter:
    """Cross-replica limiter on one Redis; keys ``<prefix>records:{<team>}:…``."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "keepstone:",
        rate: int = SEARCHES_PER_SECOND,
        window: float = 1.0,
        max_in_flight: int = MAX_IN_FLIGHT,
        in_flight_ttl: float = IN_FLIGHT_TTL_SECONDS,
    ) -> None:
        self._redis = redis_client(url)
        self._errors = redis_errors()
        self._script: Any = self._redis.register_script(_ACQUIRE_LUA)
        self.prefix = prefix
        self.rate = rate
        self.max_in_flight = max_in_flight
        # The script's ARGV but the token: rate, window ms, max in flight, ttl ms.
        self._argv = [rate, int(window * 1000), max_in_flight, int(in_flight_ttl * 1000)]

    def _keys(self, team_id: str) -> tuple[str, str]:
        # The hash tag keeps a team's two keys in one slot of a Redis Cluster.
        base = f"{self.prefix}records:{{{team_id}}}"
        return f"{base}:rate", f"{base}:inflight"

    def acquire(self, team_id: str) -> Callable[[], None]:
        rate_key, flight_key = self._keys(team_id)
        token = uuid.uuid4().hex
        try:
            result = cast(
                list[Any], self._script(keys=[rate_key, flight_key], args=[*self._argv, token])
            )
        except self._errors as exc:
            raise StoreUnavailable(
                "the search rate limiter (Redis) cannot be reached; try again shortly"
            ) from exc
        if int(result[0]) != 1:
            why = f"at most {self.rate} a second"
            if result[2] in (b"in_flight", "in_flight"):
                why = f"at most {self.max_in_flight} at once"
            raise _refusal(int(result[1]) / 1000.0, why)
        done = threading.Event()

        def release() -> None:
            if done.is_set():
                return
            done.set()
            # If Redis is unreachable, the member's deadline frees the slot anyway.
            with contextlib.suppress(*self._errors):
                self._redis.zrem(flight_key, token)

        return release

    def close(self) -> None:
        self._redis.close()


def rate_limiter(redis_url: str | None, *, prefix: str = "keepstone:") -> RateLimiter:
    """Redis at ``redis_url`` (keys under ``prefix``) when given, in-process otherwise."""
    return RedisRateLimiter(redis_url, prefix=prefix) if redis_url else LocalRateLimiter()


def make_rate_limiter(env: Mapping[str, str] | None = None) -> RateLimiter:
    """The limiter of ``KEEPSTONE_REDIS_URL`` / ``KEEPSTONE_REDIS_PREFIX`` in ``env`` (default:
    the process environment), read through :class:`~keepstone.config.Config`."""
    config = Config.from_env(env)
    return rate_limiter(config.redis_url, prefix=config.redis_prefix)
