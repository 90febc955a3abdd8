"""The one vocabulary (:mod:`keepstone.vocabulary`) held against every face: the CLI parser,
the agent tools' dispatcher, ``Memory``'s signatures and results, and the OpenAPI document.
A face that renames an operation, a parameter or a result field the table (and so the
other faces) keeps fails here."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import io
import json
import re
import typing
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.client import Client

from keepstone.api.app import create_app
from keepstone.cli.main import build_parser, main
from keepstone.config import Config
from keepstone.mcp.server import build_server
from keepstone.sdk import AsyncMemory, Memory
from keepstone.service.spaces import SpaceService
from keepstone.spaces import SpaceRef
from keepstone.store.fs import FilesystemStore
from keepstone.tools import MemoryTools
from keepstone.tools.schemas import SPECS
from keepstone.vocabulary import FACE_OWN, OPERATIONS, Face, Operation, tool_names

UNKNOWN = "zz_not_a_parameter"


def _ops(face: Face) -> list[Operation]:
    return [op for op in OPERATIONS if op.on(face) is not None]


def _ids(face: Face) -> list[str]:
    return [f"{op.name}:{op.on(face)}" for op in _ops(face)]


def _table_params(face: Face, name: str) -> set[str]:
    """Every parameter the table gives ``face``'s operation ``name`` (all the operations it
    serves: ``memory_history`` lists versions and shows one)."""
    return {p for op in OPERATIONS if op.on(face) == name for p in op.params_on(face)}


def _checked(face: Face, found: set[str], op: Operation) -> None:
    """``found`` (the face's own) holds exactly the table's parameters, beside the face's own
    settings."""
    name = op.on(face)
    assert name is not None
    wanted = _table_params(face, name)
    missing = wanted - found
    assert not missing, f"{face.value} {name} lacks {sorted(missing)} (the table's names)"
    extra = found - wanted - FACE_OWN[face]
    assert not extra, f"{face.value} {name} takes {sorted(extra)}, which the table does not name"


# --- The CLI -----------------------------------------------------------------------------------


def _cli_verbs() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    top = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    memory = top.choices["memory"]
    verbs = next(a for a in memory._actions if isinstance(a, argparse._SubParsersAction))
    return dict(verbs.choices)


def _cli_name(action: argparse.Action) -> str:
    """A flag by its long spelling (``--if-match``: ``if_match``), a positional by its dest."""
    if not action.option_strings:
        return action.dest
    long = max(action.option_strings, key=len)
    return long.lstrip("-").replace("-", "_")


@pytest.mark.parametrize("op", _ops(Face.CLI), ids=_ids(Face.CLI))
def test_the_cli_verb_takes_the_tables_parameters_and_says_its_summary(op: Operation) -> None:
    verbs = _cli_verbs()
    assert op.cli in verbs, f"keepstone memory has no verb {op.cli}"
    verb = verbs[str(op.cli)]
    _checked(Face.CLI, {_cli_name(a) for a in verb._actions}, op)
    assert verb.description == op.summary


# --- Python ------------------------------------------------------------------------------------


def _python_params(method: Any) -> set[str]:
    """The parameters of the signature a caller writes (AsyncMemory's are its twin's)."""
    return set(inspect.signature(method).parameters)


@pytest.mark.parametrize("op", _ops(Face.PYTHON), ids=_ids(Face.PYTHON))
def test_memory_and_async_memory_take_the_tables_parameters(op: Operation) -> None:
    for cls in (Memory, AsyncMemory):
        method = getattr(cls, str(op.python), None)
        assert method is not None, f"{cls.__name__} has no method {op.python}"
        _checked(Face.PYTHON, _python_params(method), op)


def _fields(cls: Any) -> set[str]:
    """A result's fields, less those it never sends (``wire_names`` maps them to None)."""
    hidden = {k for k, v in getattr(cls, "wire_names", {}).items() if v is None}
    return {f.name for f in dataclasses.fields(cls)} - hidden


# A search answers the list of its hits itself (with ``pending`` and ``hint`` beside them):
# tests/sdk's conformance suite holds it.
@pytest.mark.parametrize(
    "op",
    [op for op in _ops(Face.PYTHON) if op.result and op.name != "search"],
    ids=lambda o: o.name,
)
def test_memorys_results_carry_the_tables_fields(op: Operation) -> None:
    returned = typing.get_type_hints(getattr(Memory, str(op.python)))["return"]
    if op.item:
        item = typing.get_args(returned)[0] if typing.get_origin(returned) is list else None
        if item is not None:  # a listing returned as a list of its items
            assert _fields(item) == set(op.item_on(Face.PYTHON)), op.name
            return
    if dataclasses.is_dataclass(returned):
        assert _fields(returned) == set(op.result_on(Face.PYTHON)), op.name
        if op.item:
            listed = typing.get_type_hints(returned)[op.result[0]]
            assert _fields(typing.get_args(listed)[0]) == set(op.item_on(Face.PYTHON))


# --- The agent tools (MCP) --------------------------------------------------------------------


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> MemoryTools:
    store = FilesystemStore(tmp_path_factory.mktemp("vocabulary") / "spaces")
    ref = SpaceRef.build("project", "notes", tenant="local", project="p")
    return MemoryTools(SpaceService(store), ref)


def _accepted(tools: MemoryTools, tool: str) -> set[str]:
    """The arguments the dispatcher takes, as its refusal of an unknown one lists them."""
    result = tools.dispatch(tool, {UNKNOWN: 1})
    found = re.search(r"it takes (.*)$", result.text)
    assert result.is_error and found, result.text
    return set(found.group(1).split(", "))


def test_the_mcp_server_lists_the_tables_tools_with_its_arguments(tools: MemoryTools) -> None:
    async def listed() -> dict[str, set[str]]:
        async with Client(build_server(tools)) as client:
            answer = await client.list_tools()
            moved = await client.call_tool("memory_move", {"path": "none.md", "to": "b.md"})
            # Refused for the missing document, not for an argument the server does not know.
            assert moved.is_error and "not_found" in str(moved.content[0])
        return {tool.name: set(tool.input_schema["properties"]) for tool in answer.tools}

    served = anyio.run(listed)
    assert tuple(served) == tool_names() == tools.names
    for tool, arguments in served.items():
        assert arguments == _table_params(Face.MCP, tool), tool


@pytest.mark.parametrize("op", _ops(Face.MCP), ids=_ids(Face.MCP))
def test_the_tool_takes_the_tables_parameters(op: Operation, tools: MemoryTools) -> None:
    tool = str(op.mcp)
    _checked(Face.MCP, _accepted(tools, tool), op)
    assert set(SPECS[tool].input_schema["properties"]) == _table_params(Face.MCP, tool)


def test_a_tools_former_argument_names_still_work(tools: MemoryTools) -> None:
    tools.dispatch("memory_write", {"path": "a.md", "content": "one\n"})
    moved = tools.dispatch("memory_move", {"path": "a.md", "new_path": "b.md"})
    assert not moved.is_error and moved.data["path"] == "b.md", moved.text
    edited = tools.dispatch("memory_edit", {"path": "b.md", "old_str": "one", "new_str": "two"})
    assert not edited.is_error, edited.text
    both = tools.dispatch("memory_move", {"path": "b.md", "new_path": "c.md", "to": "d.md"})
    assert both.is_error and "drop new_path" in both.text


def test_the_tools_answer_with_the_tables_fields(tools: MemoryTools) -> None:
    written = tools.dispatch("memory_write", {"path": "f.md", "content": "x\n"})
    assert set(written.data) == set(_op("write").result_on(Face.MCP))
    listed = tools.dispatch("memory_list", {})
    assert set(listed.data) == set(_op("list").result_on(Face.MCP))
    assert set(listed.data["documents"][0]) == set(_op("list").item_on(Face.MCP))
    history = tools.dispatch("memory_history", {"path": "f.md"})
    assert set(history.data["versions"][0]) == set(_op("versions").item_on(Face.MCP))


def _op(name: str) -> Operation:
    return next(op for op in OPERATIONS if op.name == name)


# --- REST (the OpenAPI document) --------------------------------------------------------------


@pytest.fixture(scope="module")
def openapi(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("home")
    app = create_app(Config(home=Path(home), database_url="sqlite:///:memory:", local=True))
    document: dict[str, Any] = app.openapi()
    return document


def _schema(openapi: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$ref`` followed."""
    while "$ref" in schema:
        schema = openapi["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _route(openapi: dict[str, Any], op: Operation) -> dict[str, Any]:
    assert op.rest is not None
    method, path = op.rest
    route: dict[str, Any] | None = openapi["paths"].get(path, {}).get(method.lower())
    assert route is not None, f"the OpenAPI document has no {method} {path}"
    return route


def _rest_params(openapi: dict[str, Any], route: dict[str, Any]) -> set[str]:
    """Query parameters and headers (``If-Match``: ``if_match``), and a JSON body's fields."""
    names = {p["name"].lower().replace("-", "_") for p in route.get("parameters", [])}
    body = route.get("requestBody", {}).get("content", {}).get("application/json")
    if body is not None:
        schema = _schema(openapi, body["schema"])
        for form in schema.get("oneOf", [schema]):
            names |= set(_schema(openapi, form).get("properties", {}))
    return names


@pytest.mark.parametrize("op", _ops(Face.REST), ids=_ids(Face.REST))
def test_the_route_takes_the_tables_parameters(op: Operation, openapi: dict[str, Any]) -> None:
    _checked(Face.REST, _rest_params(openapi, _route(openapi, op)), op)


@pytest.mark.parametrize("op", [op for op in _ops(Face.REST) if op.result], ids=lambda o: o.name)
def test_the_route_answers_with_the_tables_fields(op: Operation, openapi: dict[str, Any]) -> None:
    responses = _route(openapi, op)["responses"]
    answer = responses.get("200") or responses["201"]
    schema = _schema(openapi, answer["content"]["application/json"]["schema"])
    assert set(schema["properties"]) == set(op.result_on(Face.REST)), op.name
    if op.item:
        listed = schema["properties"][op.result[0]]["items"]
        item = _schema(openapi, listed)
        assert set(item["properties"]) == set(op.item_on(Face.REST)), op.name


# --- The table itself ----------------------------------------------------------------------


def test_every_tool_has_one_description_and_names_no_parameter_it_lost() -> None:
    for tool in tool_names():
        described = [op for op in OPERATIONS if op.mcp == tool and op.guide]
        assert len(described) == 1, tool
        for old in described[0].deprecated:
            assert old not in described[0].guide, f"{tool}'s description names {old}"


# --- The CLI's --json answers --------------------------------------------------------------


@pytest.fixture
def cli_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KEEPSTONE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "none")
    for name in ("KEEPSTONE_SERVER", "KEEPSTONE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    note = tmp_path / "note.md"
    note.write_text("# Deploy\nroll back with helm\n")
    assert run_memory_quietly("put", "a.md", "--bot", "b1", "--file", str(note))[0] == 0
    return tmp_path


def run_memory_quietly(*argv: str) -> tuple[int, Any]:
    """``keepstone memory *argv``: its exit code and, for ``--json``, the answer."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["memory", *argv])
    return code, json.loads(out.getvalue()) if "--json" in argv else None


@pytest.mark.parametrize(
    ("verb", "argv"),
    [
        ("ls", ()),
        ("log", ("a.md",)),
        ("du", ()),
        ("spaces", None),
        ("search", ("helm",)),
    ],
)
def test_the_clis_json_answers_carry_the_tables_fields(
    cli_home: Path, verb: str, argv: tuple[str, ...] | None
) -> None:
    del cli_home
    space = () if argv is None else (*argv, "--bot", "b1")
    code, answer = run_memory_quietly(verb, *space, "--json")
    op = next(op for op in OPERATIONS if op.cli == verb)
    assert code == 0 and set(answer) <= set(op.result_on(Face.CLI)), answer
    assert set(op.result_on(Face.CLI)) - set(answer) <= {"hint"}  # a hint only when empty
    if op.item:
        assert set(answer[op.result[0]][0]) == set(op.item_on(Face.CLI)), answer


def test_keepstone_mcp_help_names_every_tool_and_what_read_only_withholds() -> None:
    top = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    mcp = top.choices["mcp"]
    text = " ".join(str(mcp.description).split())
    assert all(tool in text for tool in tool_names()), text
    read_only = next(a for a in mcp._actions if "--read-only" in a.option_strings)
    withheld = {op.mcp for op in OPERATIONS if op.mcp is not None and op.mutates}
    assert set(re.findall(r"memory_\w+", str(read_only.help))) == withheld
