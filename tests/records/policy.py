"""Policy rows of the team memory record routes (SPEC §6), for ``tests/api/policy.py``
(which uses these instead of ``tests/api/policy_records.py`` while this module exists).

Read routes take any member of the team (an org owner/admin included); deleting a
record and changing the setting take an org owner or admin in a browser session with
its CSRF token; saving takes only the service token. A caller who cannot act in the
team gets ``404 team_not_found`` first; a token credential, which belongs to no team,
gets ``403 forbidden`` (SPEC §6's order: 401 → 404 → 403).
"""

from __future__ import annotations

from keepstone.service.records import RecordService
from tests.api.policy import FORBIDDEN, OK, UNAUTH, Req, Row, policy
from tests.api.world import World

TEAM_NOT_FOUND = (404, "team_not_found")

READ = policy(
    OK,
    none=UNAUTH,
    service_token=FORBIDDEN,
    admin_token=FORBIDDEN,
    super_admin=TEAM_NOT_FOUND,
)
MANAGE = policy(
    FORBIDDEN,
    none=UNAUTH,
    super_admin=TEAM_NOT_FOUND,
    org_admin=OK,
    org_owner=OK,
)
SAVE = policy(FORBIDDEN, none=UNAUTH, super_admin=TEAM_NOT_FOUND, service_token=OK)


def _records(w: World) -> RecordService:
    records: RecordService = w.app.state.records
    return records


def _search(w: World) -> Req:
    # Memory off: the answer is 200 {"state": "off"} before the per-team search rate
    # applies, so running every credential back to back never meets 429.
    _records(w).set_enabled_as_server(w.team_id, False)
    return Req("POST", f"/api/teams/{w.team_id}/memory/search", json={"query": "deploy"})


def _save(w: World) -> Req:
    _records(w).set_enabled_as_server(w.team_id, True)
    return Req("POST", f"/api/internal/teams/{w.team_id}/memory", json={"text": "deployed v2"})


def _delete(w: World) -> Req:
    _records(w).set_enabled_as_server(w.team_id, True)
    record = _records(w).save_as_server(w.team_id, "a record to delete")
    return Req("DELETE", f"/api/teams/{w.team_id}/memory/{record.id}")


ROWS: list[Row] = [
    Row("POST", "/api/teams/{team}/memory/search", _search, READ),
    Row(
        "GET",
        "/api/teams/{team}/memory",
        lambda w: Req("GET", f"/api/teams/{w.team_id}/memory"),
        READ,
    ),
    Row(
        "GET",
        "/api/teams/{team}/memory-settings",
        lambda w: Req("GET", f"/api/teams/{w.team_id}/memory-settings"),
        READ,
    ),
    Row(
        "PUT",
        "/api/teams/{team}/memory-settings",
        lambda w: Req("PUT", f"/api/teams/{w.team_id}/memory-settings", json={"enabled": True}),
        MANAGE,
    ),
    Row("DELETE", "/api/teams/{team}/memory/{id}", _delete, MANAGE),
    Row("POST", "/api/internal/teams/{team}/memory", _save, SAVE),
]
