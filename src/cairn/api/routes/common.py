"""Shared bits of the route modules: OpenAPI error responses, and the reading of the
history's query parameters (a version number, an instant)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from cairn.api.errors import ERROR_SCHEMA
from cairn.errors import InvalidRequest

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


#: Past the version column's range (a 32-bit integer): no such version can exist.
_MAX_VERSION = 2**31 - 1


def parse_version(raw: str, field: str = "version") -> int:
    """A version number: a whole number from 1."""
    if not raw.strip():
        raise InvalidRequest(
            f"{field} is required: a version number (GET /api/memory/doc/versions lists them)",
            field=field,
        )
    try:
        number = int(raw.strip())
    except ValueError:
        number = 0
    if not 1 <= number <= _MAX_VERSION:
        raise InvalidRequest(
            f"{field} must be a version number (a whole number from 1), not {raw!r}; "
            "GET /api/memory/doc/versions lists them",
            field=field,
        )
    return number
