"""docs/deploy.md cannot drift from the code it describes: every variable a server
replica reads, the pool size, the migration lock and every table are in it."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import keepstone.db as db
from keepstone.db import migrations
from keepstone.identity import schema as identity_schema
from keepstone.records import schema as records_schema
from keepstone.store import sql_schema

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")

#: The environment variables that shape a server deployment: the server part of the
#: configuration (the command line's own variables follow it).
SERVER_SETTINGS = (ROOT / "src/keepstone/config.py").read_text().split("# --- The command line")[0]


def test_every_server_variable_is_documented() -> None:
    names = set(re.findall(r'"(KEEPSTONE_[A-Z0-9_]+)"', SERVER_SETTINGS))
    assert "KEEPSTONE_DATABASE_URL" in names and "KEEPSTONE_REDIS_URL" in names
    missing = sorted(n for n in names if f"`{n}`" not in DOC)
    assert not missing, f"docs/deploy.md does not mention {missing}"


def test_pool_and_lock_figures_match_the_code() -> None:
    pool_size = inspect.signature(db.make_engine).parameters["pool_size"].default
    assert f"pool_size={pool_size}" in DOC
    per_replica = 2 * pool_size  # max_overflow=pool_size in make_engine
    assert "max_overflow=pool_size" in inspect.getsource(db.make_engine)
    assert f"at most {per_replica} connections per replica" in DOC
    lock = re.search(r"pg_advisory_xact_lock\((\d+)\)", inspect.getsource(migrations._lock))
    assert lock is not None and f"pg_advisory_xact_lock({lock.group(1)})" in DOC


def test_every_table_has_a_place_in_the_distribution_plan() -> None:
    tables = (
        set(sql_schema.metadata.tables)
        | set(identity_schema.metadata.tables)
        | set(identity_schema.metadata_v2.tables)
        | set(records_schema.metadata.tables)
        | {"records", "keepstone_migrations"}
    )
    section = DOC.split("## When one primary is not enough", 1)[1]
    missing = sorted(t for t in tables if f"`{t}`" not in section and f"'{t}'" not in section)
    assert not missing, f"the distribution plan in docs/deploy.md leaves out {missing}"
