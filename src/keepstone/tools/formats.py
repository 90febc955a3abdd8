"""The tools' definitions in the shapes beyond :class:`~keepstone.tools.schemas.ToolSpec`'s
own: OpenAI's strict schemas and the Responses API's flat function tool.

Every shape is derived from the one :data:`~keepstone.tools.schemas.SPECS` table, so a
description or an argument is written once.

OpenAI's strict mode (``"strict": true``, the Agents SDK's ``strict_json_schema``) takes an
object schema only when every property is required and no other is allowed; an optional
argument is then said by letting it be null. It also refuses some constraint keywords (a
string's ``minLength`` and ``maxLength``): those are left out of the strict form, and the
dispatcher still refuses what they would have refused, with an error result the model
reads. :func:`without_nulls` turns the nulls back into omitted arguments before a call runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from keepstone.errors import InvalidRequest
from keepstone.tools.schemas import ToolSpec

#: The OpenAI APIs whose function-tool shape :func:`openai_tool` gives.
OpenAIApi = Literal["chat", "responses"]

#: The keywords a property keeps in a strict schema: the ones OpenAI's strict mode accepts.
_STRICT_KEYWORDS = frozenset(
    {
        "type",
        "description",
        "enum",
        "const",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "items",
        "minItems",
        "maxItems",
    }
)


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` (a tool's object schema) in OpenAI's strict form: every property required,
    an optional one nullable, no other property allowed, only the keywords strict mode
    takes. ``schema`` itself is left as it is."""
    required = set(schema.get("required", ()))
    properties: dict[str, Any] = {}
    for name, prop in schema.get("properties", {}).items():
        kept = {k: v for k, v in prop.items() if k in _STRICT_KEYWORDS}
        if name not in required:
            kind = kept.get("type")
            kinds = list(kind) if isinstance(kind, list) else [kind]
            kept["type"] = [*kinds, "null"] if "null" not in kinds else kinds
            if "enum" in kept and None not in kept["enum"]:
                kept["enum"] = [*kept["enum"], None]  # an enum holds its null too
        properties[name] = kept
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def without_nulls(spec: ToolSpec, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` less each optional argument given as null: a strict schema's way of
    leaving it out. A required argument given as null is kept, for the dispatcher to
    refuse by name."""
    required = set(spec.input_schema.get("required", ()))
    return {k: v for k, v in arguments.items() if v is not None or k in required}


def openai_tool(spec: ToolSpec, *, api: OpenAIApi = "chat", strict: bool = False) -> dict[str, Any]:
    """``spec`` as an OpenAI function tool: Chat Completions' ``{"type": "function",
    "function": {...}}`` or the Responses API's flat ``{"type": "function", "name", ...}``;
    with ``strict``, in strict mode on the strict form of its schema."""
    if api not in ("chat", "responses"):
        raise InvalidRequest(f"api must be 'chat' or 'responses', not {api!r}")
    function = spec.openai()["function"]
    if strict:
        function = {**function, "parameters": strict_schema(spec.input_schema), "strict": True}
    elif api == "responses":  # the Responses API's function tool always says strict or not
        function = {**function, "strict": False}
    if api == "chat":
        return {"type": "function", "function": function}
    return {"type": "function", **function}
