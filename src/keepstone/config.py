"""Every setting of a Keepstone process, read once from its ``KEEPSTONE_*`` environment variables.

:class:`Config` is the only reader of the environment: ``Config.from_env()`` reads the
process environment (or a given mapping), ``Config(...)`` with keywords reads nothing and
takes the defaults for the rest. Each field names its variable in full, so
``grep KEEPSTONE_X`` finds where it is read. A value that does not parse raises the
:class:`~keepstone.errors.InvalidRequest` naming the variable; an empty value means unset,
except for the byte counts of the filesystem store, where it is an error too.

Fields without a variable (``local``, ``max_json_bytes``, ``session_ttl_seconds``) are set
by flags or by code. Derived values are methods: :meth:`Config.limits`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.fields import FieldInfo

from keepstone.errors import InvalidRequest
from keepstone.quota import Limits, MiB
from keepstone.text import is_whole_number, parse_decimal

# How a variable's text becomes a value. A keyword argument that is not text is taken
# as given, so code and tests construct Config(...) with typed values.


def _unset_when_empty(value: object) -> object:
    return value or None


def _unset_when_blank(value: object) -> object:
    return (value.strip() or None) if isinstance(value, str) else value


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def _switch(value: object, info: ValidationInfo) -> object:
    """A yes/no setting; a word it does not know is refused, never read as no (a
    ``KEEPSTONE_COOKIE_SECURE=enabled`` would otherwise send the session cookie in clear)."""
    if not isinstance(value, str):
        return value
    word = value.strip().lower()
    if word not in _TRUE + _FALSE:
        raise InvalidRequest(
            f"{_field(info).validation_alias}={value!r} is not yes or no; set 1, true, yes or "
            "on, or 0, false, no or off (unset: no)"
        )
    return word in _TRUE


def _whole_number(value: str, info: ValidationInfo, least: int, what: str) -> int:
    # ASCII digits only: int() would also read "1_0", "+5" and other scripts' digits.
    number = int(value.strip()) if is_whole_number(value.strip()) else -1
    if number < least:
        raise InvalidRequest(f"{_field(info).validation_alias}={value!r} is not {what}")
    return number


def _or_default(
    parse: Callable[[str, ValidationInfo], object],
) -> Callable[[object, ValidationInfo], object]:
    """A validator of a variable's text read by ``parse`` (the field's default when blank)."""

    def check(value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            return value
        if value.strip() == "":
            return _field(info).default
        return parse(value, info)

    return check


def _whole_or_default(least: int, what: str) -> Callable[[object, ValidationInfo], object]:
    """A validator of a whole number from ``least`` (the field's default when blank);
    ``what`` ends its refusal."""
    return _or_default(lambda value, info: _whole_number(value, info, least, what))


def _one_of(default: str, *choices: str) -> Callable[[object, ValidationInfo], object]:
    """A validator of a word among ``choices`` (case-blind; ``default`` when blank)."""

    def check(value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            return value
        word = value.strip().lower() or default
        if word not in choices:
            raise InvalidRequest(
                f"{_field(info).validation_alias}={value!r} is not one of {', '.join(choices)}"
            )
        return word

    return check


_positive_whole_number = _whole_or_default(1, "a positive whole number; fix or unset it")
_count = _whole_or_default(0, "a whole number >= 0; fix or unset it")
_embedder_kind = _one_of("minilm", "minilm", "http", "none")
_pgvector_mode = _one_of("auto", "auto", "on", "off")


def _seconds_of(
    accept: Callable[[float], bool], what: str
) -> Callable[[object, ValidationInfo], object]:
    """A validator of a number of seconds ``accept`` takes (the field's default when blank);
    ``what`` names it and what to set in its refusal. Strict: a typo would otherwise leave a
    request waiting forever, or a purge off or at another pace, without a word."""

    def parse(value: str, info: ValidationInfo) -> float:
        seconds = parse_decimal(value.strip())
        if not (seconds is not None and math.isfinite(seconds) and accept(seconds)):
            raise InvalidRequest(
                f"{_field(info).validation_alias}={value!r} is not {what}, or unset it for "
                "the default"
            )
        return seconds

    return _or_default(parse)


_seconds = _seconds_of(lambda s: s >= 0, "an interval; set a number of seconds (0 turns it off)")
_timeout = _seconds_of(lambda s: s > 0, "a timeout; set a number of seconds above 0")


def _byte_count(value: object, info: ValidationInfo) -> object:
    if not isinstance(value, str):
        return value
    return _whole_number(value, info, 0, "a byte count; set a whole number >= 0")


def _on_off(value: object, info: ValidationInfo) -> object:
    if not isinstance(value, str):
        return value
    word = value.strip().lower() or "on"
    if word not in ("on", "off"):
        raise InvalidRequest(f"{_field(info).validation_alias}={value!r} is not on or off")
    return word == "on"


#: argon2id's costs: passes and KiB of memory. Below the least, argon2 refuses to hash (it
#: needs 8 KiB per lane, of 4); above the most, every sign-in would stall on it or run the
#: machine out of memory: a typo either way, refused at start instead of at each password.
ARGON2_TIME_BOUNDS = (1, 64)
ARGON2_MEMORY_BOUNDS = (32, 4 * 1024 * 1024)


def _within(low: int, high: int, what: str) -> Callable[[object, ValidationInfo], object]:
    """A validator of a whole number from ``low`` to ``high`` (the field's default when
    blank); ``what`` ends its refusal, ``<VARIABLE>='<value>' is not <what>``."""

    def check(value: str, info: ValidationInfo) -> int:
        number = _whole_number(value, info, low, what)
        if number > high:
            raise InvalidRequest(f"{_field(info).validation_alias}={value!r} is not {what}")
        return number

    return _or_default(check)


_port = _within(1, 65535, "a port; set a whole number from 1 to 65535")
_argon2_passes = _within(
    *ARGON2_TIME_BOUNDS, "a number of passes from {} to {}".format(*ARGON2_TIME_BOUNDS)
)
_argon2_memory = _within(
    *ARGON2_MEMORY_BOUNDS, "a memory cost in KiB from {} to {}".format(*ARGON2_MEMORY_BOUNDS)
)


#: The gzip level of an export (``KEEPSTONE_EXPORT_GZIP_LEVEL``): 1, chosen for throughput
#: (docs/performance.md, "Export and import").
DEFAULT_EXPORT_GZIP_LEVEL = 1


#: ``KEEPSTONE_KEEP_ALIVE_SECONDS`` unset: above the 60 s idle time of nginx's upstream
#: ``keepalive_timeout`` and of AWS's load balancers, and far above the few seconds
#: Keepstone's own clients keep a connection idle (:data:`keepstone.http_client.IDLE_SECONDS`).
DEFAULT_KEEP_ALIVE_SECONDS = 75

#: ``KEEPSTONE_REDIS_TIMEOUT`` unset: how long a Redis call may take (seconds).
DEFAULT_REDIS_TIMEOUT_SECONDS = 5.0


#: ``KEEPSTONE_WORKER_HEALTHCHECK_SECONDS`` unset: how long ``keepstone serve --workers N``'s
#: supervisor waits for a worker to answer its health check before it kills the worker and
#: starts another. uvicorn's own 5 s kills a worker that is only slow (a loaded machine, a
#: long import holding the interpreter, a worker still starting), dropping every connection
#: it holds without an answer; a hung worker is still replaced, later.
DEFAULT_WORKER_HEALTHCHECK_SECONDS = 30


_gzip_level = _within(
    0,
    9,
    "a gzip level: set a whole number from 0 (no compression) to 9 (smallest, slowest), or "
    "unset it for 1",
)


def _redis_url(value: object, info: ValidationInfo) -> object:
    """A Redis URL redis-py reads as written: its scheme, a port in range, and a database
    number (redis-py drops a path that is not one and uses database 0 without a word)."""
    value = _unset_when_blank(value)
    if not isinstance(value, str):
        return value
    parts = urlsplit(value)
    try:
        port_ok = parts.port is None or 1 <= parts.port
    except ValueError:
        port_ok = False
    db = parts.path.lstrip("/")
    db_ok = parts.scheme == "unix" or db == "" or (db.isascii() and db.isdigit())
    if (
        parts.scheme not in ("redis", "rediss", "unix")
        or not parts.netloc
        and parts.scheme != "unix"
    ):
        why = "it needs redis://HOST:PORT/DB (rediss:// for TLS, unix:///path.sock)"
    elif not port_ok:
        why = "its port is not one from 1 to 65535"
    elif not db_ok:
        why = "its database is not a number (redis://HOST:PORT/0)"
    else:
        return value
    raise InvalidRequest(f"{_field(info).validation_alias} is not a Redis URL: {why}")


def _field(info: ValidationInfo) -> FieldInfo:
    return Config.model_fields[str(info.field_name)]


_Text = Annotated[str | None, BeforeValidator(_unset_when_empty)]
_PositiveInt = Annotated[int, BeforeValidator(_positive_whole_number)]
_ByteCount = Annotated[int | None, BeforeValidator(_byte_count)]


class Config(BaseModel):
    """Everything a Keepstone process needs to know at start (see the module docstring)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_by_name=True, validate_by_alias=True
    )

    # --- The server (docs/deploy.md lists each of these) ---------------------------------
    #: Where local state lives (default ``~/.keepstone``): the SQLite database, the CLI's spaces.
    home: Path = Field(
        default_factory=lambda: Path.home() / ".keepstone", validation_alias="KEEPSTONE_HOME"
    )
    #: Where ``keepstone serve`` listens unless ``--host`` / ``--port`` say otherwise.
    host: str = Field("127.0.0.1", validation_alias="KEEPSTONE_HOST")
    port: Annotated[int, BeforeValidator(_port)] = Field(
        8420, ge=1, le=65535, validation_alias="KEEPSTONE_PORT"
    )
    #: Unset: ``sqlite:///$KEEPSTONE_HOME/keepstone.db``.
    database_url: str = Field("", validation_alias="KEEPSTONE_DATABASE_URL", validate_default=True)
    #: The credentials of the operator and of the host application; None: no such credential.
    admin_token: _Text = Field(None, validation_alias="KEEPSTONE_ADMIN_TOKEN")
    service_token: _Text = Field(None, validation_alias="KEEPSTONE_SERVICE_TOKEN")
    #: Key of the API key / session HMAC; None: the random secret kept in the database.
    key_hash_secret: _Text = Field(None, validation_alias="KEEPSTONE_KEY_HASH_SECRET")
    #: Cap on an import upload (the compressed tarball).
    max_import_bytes: _PositiveInt = Field(256 * MiB, validation_alias="KEEPSTONE_MAX_IMPORT_BYTES")
    #: The gzip level of an export (0-9): 1 compresses fastest, 9 smallest.
    export_gzip_level: Annotated[int, BeforeValidator(_gzip_level)] = Field(
        DEFAULT_EXPORT_GZIP_LEVEL, ge=0, le=9, validation_alias="KEEPSTONE_EXPORT_GZIP_LEVEL"
    )
    login_failures_per_minute: _PositiveInt = Field(
        5, validation_alias="KEEPSTONE_LOGIN_FAILURES_PER_MINUTE"
    )
    cookie_secure: Annotated[bool, BeforeValidator(_switch)] = Field(
        False, validation_alias="KEEPSTONE_COOKIE_SECURE"
    )
    #: argon2id cost of password hashes (argon2-cffi's defaults: 3 passes over 64 MiB).
    argon2_time_cost: Annotated[int, BeforeValidator(_argon2_passes)] = Field(
        3, validation_alias="KEEPSTONE_ARGON2_TIME_COST"
    )
    argon2_memory_kib: Annotated[
        int,
        BeforeValidator(_argon2_memory),
    ] = Field(65536, validation_alias="KEEPSTONE_ARGON2_MEMORY_KIB")
    #: The Redis of the records search limit; None: an in-process limit.
    redis_url: Annotated[str | None, BeforeValidator(_redis_url)] = Field(
        None, validation_alias="KEEPSTONE_REDIS_URL"
    )
    redis_prefix: str = Field("keepstone:", validation_alias="KEEPSTONE_REDIS_PREFIX")
    #: Seconds a call to that Redis (connecting, then each answer) may take before the
    #: search it serves answers 503: a hung Redis never holds a request longer.
    redis_timeout: Annotated[float, BeforeValidator(_timeout)] = Field(
        DEFAULT_REDIS_TIMEOUT_SECONDS, gt=0, validation_alias="KEEPSTONE_REDIS_TIMEOUT"
    )
    #: Seconds between purges of expired records; 0 turns purging off.
    records_purge_interval: Annotated[float, BeforeValidator(_seconds)] = Field(
        3600.0, validation_alias="KEEPSTONE_RECORDS_PURGE_INTERVAL"
    )
    #: Seconds ``keepstone serve`` keeps an idle keep-alive connection open; longer than
    #: any client's (or proxy's) own idle time, so the client closes first and never sends
    #: a request on a connection the server is closing (docs/deploy.md, "Keep-alive").
    keep_alive_seconds: _PositiveInt = Field(
        DEFAULT_KEEP_ALIVE_SECONDS, validation_alias="KEEPSTONE_KEEP_ALIVE_SECONDS"
    )
    #: Seconds a ``--workers N`` worker may miss the supervisor's health check before it is
    #: replaced (docs/deploy.md, "Workers").
    worker_healthcheck_seconds: _PositiveInt = Field(
        DEFAULT_WORKER_HEALTHCHECK_SECONDS, validation_alias="KEEPSTONE_WORKER_HEALTHCHECK_SECONDS"
    )
    #: Single-tenant mode (``keepstone serve --local``): no authentication.
    local: bool = False
    #: Cap on a JSON (or raw Markdown) request body: a 2 MiB document plus JSON escaping.
    max_json_bytes: int = 3 * MiB
    session_ttl_seconds: int = 14 * 24 * 3600

    # --- The command line and agents (docs/cli.md, docs/agents.md) -----------------------
    server: _Text = Field(None, validation_alias="KEEPSTONE_SERVER")
    token: _Text = Field(None, validation_alias="KEEPSTONE_TOKEN")
    team: _Text = Field(None, validation_alias="KEEPSTONE_TEAM")
    #: As written: it ranks below ``--auto-memory`` and the agent config, so
    #: :func:`keepstone.automemory.space.decide_auto_memory` parses it only when it decides.
    auto_memory: str | None = Field(None, validation_alias="KEEPSTONE_AUTO_MEMORY")
    #: Set by ``keepstone run`` for the agent it starts.
    auto_memory_dir: _Text = Field(None, validation_alias="KEEPSTONE_AUTO_MEMORY_DIR")
    #: The filesystem store's overrides (SPEC §4); None keeps the default.
    memory_quota_private: _ByteCount = Field(
        None, validation_alias="KEEPSTONE_MEMORY_QUOTA_PRIVATE"
    )
    memory_quota_bot: _ByteCount = Field(None, validation_alias="KEEPSTONE_MEMORY_QUOTA_BOT")
    memory_quota_project: _ByteCount = Field(
        None, validation_alias="KEEPSTONE_MEMORY_QUOTA_PROJECT"
    )
    memory_quota_cross_project: _ByteCount = Field(
        None, validation_alias="KEEPSTONE_MEMORY_QUOTA_CROSS_PROJECT"
    )
    memory_quota_user: _ByteCount = Field(None, validation_alias="KEEPSTONE_MEMORY_QUOTA_USER")
    memory_quota_org: _ByteCount = Field(None, validation_alias="KEEPSTONE_MEMORY_QUOTA_ORG")
    memory_quota_global: _ByteCount = Field(None, validation_alias="KEEPSTONE_MEMORY_QUOTA_GLOBAL")
    #: The whole tree's aggregate (0 refuses every write that grows it).
    memory_quota_org_total: _ByteCount = Field(
        None, validation_alias="KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL"
    )
    #: The document cap (0 refuses every non-empty document).
    memory_max_doc: _ByteCount = Field(None, validation_alias="KEEPSTONE_MEMORY_MAX_DOC")

    # --- Embeddings: search by meaning (docs/search.md, "Embedders") ---------------------
    #: ``minilm`` (all-MiniLM-L6-v2 on numpy, offline), ``http`` (an OpenAI-compatible
    #: ``/v1/embeddings`` endpoint) or ``none`` (keyword search only).
    embedder: Annotated[str, BeforeValidator(_embedder_kind)] = Field(
        "minilm", validation_alias="KEEPSTONE_EMBEDDER"
    )
    #: ``http``: the server's base URL (``POST {url}/v1/embeddings``), the model it
    #: serves, and an optional Bearer key.
    embeddings_url: Annotated[str | None, BeforeValidator(_unset_when_blank)] = Field(
        None, validation_alias="KEEPSTONE_EMBEDDINGS_URL"
    )
    embeddings_model: Annotated[str | None, BeforeValidator(_unset_when_blank)] = Field(
        None, validation_alias="KEEPSTONE_EMBEDDINGS_MODEL"
    )
    embeddings_key: _Text = Field(None, validation_alias="KEEPSTONE_EMBEDDINGS_KEY")
    #: ``minilm``: a directory holding model.safetensors and tokenizer.json; None: look in
    #: ``$KEEPSTONE_HOME/models/all-MiniLM-L6-v2``, then the installed model package.
    model_dir: Annotated[Path | None, BeforeValidator(_unset_when_blank)] = Field(
        None, validation_alias="KEEPSTONE_MODEL_DIR"
    )
    #: BLAS/OpenMP threads of the process (the default of OPENBLAS_NUM_THREADS,
    #: OMP_NUM_THREADS, MKL_NUM_THREADS, set by ``keepstone.cli.main`` before numpy loads).
    embed_threads: _PositiveInt = Field(1, validation_alias="KEEPSTONE_EMBED_THREADS")
    #: The process's cache of vector matrices (spaces' chunks, teams' records), in MB,
    #: least recently used dropped first; 0 keeps none between searches.
    vector_cache_mb: Annotated[int, BeforeValidator(_count)] = Field(
        256, validation_alias="KEEPSTONE_VECTOR_CACHE_MB"
    )
    #: PostgreSQL's pgvector for the dense side (docs/search.md, "pgvector"): ``auto``
    #: (where the extension is installed or can be created), ``on`` (refuse to start
    #: without it) or ``off`` (exact numpy only).
    pgvector: Annotated[str, BeforeValidator(_pgvector_mode)] = Field(
        "auto", validation_alias="KEEPSTONE_PGVECTOR"
    )
    #: A scope (a space's chunks, a team's records) with at least this many vectors of
    #: the model is searched through the HNSW index; a smaller one by exact numpy.
    hnsw_min_vectors: Annotated[int, BeforeValidator(_count)] = Field(
        30_000, validation_alias="KEEPSTONE_HNSW_MIN_VECTORS"
    )
    #: ``keepstone serve`` embeds pending chunks and records in a background process (``on``,
    #: the default; nothing to do with ``KEEPSTONE_EMBEDDER=none``) or leaves them (``off``).
    indexer: Annotated[bool, BeforeValidator(_on_off)] = Field(
        True, validation_alias="KEEPSTONE_INDEXER"
    )

    @field_validator("home", mode="before")
    @classmethod
    def _home(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        return Path(value.strip()).expanduser() if value.strip() else Path.home() / ".keepstone"

    @field_validator("database_url", mode="before")
    @classmethod
    def _database_url(cls, value: object, info: ValidationInfo) -> object:
        return value or "sqlite:///" + os.path.join(info.data["home"], "keepstone.db")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **flags: Any) -> Config:
        """The config of ``environ`` (default: the process environment).

        ``flags`` are command-line values that win over the environment (``database_url``,
        ``local``); a flag given as None is not given.
        """
        environ = os.environ if environ is None else environ
        found: dict[str, Any] = {
            name: environ[field.validation_alias]
            for name, field in cls.model_fields.items()
            if isinstance(field.validation_alias, str) and field.validation_alias in environ
        }
        found.update({name: value for name, value in flags.items() if value is not None})
        return cls(**found)

    def limits(self) -> Limits:
        """The filesystem store's limits: the defaults with the ``KEEPSTONE_MEMORY_*`` overrides."""
        default = Limits()
        return Limits(
            max_document=_or(self.memory_max_doc, default.max_document),
            subcaps=tuple(
                (vis, _or(getattr(self, f"memory_quota_{vis.value}"), cap))
                for vis, cap in default.subcaps
            ),
            team_quota=_or(self.memory_quota_org_total, default.team_quota),
        )


def _or(value: int | None, default: int) -> int:
    return default if value is None else value
