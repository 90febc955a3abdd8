"""The arguments of a tool call, as a model sends them: checked by name and type, each
refusal an ``InvalidRequest`` that says what the tool takes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from keepstone.errors import InvalidRequest
from keepstone.tools.schemas import DEPRECATED_ARGUMENTS


def current_names(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """``args`` with a tool's former argument names (``new_path``, ``old_str``, ...;
    deprecated, docs/vocabulary.md) under their names now; both spellings at once is
    refused, so neither is silently dropped."""
    for old, new in DEPRECATED_ARGUMENTS.get(tool, {}).items():
        if old in args:
            if new in args:
                raise InvalidRequest(f"{tool} takes {new}; drop {old} (its former name)")
            args[new] = args.pop(old)
    return args


def only_args(args: Mapping[str, Any], tool: str, allowed: set[str] | frozenset[str]) -> None:
    """Refuse an argument ``tool`` does not take, naming the ones it does."""
    extra = sorted(set(args) - allowed)
    if extra:
        raise InvalidRequest(
            f"{tool} does not take {', '.join(extra)}; it takes {', '.join(sorted(allowed))}"
        )


def str_arg(args: Mapping[str, Any], name: str, refusal: str = "") -> str:
    """A required string argument."""
    value = args.get(name)
    if not isinstance(value, str):
        raise InvalidRequest(refusal or f"{name} is required and must be a string")
    return value


def optional_str(args: Mapping[str, Any], name: str, refusal: str) -> str | None:
    """An optional string argument (None when left out)."""
    value = args.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidRequest(refusal)
    return value
