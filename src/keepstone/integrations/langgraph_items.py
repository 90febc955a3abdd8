"""How :mod:`keepstone.integrations.langgraph` keeps a LangGraph item as a document: pure
naming, formatting and filtering, no I/O and no LangGraph import (docs/integrations/langgraph.md).

- An item ``(namespace, key)`` is the document ``label1/…/labelN/key.md``; each label and
  the key are one path segment, spelled by :func:`encode_segment`: a character our paths
  do not take (``/``, ``\\``, control characters, the deceptive ones of
  :data:`keepstone.paths.DECEPTIVE_CHARACTERS`) and the escape character ``%`` itself are
  written ``%XX``, one per UTF-8 byte, upper-case hex, and so is the ``:`` of a segment
  that starts like a drive letter (``C:``); a segment whose text is not in NFC
  has every non-ASCII character escaped, since a path must be NFC; the empty key is ``%``.
  :func:`decode_segment` reads a segment back and answers None for any spelling
  :func:`encode_segment` does not make, so the mapping is one-to-one both ways.
- The value is a fenced ```` ```json ```` block holding the value as indented JSON
  (:func:`render_value`, which refuses what JSON would not give back as it was put: a dict
  key that is not a string, nesting deeper than :data:`MAX_VALUE_DEPTH`);
  :func:`parse_value` reads it back, None when the document is not one.
- :func:`passes` is LangGraph's ``filter`` (with :func:`matches`): equality, nested
  objects, lists element by element, dotted paths into the value, and the operators
  ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from keepstone.errors import InvalidPath, InvalidRequest
from keepstone.paths import DECEPTIVE_CHARACTERS, DOC_SUFFIX, validate_doc_path

ESCAPE = "%"
#: The spelling of the empty key (labels are never empty): a lone escape character, which
#: no other text encodes to.
EMPTY = ESCAPE
_UNSAFE = re.compile(
    "[%/\\\\\x00-\x1f\x7f-\x9f\ud800-\udfff" + "".join(sorted(DECEPTIVE_CHARACTERS)) + "]"
)
_NON_ASCII = re.compile("[^\x00-\x7f]")
#: A segment starting like a drive letter ("C:"), which a path may not start with.
_DRIVE = re.compile("(?<=^[A-Za-z]):")
_ESCAPED = re.compile("(?:%[0-9A-F]{2})+")
_OPENING = "```json\n"
_CLOSING = "\n```\n"
#: How deep a value may nest dicts and lists (the value itself is level 1): far beyond what
#: an item holds, and far inside the Python stack that writing it as JSON recurses on.
MAX_VALUE_DEPTH = 100
_MUST_BE_JSON = (
    "a LangGraph item's value must be JSON (strings, finite numbers, booleans, null, "
    "lists and dicts with string keys)"
)


def _escaped(match: re.Match[str]) -> str:
    raw = match.group().encode("utf-8", "surrogatepass")
    return "".join(f"%{b:02X}" for b in raw)


def encode_segment(text: str) -> str:
    """``text`` (a namespace label or a key) as one path segment."""
    if text == "":
        return EMPTY
    spelled = _DRIVE.sub(_escaped, _UNSAFE.sub(_escaped, text))
    if unicodedata.normalize("NFC", spelled) != spelled:
        spelled = _NON_ASCII.sub(_escaped, spelled)
    return spelled


def decode_segment(segment: str) -> str | None:
    """The text :func:`encode_segment` spelled as ``segment``, or None when it spells none."""
    if segment == EMPTY:
        return ""
    text = _unescaped(segment)
    if text is None or text == "" or encode_segment(text) != segment:
        return None
    return text


def _unescaped(segment: str) -> str | None:
    parts: list[str] = []
    at = 0
    for run in _ESCAPED.finditer(segment):
        parts.append(segment[at : run.start()])
        raw = bytes(int(run.group()[i + 1 : i + 3], 16) for i in range(0, len(run.group()), 3))
        try:
            parts.append(raw.decode("utf-8", "surrogatepass"))
        except UnicodeDecodeError:
            return None
        at = run.end()
    parts.append(segment[at:])
    return "".join(parts)


def item_path(namespace: tuple[str, ...], key: str) -> str:
    """The document that holds item ``key`` of ``namespace``; InvalidPath (naming the
    namespace and key) when it would be too long or too deep for a path."""
    path = "/".join([*map(encode_segment, namespace), encode_segment(key) + DOC_SUFFIX])
    try:
        return validate_doc_path(path)
    except InvalidPath as exc:
        raise InvalidPath(
            f"the item {key!r} of namespace {namespace!r} cannot be stored: {exc.message} "
            "(each label and the key is one segment of the document's path)",
            **exc.details,
        ) from None


def stored_at(namespace: tuple[str, ...], key: str) -> str | None:
    """The document that would hold item ``key`` of ``namespace``, or None when there can be
    none: its path would be beyond a path's limits, so nothing is ever stored there (a read
    finds nothing, a delete has nothing to do)."""
    try:
        return item_path(namespace, key)
    except InvalidPath:
        return None


def namespace_dir(namespace: tuple[str, ...]) -> str:
    """The directory prefix that holds ``namespace`` and the namespaces under it."""
    return "/".join(map(encode_segment, namespace))


def item_of_path(path: str) -> tuple[tuple[str, ...], str] | None:
    """The ``(namespace, key)`` whose document is ``path``, or None when ``path`` is no
    item's: at the root, or a segment that is no spelling of a label or key."""
    *dirs, name = path.split("/")
    if not dirs or not name.endswith(DOC_SUFFIX):
        return None
    key = decode_segment(name[: -len(DOC_SUFFIX)])
    labels = [decode_segment(d) for d in dirs]
    if key is None or not all(
        label and "." not in label and "\x00" not in label for label in labels
    ):
        return None  # LangGraph's labels: not empty, without '.' or NUL
    return tuple(label for label in labels if label is not None), key


def render_value(value: Mapping[str, Any]) -> str:
    """The document of an item's value: a fenced JSON block, readable and searchable. A
    tuple is written as a list (JSON has no tuple) and comes back as one."""
    if not isinstance(value, Mapping):
        raise InvalidRequest(f"a LangGraph item's value must be a dict, not {type(value).__name__}")
    _check_shape(value)
    try:
        text = json.dumps(dict(value), ensure_ascii=False, indent=2, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"{_MUST_BE_JSON}: {exc}") from None
    return _OPENING + text + _CLOSING


def _check_shape(value: Mapping[str, Any]) -> None:
    """Refuse a value JSON would not give back as it was put: a dict key that is not a
    string (``json.dumps`` writes ``1`` and ``True`` as ``"1"`` and ``"true"``, and two keys
    spelled alike keep one value), or nesting deeper than :data:`MAX_VALUE_DEPTH`, which
    ``json.dumps`` would recurse through until Python's stack runs out. Walked with a list,
    not recursion, so a value of any depth (or one that holds itself) is refused cleanly."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        node, depth = pending.pop()
        if isinstance(node, Mapping):
            children = list(node.values())
            for key in node:
                if not isinstance(key, str):
                    raise InvalidRequest(
                        f"{_MUST_BE_JSON}: the key {key!r} ({type(key).__name__}) is not a string"
                    )
        elif isinstance(node, list | tuple):
            children = list(node)
        else:
            continue
        if depth > MAX_VALUE_DEPTH:
            raise InvalidRequest(
                f"a LangGraph item's value may nest dicts and lists at most {MAX_VALUE_DEPTH} "
                "levels deep (or it holds itself); flatten it"
            )
        pending.extend((child, depth + 1) for child in children)


def parse_value(content: str) -> dict[str, Any] | None:
    """The value :func:`render_value` wrote into ``content``, or None when ``content`` is
    not such a document (a note written by hand, a value edited into invalid JSON)."""
    if not (content.startswith(_OPENING) and content.endswith(_CLOSING)):
        return None
    try:
        value = json.loads(content[len(_OPENING) : -len(_CLOSING)])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
_MISSING = object()


def passes(value: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """Whether an item's ``value`` passes a search's ``filter``: each field of the filter
    (a key of the value, or a dotted path into it, ``"user.level"``, as LangGraph's SQL
    stores read it) :func:`matches` its condition."""
    return all(matches(_field(value, key), condition) for key, condition in filter.items())


def _field(value: Mapping[str, Any], key: str) -> Any:
    """``value[key]``, else the value at the dotted path ``key``, else None. A key that is
    not a string names no field (a value's keys are strings): None, a missing field, as
    LangGraph's ``InMemoryStore`` reads it."""
    found = value.get(key, _MISSING)
    if found is not _MISSING:
        return found
    if not isinstance(key, str):
        return None
    node: Any = value
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def matches(value: Any, filter_value: Any) -> bool:
    """Whether ``value`` passes ``filter_value``, the way LangGraph's stores compare: a dict
    of operators applies each, another dict matches field by field, a list element by
    element, anything else by equality."""
    if isinstance(filter_value, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in filter_value):
            return all(_holds(value, op, operand) for op, operand in filter_value.items())
        if not isinstance(value, Mapping):
            return False
        return all(matches(value.get(k), v) for k, v in filter_value.items())
    if isinstance(filter_value, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(filter_value)
            and all(matches(v, f) for v, f in zip(value, filter_value, strict=True))
        )
    return bool(value == filter_value)


def _holds(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op not in _OPERATORS:
        raise InvalidRequest(
            f"filter operator {op!r} is not one LangGraph defines; use one of "
            + ", ".join(_OPERATORS)
        )
    comparable = _comparable(value, operand)
    if comparable is None:
        return False  # a missing field, or a string against a number: no order to test
    a, b = comparable
    return bool({"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op])


def _comparable(value: Any, operand: Any) -> tuple[Any, Any] | None:
    """``(value, operand)`` when they can be ordered: two numbers (booleans are not), or
    two strings."""

    def number(x: Any) -> bool:
        return isinstance(x, int | float) and not isinstance(x, bool)

    if number(value) and number(operand):
        return float(value), float(operand)
    if isinstance(value, str) and isinstance(operand, str):
        return value, operand
    return None
