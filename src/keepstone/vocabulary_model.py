"""The shape of the vocabulary (:mod:`keepstone.vocabulary`): the faces, a parameter, an
operation and its name on each face."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Face(StrEnum):
    """Where an operation is offered."""

    CLI = "cli"
    PYTHON = "python"
    REST = "rest"
    MCP = "mcp"


ALL_FACES = frozenset(Face)


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter: its name, its JSON schema (with the description every face shows),
    whether it is required, the faces that take it, and a face's own spelling where the
    contract fixes one (REST's ``q`` for a search's ``query``)."""

    name: str
    schema: Mapping[str, Any]
    required: bool = False
    faces: frozenset[Face] = ALL_FACES
    spelled: Mapping[Face, str] = field(default_factory=dict)

    def on(self, face: Face) -> str | None:
        """The parameter's name on ``face``, None when that face does not take it."""
        if face not in self.faces:
            return None
        return self.spelled.get(face, self.name)


@dataclass(frozen=True, slots=True)
class Operation:
    """One operation and its name on each face (None: not offered there).

    ``cli`` is the verb under ``keepstone memory``, ``python`` the :class:`keepstone.Memory`
    method, ``rest`` ``(METHOD, path)``, ``mcp`` the tool. ``summary`` is the one line of
    the CLI's help; ``guide``, the tool description a model reads (on the one operation
    that carries a tool's description when several share it). ``result`` names the fields
    of the answer (REST's body, Python's result, the tool's data, ``--json``).
    ``item`` names the fields of each listed item where the answer is a listing;
    ``result_spelled`` a face's own spelling of one, where the contract fixes it.
    ``deprecated`` maps an old MCP argument name to its name now (still accepted).
    """

    name: str
    summary: str
    params: tuple[Param, ...] = ()
    cli: str | None = None
    python: str | None = None
    rest: tuple[str, str] | None = None
    mcp: str | None = None
    result: tuple[str, ...] = ()
    item: tuple[str, ...] = ()
    result_spelled: Mapping[Face, Mapping[str, str]] = field(default_factory=dict)
    guide: str = ""
    mutates: bool = False
    idempotent: bool = True
    deprecated: Mapping[str, str] = field(default_factory=dict)

    def on(self, face: Face) -> str | None:
        """The operation's name on ``face`` (a REST route as ``METHOD path``)."""
        if face is Face.REST:
            return None if self.rest is None else " ".join(self.rest)
        return {Face.CLI: self.cli, Face.PYTHON: self.python, Face.MCP: self.mcp}[face]

    def params_on(self, face: Face) -> dict[str, Param]:
        """The parameters ``face`` takes, by their name there."""
        out: dict[str, Param] = {}
        for param in self.params:
            name = param.on(face)
            if name is not None:
                out[name] = param
        return out

    def result_on(self, face: Face) -> tuple[str, ...]:
        """The answer's field names on ``face``."""
        spelled = self.result_spelled.get(face, {})
        return tuple(spelled.get(name, name) for name in self.result)

    def item_on(self, face: Face) -> tuple[str, ...]:
        """The field names of each item of a listing's answer on ``face``."""
        spelled = self.result_spelled.get(face, {})
        return tuple(spelled.get(name, name) for name in self.item)


def prop(type_: str, description: str, **extra: Any) -> dict[str, Any]:
    """A parameter's JSON schema: its type, the description every face shows, and more."""
    return {"type": type_, "description": description, **extra}
