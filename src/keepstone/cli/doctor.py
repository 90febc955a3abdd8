"""``keepstone doctor``: check the install, one line per check.

Each check is ``ok``, ``warn`` (works, but something is missing or was off: the line
says what to do) or ``FAIL`` (something Keepstone needs is broken: the line says what to
do). Exit status 1 when any check FAILs, else 0. ``--json`` prints them as one object.

The checks: Python and Keepstone; ``$KEEPSTONE_HOME`` (exists, writable, not world-writable);
the database (opens, migrations current); the embedding model (loads); Redis when
``KEEPSTONE_REDIS_URL`` is set; the local store's history, which records hand edits of the
tree as versions; and the local store's usage counters, recounted from the files (hand
edits bypass them), old and new totals shown when they differed. ``stored`` sums what the
database and the local store hold, every team together: documents and search index.
Nothing is created: a missing ``$KEEPSTONE_HOME`` or default database is a warning.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import stat
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from keepstone import __version__, runtime
from keepstone.cli.common import add_database_arg, cli_command, cli_config, human_bytes
from keepstone.config import Config
from keepstone.errors import KeepstoneError
from keepstone.service.access import LOCAL_TEAM
from keepstone.text import counted

if TYPE_CHECKING:
    from keepstone.documents import StoredBytes
    from keepstone.runtime import MemoryStore, Runtime

T = TypeVar("T")

OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: str
    detail: str


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check the install: home, database, model, Redis; recount local usage",
        description="Check the install, one line per check; exit 1 when any check FAILs.",
    )
    add_database_arg(parser)
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    parser.set_defaults(func=cli_command(run))


def run(args: argparse.Namespace) -> int:
    config = cli_config(args)
    checks = [check(config) for check in CHECKS]
    failed = any(c.status == FAIL for c in checks)
    if args.json:
        print(json.dumps({"ok": not failed, "checks": [asdict(c) for c in checks]}))
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            print(f"{c.status:<4}  {c.name:<{width}}  {c.detail}")
    return 1 if failed else 0


def _python(_config: Config) -> Check:
    # An older Python cannot import Keepstone at all: reaching here means a supported one.
    return Check("python", OK, f"{platform.python_version()} ({sys.executable})")


def _keepstone(_config: Config) -> Check:
    return Check("keepstone", OK, f"{__version__} ({Path(__file__).resolve().parents[1]})")


def _home(config: Config) -> Check:
    home = config.home
    if not home.exists():
        return Check("home", WARN, f"{home} does not exist yet; Keepstone creates it on first use")
    if not home.is_dir():
        return Check("home", FAIL, f"{home} is not a directory; remove it or set KEEPSTONE_HOME")
    if not os.access(home, os.W_OK | os.X_OK):
        return Check("home", FAIL, f"{home} is not writable by you; fix its owner or mode")
    if home.stat().st_mode & stat.S_IWOTH:
        return Check(
            "home",
            FAIL,
            f"{home} is world-writable: anyone on this machine can change your memory; "
            f"run: chmod o-w {home}",
        )
    return Check("home", OK, f"{home}")


def _database(config: Config) -> Check:
    url = config.database_url
    shown = url.split("@", 1)[-1] if "@" in url else url  # never print a password
    file = _sqlite_file(url)
    # Opening a SQLite file that is not there would create it: only say it will be. A
    # missing directory other than $KEEPSTONE_HOME is refused below, as every command does.
    if file is not None and not file.exists():
        if file.parent.is_dir() or file.parent == config.home.absolute():
            return Check(
                "database",
                WARN,
                f"{shown} does not exist yet; `keepstone serve` or `keepstone db upgrade` "
                "creates it",
            )
    from keepstone.service.doctor import migration_state  # SQLAlchemy: loaded by this check only

    try:
        engine = runtime.open_engine(config, migrate=False)
        try:
            state = migration_state(engine)
        finally:
            engine.dispose()
    except KeepstoneError as exc:
        return Check("database", FAIL, f"{shown}: {exc.operator_message or exc.message}")
    if state.unknown:
        return Check(
            "database",
            FAIL,
            f"{shown} was migrated by a newer Keepstone ({', '.join(state.unknown)}); "
            "upgrade Keepstone to use it",
        )
    if state.pending:
        return Check(
            "database",
            WARN,
            f"{shown}: {len(state.pending)} migrations pending; run: keepstone db upgrade "
            "(keepstone serve applies them at start)",
        )
    return Check("database", OK, f"{shown} (migrations current)")


def _sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///path`` URL, absolute; None for any other database."""
    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else ""
    return Path(path).absolute() if path and path != ":memory:" else None


def _model(config: Config) -> Check:
    status = runtime.describe_embedder(config)
    if status.kind == "none":
        return Check("model", OK, "KEEPSTONE_EMBEDDER=none: search is by keyword only")
    if status.ready:
        where = f" at {status.location}" if status.location else ""
        return Check("model", OK, f"{status.kind}: {status.model_id}, {status.dim} dims{where}")
    # The configured embedder cannot embed: searches fall back to keyword, which is not
    # what was asked for, so this fails (KEEPSTONE_EMBEDDER=none chooses keyword on purpose).
    todo = "run: keepstone models install" if status.kind == "minilm" else "check the endpoint"
    return Check(
        "model",
        FAIL,
        f"{status.kind}: {status.problem} — search is by keyword only until then; {todo} "
        "(or set KEEPSTONE_EMBEDDER=none)",
    )


def _redis(config: Config) -> Check:
    if not config.redis_url:
        return Check("redis", OK, "KEEPSTONE_REDIS_URL is not set: the search limit is in-process")
    from keepstone.service.doctor import ping_redis

    shown = config.redis_url.split("@", 1)[-1]  # never print a password
    try:
        ping_redis(config.redis_url, config.redis_timeout)
    except KeepstoneError as exc:
        return Check(
            "redis",
            FAIL,
            f"{shown}: {exc.message}; start Redis or fix KEEPSTONE_REDIS_URL (unset: in-process)",
        )
    return Check("redis", OK, f"{shown} answers")


def _backlog(config: Config) -> Check:
    """What waits for a vector: the database's chunks and records (when it exists and is
    migrated), the local store's chunks. Never a failure: search answers meanwhile."""
    from keepstone.service.indexer import backlog

    model = runtime.configured_model_id(config)
    if model is None:
        return Check("backlog", OK, "KEEPSTONE_EMBEDDER=none: nothing is embedded")

    def count(rt: Runtime) -> str:
        found = rt.backlog()
        return f"{_counted(found.chunks, 'chunk')}, {_counted(found.records, 'record')}"

    said = _in_database(config, count)
    local = _on_local_store(config, "backlog", "cannot count", lambda s: backlog(s, None, model))
    if not isinstance(local, Check):
        said.append(f"local store: {_counted(local.chunks, 'chunk')}")
    waiting = "; ".join(said) or "nothing to count yet"
    return Check("backlog", OK, f"waiting for a vector of {model}: {waiting}")


def _counted(number: int | None, noun: str) -> str:
    """``3 chunks``, ``1 chunk``; ``chunks not counted`` for a store that cannot count them."""
    return f"{noun}s not counted" if number is None else counted(number, noun)


def _stored(config: Config) -> Check:
    """What the database and the local store hold, every team and space together: the
    documents' bytes and their search index's (which counts against no quota). Never a
    failure: the figures are for the operator."""
    from keepstone.service.doctor import stored_totals

    def said_of(found: StoredBytes | None) -> str:
        if found is None:
            return "not counted by this store"
        return (
            f"documents {human_bytes(found.document_bytes)}, index {human_bytes(found.index_bytes)}"
        )

    said = _in_database(config, lambda rt: said_of(stored_totals(rt.store)))
    local = _on_local_store(config, "stored", "cannot count", stored_totals)
    if not isinstance(local, Check):
        said.append(f"local store: {said_of(local)}")
    return Check("stored", OK, "; ".join(said) or "nothing stored yet")


def _in_database(config: Config, act: Callable[[Runtime], str]) -> list[str]:
    """``database: <what act says of it>`` when the database exists and is migrated,
    ``database: not counted (why)`` when it does not answer; nothing when it is not there."""
    if _database(config).status != OK:
        return []
    try:
        rt = runtime.open_runtime(config, migrate=False)
        try:
            return [f"database: {act(rt)}"]
        finally:
            rt.close()
    except KeepstoneError as exc:
        return [f"database: not counted ({exc.operator_message or exc.message})"]


def _on_local_store(
    config: Config, name: str, failing: str, act: Callable[[MemoryStore], T]
) -> T | Check:
    """What ``act`` finds in the local store; else the check ``name`` that says why not:
    no local spaces yet (ok), or ``failing`` and the refusal (fail)."""
    root = config.home / "spaces"
    if not root.is_dir():
        return Check(name, OK, f"no local spaces yet ({root})")
    try:
        return act(runtime.open_local_store(config))
    except KeepstoneError as exc:
        return Check(name, FAIL, f"{root}: {failing}: {exc.message}")


def _local_history(config: Config) -> Check:
    from keepstone.service.doctor import record_hand_edits

    found = _on_local_store(config, "history", "cannot record hand edits", record_hand_edits)
    if isinstance(found, Check):
        return found
    return Check("history", OK, f"{counted(found, 'hand edit')} recorded as versions")


def _local_usage(config: Config) -> Check:
    from keepstone.service.doctor import recount_local_store

    found = _on_local_store(
        config, "local usage", "cannot recount", lambda s: recount_local_store(s, LOCAL_TEAM)
    )
    if isinstance(found, Check):
        return found
    if not found.changed:
        return Check("local usage", OK, f"counters match the files: {human_bytes(found.after)}")
    return Check(
        "local usage",
        OK,
        f"recounted after hand edits: {human_bytes(found.before)} → {human_bytes(found.after)} "
        f"({found.spaces_changed} spaces changed)",
    )


CHECKS: tuple[Callable[[Config], Check], ...] = (
    _python,
    _keepstone,
    _home,
    _database,
    _model,
    _backlog,
    _stored,
    _redis,
    _local_history,  # before the recount, which records hand edits too (uncounted)
    _local_usage,
)
