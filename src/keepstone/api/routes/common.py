"""Shared bits of the route modules: OpenAPI error responses, and the reading of the
history's query parameters (a version number, an instant)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

from fastapi.routing import APIRoute
from pydantic import BeforeValidator

from keepstone.api.errors import ERROR_SCHEMA
from keepstone.documents import MAX_VERSION
from keepstone.errors import InvalidRequest
from keepstone.text import is_whole_number, parse_int

_DESCRIPTIONS = {
    400: "Bad request (invalid_request, invalid_space_ref, unknown_parameter, ...)",
    401: "Not signed in (unauthenticated)",
    402: "The plan does not include this (plan_required)",
    403: "Not allowed (forbidden, member_role_required, platform_authority_required, "
    "csrf_required)",
    404: "Not found (not_found, team_not_found, ...)",
    409: "Conflict",
    412: "The document changed meanwhile (precondition_failed)",
    413: "Too large (quota_exceeded, document_too_large, import_too_large, body_too_large)",
    422: "Unprocessable (invalid_path, secret_detected, invalid_document, invalid_archive)",
    429: "Rate limited (rate_limited); see Retry-After",
    500: "Internal error (a bug)",
    503: "The store cannot be reached (store_unavailable)",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the given error statuses, all in the one error shape."""
    return {
        status: {
            "description": _DESCRIPTIONS[status],
            "content": {"application/json": {"schema": ERROR_SCHEMA}},
        }
        for status in statuses
    }


#: Errors any authenticated route may answer.
AUTH_ERRORS = (400, 401, 403, 404, 500, 503)


#: What ``as_of`` takes, said in every refusal of one.
AS_OF_FORM = (
    "an ISO 8601 instant such as 2026-11-30T14:05:00Z or 2026-11-30T16:05:00+02:00 "
    "(a time without an offset is UTC; a date alone is its midnight UTC)"
)
# A '+' of an offset sent unencoded in a query string arrives as a space.
# Only after a time (":mm" or ":ss[.ffffff]"): "2026-11-30 14:05" is a time, not an offset.
_SPACED_OFFSET = re.compile(r"(:\d{2}(?:\.\d+)?) (\d{2}(?::?\d{2})?)$")


def parse_as_of(raw: str, field: str = "as_of") -> datetime:
    """The instant ``raw`` names, in UTC: ISO 8601, ``Z`` or an offset; naive is UTC."""
    text = _SPACED_OFFSET.sub(r"\1+\2", raw.strip())
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidRequest(
            f"{field} {raw!r} is not a timestamp; send {AS_OF_FORM}", field=field
        ) from None
    if at.tzinfo is None:
        return at.replace(tzinfo=UTC)
    try:
        # In UTC: the instant the caller meant, in the zone every stored instant is in.
        return at.astimezone(UTC)
    except OverflowError:  # an offset pushing year 1 or 9999 past the calendar
        raise InvalidRequest(
            f"{field} {raw!r} is outside the years 1-9999 once in UTC; send {AS_OF_FORM}",
            field=field,
        ) from None


def parse_limit(raw: str) -> int:
    """A page's size as sent: a whole number in ASCII digits (its range is the listing's
    to check)."""
    return parse_int("limit", raw, what="a page size, or leave limit out for the whole listing")


def parse_version(raw: str, field: str = "version") -> int:
    """A version number: a whole number from 1."""
    if not raw.strip():
        raise InvalidRequest(
            f"{field} is required: a version number (GET /api/memory/doc/versions lists them)",
            field=field,
        )
    number = int(raw) if is_whole_number(raw) else 0
    if not 1 <= number <= MAX_VERSION:
        raise InvalidRequest(
            f"{field} must be a version number (a whole number from 1 in digits 0-9), "
            f"not {raw!r}; GET /api/memory/doc/versions lists them",
            field=field,
        )
    return number


def _whole_number(value: object) -> object:
    # A number FastAPI reads from a query string: digits 0-9 only (pydantic alone also
    # takes "1_0" as ten, "+5", " 5" and "5.0").
    if isinstance(value, str) and not is_whole_number(value, negative=True):
        raise ValueError("must be a whole number written with digits 0-9")
    return value


#: An ``int`` query parameter read strictly (:func:`keepstone.text.parse_int`'s rule).
WholeNumber = Annotated[int, BeforeValidator(_whole_number)]


# --- Query parameters read by hand ---------------------------------------------------------
#
# FastAPI's handling of each declared query parameter, and of each dependency, costs CPU on
# every request: for GET /api/memory/doc (a space's four, the path, version and as_of, two
# dependencies) a sizeable share of the request (docs/performance.md has the figure). The
# most requested parameters are read off ``request.query_params`` instead, with the same
# values, refusals and documentation as declared ones:
#
# * :func:`query_value` answers what FastAPI would (the last value of a repeated one, ``""``
#   for ``?name=``), and :func:`required_query` raises for a missing one the very error
#   FastAPI raises, so the
#   app's validation handler answers it as before (the credential's refusal first, then
#   the domain's ``invalid_space_ref``/``invalid_path``);
# * :func:`query_parameters` writes their OpenAPI entries from the same ``Annotated``
#   declarations, in the shape FastAPI gives declared ones.


def query_value(params: Any, name: str) -> str | None:
    """The value of query parameter ``name`` in ``params`` (a request's ``query_params``),
    None when absent."""
    value: str | None = params.get(name)
    return value


def required_query(params: Any, name: str) -> str:
    """The value of required query parameter ``name``; when absent, the validation error
    FastAPI raises for a declared one."""
    value = query_value(params, name)
    if value is None:
        from fastapi.exceptions import RequestValidationError

        raise RequestValidationError(
            [{"type": "missing", "loc": ("query", name), "msg": "Field required", "input": None}]
        )
    return value


F = TypeVar("F", bound=Callable[..., Any])


def reads_query(**declared: tuple[Any, Any]) -> Callable[[F], F]:
    """Mark a dependency that reads these query parameters by hand (``name=(Annotated[type,
    Query(...)], default)``, as :func:`query_parameters` takes them): the OpenAPI document
    lists them on every :class:`HandReadRoute` that depends on it."""
    parameters = query_parameters(**declared)

    def mark(func: F) -> F:
        func.__dict__["openapi_parameters"] = parameters
        return func

    return mark


def query_parameters(**declared: tuple[Any, Any]) -> list[dict[str, Any]]:
    """OpenAPI ``parameters`` for query parameters read by hand: ``name=(Annotated[type,
    Query(...)], default)``, ``...`` for a required one (as pydantic says it), with the
    declaration's description and constraints, shaped as FastAPI shapes a declared
    parameter's."""
    import types
    import typing

    out: list[dict[str, Any]] = []
    for name, (alias, default) in declared.items():
        kind, info = typing.get_args(alias)[:2]
        optional = isinstance(kind, types.UnionType) and type(None) in typing.get_args(kind)
        schema: dict[str, Any] = (
            {"anyOf": [{"type": "string"}, {"type": "null"}]} if optional else {"type": "string"}
        )
        schema.update({"description": info.description, **(info.json_schema_extra or {})})
        if default is not ... and default is not None:
            schema["default"] = default
        schema["title"] = name.replace("_", " ").title()
        out.append(
            {
                "name": name,
                "in": "query",
                "required": default is ...,
                "schema": schema,
                "description": info.description,
            }
        )
    return out


class HandReadRoute(APIRoute):
    """A route whose OpenAPI operation lists the query parameters its dependencies read by
    hand (:func:`reads_query`), after those it declares: the route class of the routers
    whose routes take a space (``APIRouter(route_class=...)``, FastAPI's own hook)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        extra: list[dict[str, Any]] = []
        pending = list(self.dependant.dependencies)
        while pending:
            dependency = pending.pop(0)
            extra += getattr(dependency.call, "openapi_parameters", [])
            pending += dependency.dependencies
        if extra:
            openapi_extra = dict(self.openapi_extra or {})
            listed = list(openapi_extra.get("parameters", []))
            have = {(p["name"], p["in"]) for p in listed}
            openapi_extra["parameters"] = listed + [
                p for p in extra if (p["name"], p["in"]) not in have
            ]
            self.openapi_extra = openapi_extra


def etag_of_if_match(raw: str | None) -> str | None:
    """The etag of an If-Match header: quoted or bare, a weak ``W/`` prefix ignored."""
    if raw is None:
        return None
    raw = raw.strip()
    if raw.startswith("W/"):
        raw = raw[2:]
    return raw.strip('"')
