"""The docs cannot drift: every route, tool, setting, command and error code is documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md")))
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _route_paths() -> list[tuple[str, str]]:
    """Every (method, path) the app's OpenAPI document describes (it lists every route)."""
    from keepstone.api.app import create_app
    from keepstone.config import Config

    app = create_app(Config(database_url="sqlite:///:memory:", local=True))
    out = [
        (method.upper(), path)
        for path, ops in app.openapi()["paths"].items()
        for method in ops
        if method in {"get", "put", "post", "patch", "delete"}
    ]
    assert len(out) > 20, "the app lists too few routes for this check to mean anything"
    return sorted(out)


def _env_settings() -> list[str]:
    names: set[str] = set()
    for path in (ROOT / "src" / "keepstone").rglob("*.py"):
        names.update(re.findall(r"\"(KEEPSTONE_[A-Z0-9_]+)\"", path.read_text(encoding="utf-8")))
    # Per-visibility overrides are documented as one pattern.
    return sorted(
        n for n in names if not n.startswith("KEEPSTONE_MEMORY_QUOTA_") or n.endswith("_TOTAL")
    )


def test_every_error_code_is_documented() -> None:
    from keepstone.errors import all_error_classes

    missing = [c.code for c in all_error_classes() if f"`{c.code}`" not in DOCS]
    assert missing == []


def test_every_route_is_documented() -> None:
    missing = [f"{m} {p}" for m, p in _route_paths() if f"`{p}`" not in DOCS]
    assert missing == []


def test_every_environment_setting_is_documented() -> None:
    missing = [name for name in _env_settings() if name not in DOCS]
    assert missing == []


@pytest.mark.parametrize("tool", ["memory_read", "memory_write", "memory_list", "memory_search"])
def test_every_tool_is_documented(tool: str) -> None:
    assert f"`{tool}`" in DOCS


def test_every_cli_command_is_documented() -> None:
    import argparse

    from keepstone.cli.main import build_parser

    parser = build_parser()
    commands: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                subs = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
                if subs:
                    commands.extend(f"keepstone {name} {verb}" for verb in subs[0].choices)
                else:
                    commands.append(f"keepstone {name}")
    assert commands, "the parser lists no commands"
    missing = [c for c in commands if c not in DOCS and c not in README]
    assert missing == []


def test_readme_quickstart_is_two_commands() -> None:
    assert "make run" in README and "make test" in README


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


@pytest.mark.parametrize(
    "page",
    sorted(
        p.relative_to(ROOT).as_posix() for p in [ROOT / "README.md", *ROOT.glob("docs/**/*.md")]
    ),
)
def test_every_code_fence_opens_and_closes(page: str) -> None:
    # A fence without its opening turns the prose after it into one code block (CommonMark: a
    # closing fence takes no info string), and hides its examples from the tests that run them.
    opened: tuple[int, str] | None = None
    for number, line in enumerate((ROOT / page).read_text(encoding="utf-8").splitlines(), 1):
        found = _FENCE.match(line)
        if found is None:
            continue
        marks, info = found.groups()
        if opened is None:
            opened = (number, marks)
        elif marks[0] == opened[1][0] and len(marks) >= len(opened[1]):
            inside = f"{page}:{number}: {info.strip()!r} after a fence, inside a block"
            assert not info.strip(), f"{inside} opened at line {opened[0]}"
            opened = None
    assert opened is None, f"{page}: the code block opened at line {opened[0]} never closes"
