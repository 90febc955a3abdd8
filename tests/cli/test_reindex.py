"""``keepstone reindex``: the server database's index, backfilled in one command (real model).

It chunks every unindexed document and embeds every pending chunk (``--json`` counts
them), does nothing the second time, starts over with ``--rebuild``, only chunks with
``KEEPSTONE_EMBEDDER=none`` (and says search by meaning is off), and refuses in one line
when the model is not installed. ``keepstone memory reindex`` embeds the local store's
chunks through the same code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from keepstone.cli.main import main
from keepstone.config import Config
from keepstone.db import make_engine
from keepstone.db.vectors import decode
from keepstone.records.schema import records
from keepstone.runtime import open_runtime
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.fs import FilesystemStore
from keepstone.store.sql import SqlStore
from tests.cli_runner import run_cli
from tests.records.conftest import make_world

MODEL = "all-MiniLM-L6-v2"
REF = SpaceRef.build(Visibility.PROJECT, "notes", tenant="team-a", project="p1")


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("KEEPSTONE_HOME", str(tmp_path / "home"))
    for name in (
        "KEEPSTONE_DATABASE_URL",
        "KEEPSTONE_EMBEDDER",
        "KEEPSTONE_MODEL_DIR",
        "KEEPSTONE_SERVER",
    ):
        monkeypatch.delenv(name, raising=False)
    url = f"sqlite:///{tmp_path / 'keepstone.db'}"
    store = SqlStore.open(url)
    try:
        for i in range(3):
            store.write(REF, f"n/{i}.md", f"# Note {i}\n\nDeploy {i}.\n\n## Fix\n\nRetry {i}.\n")
    finally:
        store.close()
    return url


def stored(url: str) -> list[tuple[str | None, int]]:
    store = SqlStore.open(url)
    try:
        return [
            (r.model, len(decode(r.embedding)) if r.embedding else 0) for r in store.chunk_rows(REF)
        ]
    finally:
        store.close()


def test_reindex_chunks_and_embeds_everything_then_nothing(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, "reindex", "--database", database, "--json")
    assert code == 0, err
    assert json.loads(out) == {
        "documents": 3,
        "chunks_embedded": 6,
        "records_embedded": 0,
        "model": MODEL,
    }
    assert err == ""  # off a terminal, a run shorter than the plain lines' period says nothing
    assert stored(database) == [(MODEL, 384)] * 6
    code, out, _ = run_cli(capsys, "reindex", "--database", database, "--json")
    assert json.loads(out)["documents"] == 0 and json.loads(out)["chunks_embedded"] == 0
    code, out, _ = run_cli(capsys, "reindex", "--database", database)
    assert (code, out) == (
        0,
        f"reindexed 0 document(s); embedded 0 chunk(s) and 0 record(s) with {MODEL}\n",
    )


def test_off_a_terminal_the_progress_is_a_plain_line_every_few_seconds(
    database: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from keepstone.cli import common

    monkeypatch.setattr(common, "PLAIN_EVERY_SECONDS", 0.0)  # a line at every batch
    code, _, err = run_cli(capsys, "reindex", "--database", database, "--json")
    assert code == 0
    lines = err.splitlines()
    embedding = [line for line in lines if line.startswith("embedding: ")]
    assert embedding, err
    # The total is the backlog counted once chunking is over; the last line says all done.
    assert embedding[-1].startswith("embedding: 6/6 (") and "/s, " in embedding[-1]
    assert all(line.startswith(("chunking documents: ", "embedding: ")) for line in lines)
    assert any("left)" in line for line in embedding[:-1]) or len(embedding) == 1


def test_rebuild_drops_every_vector_first(
    database: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEPSTONE_DATABASE_URL", database)  # as `keepstone serve` reads it
    assert run_cli(capsys, "reindex", "--json")[0] == 0
    code, out, _ = run_cli(capsys, "reindex", "--rebuild", "--json")
    assert code == 0
    assert json.loads(out)["documents"] == 3
    assert json.loads(out)["chunks_embedded"] == 6
    assert stored(database) == [(MODEL, 384)] * 6


def test_with_no_embedder_it_chunks_only_and_says_so(
    database: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "none")
    code, out, err = run_cli(capsys, "reindex", "--database", database)
    assert code == 0
    assert out == "reindexed 3 document(s)\n"
    assert "search by meaning is off (KEEPSTONE_EMBEDDER=none)" in err
    assert stored(database) == [(None, 0)] * 6  # keyword-searchable, nothing embedded
    code, out, _ = run_cli(capsys, "reindex", "--database", database, "--json")
    assert json.loads(out) == {
        "documents": 0,
        "chunks_embedded": 0,
        "records_embedded": 0,
        "model": None,
    }


def test_a_model_that_is_not_installed_is_one_line_and_exit_1(
    database: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("KEEPSTONE_MODEL_DIR", str(tmp_path / "no-model"))
    code, out, err = run_cli(capsys, "reindex", "--database", database)
    assert code == 1
    assert out == ""
    assert len(err.splitlines()) == 1
    assert "keepstone models install" in err
    assert stored(database) == []  # refused before touching the database


def test_memory_reindex_embeds_the_local_store_through_the_same_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("KEEPSTONE_HOME", str(home))
    for name in (
        "KEEPSTONE_EMBEDDER",
        "KEEPSTONE_MODEL_DIR",
        "KEEPSTONE_SERVER",
        "KEEPSTONE_TOKEN",
    ):
        monkeypatch.delenv(name, raising=False)
    local = SpaceRef.build(Visibility.PROJECT, "notes", tenant="local", project="p1")
    store = FilesystemStore(home / "spaces")
    store.write(local, "a.md", "# Alpha\n\nFirst note.\n")
    store.close()
    assert main(["memory", "reindex"]) == 0
    out, err = capsys.readouterr()
    assert out == "reindexed 1 document(s)\n"
    assert err == f"embedded 1 chunk(s) with {MODEL}\n"
    store = FilesystemStore(home / "spaces")
    try:
        assert store.pending_chunks(10, MODEL) == []
        assert [r.model for r in store.chunk_rows(local)] == [MODEL]
    finally:
        store.close()


def test_reindex_embeds_team_records_and_rebuild_drops_their_vectors(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime = open_runtime(Config(database_url=database))
    try:
        team = make_world(runtime.engine).team_id
        for i in range(3):
            runtime.records.save_as_server(team, f"Pinned the base image of build {i}")
    finally:
        runtime.close()
    code, out, _ = run_cli(capsys, "reindex", "--database", database, "--json")
    assert code == 0
    assert json.loads(out)["records_embedded"] == 3
    assert json.loads(out)["chunks_embedded"] == 6
    assert record_models(database) == [MODEL] * 3
    assert (
        json.loads(run_cli(capsys, "reindex", "--database", database, "--json")[1])[
            "records_embedded"
        ]
        == 0
    )
    code, out, _ = run_cli(capsys, "reindex", "--database", database, "--rebuild", "--json")
    assert json.loads(out)["records_embedded"] == 3
    assert record_models(database) == [MODEL] * 3


def record_models(url: str) -> list[str | None]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.select(records.c.model)).scalars())
    finally:
        engine.dispose()
