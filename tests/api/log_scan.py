"""Logs at DEBUG, every logger (SQLAlchemy's, uvicorn's, Keepstone's), scanned for what may
never be logged: password hashes, API keys and their hashes, session and CSRF tokens,
emails, document and record text.

    with everything_logged(caplog):
        ...requests...
    assert not leaks(caplog, world, DOC_TEXT)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import pytest

from tests.api.world import World

#: Written into documents and records by the tests that scan: it must not reach a log.
DOC_TEXT = "kestrel-umbrella-7731"
#: The test's own HTTP client's loggers: what it logs is the caller's, not the server's.
CLIENT_LOGGERS = ("httpx", "httpcore")
LOGGERS = ("", "sqlalchemy", "sqlalchemy.engine", "sqlalchemy.pool", "uvicorn", "keepstone")


@contextlib.contextmanager
def everything_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Every logger named in :data:`LOGGERS` at DEBUG, captured, for the block."""
    with contextlib.ExitStack() as stack:
        for name in LOGGERS:
            stack.enter_context(caplog.at_level(logging.DEBUG, logger=name))
        yield


def leaks(caplog: pytest.LogCaptureFixture, world: World, *texts: str) -> list[str]:
    """Each captured line (message, arguments and traceback) that holds a secret of
    ``world`` or one of ``texts``, with what it holds."""
    hasher = world.identity.hasher
    secrets = {"a password hash": "$argon2", **{f"text {t!r}": t for t in texts}}
    for role, email in world.emails.items():
        secrets[f"{role}'s email"] = email
    for role, key in world.keys.items():
        secrets[f"{role}'s API key"] = key
        secrets[f"{role}'s API key hash"] = hasher.hash(key)
    for role, (cookie, csrf) in world.sessions.items():
        secrets[f"{role}'s session"] = cookie
        secrets[f"{role}'s CSRF token"] = csrf
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    found = []
    assert caplog.records, "nothing was logged: the scan would prove nothing"
    for record in caplog.records:
        if record.name.startswith(CLIENT_LOGGERS):
            continue
        line = formatter.format(record)
        for what, value in secrets.items():
            if value and value in line:
                found.append(f"{what} in {line[:300]!r}")
    return found
