"""Records migrations 2 to 6 on a database made at migration 1 with records in it: the
full-text index goes, every record's terms are rewritten and its near-duplicate key
written, the teams get their search versions, and the records are searchable (and pending
for the indexer) at once, their repeated texts folded; a record saved after migration 5
extends the rows a search cached of those stored before it, and a delete of one stored
before it (listed as stored at version 0) patches them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from keepstone.db import make_engine, read_transaction, upgrade, write_transaction
from keepstone.identity import schema as ids
from keepstone.principal import CredentialKind
from keepstone.records import schema as rschema
from keepstone.records.ratelimit import LocalRateLimiter
from keepstone.records.sql import SqlRecordStore
from keepstone.search.floor import duplicate_key
from keepstone.search.text import analyze
from tests.conftest import create_postgres_database, drop_postgres_database
from tests.records.conftest import make_world, records_of

V1 = [*ids.MIGRATIONS, rschema.MIGRATIONS[0]]
TEXTS = [
    "Deploying the payments service twice a day",
    "Menu du café traduit en français",
    "修复了 登录 页面的错误",
]


@pytest.fixture(params=["sqlite", "postgres"])
def v1_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'v1.db'}" if request.param == "sqlite" else None
    url = url or create_postgres_database()
    engine = make_engine(url, pool_size=2)
    upgrade(engine, V1)
    try:
        yield engine
    finally:
        engine.dispose()
        if request.param == "postgres":
            drop_postgres_database(url)


def _insert_v1(
    engine: Engine, team: str, count: int, texts: Sequence[str] = (), first: int = 0
) -> list[str]:
    """Records as migration 1 stored them: team-prefixed tokens in ``terms`` (the FTS5
    triggers / the generated tsvector index them). ``texts``: theirs, in place of TEXTS
    numbered; ``first``: the number of the first record's id."""
    now = datetime.now(UTC)
    rows = [
        {
            "team_id": team,
            "id": f"rec_{team}_{first + i:04d}",
            "repo_id": None,
            "text": texts[i] if texts else TEXTS[i % len(TEXTS)] + f" #{i}",
            "terms": "t0123456789aold tokens",
            "created_at": now + timedelta(microseconds=i),
            "expires_at": now + timedelta(days=365),
        }
        for i in range(count)
    ]
    # Plain SQL: the table object is migration 2's, with columns v1 lacks.
    insert = sa.text(
        "INSERT INTO records (team_id, id, repo_id, text, terms, created_at, expires_at)"
        " VALUES (:team_id, :id, :repo_id, :text, :terms, :created_at, :expires_at)"
    ).bindparams(
        sa.bindparam("created_at", type_=rschema.TS),
        sa.bindparam("expires_at", type_=rschema.TS),
    )
    with write_transaction(engine) as conn:
        conn.execute(insert, rows)
    return [str(r["id"]) for r in rows]


def test_migration_2_on_a_database_with_records(v1_engine: Engine) -> None:
    engine = v1_engine
    world = make_world(engine)  # memory on: migration 1's settings table
    count = rschema.REWRITE_BATCH + 7  # more than one batch of the rewrite
    made = _insert_v1(engine, world.team_id, count)
    twins = _insert_v1(
        engine, world.team_id, 2, ["Rotated the vault keys", "rotated the VAULT keys."], count
    )
    count += 2
    applied = upgrade(engine, [*ids.MIGRATIONS, *rschema.MIGRATIONS])
    assert [(m.component, m.version) for m in applied] == [
        ("records", 2),
        ("records", 3),
        ("records", 4),
        ("records", 5),
        ("records", 6),
    ]

    inspector = sa.inspect(engine)
    columns = {c["name"] for c in inspector.get_columns("records")}
    assert {"embedding", "model", "vector_version"} <= columns and "tsv" not in columns
    assert "records_fts" not in inspector.get_table_names()
    assert "record_removals" in inspector.get_table_names()
    indexes = {i["name"] for i in inspector.get_indexes("records")}
    assert {
        "ix_records_model",
        "ix_records_team_vectors",
        "ix_records_unembedded",
        "ix_records_team_terms",
    } <= indexes
    with read_transaction(engine) as conn:
        r = rschema.records.c
        rows = conn.execute(sa.select(r.text, r.terms, r.dup_key)).all()
        assert len(rows) == count
        assert all(terms == " ".join(analyze(text)) for text, terms, _ in rows)
        assert all(key == duplicate_key(text) for text, _, key in rows)
        if engine.dialect.name == "sqlite":
            triggers = conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type='trigger'")
            assert not [t for (t,) in triggers if t.startswith("records_")]

    store = SqlRecordStore(engine)
    with store.reading() as tx:
        versions = tx.search_versions(world.team_id)
    assert (versions.terms, versions.vectors) == (1, 0)
    assert set(made) <= {p.id for p in store.pending_records(10 * count, "any-model")}
    # Searchable at once, through the service, with the rewritten terms.
    records = world.records
    found = records.search(world.principal(world.member), world.team_id, "deployed payment")
    assert len(found.hits) == 10 and all("Deploying" in h.text for h in found.hits)
    assert records.search(world.principal(world.member), world.team_id, "登录").hits
    # Records of one text stored before migration 4 fold as those saved after it do.
    [hit] = records.search(world.principal(world.member), world.team_id, "vault keys").hits
    assert sorted([hit.id, *hit.also_in]) == sorted(twins)
    # Stored before migration 5 (no terms_version): a save after it extends what the
    # searches above cached, and both are found.
    saved = records.save_as_server(world.team_id, "Deploying the ledger service at noon")
    after = records.search(world.principal(world.member), world.team_id, "deploying ledger")
    assert after.hits[0].id == saved.id and len(after.hits) == 10
    # A delete of a record stored before migration 5 patches them, and it is gone.
    owner = world.principal(world.owner, CredentialKind.SESSION)
    records.delete(owner, world.team_id, after.hits[1].id)
    patched = records.search(world.principal(world.member), world.team_id, "deploying ledger")
    assert after.hits[1].id not in {h.id for h in patched.hits}
    fresh = records_of(engine, LocalRateLimiter(rate=10**9, max_in_flight=10**9))
    again = fresh.search(world.principal(world.member), world.team_id, "deploying ledger")
    assert [(h.id, h.score) for h in patched.hits] == [(h.id, h.score) for h in again.hits]
