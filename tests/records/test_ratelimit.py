"""The per-team search limit: 5 a second, 10 in flight, in process and across
processes sharing one Redis (SPEC §6)."""

from __future__ import annotations

import os
import signal
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from keepstone.errors import RateLimited, StoreUnavailable
from keepstone.records.ratelimit import LocalRateLimiter, RateLimiter, RedisRateLimiter
from tests.processes import child_context
from tests.serving import free_port, redis_server


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _redis(url: str, **kw: float) -> RedisRateLimiter:
    return RedisRateLimiter(url, prefix=f"test:{uuid.uuid4().hex}:", **kw)  # type: ignore[arg-type]


def test_local_sixth_in_one_second_is_refused() -> None:
    clock = FakeClock()
    limiter = LocalRateLimiter(clock=clock)
    for _ in range(5):
        limiter.acquire("t")()
    with pytest.raises(RateLimited) as info:
        limiter.acquire("t")
    assert info.value.retry_after >= 1
    limiter.acquire("other")()  # per team
    clock.now += 1.0
    limiter.acquire("t")()


def test_local_eleventh_in_flight_is_refused() -> None:
    limiter = LocalRateLimiter(rate=100)
    releases = [limiter.acquire("t") for _ in range(10)]
    with pytest.raises(RateLimited, match="at once"):
        limiter.acquire("t")
    releases[0]()
    releases[0]()  # releasing twice frees one slot only
    limiter.acquire("t")
    with pytest.raises(RateLimited):
        limiter.acquire("t")


def test_refused_acquire_takes_nothing() -> None:
    clock = FakeClock()
    limiter = LocalRateLimiter(clock=clock)
    for _ in range(5):
        limiter.acquire("t")()
    for _ in range(20):
        with pytest.raises(RateLimited):
            limiter.acquire("t")
    clock.now += 1.0
    for _ in range(5):
        limiter.acquire("t")()


def test_redis_rate_and_in_flight(redis_url: str) -> None:
    # A wide window for the refusal: a stalled machine cannot let it pass mid-test.
    limiter = _redis(redis_url, window=30.0)
    for _ in range(5):
        limiter.acquire("t")()
    with pytest.raises(RateLimited, match="a second"):
        limiter.acquire("t")
    limiter.acquire("u")()
    # The one-second window slides on the Redis clock.
    sliding = _redis(redis_url)
    for _ in range(5):
        sliding.acquire("t")()
    time.sleep(1.05)
    sliding.acquire("t")()
    sliding.close()

    wide = _redis(redis_url, rate=1000)
    held = [wide.acquire("t") for _ in range(10)]
    with pytest.raises(RateLimited, match="at once"):
        wide.acquire("t")
    held.pop()()
    held.append(wide.acquire("t"))
    for release in held:
        release()
    limiter.close()
    wide.close()


def test_redis_crashed_holder_does_not_wedge(redis_url: str) -> None:
    # The slots must outlive the test's own acquires on a stalled machine, then expire.
    limiter = _redis(redis_url, rate=1000, in_flight_ttl=3.0)
    for _ in range(10):
        limiter.acquire("t")  # never released: a replica that died mid-search
    with pytest.raises(RateLimited):
        limiter.acquire("t")
    time.sleep(3.2)
    limiter.acquire("t")()
    limiter.close()


def _acquire_in_child(
    url: str, prefix: str, rate: int, count: int, ready: Any, results: Any
) -> None:
    # A wide window: both children's attempts fall in it however slowly they start.
    limiter = RedisRateLimiter(url, prefix=prefix, rate=rate, window=60.0)
    ready.wait()
    admitted, refused = 0, 0
    held: list[Callable[[], None]] = []
    for _ in range(count):
        try:
            held.append(limiter.acquire("shared"))
            admitted += 1
        except RateLimited:
            refused += 1
    results.put((admitted, refused))
    ready.wait()  # hold the slots until both processes have counted


def _two_processes(url: str, rate: int, count: int) -> list[tuple[int, int]]:
    ctx = child_context()
    prefix = f"test:{uuid.uuid4().hex}:"
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_acquire_in_child, args=(url, prefix, rate, count, barrier, results))
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    out = [results.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    return out


@pytest.mark.slow
def test_two_processes_share_in_flight_limit(redis_url: str) -> None:
    # Each process tries 8 concurrent searches; together only 10 may be in flight.
    out = _two_processes(redis_url, rate=1000, count=8)
    assert sum(a for a, _ in out) == 10
    assert sum(r for _, r in out) == 6


@pytest.mark.slow
def test_two_processes_share_rate_limit(redis_url: str) -> None:
    # 4 attempts each within one window: only 5 admitted in total.
    out = _two_processes(redis_url, rate=5, count=4)
    assert sum(a for a, _ in out) == 5
    assert sum(r for _, r in out) == 3


def test_make_rate_limiter_picks_backend(redis_url: str) -> None:
    from keepstone.records.ratelimit import make_rate_limiter

    limiter: RateLimiter = make_rate_limiter({})
    assert isinstance(limiter, LocalRateLimiter)
    limiter = make_rate_limiter({"KEEPSTONE_REDIS_URL": redis_url})
    assert isinstance(limiter, RedisRateLimiter)
    limiter.close()


def test_the_redis_timeout_is_read_and_checked() -> None:
    from keepstone.config import Config
    from keepstone.errors import InvalidRequest

    assert Config.from_env({}).redis_timeout == 5.0
    assert Config.from_env({"KEEPSTONE_REDIS_TIMEOUT": " 0.5 "}).redis_timeout == 0.5
    assert Config.from_env({"KEEPSTONE_REDIS_TIMEOUT": ""}).redis_timeout == 5.0
    for bad in ("0", "-1", "soon", "nan", "inf"):
        with pytest.raises(InvalidRequest, match="KEEPSTONE_REDIS_TIMEOUT=.*seconds above 0"):
            Config.from_env({"KEEPSTONE_REDIS_TIMEOUT": bad})


def test_a_redis_that_never_answers_is_given_up_on() -> None:
    """A socket that takes connections and never answers (as a hung Redis's does): the
    search is refused as unavailable instead of waiting forever, and so is the ping."""
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)  # never accepted: the kernel completes the connections, nobody reads
        url = f"redis://127.0.0.1:{hung.getsockname()[1]}/0"
        limiter = RedisRateLimiter(url, timeout=0.2)
        with pytest.raises(StoreUnavailable, match=r"rate limiter \(Redis\)"):
            limiter.acquire("t")
        with pytest.raises(StoreUnavailable, match="Redis does not answer"):
            limiter.ping()
        limiter.close()
    LocalRateLimiter().ping()  # nothing to reach


def test_a_call_given_up_on_holds_no_slot_once_redis_runs_it(tmp_path: Path) -> None:
    """A Redis stopped (SIGSTOP) past the client's timeout runs the call given up on when
    it continues (the call waited in its socket); the next acquisition of the team frees
    the slot that call took. On a Redis of the test's own."""
    port = free_port()
    with redis_server(port, tmp_path) as server, redis.Redis(port=port) as admin:
        limiter = _redis(f"redis://127.0.0.1:{port}/0", rate=1000, timeout=0.2)
        flight = f"{limiter.prefix}records:{{t}}:inflight"
        limiter.acquire("t")()  # the script is loaded: the late call is one EVALSHA
        os.kill(server.pid, signal.SIGSTOP)
        try:
            with pytest.raises(StoreUnavailable):
                limiter.acquire("t")
        finally:
            os.kill(server.pid, signal.SIGCONT)
        server.wait_until(lambda: admin.zcard(flight) == 1, "the late call")  # nobody frees
        limiter.acquire("t")()
        assert admin.zcard(flight) == 0
        limiter.close()
