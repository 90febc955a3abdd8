"""``keepstone doctor``: one line per check, exit 1 on a FAIL, and the local store's usage
recounted after hand edits, so that ``du`` does not stay stale."""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.cli_runner import run_cli
from tests.conftest import require_postgres


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    project = tmp_path / "proj"
    project.mkdir()
    monkeypatch.setenv("KEEPSTONE_HOME", str(home))
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "none")  # the model check has its own test
    for name in (
        "KEEPSTONE_DATABASE_URL",
        "KEEPSTONE_REDIS_URL",
        "KEEPSTONE_SERVER",
        "KEEPSTONE_TOKEN",
        "KEEPSTONE_MODEL_DIR",
        "KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(project)
    return home


def doctor(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code, out, err = run_cli(capsys, "doctor", "--json", *argv)
    body = json.loads(out)
    return code, {c["name"]: c for c in body["checks"]} | {"ok": body["ok"]}


def du(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "memory", "du", "--bot", "b1", "--json")
    assert code == 0, err
    body: dict[str, Any] = json.loads(out)
    return body


def test_doctor_recounts_usage_left_stale_by_a_hand_edit(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    note = Path.cwd() / "note.md"
    note.write_text("12345")
    code, _, err = run_cli(capsys, "memory", "put", "a.md", "--bot", "b1", "--file", str(note))
    assert code == 0, err
    assert du(capsys)["used_bytes"] == 5
    (on_disk,) = (home / "spaces").rglob("a.md")
    on_disk.write_text("12345 and seventeen more")  # by hand: the counters never hear of it
    (on_disk.parent / "b.md").write_text("added by hand")
    assert du(capsys)["used_bytes"] == 5  # stale

    code, out, err = run_cli(capsys, "doctor")
    assert code == 0, err
    (line,) = [x for x in out.splitlines() if "local usage" in x]
    assert line.split()[0] == "ok"
    assert "5 B → 37 B (1 spaces changed)" in line
    (line,) = [x for x in out.splitlines() if x.split()[1] == "history"]
    assert line.split()[0] == "ok"
    assert "2 hand edits recorded as versions" in line  # a.md changed, b.md added
    assert du(capsys)["used_bytes"] == 24 + 13
    assert du(capsys)["team_used_bytes"] == 37

    # Once recounted, nothing differs.
    code, checks = doctor(capsys)
    assert code == 0 and checks["ok"] is True
    assert checks["local usage"]["detail"] == "counters match the files: 37 B"
    assert checks["history"]["detail"] == "0 hand edits recorded as versions"


def test_one_line_per_check_and_a_current_database_is_ok(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "doctor")
    assert code == 0
    names = [
        "python",
        "keepstone",
        "home",
        "database",
        "model",
        "backlog",
        "stored",
        "redis",
        "history",
        "local usage",
    ]
    assert [line.split()[0] for line in out.splitlines()] == [
        "ok",
        "ok",
        "warn",
        "warn",
        "ok",
        "ok",
        "ok",
        "ok",
        "ok",
        "ok",
    ]
    assert [line[6:].split("  ")[0].strip() for line in out.splitlines()] == names
    assert not home.exists()  # the doctor only looks
    assert run_cli(capsys, "db", "upgrade")[0] == 0
    code, checks = doctor(capsys)
    assert code == 0
    assert checks["home"]["status"] == "ok"
    assert checks["database"]["status"] == "ok"
    assert "migrations current" in checks["database"]["detail"]
    assert checks["backlog"]["detail"] == "KEEPSTONE_EMBEDDER=none: nothing is embedded"


def test_the_backlog_check_counts_what_waits_for_a_vector(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run_cli(capsys, "db", "upgrade")[0] == 0
    source = home.parent / "a.md"
    source.write_text("# A\n\nalpha", encoding="utf-8")
    put = ("memory", "put", "notes/a.md", "--bot", "b1", "--file", str(source))
    assert run_cli(capsys, *put)[0] == 0
    assert run_cli(capsys, "memory", "search", "alpha", "--bot", "b1")[0] == 0  # chunks it
    # The model is named, not loaded: a backlog is counted without it.
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "minilm")
    _, checks = doctor(capsys)
    assert checks["backlog"]["status"] == "ok"
    assert checks["backlog"]["detail"] == (
        "waiting for a vector of all-MiniLM-L6-v2: database: 0 chunks, 0 records; "
        "local store: 1 chunk"
    )


def test_the_stored_check_sums_documents_and_index(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(capsys, "db", "upgrade")[0] == 0
    _, checks = doctor(capsys)
    assert checks["stored"] == {
        "name": "stored",
        "status": "ok",
        "detail": "database: documents 0 B, index 0 B",
    }
    source = home.parent / "a.md"
    source.write_text("# A\n\nalpha beta gamma", encoding="utf-8")
    put = ("memory", "put", "notes/a.md", "--bot", "b1", "--file", str(source))
    assert run_cli(capsys, *put)[0] == 0
    assert du(capsys)["index_bytes"] == 0  # not indexed before a search
    assert run_cli(capsys, "memory", "search", "alpha", "--bot", "b1")[0] == 0
    used, index = (du(capsys)[key] for key in ("used_bytes", "index_bytes"))
    assert (used, index > len("alpha beta gamma")) == (21, True)
    _, checks = doctor(capsys)
    assert checks["stored"]["detail"] == (
        f"database: documents 0 B, index 0 B; local store: documents {used} B, index {index} B"
    )


@pytest.mark.parametrize("kind", ["missing-dir", "not-a-database", "unreachable-postgres"])
def test_a_bad_database_fails_with_exit_1(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    if kind == "missing-dir":
        url = f"sqlite:///{tmp_path / 'nowhere' / 'x.db'}"
        why = f"the directory {tmp_path / 'nowhere'} of the SQLite database does not exist"
    elif kind == "not-a-database":
        junk = tmp_path / "junk.db"
        junk.write_bytes(b"this is not a SQLite database, not at all" * 100)
        url, why = f"sqlite:///{junk}", ""
    else:  # the driver's reason, for the operator who runs doctor
        url, why = "postgresql://keepstone:s3cret@127.0.0.1:1/nothing", "Connection refused"
    code, checks = doctor(capsys, "--database", url)
    assert code == 1 and checks["ok"] is False
    assert checks["database"]["status"] == "FAIL"
    assert why in checks["database"]["detail"]
    assert "s3cret" not in checks["database"]["detail"]
    assert not (tmp_path / "nowhere").exists()
    code, out, _ = run_cli(capsys, "doctor", "--database", url)
    assert code == 1
    assert [x for x in out.splitlines() if x.startswith("FAIL")][0].split()[1] == "database"


def test_a_missing_postgres_database_is_named_with_the_command_that_creates_it(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = require_postgres().rsplit("/", 1)[0]
    name = f"missing_{uuid.uuid4().hex[:12]}"
    code, checks = doctor(capsys, "--database", f"{base}/{name}")
    assert code == 1 and checks["database"]["status"] == "FAIL"
    assert (
        f'database "{name}" does not exist; create it with: createdb'
        in checks["database"]["detail"]
    )


def test_a_world_writable_home_fails(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home.mkdir()
    os.chmod(home, home.stat().st_mode | stat.S_IWOTH)
    code, checks = doctor(capsys)
    assert code == 1
    assert checks["home"]["status"] == "FAIL"
    assert f"chmod o-w {home}" in checks["home"]["detail"]


def test_a_missing_model_says_to_install_it(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "minilm")
    monkeypatch.setenv("KEEPSTONE_MODEL_DIR", str(tmp_path / "no-model-here"))
    code, checks = doctor(capsys)
    assert code == 1  # search still works, but by keyword only: not what was configured
    assert checks["model"]["status"] == "FAIL"
    assert "run: keepstone models install" in checks["model"]["detail"]
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "none")
    code, checks = doctor(capsys)
    assert code == 0 and checks["model"]["status"] == "ok"


def test_an_unreachable_redis_fails(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KEEPSTONE_REDIS_URL", "redis://:pw0rd@127.0.0.1:1/0")
    code, checks = doctor(capsys)
    assert code == 1
    assert checks["redis"]["status"] == "FAIL"
    assert "pw0rd" not in checks["redis"]["detail"]


@pytest.mark.redis
def test_a_reachable_redis_is_ok(
    home: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KEEPSTONE_REDIS_URL", redis_url)
    code, checks = doctor(capsys)
    assert code == 0, checks
    assert checks["redis"]["status"] == "ok"
