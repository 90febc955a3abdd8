"""Shared bits of the route modules: OpenAPI error responses."""

from __future__ import annotations

from typing import Any

from cairn.api.errors import ERROR_SCHEMA

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
