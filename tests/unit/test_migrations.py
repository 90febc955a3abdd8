"""Every component's migrations, applied from a blank database on SQLite and PostgreSQL.

``keepstone.schema.upgrade_all`` must bring a blank database to the current schema, record
exactly the versions it applied, and be a no-op the second time (SPEC §1: migrations
run at every start, on every replica).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from keepstone import schema
from keepstone.db import Steps, applied_versions, make_engine, upgrade
from keepstone.store import sql_schema
from keepstone.store.index import chunk_bytes
from tests.conftest import create_postgres_database, drop_postgres_database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def blank_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An engine on a database nothing has touched yet."""
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'blank.db'}")
        try:
            yield engine
        finally:
            engine.dispose()
        return
    url = create_postgres_database()
    engine = make_engine(url, pool_size=2)
    try:
        yield engine
    finally:
        engine.dispose()
        drop_postgres_database(url)


def test_documents_migrations_are_ordered_and_numbered() -> None:
    versions = [m.version for m in sql_schema.MIGRATIONS]
    assert versions == list(range(1, len(versions) + 1))
    assert {m.component for m in sql_schema.MIGRATIONS} == {"documents"}
    assert all(m.description for m in sql_schema.MIGRATIONS)
    assert "keepstone.store.sql_schema" in schema.COMPONENT_MODULES
    assert set(sql_schema.MIGRATIONS) <= set(schema.all_migrations())


def test_a_step_registered_out_of_order_is_refused_where_it_is_defined() -> None:
    steps = Steps("example")

    @steps.add(1, "first")
    def first(conn: sa.Connection) -> None: ...

    with pytest.raises(ValueError, match="example migration 1 follows 1"):

        @steps.add(1, "again")
        def again(conn: sa.Connection) -> None: ...

    assert [(m.component, m.version, m.up) for m in steps] == [("example", 1, first)]


def test_upgrade_all_from_blank_then_no_op(blank_engine: Engine) -> None:
    expected = {(m.component, m.version) for m in schema.all_migrations()}
    assert applied_versions(blank_engine) == set()

    applied = schema.upgrade_all(blank_engine)
    assert [(m.component, m.version) for m in applied] == [
        (m.component, m.version) for m in schema.all_migrations()
    ]
    assert applied_versions(blank_engine) == expected

    assert schema.upgrade_all(blank_engine) == []
    assert applied_versions(blank_engine) == expected


def test_documents_migrations_build_the_tables(blank_engine: Engine) -> None:
    applied = upgrade(blank_engine, sql_schema.MIGRATIONS)
    assert applied == sql_schema.MIGRATIONS
    assert upgrade(blank_engine, sql_schema.MIGRATIONS) == []
    with blank_engine.connect() as conn:
        inspector = sa.inspect(conn)
        for table in sql_schema.metadata.sorted_tables:
            assert inspector.has_table(table.name)
            columns = {c["name"] for c in inspector.get_columns(table.name)}
            assert columns == {c.name for c in table.columns}
            pk = inspector.get_pk_constraint(table.name)["constrained_columns"]
            assert pk == [c.name for c in table.primary_key.columns]
            assert pk[0] == "tenant_id"
    recorded = {v for c, v in applied_versions(blank_engine) if c == "documents"}
    assert recorded == {m.version for m in sql_schema.MIGRATIONS}


def test_documents_v3_adds_the_index_to_a_v2_database(blank_engine: Engine) -> None:
    """A database at documents v2 (rows and all) gains memory_chunks and a zero
    search_version on every space counter."""
    v2 = sql_schema.MIGRATIONS[:2]
    assert upgrade(blank_engine, v2) == v2
    with blank_engine.connect() as conn:
        inspector = sa.inspect(conn)
        assert not inspector.has_table("memory_chunks")
        columns = {c["name"] for c in inspector.get_columns("memory_space_usage")}
        assert "search_version" not in columns
    with blank_engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO memory_space_usage (tenant_id, space_key, space_id, used_bytes) "
                "VALUES ('team-a', 'k', 'project/team-a/p1/notes', 42)"
            )
        )

    assert upgrade(blank_engine, sql_schema.MIGRATIONS) == sql_schema.MIGRATIONS[2:]
    with blank_engine.connect() as conn:
        inspector = sa.inspect(conn)
        chunks = sql_schema.memory_chunks
        assert {c["name"] for c in inspector.get_columns("memory_chunks")} == {
            c.name for c in chunks.columns
        }
        pk = inspector.get_pk_constraint("memory_chunks")["constrained_columns"]
        assert pk == ["tenant_id", "space_key", "path", "seq"]
        indexes = {i["name"]: i["column_names"] for i in inspector.get_indexes("memory_chunks")}
        assert indexes["ix_memory_chunks_model"] == ["model"]
        row = conn.execute(
            sa.text("SELECT used_bytes, search_version FROM memory_space_usage")
        ).one()
        assert tuple(row) == (42, 0)
    assert upgrade(blank_engine, sql_schema.MIGRATIONS) == []


def test_documents_v5_moves_each_live_version_onto_its_document(blank_engine: Engine) -> None:
    """A database at documents v4 kept every version in the table, the live one included;
    v5 gives each document its live version's number, actor and packed content and drops
    those rows, so the history reads back exactly as it was."""
    import zlib
    from datetime import UTC, datetime, timedelta

    from keepstone.spaces import SpaceRef, Visibility
    from keepstone.store.sql import SqlStore
    from keepstone.store.version_pack import pack_version

    v4 = sql_schema.MIGRATIONS[:4]
    assert upgrade(blank_engine, v4) == v4
    ref = SpaceRef.build(Visibility.PROJECT, "notes", tenant="team-a", project="p1")
    addr = SqlStore._address(ref)
    at = datetime(2026, 11, 1, tzinfo=UTC)
    big = "a line of notes\n" * 1000  # 16 KB
    # path -> versions as v4 kept them: (number, content or None for a deletion, actor);
    # the document's content, or None for a deleted path.
    paths: dict[str, tuple[list[tuple[int, str | None, str]], str | None]] = {
        "a.md": ([(1, "one", "user:1"), (2, "two", "user:2"), (3, "three", "user:3")], "three"),
        "big.md": ([(1, "small first", "user:1"), (2, big, "user:2")], big),
        "zlib.md": ([(1, "from the zlib era", "before-history")], "from the zlib era"),
        "gone.md": ([(1, "was here", "user:1"), (2, None, "user:1")], None),
        "again.md": ([(1, "first", "user:1"), (2, None, "user:1"), (3, "back", "user:4")], "back"),
        # A document with no row for its content: its version 1.
        "orphan.md": ([], big + "orphan"),
    }

    def etag(text: str) -> str:
        import hashlib

        return hashlib.sha256(text.encode()).hexdigest()

    V, D = sql_schema.memory_document_versions, sql_schema.memory_documents
    expected: dict[str, list[tuple[int, str, int, datetime, str, bool]]] = {}
    with blank_engine.begin() as conn:
        for path, (versions, live) in paths.items():
            history = []
            for n, text, actor in versions:
                when = at + timedelta(minutes=n)
                data = None if text is None else text.encode()
                packed = None if data is None else pack_version(data)
                if path == "zlib.md" and data is not None:
                    packed = zlib.compress(data)
                conn.execute(
                    V.insert().values(
                        tenant_id=addr["t"],
                        space_key=addr["k"],
                        space_id=addr["sid"],
                        path=path,
                        version=n,
                        etag="" if text is None else etag(text),
                        size_bytes=0 if data is None else len(data),
                        stored_bytes=0 if packed is None else len(packed),
                        content=packed,
                        at=when,
                        actor=actor,
                        deleted=text is None,
                    )
                )
                history.append(
                    (n, "" if text is None else etag(text), len(data or b""), when, actor, not data)
                )
            if live is not None:
                updated = history[-1][3] if history else at
                conn.execute(
                    sa.text(
                        "INSERT INTO memory_documents (tenant_id, space_key, path, space_id, "
                        "visibility, content, size_bytes, etag, updated_at) VALUES (:t, :k, :p, "
                        ":sid, 'project', :c, :s, :e, :u)"
                    ).bindparams(sa.bindparam("u", type_=sa.DateTime(timezone=True))),
                    {**addr, "p": path, "c": live, "s": len(live.encode()), "e": etag(live)}
                    | {"u": updated},
                )
                if not history:
                    history.append((1, etag(live), len(live.encode()), at, "before-history", False))
            expected[path] = list(reversed(history))

    assert upgrade(blank_engine, sql_schema.MIGRATIONS) == sql_schema.MIGRATIONS[4:]
    store = SqlStore(blank_engine)
    for path, versions in expected.items():
        found = [
            (v.version, v.etag, v.size_bytes, v.at, v.actor, v.deleted)
            for v in store.versions(ref, path)
        ]
        assert found == versions, path
        for n, _, _, _, _, deleted in versions:
            text = {m: t for m, t, _ in paths[path][0]}.get(n, paths[path][1])
            got = store.read_version(ref, path, n) if not deleted else None
            assert deleted or (got is not None and got.content == text), (path, n)
    with blank_engine.connect() as conn:
        live_rows = conn.execute(
            sa.select(V.c.path).select_from(
                V.join(D, sa.and_(V.c.path == D.c.path, V.c.version == D.c.version))
            )
        ).scalars()
        # A small live version's row goes; a large one's packed row stays with it. (The
        # orphan's version 1 has none: it is compressed when it is replaced... by SQL as
        # it is, so it is kept whole.)
        assert sorted(live_rows) == ["big.md"]
    # The live versions are replaced as any other: their content kept in the table.
    for path in ("a.md", "big.md", "zlib.md", "again.md", "orphan.md"):
        store.write(ref, path, "after v5")
        assert store.read_version(ref, path, expected[path][0][0]).content == paths[path][1]
        assert [v.version for v in store.versions(ref, path)][:2] == [
            expected[path][0][0] + 1,
            expected[path][0][0],
        ]


def test_documents_v6_marks_the_documents_that_have_chunks(blank_engine: Engine) -> None:
    """A database at documents v5: v6 marks each document with chunks ``chunked``, leaves
    the others (a blank one among them) for the next reconcile, and adds the partial
    indexes of the documents to chunk and the chunks to embed."""
    v5 = sql_schema.MIGRATIONS[:5]
    assert upgrade(blank_engine, v5) == v5
    columns = "tenant_id, space_key, path, space_id"
    with blank_engine.begin() as conn:
        for path in ("chunked.md", "written-since.md", "blank.md"):
            conn.execute(
                sa.text(
                    f"INSERT INTO memory_documents ({columns}, visibility, content, size_bytes, "
                    "etag, updated_at) VALUES ('t', 'k', :p, 's', 'project', 'x', 1, 'e', "
                    "CURRENT_TIMESTAMP)"
                ),
                {"p": path},
            )
        conn.execute(
            sa.text(
                f"INSERT INTO memory_chunks ({columns}, seq, visibility, heading, context, "
                "start_offset, end_offset, text, terms, updated_at) VALUES ('t', 'k', "
                "'chunked.md', 's', 0, 'project', '', '', 0, 1, 'x', 'x', CURRENT_TIMESTAMP)"
            )
        )

    assert upgrade(blank_engine, sql_schema.MIGRATIONS) == sql_schema.MIGRATIONS[5:]
    d = sql_schema.memory_documents
    with blank_engine.connect() as conn:
        marked = dict(conn.execute(sa.select(d.c.path, d.c.chunked)).all())
        inspector = sa.inspect(conn)
        documents = {i["name"] for i in inspector.get_indexes("memory_documents")}
        chunks = {i["name"] for i in inspector.get_indexes("memory_chunks")}
    assert marked == {"chunked.md": True, "written-since.md": False, "blank.md": False}
    assert "ix_memory_documents_unchunked" in documents
    assert "ix_memory_chunks_unembedded" in chunks


def test_documents_v9_counts_the_bytes_of_chunks_written_before(blank_engine: Engine) -> None:
    """A database at documents v8, its chunks without ``stored_bytes``: v9 adds the column,
    counts each existing row as a new one is counted (UTF-8 text, and the vector blob), and
    the index that sums a space's."""
    v8 = sql_schema.MIGRATIONS[:8]
    assert upgrade(blank_engine, v8) == v8
    columns = "tenant_id, space_key, path, space_id, seq, visibility, heading, context"
    rows = [
        (0, "Café", "Menu", "crème brûlée", "creme brulee", b"\x01\x02\x03\x04"),
        (1, "", "", "x", "x", None),
    ]
    with blank_engine.begin() as conn:
        # As v3 made the table before v9 existed (v3 builds today's table on a blank one).
        conn.exec_driver_sql("DROP INDEX ix_memory_chunks_space_bytes")
        conn.exec_driver_sql("ALTER TABLE memory_chunks DROP COLUMN stored_bytes")
        for seq, heading, context, text, terms, blob in rows:
            conn.execute(
                sa.text(
                    f"INSERT INTO memory_chunks ({columns}, start_offset, end_offset, text, "
                    "terms, embedding, updated_at) VALUES ('t', 'k', 'a.md', 's', :n, "
                    "'project', :h, :c, 0, 1, :x, :terms, :blob, CURRENT_TIMESTAMP)"
                ),
                {"n": seq, "h": heading, "c": context, "x": text, "terms": terms, "blob": blob},
            )

    assert upgrade(blank_engine, sql_schema.MIGRATIONS) == sql_schema.MIGRATIONS[8:]
    c = sql_schema.memory_chunks
    with blank_engine.connect() as conn:
        counted = dict(conn.execute(sa.select(c.c.seq, c.c.stored_bytes)).all())
        chunks = {i["name"] for i in sa.inspect(conn).get_indexes("memory_chunks")}
    assert counted == {seq: chunk_bytes(*row) for seq, *row in rows}
    assert counted[0] == 5 + 4 + 15 + 12 + 4  # UTF-8 bytes, not characters
    assert "ix_memory_chunks_space_bytes" in chunks


def test_documents_v11_stamps_chunks_written_before_with_zero(blank_engine: Engine) -> None:
    """A database at documents v10, its chunks without ``stamp``: v11 adds the column (0 on
    every row written before: they are read whole by a first search anyway) and the index
    a search reads each document's digest of stamps from."""
    v10 = sql_schema.MIGRATIONS[:10]
    assert upgrade(blank_engine, v10) == v10
    with blank_engine.begin() as conn:
        # As v3 made the table before v11 existed (v3 builds today's table on a blank one).
        conn.exec_driver_sql("DROP INDEX ix_memory_chunks_space_stamps")
        conn.exec_driver_sql("ALTER TABLE memory_chunks DROP COLUMN stamp")
        conn.execute(
            sa.text(
                "INSERT INTO memory_chunks (tenant_id, space_key, path, space_id, seq, "
                "visibility, heading, context, start_offset, end_offset, text, terms, "
                "updated_at) VALUES ('t', 'k', 'a.md', 's', 0, 'project', '', '', 0, 1, 'x', "
                "'x', CURRENT_TIMESTAMP)"
            )
        )
    assert upgrade(blank_engine, sql_schema.MIGRATIONS) == sql_schema.MIGRATIONS[10:]
    c = sql_schema.memory_chunks
    with blank_engine.connect() as conn:
        assert conn.execute(sa.select(c.c.path, c.c.stamp)).all() == [("a.md", 0)]
        chunks = {i["name"] for i in sa.inspect(conn).get_indexes("memory_chunks")}
    assert "ix_memory_chunks_space_stamps" in chunks
