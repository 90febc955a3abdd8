"""Which space a run uses, whether auto-memory is on, and the bounded fold-back."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from keepstone.agentconfig import parse_config_text
from keepstone.automemory import (
    auto_memory_ref,
    decide_auto_memory,
    fold_back,
    materialise,
    render_prompt,
    repository_root,
    resolve_bot_id,
)
from keepstone.automemory.sync import sync_budget
from keepstone.cli.main import main
from keepstone.errors import InvalidRequest
from keepstone.service.access import console_principal
from keepstone.service.spaces import SpaceService
from keepstone.spaces import AUTO_MEMORY_SPACE, Visibility, encode_workdir_key
from keepstone.store.fs import FilesystemStore
from tests.automemory.agent_script import AGENT
from tests.cli_runner import keepstone_argv

#: The operator at the local console, as the CLI and `keepstone run` act.
ME = console_principal("local")


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "work" / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "pkg" / "sub").mkdir(parents=True)
    return repo


def test_the_space_is_keyed_on_the_repository_root(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    root_ref = auto_memory_ref("whats-next", repo, tenant="local")
    assert root_ref.visibility is Visibility.BOT and root_ref.name == AUTO_MEMORY_SPACE
    assert root_ref.project == encode_workdir_key(repo) and root_ref.bot == "whats-next"
    assert auto_memory_ref("whats-next", repo / "pkg" / "sub", tenant="local") == root_ref
    assert repository_root(repo / "pkg") == repo.resolve()
    # Another bot, or a directory outside any repository, is another space.
    assert auto_memory_ref("other", repo, tenant="local") != root_ref
    outside = tmp_path / "loose"
    outside.mkdir()
    assert repository_root(outside) == outside.resolve()
    # A worktree's .git is a file; it still marks the root.
    wt = tmp_path / "wt"
    (wt / "a").mkdir(parents=True)
    (wt / ".git").write_text("gitdir: /elsewhere\n")
    assert repository_root(wt / "a") == wt.resolve()


def test_runs_from_root_subdir_and_a_resume_share_one_space(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEPSTONE_")}
    env.update(KEEPSTONE_HOME=str(tmp_path / "home"), AGENT_REPORT=str(tmp_path / "r.json"))
    for cwd, line in ((repo, "first"), (repo / "pkg", "second"), (repo / "pkg" / "sub", "resume")):
        subprocess.run(
            [
                *keepstone_argv(),
                "run",
                "--auto-memory",
                "on",
                "--bot",
                "whats-next",
                "--",
                sys.executable,
                str(agent),
                "append",
            ],
            cwd=cwd,
            env={**env, "AGENT_LINE": line},
            check=True,
            timeout=120,
            capture_output=True,
        )
    ref = auto_memory_ref("whats-next", repo, tenant="local")
    doc = FilesystemStore(tmp_path / "home" / "spaces").read(ref, "MEMORY.md")
    assert doc.content == "first\nsecond\nresume\n"


def test_precedence_of_the_switch() -> None:
    on = parse_config_text("auto_memory: on\n", "c.yaml")
    off = parse_config_text("auto_memory: off\n", "c.yaml")
    silent = parse_config_text("backend: claw\n", "c.yaml")
    assert decide_auto_memory("off", on, {"KEEPSTONE_AUTO_MEMORY": "on"}) is False
    assert decide_auto_memory("on", off, {}) is True
    assert decide_auto_memory(None, off, {"KEEPSTONE_AUTO_MEMORY": "on"}) is False
    assert decide_auto_memory(None, on, {"KEEPSTONE_AUTO_MEMORY": "off"}) is True
    assert decide_auto_memory(None, silent, {"KEEPSTONE_AUTO_MEMORY": "on"}) is True
    assert decide_auto_memory(None, None, {"KEEPSTONE_AUTO_MEMORY": "1"}) is True
    assert decide_auto_memory(None, None, {"KEEPSTONE_AUTO_MEMORY": "off"}) is False
    assert decide_auto_memory(None, None, {}) is False
    with pytest.raises(InvalidRequest, match="KEEPSTONE_AUTO_MEMORY"):
        decide_auto_memory(None, None, {"KEEPSTONE_AUTO_MEMORY": "sometimes"})


def test_bot_id_rule(tmp_path: Path) -> None:
    cfg = parse_config_text("memory:\n  scope: {bot: from-scope}\n", str(tmp_path / "b" / "x.yaml"))
    bare = parse_config_text("auto_memory: on\n", str(tmp_path / "bundle-dir" / "x.yaml"))
    assert resolve_bot_id("flag", cfg) == "flag"
    assert resolve_bot_id(None, cfg) == "from-scope"
    assert resolve_bot_id(None, bare) == "bundle-dir"
    with pytest.raises(InvalidRequest, match="--bot"):
        resolve_bot_id(None, None)


def test_budget_grows_with_what_there_is_to_persist() -> None:
    assert sync_budget(0, 0) < sync_budget(0, 10) < sync_budget(50 << 20, 10)


def test_a_sync_past_its_deadline_persists_nothing_and_says_so(tmp_path: Path) -> None:
    svc = SpaceService(FilesystemStore(tmp_path / "spaces"))
    ref = auto_memory_ref("b", tmp_path, tenant="local")
    svc.write(ME, ref, "MEMORY.md", "v1")
    directory = tmp_path / "dir"
    directory.mkdir()
    snap = materialise(svc, ref, directory)
    (directory / "MEMORY.md").write_text("v2")
    (directory / "new.md").write_text("n")
    warnings: list[str] = []
    report = fold_back(
        svc, ref, directory, snap, deadline=time.monotonic() - 1, warn=warnings.append
    )
    assert not report.ok and {p for p, _ in report.failed} == {"MEMORY.md", "new.md"}
    assert all("time bound" in w for w in warnings)
    assert svc.read(ref, "MEMORY.md").content == "v1"


def test_a_concurrent_change_is_not_overwritten(tmp_path: Path) -> None:
    svc = SpaceService(FilesystemStore(tmp_path / "spaces"))
    ref = auto_memory_ref("b", tmp_path, tenant="local")
    svc.write(ME, ref, "MEMORY.md", "v1")
    svc.write(ME, ref, "gone.md", "g1")
    directory = tmp_path / "dir"
    directory.mkdir()
    snap = materialise(svc, ref, directory)
    svc.write(ME, ref, "MEMORY.md", "another run")  # lands while this run works
    svc.write(ME, ref, "gone.md", "g2")
    (directory / "MEMORY.md").write_text("this run")
    (directory / "gone.md").unlink()
    warnings: list[str] = []
    report = fold_back(
        svc, ref, directory, snap, deadline=time.monotonic() + 60, warn=warnings.append
    )
    assert {p for p, _ in report.failed} == {"MEMORY.md", "gone.md"}
    assert svc.read(ref, "MEMORY.md").content == "another run"
    assert svc.read(ref, "gone.md").content == "g2"
    assert all("precondition_failed" in w for w in warnings)


def test_prompt_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "MEMORY.md").write_text("- deploy: see deploy.md\n")
    assert main(["auto-memory", "prompt", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out == render_prompt(tmp_path)
    assert out.startswith("# Auto memory\n") and str(tmp_path) in out
    assert "- deploy: see deploy.md" in out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "does not exist yet" in render_prompt(empty)
    assert main(["auto-memory", "prompt", "--dir", str(tmp_path / "nope")]) == 2


def test_run_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--auto-memory", "on"]) == 2
    assert "after '--'" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("auto_memory: perhaps\n")
    assert main(["run", "--config", str(bad), "--", "true"]) == 1
    assert "C131" in capsys.readouterr().err


def test_what_a_run_folds_back_is_the_agent_run_s_in_the_feed(tmp_path: Path) -> None:
    svc = SpaceService(FilesystemStore(tmp_path / "spaces"))
    ref = auto_memory_ref("b", tmp_path, tenant="local")
    svc.write(ME, ref, "MEMORY.md", "v1")
    svc.write(ME, ref, "old.md", "o")
    directory = tmp_path / "dir"
    directory.mkdir()
    snap = materialise(svc, ref, directory)
    (directory / "MEMORY.md").write_text("v1, and what the run learnt")
    (directory / "old.md").unlink()
    report = fold_back(svc, ref, directory, snap, deadline=time.monotonic() + 60, warn=print)
    assert report.ok
    changes = svc.recent(ME, ref).changes
    got = [(c.path, c.action, c.actor.kind) for c in changes]
    assert got[:2] == [("MEMORY.md", "write", "agent_run"), ("old.md", "delete", "agent_run")]
    assert got[2:] == [("old.md", "write", "user"), ("MEMORY.md", "write", "user")]
