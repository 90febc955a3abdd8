"""Settings a server cannot run with are refused when it starts, in one line naming the
variable and what it takes: never read as another value, never found out request by request."""

from __future__ import annotations

import pytest

from keepstone.config import Config
from keepstone.errors import InvalidRequest


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("KEEPSTONE_COOKIE_SECURE", "enabled", "is not yes or no"),
        ("KEEPSTONE_COOKIE_SECURE", "2", "is not yes or no"),
        ("KEEPSTONE_ARGON2_MEMORY_KIB", "1", "from 32 to 4194304"),
        ("KEEPSTONE_ARGON2_MEMORY_KIB", "4294967296", "from 32 to 4194304"),
        ("KEEPSTONE_ARGON2_TIME_COST", "0", "from 1 to 64"),
        ("KEEPSTONE_ARGON2_TIME_COST", "99999999999999999999", "from 1 to 64"),
        ("KEEPSTONE_REDIS_URL", "notaurl", "needs redis://HOST:PORT/DB"),
        ("KEEPSTONE_REDIS_URL", "http://127.0.0.1:6379/0", "needs redis://HOST:PORT/DB"),
        ("KEEPSTONE_REDIS_URL", "redis://127.0.0.1:99999/0", "its port"),
        ("KEEPSTONE_REDIS_URL", "redis://127.0.0.1:6379/abc", "its database is not a number"),
        ("KEEPSTONE_RECORDS_PURGE_INTERVAL", "abc", "is not an interval"),
        ("KEEPSTONE_RECORDS_PURGE_INTERVAL", "-5", "is not an interval"),
        ("KEEPSTONE_RECORDS_PURGE_INTERVAL", "nan", "is not an interval"),
        # Numbers are ASCII, as on every other face: int() and float() would read these.
        ("KEEPSTONE_RECORDS_PURGE_INTERVAL", "\u0665", "is not an interval"),
        ("KEEPSTONE_RECORDS_PURGE_INTERVAL", "1_0", "is not an interval"),
        ("KEEPSTONE_PORT", "\u0668\u0664\u0662\u0660", "is not a port"),
        ("KEEPSTONE_EMBED_THREADS", "1_0", "is not a positive whole number"),
        ("KEEPSTONE_MEMORY_MAX_DOC", "+5", "is not a byte count"),
    ],
)
def test_a_setting_that_cannot_work_is_refused_naming_it(
    variable: str, value: str, said: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        Config.from_env({variable: value})
    assert refused.value.message.startswith(variable) and said in refused.value.message


def test_a_redis_url_refusal_never_echoes_its_password() -> None:
    with pytest.raises(InvalidRequest) as refused:
        Config.from_env({"KEEPSTONE_REDIS_URL": "redis://:s3cret@127.0.0.1:6379/x"})
    assert "s3cret" not in refused.value.message


@pytest.mark.parametrize(
    ("variable", "value", "field", "read"),
    [
        ("KEEPSTONE_COOKIE_SECURE", "on", "cookie_secure", True),
        ("KEEPSTONE_COOKIE_SECURE", "TRUE", "cookie_secure", True),
        ("KEEPSTONE_COOKIE_SECURE", "no", "cookie_secure", False),
        ("KEEPSTONE_COOKIE_SECURE", "", "cookie_secure", False),
        ("KEEPSTONE_ARGON2_MEMORY_KIB", "32", "argon2_memory_kib", 32),
        (
            "KEEPSTONE_REDIS_URL",
            "rediss://:pw@cache:6380/2",
            "redis_url",
            "rediss://:pw@cache:6380/2",
        ),
        ("KEEPSTONE_REDIS_URL", "unix:///run/redis.sock", "redis_url", "unix:///run/redis.sock"),
        ("KEEPSTONE_REDIS_URL", " ", "redis_url", None),
        ("KEEPSTONE_RECORDS_PURGE_INTERVAL", "0", "records_purge_interval", 0.0),
        ("KEEPSTONE_RECORDS_PURGE_INTERVAL", "", "records_purge_interval", 3600.0),
        ("KEEPSTONE_RECORDS_PURGE_INTERVAL", " 1.5e1 ", "records_purge_interval", 15.0),
        ("KEEPSTONE_PORT", " 8080 ", "port", 8080),
    ],
)
def test_what_each_setting_takes_still_reads(
    variable: str, value: str, field: str, read: object
) -> None:
    assert getattr(Config.from_env({variable: value}), field) == read
