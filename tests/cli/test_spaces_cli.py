"""``keepstone memory spaces``: the local tree's spaces with their usage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from keepstone.spaces import encode_workdir_key
from tests.cli_runner import run_memory


def put(capsys: pytest.CaptureFixture[str], path: str, text: str, *flags: str) -> None:
    file = Path.cwd() / "in.txt"
    file.write_text(text)
    code, _, err = run_memory(capsys, "put", path, "--file", str(file), *flags)
    assert code == 0, err


def test_spaces_lists_every_space_of_the_tree_with_its_usage(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put(capsys, "a.md", "12345", "--bot", "b1")
    put(capsys, "n.md", "abc", "--visibility", "user", "--user", "alice")
    put(capsys, "m.md", "xy", "--visibility", "user", "--user", "bob")
    code, out, err = run_memory(capsys, "spaces", "--json")
    assert code == 0, err
    body = json.loads(out)
    assert body["truncated"] is False
    listed = {
        (s["space"]["visibility"], s["space"]["bot"], s["space"]["user"]): s for s in body["spaces"]
    }
    bot = listed[("bot", "b1", None)]
    assert bot["used_bytes"] == 5 and bot["quota_bytes"] > 0
    assert bot["space"]["project"] == encode_workdir_key(Path.cwd())
    # On one's own machine the console sees every login's user spaces.
    assert listed[("user", None, "alice")]["used_bytes"] == 3
    assert listed[("user", None, "bob")]["used_bytes"] == 2
    code, out, _ = run_memory(capsys, "spaces")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 3
    assert any("bot=b1" in line and "5 B" in line for line in lines)


def test_spaces_on_an_empty_tree_says_where_it_looked(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_memory(capsys, "spaces")
    assert code == 0, err
    assert out.strip() == f"no spaces with documents in {home / 'spaces'}"
    code, out, _ = run_memory(capsys, "spaces", "--json")
    assert json.loads(out) == {"spaces": [], "truncated": False}
