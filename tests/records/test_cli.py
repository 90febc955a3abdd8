"""``keepstone records add|purge|enable|disable`` against the real database."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.engine import Engine

from keepstone.cli.main import main
from tests.records.conftest import World


def _url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def test_add_and_purge(
    engine: Engine, world: World, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    url = _url(engine)
    rc = main(
        [
            "records",
            "add",
            "--team",
            world.team_id,
            "--repo",
            world.repo_a,
            "--text",
            "rotated AKIAABCDEFGHIJKLMNOP",
            "--database",
            url,
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    listed = world.records.list(world.principal(world.member), world.team_id).records
    assert [r.id for r in listed] == [out["id"]]
    assert "AKIA" not in listed[0].text

    world.records.save_as_server(world.team_id, "old", now=datetime.now(UTC) - timedelta(days=400))
    assert main(["records", "purge", "--database", url]) == 0
    assert json.loads(capsys.readouterr().out)["purged"] >= 1


def test_add_refusals_are_one_line(
    engine: Engine, world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _url(engine)
    assert main(["records", "disable", "--team", world.team_id, "--database", url]) == 0
    capsys.readouterr()
    assert main(["records", "add", "--team", world.team_id, "--text", "x", "--database", url]) == 1
    err = capsys.readouterr().err
    assert err.startswith("keepstone: memory_off:") and err.count("\n") == 1
    assert main(["records", "enable", "--team", world.team_id, "--database", url]) == 0
    assert main(["records", "add", "--team", "nope", "--text", "x", "--database", url]) == 1
    assert "team_not_found" in capsys.readouterr().err
    assert main(["records", "add", "--team", world.team_id, "--text", "", "--database", url]) == 1
    assert "invalid_request" in capsys.readouterr().err
