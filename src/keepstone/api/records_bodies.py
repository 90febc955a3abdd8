"""Request bodies of the records routes: their shape, read strictly.

Unknown fields are refused (``extra="forbid"``) and types are strict (no ``"5"`` for
5, no ``true`` for 1). The limits of SPEC §6 (lengths, ``limit`` 1-50, ids) appear
in the JSON schema but are checked by :mod:`keepstone.service.records`, once, for every
face.

:func:`parse` turns any failure into ``400 invalid_request`` naming the field, so
the route never answers 422; the JSON itself is read by
:func:`keepstone.jsonbody.parse_json_body`, which also refuses a body nested too deeply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from keepstone.errors import InvalidRequest
from keepstone.jsonbody import parse_json_body
from keepstone.service.records import DEFAULT_LIMIT, MAX_ID, MAX_LIMIT, MAX_QUERY, MAX_TEXT


def _limits(min_length: int, max_length: int) -> dict[str, Any]:
    # Documented in the JSON schema; checked by the records service, once, after the
    # caller's access (a non-member hears 404 before a field's 400).
    return {"json_schema_extra": {"minLength": min_length, "maxLength": max_length}}


#: A repository id in a body: its limits documented inside the string branch.
_RepoId = Annotated[str, Field(**_limits(1, MAX_ID))]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SaveRequest(_Strict):
    text: str = Field(**_limits(1, MAX_TEXT))
    repo_id: _RepoId | None = None


class SearchRequest(_Strict):
    query: str = Field(**_limits(1, MAX_QUERY))
    repo_id: _RepoId | None = None
    limit: int = Field(
        default=DEFAULT_LIMIT, json_schema_extra={"minimum": 1, "maximum": MAX_LIMIT}
    )
    #: ISO 8601: only records created at or after / at or before this instant.
    since: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    until: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    #: In place of the relevance floor: only hits whose fused score reaches this.
    min_score: float | None = Field(default=None, json_schema_extra={"minimum": -1, "maximum": 1})
    #: The recency prior's half-life in days (off unless given).
    recency_days: float | None = Field(default=None, json_schema_extra={"exclusiveMinimum": 0})


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
            data = parse_json_body(raw, hint=f"send a JSON object such as {_example(model)}")
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
