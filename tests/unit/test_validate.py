"""The memory block and ``keepstone validate`` (SPEC §9.1): every code, positive and negative."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepstone.agentconfig import (
    AGENT_VISIBILITIES,
    ALL_BACKENDS,
    AUTO_MEMORY_BACKENDS,
    INERT_BACKENDS,
    Severity,
    load_config,
    parse_config_text,
)
from keepstone.cli.main import main
from keepstone.spaces import Visibility


def codes(text: str) -> list[tuple[int, str]]:
    return [(d.line, d.code) for d in parse_config_text(text, "bot.yaml").diagnostics]


FULL = """\
memory:
  enabled: true
  visibility: bot
  scope: {name: notes, bot: whats-next}
  write: true
  autoload: [MEMORY.md, topics/deploy.md]
auto_memory: off
backend: claude_code
"""


def test_the_spec_example_is_clean_and_parsed() -> None:
    config = parse_config_text(FULL, "bot.yaml", base_dir=Path("/tmp"))
    assert config.diagnostics == ()
    assert config.memory is not None
    assert config.memory.visibility is Visibility.BOT
    assert (config.memory.name, config.memory.bot) == ("notes", "whats-next")
    assert config.memory.autoload == ("MEMORY.md", "topics/deploy.md")
    assert config.memory.can_write
    assert config.auto_memory is False
    assert config.backend == "claude_code"


@pytest.mark.parametrize("value", ["maybe", "'2'", "[on]", "{a: b}", "onn"])
def test_c131_invalid_auto_memory_value(value: str) -> None:
    assert codes(f"backend: claw\n\nauto_memory: {value}\n") == [(3, "C131")]


@pytest.mark.parametrize("value", ["on", "off", "true", "false", "On", "OFF", "yes", "no"])
def test_c131_not_raised_for_on_off(value: str) -> None:
    assert codes(f"auto_memory: {value}\nbackend: claw\n") == []


@pytest.mark.parametrize("backend", sorted(INERT_BACKENDS))
def test_c132_auto_memory_on_for_a_backend_that_ignores_it(backend: str) -> None:
    found = parse_config_text(f"backend: {backend}\nauto_memory: on\n", "b.yaml").diagnostics
    assert [(d.line, d.code, d.severity) for d in found] == [(2, "C132", Severity.WARNING)]
    assert backend in found[0].message


@pytest.mark.parametrize("backend", sorted(AUTO_MEMORY_BACKENDS))
def test_c132_not_raised_for_consuming_backends(backend: str) -> None:
    assert codes(f"backend: {backend}\nauto_memory: on\n") == []


@pytest.mark.parametrize("backend", sorted(INERT_BACKENDS))
def test_c132_not_raised_when_auto_memory_is_off(backend: str) -> None:
    assert codes(f"backend: {backend}\nauto_memory: off\n") == []


@pytest.mark.parametrize("vis", ["private", "team", "Bot", "global ", "''"])
def test_c170_visibility_outside_the_six(vis: str) -> None:
    text = f"memory:\n  scope: {{name: n, bot: b}}\n  visibility: {vis}\n"
    found = codes(text)
    if vis == "global ":  # YAML strips the trailing space: a valid visibility
        assert found == [(3, "C319")]
    else:
        assert found == [(3, "C170")]


@pytest.mark.parametrize("vis", AGENT_VISIBILITIES)
def test_c170_not_raised_for_the_six(vis: str) -> None:
    found = codes(f"memory:\n  visibility: {vis}\n  write: false\n")
    assert "C170" not in {c for _, c in found}
    assert len(AGENT_VISIBILITIES) == 6


def test_c319_global_with_write_left_on() -> None:
    assert codes("memory:\n  visibility: global\n  scope: {name: catalogue}\n") == [(2, "C319")]
    assert codes("memory:\n  visibility: global\n  write: true\n") == [(3, "C319")]
    config = parse_config_text("memory:\n  visibility: global\n", "g.yaml")
    assert config.memory is not None and not config.memory.can_write
    assert not config.has_errors  # a warning only


def test_c319_not_raised_with_write_false_or_another_visibility() -> None:
    assert codes("memory:\n  visibility: global\n  write: false\n") == []
    assert codes("memory:\n  visibility: org\n") == []


def test_c100_not_yaml_and_not_a_mapping() -> None:
    assert [c for _, c in codes("memory: [\n  visibility: bot\n")] == ["C100"]
    assert codes("- a\n- b\n") == [(1, "C100")]
    assert codes("") == []


def test_c101_field_errors_name_the_field() -> None:
    text = (
        "memory:\n"
        "  write: sometimes\n"
        "  scope: {name: 'a/b', colour: red}\n"
        "  autoload: [./MEMORY.md]\n"
        "  extra: 1\n"
        "backend: gpt\n"
    )
    config = parse_config_text(text, "x.yaml")
    got = [(d.line, d.code) for d in config.diagnostics]
    assert got == [(2, "C101"), (3, "C101"), (3, "C101"), (4, "C101"), (5, "C101"), (6, "C101")]
    messages = " | ".join(d.message for d in config.diagnostics)
    for needle in ("memory.write", "'/'", "colour", "'MEMORY.md'", "extra", "gpt"):
        assert needle in messages


def test_render_is_file_line_code_message() -> None:
    (d,) = parse_config_text("auto_memory: perhaps\n", "agents/x.yaml").diagnostics
    assert d.render() == "agents/x.yaml:1: C131 error: auto_memory must be on or off, not 'perhaps'"


def test_scope_project_resolves_against_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "bots" / "b" / "agent.yaml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("memory:\n  visibility: project\n  scope: {project: ../..}\n")
    config = load_config(cfg)
    assert config.memory is not None
    assert config.memory.project == str(tmp_path.resolve())
    assert config.directory_name == "b"


def test_scope_project_as_a_bare_word_is_a_project_name(tmp_path: Path) -> None:
    from keepstone.tools import ref_for_block

    cfg = tmp_path / "agent.yaml"
    (tmp_path / "web").mkdir()  # a folder of that name does not make it a directory
    cfg.write_text("memory:\n  visibility: project\n  scope: {project: web, name: notes}\n")
    config = load_config(cfg)
    assert config.memory is not None and config.memory.project == "web"
    assert ref_for_block(config.memory, tenant="t").project == "web"
    bad = parse_config_text("memory:\n  scope: {project: 'we:b'}\n", "a.yaml")
    assert [d.code for d in bad.diagnostics] == ["C101"]


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=12))
def test_any_auto_memory_word_is_either_on_off_or_c131(word: str) -> None:
    config = parse_config_text(f"auto_memory: {json.dumps(word)}\n", "p.yaml")
    words = {"on", "off", "true", "false", "yes", "no", "y", "n"}
    if word.strip().lower() in words:
        assert config.diagnostics == () and config.auto_memory is not None
    else:
        assert [d.code for d in config.diagnostics] == ["C131"]
        assert config.auto_memory is None


# --- The command -----------------------------------------------------------------------------


def test_keepstone_validate_prints_each_finding_and_exits_1_on_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("memory:\n  visibility: private\nauto_memory: sometimes\nbackend: codex\n")
    assert main(["validate", str(bad)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"{bad}:2: C170 error: visibility 'private' is not allowed (private has no durable home "
        "for an agent run); use one of: " + ", ".join(AGENT_VISIBILITIES),
        f"{bad}:3: C131 error: auto_memory must be on or off, not 'sometimes'",
    ]


def test_keepstone_validate_warnings_only_exit_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warn = tmp_path / "warn.yaml"
    warn.write_text("memory:\n  visibility: global\nauto_memory: on\nbackend: grok\n")
    clean = tmp_path / "clean.yaml"
    clean.write_text(FULL)
    assert main(["validate", str(warn), str(clean)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[1].split()[0] for line in lines] == ["C319", "C132"]
    assert lines[0].startswith(f"{warn}:2: C319 warning:")
    assert lines[1].startswith(f"{warn}:3: C132 warning:")


def test_keepstone_validate_unreadable_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(tmp_path / "missing.yaml")]) == 1
    assert capsys.readouterr().out.startswith(f"{tmp_path / 'missing.yaml'}:1: C100 error:")


def test_backends_partition() -> None:
    assert set(ALL_BACKENDS) == AUTO_MEMORY_BACKENDS | INERT_BACKENDS
