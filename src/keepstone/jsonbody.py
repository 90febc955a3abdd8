"""Parse a JSON request body whatever its shape, answering a bad one with ``400``.

Python's ``json`` recurses once per nesting level, so a body of a thousand ``[`` (2 KB)
raises ``RecursionError`` — a 500 — and pydantic's validators recurse again over
whatever did parse. No body Keepstone takes nests more than a few levels, so
:func:`parse_json_body` refuses anything deeper than :data:`MAX_JSON_DEPTH` with
``400 invalid_request`` naming the body, as it does malformed JSON. Domain-free, so
both the API and the records routes can use it.
"""

from __future__ import annotations

import json

from keepstone.errors import InvalidRequest

#: Deepest nesting of arrays and objects a request body may have (the top level is 1).
MAX_JSON_DEPTH = 64


def parse_json_body(raw: bytes | bytearray | str, *, hint: str = "") -> object:
    """The JSON value of ``raw``, or :class:`InvalidRequest` (``field="body"``).

    Refused: bytes that are not JSON (or not UTF-8/16/32) and values nested deeper than
    :data:`MAX_JSON_DEPTH`. ``hint`` ends the message (e.g. ``send {"content": "..."}``).
    """
    suffix = f"; {hint}" if hint else ""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise _too_deep(suffix) from None
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest(f"the body is not valid JSON{suffix}", field="body") from None
    if nesting_exceeds(value, MAX_JSON_DEPTH):
        raise _too_deep(suffix)
    return value


def nesting_exceeds(value: object, limit: int) -> bool:
    """Whether ``value`` nests lists/dicts deeper than ``limit`` (iterative: no recursion)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _too_deep(suffix: str) -> InvalidRequest:
    return InvalidRequest(
        f"the body nests arrays/objects deeper than {MAX_JSON_DEPTH} levels{suffix}",
        field="body",
    )
