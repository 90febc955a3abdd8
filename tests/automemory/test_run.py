"""``keepstone run`` with a stand-in agent: every way a run can end folds the notes back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from keepstone.cli.main import main
from keepstone.service.access import console_principal
from keepstone.service.spaces import SpaceService
from keepstone.spaces import AUTO_MEMORY_SPACE, SpaceRef, Visibility, encode_workdir_key
from keepstone.store.fs import FilesystemStore
from tests.automemory.agent_script import AGENT
from tests.cli_runner import keepstone_argv

#: The operator at the local console, as the CLI and `keepstone run` act.
ME = console_principal("local")

BOT = "whats-next"


@dataclass
class Env:
    tmp: Path
    home: Path
    repo: Path
    agent: Path
    report: Path

    def environ(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KEEPSTONE_")}
        env.update(
            KEEPSTONE_HOME=str(self.home),
            AGENT_REPORT=str(self.report),
            TMPDIR=str(self.tmp / "tmp"),
        )
        env.update(extra)
        return env

    @property
    def store(self) -> FilesystemStore:
        return FilesystemStore(self.home / "spaces")

    @property
    def ref(self) -> SpaceRef:
        return SpaceRef.build(
            Visibility.BOT,
            AUTO_MEMORY_SPACE,
            tenant="local",
            project=encode_workdir_key(self.repo),
            bot=BOT,
        )

    def space(self) -> dict[str, str]:
        store = self.store
        return {d.path: d.content for d in store.iter_documents(self.ref)}

    def seen(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.report.read_text())
        return data

    def argv(self, *run_args: str, mode: str = "exit0") -> list[str]:
        return [
            *keepstone_argv(),
            "run",
            *run_args,
            "--",
            sys.executable,
            str(self.agent),
            mode,
        ]


@pytest.fixture
def env(tmp_path: Path) -> Env:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src" / "deep").mkdir(parents=True)
    (tmp_path / "tmp").mkdir()
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    e = Env(tmp_path, tmp_path / "home", repo, agent, tmp_path / "report.json")
    svc = SpaceService(e.store)
    for path, body in (("MEMORY.md", "# Index\n"), ("old.md", "stale\n"), ("keep.md", "kept\n")):
        svc.write(ME, e.ref, path, body)
    return e


EXPECTED = {
    "MEMORY.md": "# Index\nedited by the agent\n",
    "keep.md": "kept\n",
    "topics/new.md": "a new note\n",
}


def _assert_folded_back(env: Env, stderr: str) -> None:
    assert env.space() == EXPECTED
    assert env.seen()["seen"] == {
        "MEMORY.md": "# Index\n",
        "old.md": "stale\n",
        "keep.md": "kept\n",
    }
    warnings = [line for line in stderr.splitlines() if line.startswith("keepstone: warning:")]
    for skipped in ("notes.txt", "link.md", "linkdir", "secret.md"):
        assert any(f" {skipped}: " in w for w in warnings), (skipped, stderr)
    assert "secret_detected" in stderr
    assert "ghp_" not in stderr  # the secret itself is never echoed


@pytest.mark.parametrize(("mode", "status"), [("exit0", 0), ("exit3", 3)])
def test_run_folds_edits_back_and_keeps_the_exit_status(env: Env, mode: str, status: int) -> None:
    proc = subprocess.run(
        env.argv("--auto-memory", "on", "--bot", BOT, mode=mode),
        cwd=env.repo,
        env=env.environ(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == status, proc.stderr
    _assert_folded_back(env, proc.stderr)


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_run_interrupted_forwards_the_signal_and_still_syncs(
    env: Env, sig: signal.Signals, status: int
) -> None:
    proc = subprocess.Popen(
        env.argv("--auto-memory", "on", "--bot", BOT, mode="wait"),
        cwd=env.repo,
        env=env.environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Without a controlling terminal, as under a supervisor: keepstone must forward the
        # signal itself (at a terminal, the terminal delivers Ctrl-C to the agent too).
        start_new_session=True,
    )
    ready = Path(str(env.report) + ".ready")
    for _ in range(1200):
        if ready.exists() or proc.poll() is not None:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=120)
    # The agent was killed by the forwarded signal: 128 + N, the shell's convention.
    assert proc.returncode == status, err
    _assert_folded_back(env, err)


def test_claude_code_gets_settings_and_claw_gets_the_prompt(env: Env) -> None:
    subprocess.run(
        env.argv("--auto-memory", "on", "--bot", BOT, "--backend", "claude_code", mode="noop"),
        cwd=env.repo,
        env=env.environ(),
        check=True,
        timeout=120,
        capture_output=True,
    )
    seen = env.seen()
    assert seen["argv"][0] == "--settings"
    assert json.loads(seen["argv"][1]) == {"autoMemoryDirectory": seen["dir"]}
    assert seen["prompt"] is None

    subprocess.run(
        env.argv("--auto-memory", "on", "--bot", BOT, "--backend", "claw", mode="noop"),
        cwd=env.repo,
        env=env.environ(),
        check=True,
        timeout=120,
        capture_output=True,
    )
    seen = env.seen()
    assert seen["argv"] == []
    assert seen["prompt"].startswith("# Auto memory\n")
    assert seen["dir"] in seen["prompt"] and "# Index" in seen["prompt"]
    assert not seen["prompt_file"].startswith(seen["dir"])  # never synced as a note
    assert env.space()["MEMORY.md"] == "# Index\n"


def test_off_just_runs_the_command(env: Env) -> None:
    proc = subprocess.run(
        [*env.argv("--bot", BOT, mode="exit3")],
        cwd=env.repo,
        env=env.environ(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Without a memory directory the agent cannot start its edits: KeyError, exit 1.
    assert proc.returncode == 1 and "KEEPSTONE_AUTO_MEMORY_DIR" in proc.stderr
    assert env.space() == {"MEMORY.md": "# Index\n", "old.md": "stale\n", "keep.md": "kept\n"}


def test_env_and_config_precedence(env: Env) -> None:
    bot_dir = env.tmp / "bots" / BOT
    bot_dir.mkdir(parents=True)
    config = bot_dir / "agent.yaml"
    config.write_text("auto_memory: off\nbackend: claw\n")
    run = env.argv("--config", str(config), mode="exit0")
    # The config's off beats KEEPSTONE_AUTO_MEMORY=on: the agent sees no directory.
    off = subprocess.run(
        run,
        cwd=env.repo,
        env=env.environ(KEEPSTONE_AUTO_MEMORY="on"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert off.returncode == 1 and "KEEPSTONE_AUTO_MEMORY_DIR" in off.stderr
    # --auto-memory on beats the config; the bot id is the config's directory name.
    on = subprocess.run(
        env.argv("--config", str(config), "--auto-memory", "on", mode="exit0"),
        cwd=env.repo,
        env=env.environ(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert on.returncode == 0, on.stderr
    assert env.space() == EXPECTED


def test_quota_refusal_warns_and_the_rest_lands(env: Env) -> None:
    total = sum(len(v.encode()) for v in env.space().values())
    # Room for the edits below except the new topic note.
    quota = total + len(EXPECTED["MEMORY.md"]) - len("# Index\n") - len("stale\n") + 5
    proc = subprocess.run(
        env.argv("--auto-memory", "on", "--bot", BOT, mode="exit3"),
        cwd=env.repo,
        env=env.environ(KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL=str(quota)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3
    assert "topics/new.md: not persisted: quota_exceeded" in proc.stderr
    space = env.space()
    assert space == {k: v for k, v in EXPECTED.items() if k != "topics/new.md"}
    # The unsaved note is kept on disk, and the warning says where.
    kept = [line for line in proc.stderr.splitlines() if "they are kept in" in line]
    assert kept and Path(kept[0].rsplit(" ", 1)[1], "topics", "new.md").exists()


def _in_process(env: Env, monkeypatch: pytest.MonkeyPatch, **extra: str) -> None:
    for key in [k for k in os.environ if k.startswith("KEEPSTONE_")]:
        monkeypatch.delenv(key)
    for key, value in env.environ(**extra).items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(env.repo)


def test_command_not_found_is_127_and_the_space_is_untouched(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _in_process(env, monkeypatch)
    before = env.space()
    status = main(["run", "--auto-memory", "on", "--bot", BOT, "--", str(env.tmp / "no-such")])
    assert status == 127
    assert "command not found" in capsys.readouterr().err
    assert env.space() == before
    assert list((env.tmp / "tmp").iterdir()) == []  # the clean directory was removed


def test_inert_backend_is_warned_about_and_still_gets_the_directory(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _in_process(env, monkeypatch)
    argv = ["run", "--auto-memory", "on", "--bot", BOT, "--backend", "codex", "--"]
    assert main([*argv, sys.executable, str(env.agent), "noop"]) == 0
    assert "'codex' ignores auto-memory" in capsys.readouterr().err
    assert env.seen()["seen"]["MEMORY.md"] == "# Index\n"


def test_a_space_that_cannot_be_loaded_does_not_run_the_command(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken_home = env.tmp / "broken"
    broken_home.mkdir()
    (broken_home / "spaces").write_text("not a directory")
    _in_process(env, monkeypatch, KEEPSTONE_HOME=str(broken_home))
    argv = ["run", "--auto-memory", "on", "--bot", BOT, "--"]
    assert main([*argv, sys.executable, str(env.agent), "exit0"]) == 1
    err = capsys.readouterr().err
    assert "cannot load the auto-memory space" in err and "--auto-memory off" in err
    assert not env.report.exists()
