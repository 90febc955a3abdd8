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


# --- links, examples and named parts --------------------------------------------------------

_PAGES = sorted(
    p.relative_to(ROOT).as_posix() for p in [ROOT / "README.md", *ROOT.glob("docs/**/*.md")]
)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, with their numbers."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        found = _FENCE.match(line)
        if found is not None:
            marks = found.group(1)
            if fence is None:
                fence = marks
            elif marks[0] == fence[0] and len(marks) >= len(fence):
                fence = None
            continue
        if fence is None:
            out.append((number, line))
    return out


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, punctuation dropped, spaces
    as hyphens, a repeated heading numbered (``-1``, ``-2``)."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in _prose_lines(page.read_text(encoding="utf-8")):
        found = _HEADING.match(line)
        if found is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", found.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(f"{slug}-{count}" if count else slug)
    return anchors


@pytest.mark.parametrize("page", _PAGES)
def test_every_link_to_a_page_or_an_anchor_resolves(page: str) -> None:
    source = ROOT / page
    broken = []
    for number, line in _prose_lines(source.read_text(encoding="utf-8")):
        for target in _LINK.findall(re.sub(r"`+[^`]*`+", "", line)):  # not in inline code
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            linked = (source.parent / path).resolve() if path else source
            if not linked.exists():
                broken.append(f"{page}:{number}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{page}:{number}: {target} (no such heading)")
    assert broken == []


@pytest.mark.parametrize("page", _PAGES)
def test_every_keepstone_import_of_a_python_example_works(page: str) -> None:
    # A reader pastes these blocks; the pages whose blocks are not run whole by a test
    # (docs/agents.md, docs/storage.md, ...) still must not name a module or class that is
    # not there.
    import ast
    import importlib

    missing = []
    for block in _PYTHON_BLOCK.findall((ROOT / page).read_text(encoding="utf-8")):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("keepstone"):
                module = importlib.import_module(node.module or "")
                missing += [
                    f"from {node.module} import {alias.name}"
                    for alias in node.names
                    if not hasattr(module, alias.name)
                ]
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("keepstone"):
                        importlib.import_module(alias.name)
    assert missing == [], f"{page} imports what is not there"


def test_every_abstract_method_of_a_store_is_named_in_the_architecture() -> None:
    from keepstone.store.base import MemoryStore

    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [m for m in sorted(MemoryStore.__abstractmethods__) if f"`{m}`" not in page]
    assert missing == []


def test_every_capability_a_store_declares_is_documented() -> None:
    from keepstone.store.fs import FilesystemStore
    from keepstone.store.http import HttpMemoryStore
    from keepstone.store.sql import SqlStore

    page = (ROOT / "docs" / "storage.md").read_text(encoding="utf-8")
    declared = FilesystemStore.capabilities | HttpMemoryStore.capabilities | SqlStore.capabilities
    assert sorted(c for c in declared if f"`{c}`" not in page) == []


def test_codes_that_no_error_class_carries_are_in_the_errors_page(tmp_path: Path) -> None:
    # The routing's 405 and the agent tools' own refusals are answered by no class of
    # keepstone.errors, so test_every_error_code_is_documented cannot see them.
    from datetime import UTC, datetime

    from fastapi.testclient import TestClient

    from keepstone.api.app import create_app
    from keepstone.config import Config
    from keepstone.service.spaces import SpaceService
    from keepstone.spaces import SpaceRef
    from keepstone.store.fs import FilesystemStore
    from keepstone.tools import MemoryTools

    app = create_app(Config(database_url=f"sqlite:///{tmp_path / 'k.db'}", local=True))
    with TestClient(app) as client:
        codes = {client.patch("/api/memory/doc?name=n&path=a.md").json()["error"]["code"]}
    service = SpaceService(FilesystemStore(tmp_path / "spaces"))
    ref = SpaceRef("bot", "notes", tenant="local", project="web", bot="b")
    read_only = MemoryTools(service, ref, write=False)
    past = MemoryTools(service, ref, as_of=datetime(2026, 1, 1, tzinfo=UTC))
    codes |= {
        read_only.dispatch("memory_nope", {}).code or "",
        read_only.dispatch("memory_write", {"path": "a.md", "content": "x"}).code or "",
        past.dispatch("memory_search", {"query": "x"}).code or "",
    }
    page = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    assert sorted(code for code in codes if f"`{code}`" not in page) == []
