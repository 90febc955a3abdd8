"""``keepstone openapi``: the OpenAPI document /openapi.json serves, printed without a server
or a database (what clients/typescript's ``npm run generate`` reads)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_runner import run_cli


def test_openapi_prints_the_served_document(
    capsys: pytest.CaptureFixture[str], home: Path, tmp_path: Path
) -> None:
    code, out, err = run_cli(capsys, "openapi")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["openapi"].startswith("3.") and doc["info"]["title"] == "Keepstone"
    edit = doc["paths"]["/api/memory/doc/edit"]["post"]
    assert {p["name"] for p in edit["parameters"]} >= {"path", "name", "If-Match"}
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = out_dir / "openapi.json"
    code, out, err = run_cli(capsys, "openapi", "-o", str(target))
    assert (code, out) == (0, ""), err
    assert json.loads(target.read_text(encoding="utf-8")) == doc
    assert list(out_dir.iterdir()) == [target]  # no database left behind
