"""What ``keepstone mcp`` refuses and how: a tool withheld from a run as of a past moment, a bad
version number, a missing document and a bad ``--port``. The tools are driven through the
official SDK's client, in-process against :func:`keepstone.mcp.server.build_server`; the
port is refused by the real command."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.client import Client

from keepstone.errors import InvalidRequest
from keepstone.mcp.server import build_server
from keepstone.service.access import console_principal
from keepstone.service.spaces import SpaceService
from keepstone.spaces import SpaceRef
from keepstone.store.fs import FilesystemStore
from keepstone.tools import TOOL_NAMES, MemoryTools
from keepstone.tools.dispatch import as_of_notice
from tests.cli_runner import keepstone_env, run_cli

REF = SpaceRef.build("bot", "default", tenant="local", project="web", bot="b1")
ME = console_principal("local")
START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

#: One answer of the server: (isError, text, structuredContent).
Answer = tuple[bool, str, dict[str, Any] | None]


class _Clock:
    """The store's "now", moved by the test, so an as-of moment falls between two writes."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def space(tmp_path: Path) -> tuple[SpaceService, datetime]:
    """MEMORY.md written as v1, then (an hour later) as v2; the moment between the two."""
    store = FilesystemStore(tmp_path / "spaces")
    clock = _Clock()
    store.clock = clock
    service = SpaceService(store)
    service.write(ME, REF, "MEMORY.md", "# v1\n")
    clock.now = START + timedelta(hours=2)
    service.write(ME, REF, "MEMORY.md", "# v2\n")
    return service, START + timedelta(hours=1)


def _serve(tools: MemoryTools, calls: list[tuple[str, dict[str, Any]]]) -> list[Answer]:
    """Each call's answer as the SDK's client receives it, and ``tools/list`` first."""

    async def main() -> list[Answer]:
        async with Client(build_server(tools)) as client:
            listed = await client.list_tools()
            out: list[Answer] = [(False, " ".join(t.name for t in listed.tools), None)]
            for name, args in calls:
                got = await client.call_tool(name, args)
                text = got.content[0].text if got.content[0].type == "text" else ""
                out.append((got.is_error, text, got.structured_content))
            return out

    return anyio.run(main)


# --- A run as of a past moment ------------------------------------------------------------------


def test_as_of_refuses_memory_recent_as_it_leaves_it_out(
    space: tuple[SpaceService, datetime],
) -> None:
    service, moment = space
    past = MemoryTools(service, REF, as_of=moment)
    listed, recent, search = _serve(
        past, [("memory_recent", {}), ("memory_search", {"query": "v2"})]
    )
    assert listed[1] == "memory_read memory_list memory_history"
    # Refused as search is, and nothing of what changed after the moment is told.
    assert recent[0] is True and recent[1] == search[1] == as_of_notice(moment)
    assert "version 2" not in recent[1] and "memory_recent" in recent[1]


#: A call each tool answers on the space of :func:`space` (a document, or "not found").
_ONE_CALL_EACH: dict[str, dict[str, Any]] = {
    "memory_read": {"path": "MEMORY.md"},
    "memory_write": {"path": "a.md", "content": "x"},
    "memory_list": {},
    "memory_search": {"query": "v2"},
    "memory_edit": {"path": "MEMORY.md", "insert_line": 0, "text": "x"},
    "memory_delete": {"path": "a.md"},
    "memory_move": {"path": "a.md", "to": "b.md"},
    "memory_history": {"path": "MEMORY.md"},
    "memory_recent": {},
}


def test_every_tool_not_listed_is_refused_and_every_listed_one_answers(
    space: tuple[SpaceService, datetime],
) -> None:
    service, moment = space
    assert tuple(_ONE_CALL_EACH) == TOOL_NAMES
    for tools in (
        MemoryTools(service, REF, as_of=moment),
        MemoryTools(service, REF, write=False),
        MemoryTools(service, REF),
    ):
        for name, args in _ONE_CALL_EACH.items():
            result = tools.dispatch(name, args)
            withheld = result.code in ("tool_withheld", "write_refused")
            assert withheld is (name not in tools.names), (name, result.text)


# --- memory_history's version number ----------------------------------------------------------


@pytest.mark.parametrize("version", [0, -1])
def test_history_refuses_a_version_below_one_as_every_face_does(
    space: tuple[SpaceService, datetime], version: int
) -> None:
    service, _ = space
    tools = MemoryTools(service, REF)
    for path in ("MEMORY.md", "nope.md"):
        got = tools.dispatch("memory_history", {"path": path, "version": version})
        assert got.is_error and got.code == "invalid_request", got.text
        assert got.text == f"invalid_request: version must be a whole number from 1, not {version}"
    # The same words the Python face (and so the CLI's memory show) answers with.
    with pytest.raises(InvalidRequest) as info:
        service.read_version(REF, "MEMORY.md", version)
    assert got.text == f"invalid_request: {info.value.message}"


def test_history_still_reads_a_version_and_refuses_one_that_is_not_there(
    space: tuple[SpaceService, datetime],
) -> None:
    service, moment = space
    now, past = MemoryTools(service, REF), MemoryTools(service, REF, as_of=moment)
    assert "# v2" in now.dispatch("memory_history", {"path": "MEMORY.md", "version": 2}).text
    assert "# v1" in past.dispatch("memory_history", {"path": "MEMORY.md", "version": 1}).text
    for tools, version in ((now, 9), (past, 2)):
        got = tools.dispatch("memory_history", {"path": "MEMORY.md", "version": version})
        assert got.is_error and got.code == "not_found", got.text
        assert "call memory_history without version" in got.text
    service.delete(ME, REF, "MEMORY.md")
    deleted = now.dispatch("memory_history", {"path": "MEMORY.md", "version": 3})
    assert deleted.is_error and deleted.code == "not_found" and "deletion" in deleted.text


# --- A missing document ------------------------------------------------------------------------

_MISSING: list[tuple[str, dict[str, Any]]] = [
    ("memory_read", {"path": "nope.md"}),
    ("memory_edit", {"path": "nope.md", "old": "a", "new": "b"}),
    ("memory_edit", {"path": "nope.md", "insert_line": 0, "text": "x"}),
    ("memory_history", {"path": "nope.md"}),
    ("memory_history", {"path": "nope.md", "version": 1}),
    ("memory_delete", {"path": "nope.md"}),
    ("memory_move", {"path": "nope.md", "to": "b.md"}),
]


@pytest.mark.parametrize(
    "make",
    [lambda s, _: MemoryTools(s, REF), lambda s, at: MemoryTools(s, REF, as_of=at)],
    ids=["live", "as-of"],
)
def test_a_missing_document_always_carries_the_memory_list_hint(
    space: tuple[SpaceService, datetime],
    make: Callable[[SpaceService, datetime], MemoryTools],
) -> None:
    tools = make(*space)
    calls = [(name, args) for name, args in _MISSING if name in tools.names]
    answers = _serve(tools, calls)[1:]
    assert len(answers) == len(calls) >= 3
    for (name, _), (is_error, text, data) in zip(calls, answers, strict=True):
        assert is_error and text.startswith("not_found: "), (name, text)
        assert text.endswith("; call memory_list to see what exists"), (name, text)
        assert data is not None and data["path"] == "nope.md", (name, data)


# --- keepstone mcp --http --port ---------------------------------------------------------------


@pytest.mark.parametrize("port", ["99999", "-5", "0", "65536"])
def test_a_port_out_of_range_is_the_usage_error_serve_gives(
    tmp_path: Path,
    port: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def served(*_args: object, **_kwargs: object) -> None:
        raise AssertionError(f"port {port} was served")

    monkeypatch.setattr("keepstone.mcp.server.serve_http", served)
    for name, value in keepstone_env(tmp_path / "home").items():
        monkeypatch.setenv(name, value)
    code, _, err = run_cli(capsys, "mcp", "--bot", "b", "--http", "--port", port)
    assert (code, err.splitlines()) == (2, ["keepstone: usage: --port must be 1-65535"])
    assert not (tmp_path / "home").exists()  # refused before any store is opened
