"""A write PostgreSQL rolls back as a deadlock's victim (or a serialization failure) is
sent again, at most a few times; any other failure reaches its caller at once, and a victim
that keeps losing is told to the operator as contention, not as an unreachable database."""

from __future__ import annotations

from collections.abc import Callable

import psycopg.errors
import pytest
import sqlalchemy as sa

from keepstone.db import again_if_rolled_back, translated_errors
from keepstone.db.engine import ROLLBACK_ATTEMPTS, rolled_back
from keepstone.errors import StoreUnavailable


def _failure(orig: Exception) -> StoreUnavailable:
    """What a write transaction raises when the driver raised ``orig``."""
    with pytest.raises(StoreUnavailable) as raised, translated_errors():
        raise sa.exc.OperationalError("UPDATE memory_documents ...", {}, orig)
    return raised.value


@pytest.mark.parametrize(
    "orig",
    [psycopg.errors.DeadlockDetected("deadlock detected"), psycopg.errors.SerializationFailure()],
)
def test_a_victim_is_sent_again_until_it_commits(orig: Exception) -> None:
    sent: list[int] = []

    def write() -> str:
        sent.append(1)
        if len(sent) < ROLLBACK_ATTEMPTS:
            raise _failure(orig)
        return "committed"

    assert again_if_rolled_back(write) == "committed" and len(sent) == ROLLBACK_ATTEMPTS


def _always_failing(orig: Exception) -> tuple[list[int], Callable[[], None]]:
    """A write that fails with ``orig`` every time, and the list of its attempts."""
    sent: list[int] = []

    def write() -> None:
        sent.append(1)
        raise _failure(orig)

    return sent, write


def test_a_victim_that_keeps_losing_is_told_as_contention() -> None:
    sent, write = _always_failing(psycopg.errors.DeadlockDetected("deadlock detected"))
    with pytest.raises(StoreUnavailable) as raised:
        again_if_rolled_back(write)
    assert len(sent) == ROLLBACK_ATTEMPTS
    told = raised.value.operator_message or ""
    assert "rolled back" in told and "KEEPSTONE_DATABASE_URL" not in told


def test_any_other_failure_is_not_sent_again() -> None:
    sent, write = _always_failing(psycopg.errors.AdminShutdown("terminating connection"))
    with pytest.raises(StoreUnavailable) as raised:
        again_if_rolled_back(write)
    assert len(sent) == 1 and not rolled_back(raised.value)
    assert "KEEPSTONE_DATABASE_URL" in (raised.value.operator_message or "")
