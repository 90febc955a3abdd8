"""Settings of one ``cairn serve`` process, read from flags and ``CAIRN_*`` variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from cairn.errors import InvalidRequest
from cairn.quota import MiB

#: Cap on a JSON (or raw Markdown) request body: a 2 MiB document plus JSON escaping.
DEFAULT_MAX_JSON_BYTES = 3 * MiB
#: Cap on an import upload (the compressed tarball); CAIRN_MAX_IMPORT_BYTES overrides it.
DEFAULT_MAX_IMPORT_BYTES = 256 * MiB


def default_home(environ: Mapping[str, str]) -> str:
    return environ.get("CAIRN_HOME") or os.path.join(os.path.expanduser("~"), ".cairn")


def default_database_url(environ: Mapping[str, str]) -> str:
    """``CAIRN_DATABASE_URL``, else ``sqlite:///$CAIRN_HOME/cairn.db``."""
    url = environ.get("CAIRN_DATABASE_URL")
    if url:
        return url
    return "sqlite:///" + os.path.join(default_home(environ), "cairn.db")


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the app needs to know at start.

    ``admin_token`` / ``service_token`` are None when unset (the credential then
    does not exist). ``key_hash_secret`` None means: use the random secret persisted
    in the database. ``local`` is single-tenant mode (no authentication).
    """

    database_url: str
    local: bool = False
    admin_token: str | None = None
    service_token: str | None = None
    key_hash_secret: str | None = None
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES
    max_import_bytes: int = DEFAULT_MAX_IMPORT_BYTES
    login_failures_per_minute: int = 5
    session_ttl_seconds: int = 14 * 24 * 3600
    cookie_secure: bool = False
    #: argon2id cost of password hashes (argon2-cffi's defaults: 3 passes over 64 MiB).
    argon2_time_cost: int = 3
    argon2_memory_kib: int = 65536

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        database_url: str | None = None,
        local: bool = False,
    ) -> Settings:
        env = os.environ if environ is None else environ
        return cls(
            database_url=database_url or default_database_url(env),
            local=local,
            admin_token=env.get("CAIRN_ADMIN_TOKEN") or None,
            service_token=env.get("CAIRN_SERVICE_TOKEN") or None,
            key_hash_secret=env.get("CAIRN_KEY_HASH_SECRET") or None,
            max_import_bytes=_int(env, "CAIRN_MAX_IMPORT_BYTES", DEFAULT_MAX_IMPORT_BYTES),
            login_failures_per_minute=_int(env, "CAIRN_LOGIN_FAILURES_PER_MINUTE", 5),
            cookie_secure=env.get("CAIRN_COOKIE_SECURE", "").lower() in ("1", "true", "yes"),
            argon2_time_cost=_int(env, "CAIRN_ARGON2_TIME_COST", 3),
            argon2_memory_kib=_int(env, "CAIRN_ARGON2_MEMORY_KIB", 65536),
        )


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = -1
    if value <= 0:
        raise InvalidRequest(f"{name}={raw!r} is not a positive whole number; fix or unset it")
    return value
