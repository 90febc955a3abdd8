"""Per-team search rate limit: 5 searches a second and at most 10 in flight (SPEC §6).

Two implementations of one small interface:

* :class:`RedisRateLimiter` — shared by every replica pointing at one Redis
  (``KEEPSTONE_REDIS_URL``). One Lua script checks and takes both limits atomically on
  the Redis clock (so replicas' clocks do not matter). The window is a sliding log
  (a sorted set of admission times), so no second ever admits more than 5 across a
  window boundary. In-flight searches are members of a sorted set scored by a
  deadline: a replica that dies mid-search leaves a member that expires after
  ``in_flight_ttl`` seconds instead of wedging the team. A call this replica gave up on
  (Redis hung past the timeout) may still run once Redis resumes, and nobody would
  release the slot it took: the replica's next acquisition for that team cancels it —
  frees the slot if the call ran, and leaves a mark that makes it take nothing if it
  runs later.
* :class:`LocalRateLimiter` — the same rules in process memory, for a single server.

A refused acquisition takes nothing: it neither counts toward the rate nor holds a
slot. :func:`rate_limiter` picks one for a Redis URL or none.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from keepstone.config import DEFAULT_REDIS_TIMEOUT_SECONDS, Config
from keepstone.errors import InvalidRequest, RateLimited, StoreUnavailable

if TYPE_CHECKING:
    import redis

SEARCHES_PER_SECOND = 5
MAX_IN_FLIGHT = 10
IN_FLIGHT_TTL_SECONDS = 60.0
#: How long a cancelled call stays marked (see the module docstring). One that a Redis
#: hung even longer runs afterwards holds its slot until the slot's own deadline, as a dead
#: replica's does; a Redis hung that long has usually been restarted, which forgets it.
CANCELLED_TTL_SECONDS = 600.0
#: The calls given up on that a replica keeps per team until Redis answers again, so that a
#: long outage does not grow them without bound; past it the oldest are dropped (each held
#: slot, again, only until its deadline).
MAX_CANCELLED = 1024


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

    def ping(self) -> None:
        """Reach the limit's shared backend once (readiness); StoreUnavailable when it does
        not answer. Nothing to reach for a limit kept in process memory."""
        ...

    def close(self) -> None:
        """Release the backend's connections (nothing to release for one in memory)."""
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

    def ping(self) -> None:
        """Always reachable: the limit is this process's memory."""

    def close(self) -> None:
        """Nothing to release: the limit is this process's memory."""


# KEYS: rate log, in-flight set, cancelled tokens.
# ARGV: rate, window ms, max in flight, ttl ms, cancel ttl ms, token, then the tokens of calls
# this replica gave up on. Returns {1, 0} when admitted, {0, retry_ms, reason} when refused.
_ACQUIRE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local max_in_flight = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
local cancel_ttl = tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
for i = 7, #ARGV do
  redis.call('ZREM', KEYS[2], ARGV[i])
  redis.call('ZADD', KEYS[3], now + cancel_ttl, ARGV[i])
end
if #ARGV >= 7 then
  redis.call('PEXPIRE', KEYS[3], cancel_ttl)
end
if redis.call('ZSCORE', KEYS[3], ARGV[6]) then
  return {0, 0, 'cancelled'}
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[2]) >= max_in_flight then
  return {0, 1000, 'in_flight'}
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= rate then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, tonumber(oldest[2]) + window - now, 'rate'}
end
redis.call('ZADD', KEYS[1], now, ARGV[6])
redis.call('PEXPIRE', KEYS[1], window * 2)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[6])
redis.call('PEXPIRE', KEYS[2], ttl * 2)
return {1, 0, ''}
"""


#: The bound of a readiness ping: a probe must answer fast even while Redis hangs, and
#: a Redis that answers at all answers a PING far sooner.
PING_TIMEOUT_SECONDS = 0.5


def ping(client: redis.Redis) -> None:
    """One PING on ``client``; :class:`StoreUnavailable` when Redis does not answer."""
    try:
        client.ping()
    except redis_errors() as exc:
        raise StoreUnavailable(f"Redis does not answer: {exc}") from exc


def redis_client(url: str, timeout: float = DEFAULT_REDIS_TIMEOUT_SECONDS) -> redis.Redis:
    """A client of the Redis at ``url`` whose connecting and each answer is given up after
    ``timeout`` seconds (redis-py's default is to wait forever); InvalidRequest without the
    redis extra, ValueError for a URL that is no Redis URL."""
    try:
        import redis
    except ImportError:
        raise InvalidRequest(
            "KEEPSTONE_REDIS_URL needs the redis extra: pip install 'keepstone[redis]'"
        ) from None
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


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
        timeout: float = DEFAULT_REDIS_TIMEOUT_SECONDS,
        cancelled_ttl: float = CANCELLED_TTL_SECONDS,
    ) -> None:
        self._redis = redis_client(url, timeout)
        self._pinger = redis_client(url, min(timeout, PING_TIMEOUT_SECONDS))
        self._errors = redis_errors()
        self._script: Any = self._redis.register_script(_ACQUIRE_LUA)
        self.prefix = prefix
        self.rate = rate
        self.max_in_flight = max_in_flight
        # The script's ARGV before the tokens: rate, window ms, max in flight, ttl ms,
        # cancel ttl ms.
        self._argv = [
            rate,
            int(window * 1000),
            max_in_flight,
            int(in_flight_ttl * 1000),
            int(cancelled_ttl * 1000),
        ]
        # Per team, the tokens of calls given up on, for the team's next acquisition.
        self._given_up: dict[str, deque[str]] = {}
        self._lock = threading.Lock()

    def _keys(self, team_id: str) -> list[str]:
        # The hash tag keeps a team's keys in one slot of a Redis Cluster.
        base = f"{self.prefix}records:{{{team_id}}}"
        return [f"{base}:rate", f"{base}:inflight", f"{base}:cancelled"]

    def _give_up(self, team_id: str, tokens: Iterable[str]) -> None:
        """Keep ``tokens`` (calls that got no answer) for the team's next acquisition."""
        with self._lock:
            self._given_up.setdefault(team_id, deque(maxlen=MAX_CANCELLED)).extend(tokens)

    def acquire(self, team_id: str) -> Callable[[], None]:
        keys = self._keys(team_id)
        token = uuid.uuid4().hex
        with self._lock:
            cancel = list(self._given_up.pop(team_id, ()))
        try:
            result = cast(list[Any], self._script(keys=keys, args=[*self._argv, token, *cancel]))
        except self._errors as exc:
            # Each may yet run on a Redis that hung: the next call cancels them.
            self._give_up(team_id, [*cancel, token])
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
            # If Redis does not answer, the team's next acquisition here frees the slot (or
            # the member's deadline does, if there is none).
            try:
                self._redis.zrem(keys[1], token)
            except self._errors:
                self._give_up(team_id, [token])

        return release

    def ping(self) -> None:
        """One PING, given up after at most :data:`PING_TIMEOUT_SECONDS`."""
        ping(self._pinger)

    def close(self) -> None:
        self._redis.close()
        self._pinger.close()


def rate_limiter(
    redis_url: str | None,
    *,
    prefix: str = "keepstone:",
    timeout: float = DEFAULT_REDIS_TIMEOUT_SECONDS,
) -> RateLimiter:
    """Redis at ``redis_url`` (keys under ``prefix``, each call given up after ``timeout``
    seconds) when given, in-process otherwise."""
    if redis_url:
        return RedisRateLimiter(redis_url, prefix=prefix, timeout=timeout)
    return LocalRateLimiter()


def make_rate_limiter(env: Mapping[str, str] | None = None) -> RateLimiter:
    """The limiter of ``KEEPSTONE_REDIS_URL`` / ``KEEPSTONE_REDIS_PREFIX`` in ``env`` (default:
    the process environment), read through :class:`~keepstone.config.Config`."""
    config = Config.from_env(env)
    return rate_limiter(config.redis_url, prefix=config.redis_prefix, timeout=config.redis_timeout)
