"""``keepstone serve``'s start: a bad port, a port in use and a SQLite database in a missing
directory are each one line, before anything says "listening".

The port cases run the real ``keepstone serve`` in a subprocess; the database rule is held
in-process too, through ``keepstone db upgrade``, which opens the database the same way.
"""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

from keepstone.cli.main import main
from tests.cli_runner import keepstone_argv
from tests.serving import free_port, keepstone_serve


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    for name in (
        "KEEPSTONE_DATABASE_URL",
        "KEEPSTONE_SERVER",
        "KEEPSTONE_TOKEN",
        "KEEPSTONE_ADMIN_TOKEN",
    ):
        env.pop(name, None)
    env.update(KEEPSTONE_HOME=str(home), KEEPSTONE_INDEXER="off", KEEPSTONE_EMBEDDER="none")
    return env


def _serve(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    # A start that fails must exit on its own; a server that started would hit the timeout.
    return subprocess.run(
        [*keepstone_argv(), "serve", *argv],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
@pytest.mark.parametrize("port", ["99999", "0", "-1"])
def test_a_port_out_of_range_is_one_usage_line(tmp_path: Path, port: str) -> None:
    done = _serve(tmp_path / "home", "--port", port)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["keepstone: usage: --port must be 1-65535"]
    assert "listening" not in done.stdout + done.stderr


@pytest.mark.slow
def test_a_port_in_use_fails_in_one_line_before_listening(tmp_path: Path) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        done = _serve(tmp_path / "home", "--port", str(port))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"keepstone: conflict: 127.0.0.1:{port} is in use: stop the other server or pass --port N"
    ]
    assert "listening" not in done.stdout


@pytest.mark.slow
def test_serve_says_listening_once_bound_and_answers(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    env = _env(tmp_path / "home")
    with keepstone_serve("--local", env=env, log=log) as server:
        port = server.port
    assert f"keepstone serve: listening on http://127.0.0.1:{port}" in log.read_text()
    # The default database under a new KEEPSTONE_HOME is still created, home and all.
    assert (tmp_path / "home" / "keepstone.db").is_file()


@pytest.mark.slow
def test_serve_refuses_a_sqlite_database_in_a_missing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent-dir"
    done = _serve(
        tmp_path / "home", "--port", str(free_port()), "--database", f"sqlite:///{missing}/x.db"
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"keepstone: invalid_request: the directory {missing} of the SQLite database does not "
        "exist; create it or choose another --database"
    ]
    assert not missing.exists()


def test_db_upgrade_refuses_a_sqlite_database_in_a_missing_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KEEPSTONE_HOME", str(tmp_path / "home"))
    missing = tmp_path / "nowhere" / "deeper"
    monkeypatch.setenv("KEEPSTONE_DATABASE_URL", f"sqlite:///{missing}/x.db")
    assert main(["db", "upgrade"]) == 1
    assert f"the directory {missing} of the SQLite database does not exist" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "nowhere").exists()


def test_the_default_database_still_creates_keepstone_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "new" / "home"
    monkeypatch.setenv("KEEPSTONE_HOME", str(home))
    monkeypatch.delenv("KEEPSTONE_DATABASE_URL", raising=False)
    assert main(["db", "upgrade"]) == 0, capsys.readouterr().err
    assert (home / "keepstone.db").is_file()


def test_a_file_that_is_not_a_sqlite_database_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KEEPSTONE_HOME", str(tmp_path / "home"))
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all " * 200)
    assert main(["db", "upgrade", "--database", f"sqlite:///{junk}"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"keepstone: invalid_request: {junk} is not a SQLite database (file is not a database); "
        "choose another --database"
    ]


@pytest.mark.postgres
def test_a_postgres_database_that_does_not_exist_says_how_to_create_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sqlalchemy.engine import make_url

    from tests.conftest import require_postgres

    url = make_url(require_postgres()).set(database=f"missing_{uuid.uuid4().hex[:12]}")
    monkeypatch.setenv("KEEPSTONE_HOME", str(tmp_path / "home"))
    shown = url.render_as_string(hide_password=False)
    assert main(["db", "upgrade", "--database", shown]) == 1
    flags = f"-h {url.host}" + (f" -p {url.port}" if url.port else "")
    flags += f" -U {url.username}" if url.username else ""
    assert capsys.readouterr().err.splitlines() == [
        f'keepstone: store_unavailable: database "{url.database}" does not exist; create it '
        f"with: createdb {flags} {url.database}"
    ]


@pytest.mark.slow
def test_keepstone_port_picks_the_port_and_a_bad_one_is_one_line(tmp_path: Path) -> None:
    env = {**_env(tmp_path / "home"), "KEEPSTONE_PORT": "http"}
    done = subprocess.run(
        [*keepstone_argv(), "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "keepstone: invalid_request: KEEPSTONE_PORT='http' is not a port; set a whole number "
        "from 1 to 65535"
    ]
    with socket.socket() as other:  # the port KEEPSTONE_PORT names is the one bound
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        env["KEEPSTONE_PORT"] = str(port)
        done = subprocess.run(
            [*keepstone_argv(), "serve"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1 and f"127.0.0.1:{port} is in use" in done.stderr
