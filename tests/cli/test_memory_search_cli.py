"""``keepstone memory search``: plain and ``--json`` output on the local store, its limits, and
search by meaning with the configured embedder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_runner import run_memory

RUNBOOK = """# Deploy runbook

How we ship.

## Rollback

Run `deploy rollback` and watch the quokka dashboards.
"""


def put(capsys: pytest.CaptureFixture[str], tmp_path: Path, path: str, content: str) -> None:
    source = tmp_path / "content.md"
    source.write_text(content, encoding="utf-8")
    code, _, err = run_memory(capsys, "put", path, "--file", str(source), "--bot", "b1")
    assert code == 0, err


@pytest.fixture
def keyword_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "none")


@pytest.fixture
def with_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "minilm")


@pytest.mark.usefixtures("keyword_only")
def test_search_plain_and_json(
    home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    put(capsys, tmp_path, "ops/runbook.md", RUNBOOK)
    put(capsys, tmp_path, "notes/park.md", "# Park\nquokka sightings\n")

    code, out, err = run_memory(capsys, "search", "rollback quokka", "--bot", "b1")
    assert code == 0, err
    blocks = out.strip().split("\n\n")
    assert len(blocks) == 2
    first = blocks[0].splitlines()
    assert first[0] == "ops/runbook.md"
    assert first[1] == "  Deploy runbook > Rollback"
    assert first[2].startswith("  score ") and first[2].endswith("(keyword)")
    assert first[3] == "    Rollback Run deploy rollback and watch the quokka dashboards."
    assert blocks[1].splitlines()[0] == "notes/park.md"

    code, out, err = run_memory(capsys, "search", "quokka", "--bot", "b1", "--json", "--limit", "1")
    assert code == 0, err
    body = json.loads(out)
    assert list(body) == ["results", "pending"]
    assert body["pending"] == 0  # keyword-only search embeds nothing: nothing is pending
    assert len(body["results"]) == 1
    assert set(body["results"][0]) == {"path", "heading", "snippet", "score", "matched", "also_in"}
    assert body["results"][0]["matched"] == ["keyword"]

    code, out, _ = run_memory(
        capsys, "search", "quokka", "--bot", "b1", "--json", "--path-prefix", "notes/"
    )
    assert [h["path"] for h in json.loads(out)["results"]] == ["notes/park.md"]


@pytest.mark.usefixtures("keyword_only")
def test_search_refusals(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_memory(capsys, "search", "x", "--bot", "b1", "--limit", "0")
    assert code == 1 and "invalid_request" in err and "limit" in err
    code, _, err = run_memory(capsys, "search", "  ", "--bot", "b1")
    assert code == 1 and "invalid_request" in err
    code, out, err = run_memory(capsys, "search", "nothing", "--bot", "b1")
    assert code == 0 and out == "" and "no matches" in err


@pytest.mark.usefixtures("with_model")
def test_search_by_meaning_with_the_model(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put(capsys, tmp_path, "ops/runbook.md", RUNBOOK)
    put(capsys, tmp_path, "home/garden.md", "# Garden\nTomatoes want sun and water.\n")
    code, out, err = run_memory(
        capsys, "search", "revert a broken release", "--bot", "b1", "--json"
    )
    assert code == 0, err
    body = json.loads(out)
    results = body["results"]
    assert results[0]["path"] == "ops/runbook.md"
    assert results[0]["matched"] == ["meaning"]  # no word in common: found by meaning
    assert body["pending"] == 0  # a few chunks: all embedded within the time budget
    assert err == ""  # quick: no progress line


@pytest.mark.usefixtures("with_model")
def test_a_local_search_embeds_under_a_time_budget_and_says_what_is_left(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from keepstone import runtime
    from keepstone.service import search

    sections = "".join(f"## Part {i}\n\nThe quokka count of day {i}.\n\n" for i in range(40))
    put(capsys, tmp_path, "notes/long.md", "# Long\n\n" + sections)
    # A budget that one batch of chunks overruns, and a notice as soon as one is done:
    # what a large backlog meets after one and a half seconds, made quick.
    monkeypatch.setattr(runtime, "EMBED_BUDGET_SECONDS", 1e-3)
    monkeypatch.setattr(search, "SLOW_NOTICE_SECONDS", 0.0)
    code, out, err = run_memory(capsys, "search", "quokka", "--bot", "b1", "--json")
    assert code == 0, err
    body = json.loads(out)
    total = 41  # the title's chunk and one per part
    assert body["pending"] == total - search.LOCAL_BATCH
    said = f"embedding pending chunks for search by meaning: {search.LOCAL_BATCH} in"
    assert err.startswith(said)
    assert len(err.splitlines()) == 1
    # Each search embeds another batch; what is left is said every time.
    code, out, err = run_memory(capsys, "search", "quokka", "--bot", "b1")
    assert code == 0
    assert err.splitlines()[-1].startswith(f"{total - 2 * search.LOCAL_BATCH} chunk(s) not yet")


@pytest.mark.usefixtures("keyword_only")
def test_search_all_reads_every_readable_local_space(
    home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    put(capsys, tmp_path, "ops/runbook.md", RUNBOOK)
    source = tmp_path / "c.md"
    for flags, content in (
        (["--visibility", "org"], "# Org\nquokka habits of the team\n"),
        (["--visibility", "user", "--user", "ann"], "# Ann\nquokka notes of ann\n"),
        (["--visibility", "user", "--user", "bob"], "# Bob\nquokka notes of bob\n"),
    ):
        source.write_text(content, encoding="utf-8")
        code, _, err = run_memory(capsys, "put", "n.md", "--file", str(source), *flags)
        assert code == 0, err

    code, out, err = run_memory(capsys, "search", "quokka", "--all", "--user", "ann", "--json")
    assert code == 0, err
    results = json.loads(out)["results"]
    spaces = {(h["space"]["visibility"], h["space"]["user"]) for h in results}
    assert spaces == {("bot", None), ("org", None), ("user", "ann")}  # never bob's user space
    bot = next(h for h in results if h["space"]["visibility"] == "bot")
    assert bot["path"] == "ops/runbook.md" and bot["space"]["bot"] == "b1"
    assert set(bot) == {"path", "heading", "snippet", "score", "matched", "also_in", "space"}

    code, out, err = run_memory(capsys, "search", "rollback", "--all", "--user", "ann")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "ops/runbook.md"
    assert lines[1].startswith("  in bot space 'default', project ") and lines[1].endswith(
        ", bot b1"
    )


@pytest.mark.usefixtures("keyword_only")
def test_since_and_until_take_a_time_ago_as_the_history_flags_do(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    put(capsys, tmp_path, "ops/runbook.md", RUNBOOK)
    found = run_memory(capsys, "search", "quokka", "--bot", "b1", "--since", "1h", "--json")
    assert found[0] == 0, found[2]
    assert [hit["path"] for hit in json.loads(found[1])["results"]] == ["ops/runbook.md"]
    before = run_memory(capsys, "search", "quokka", "--bot", "b1", "--until", "1h", "--json")
    assert before[0] == 0, before[2]
    assert json.loads(before[1])["results"] == []
    code, _, err = run_memory(capsys, "search", "quokka", "--bot", "b1", "--since", "soon")
    assert code == 1 and "since must be an ISO 8601 date or time" in err
