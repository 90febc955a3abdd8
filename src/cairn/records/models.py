"""Request bodies of the records routes, validated strictly (SPEC §6 limits).

Unknown fields are refused (``extra="forbid"``) and types are strict (no ``"5"`` for
5, no ``true`` for 1). :func:`parse` turns any failure into ``400 invalid_request``
naming the field, so the route never answers 422.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from cairn.errors import InvalidRequest

MAX_TEXT = 8000
MAX_QUERY = 1000
MAX_LIMIT = 50
DEFAULT_LIMIT = 10
MAX_ID = 64


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _utf8(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate from a JSON \ud800 escape
        raise ValueError("must be valid Unicode text (no lone surrogates)") from exc
    return value


def is_clean_id(value: str) -> bool:
    """An id as stored: 1-64 characters, no control character, valid Unicode."""
    if not 1 <= len(value) <= MAX_ID or _CONTROL.search(value):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _id(value: str) -> str:
    if not is_clean_id(value):
        raise ValueError(f"must be an id of 1 to {MAX_ID} printable characters")
    return value


Text = Annotated[str, AfterValidator(_utf8)]
Id = Annotated[str, AfterValidator(_id)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SaveRequest(_Strict):
    text: Text = Field(min_length=1, max_length=MAX_TEXT)
    repo_id: Id | None = Field(default=None, min_length=1, max_length=MAX_ID)


class SearchRequest(_Strict):
    query: Text = Field(min_length=1, max_length=MAX_QUERY)
    repo_id: Id | None = Field(default=None, min_length=1, max_length=MAX_ID)
    limit: int = Field(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)


class SettingsRequest(_Strict):
    enabled: bool


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], raw: bytes | Mapping[str, Any] | None) -> M:
    """Validate ``raw`` (JSON bytes or a mapping) as ``model`` or raise 400."""
    data: Any = raw
    if isinstance(raw, bytes | bytearray):
        if not raw.strip():
            data = {}
        else:
            try:
                data = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise InvalidRequest(
                    f"the body is not valid JSON; send a JSON object such as {_example(model)}"
                ) from exc
    if not isinstance(data, Mapping):
        raise InvalidRequest(f"the body must be a JSON object such as {_example(model)}")
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "body"
        if err["type"] == "extra_forbidden":
            allowed = ", ".join(model.model_fields)
            message = f"field {field!r} is not taken by this route; send only: {allowed}"
        else:
            message = f"field {field!r}: {err['msg']}"
        raise InvalidRequest(message, field=field) from exc


def check_params(params: Iterable[str], allowed: Iterable[str]) -> None:
    """Refuse a query parameter the route does not take (400 naming it)."""
    allowed_set = set(allowed)
    for name in params:
        if name not in allowed_set:
            taken = ", ".join(sorted(allowed_set)) or "none"
            raise InvalidRequest(
                f"query parameter {name!r} is not taken by this route (it takes: {taken}); "
                "the team comes from the path, never from a parameter",
                field=name,
            )


def _example(model: type[BaseModel]) -> str:
    examples = {
        SaveRequest: '{"text": "..."}',
        SearchRequest: '{"query": "..."}',
        SettingsRequest: '{"enabled": true}',
    }
    return examples.get(model, "{}")
