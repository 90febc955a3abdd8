"""The JSON form of a result, as every face renders it (the API, ``--json`` in the CLI, the
agent tools).

A result is a dataclass that subclasses :class:`Jsonable`; its :meth:`~Jsonable.as_json` is
its fields in declaration order, each under its own name, with a time as ISO 8601 text, a
tuple as a list and a nested result as its own JSON. A class whose wire shape differs names
the difference in ``wire_names``: a field's name on the wire, or None to leave it out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar


class Jsonable:
    """A dataclass result whose :meth:`as_json` is derived from its fields (see the module)."""

    __slots__ = ()

    #: Fields whose name on the wire is not their own: the wire name, or None to leave out.
    wire_names: ClassVar[Mapping[str, str | None]] = {}

    def as_json(self) -> dict[str, Any]:
        # Field by field, not dataclasses.asdict: that deep-copies every value, a visible
        # share of a small request's time.
        cls = type(self)
        names = _WIRE_FIELDS.get(cls) or _WIRE_FIELDS.setdefault(cls, _wire_fields(cls))
        return {wire: _wire_value(getattr(self, name)) for name, wire in names}

    def as_fields(self) -> dict[str, Any]:
        """:meth:`as_json` with each field under its own name: the form of the faces other
        than REST where the contract fixes another spelling there (a version's ``size``
        is ``size_bytes`` on the CLI and in the tools, docs/vocabulary.md)."""
        own = {wire: name for name, wire in type(self).wire_names.items() if wire is not None}
        return {own.get(key, key): value for key, value in self.as_json().items()}


#: Each class's ``(field name, wire name)`` pairs, worked out on its first rendering.
_WIRE_FIELDS: dict[type[Jsonable], tuple[tuple[str, str], ...]] = {}


def _wire_fields(cls: type[Jsonable]) -> tuple[tuple[str, str], ...]:
    """``(field name, wire name)`` of each field ``cls`` renders, in declaration order."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    named = ((f.name, cls.wire_names.get(f.name, f.name)) for f in fields)
    return tuple((name, wire) for name, wire in named if wire is not None)


def _wire_value(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Jsonable):
        return value.as_json()
    if isinstance(value, tuple):
        return [_wire_value(v) for v in value]
    return value
