"""Checks of identity input: roles, plans, names. Each refusal names the allowed values."""

from __future__ import annotations

from cairn.errors import InvalidRequest
from cairn.identity.principal import OrgRole, Plan, TeamRole


def parse_team_role(value: object) -> TeamRole:
    try:
        return TeamRole(str(value))
    except ValueError:
        raise InvalidRequest(
            f"role {value!r} is not a team role; use one of: "
            + ", ".join(r.value for r in TeamRole),
            field="role",
        ) from None


def parse_org_role(value: object) -> OrgRole:
    try:
        return OrgRole(str(value))
    except ValueError:
        raise InvalidRequest(
            f"role {value!r} is not an org role; use one of: "
            + ", ".join(r.value for r in OrgRole),
            field="role",
        ) from None


def parse_plan(value: object) -> Plan:
    try:
        return Plan(str(value))
    except ValueError:
        raise InvalidRequest(
            f"plan {value!r} is unknown; use one of: " + ", ".join(p.value for p in Plan),
            field="plan",
        ) from None


def clean_name(field: str, value: str, *, required: bool = True) -> str:
    value = value.strip()
    if required and not value:
        raise InvalidRequest(f"{field} must not be empty", field=field)
    if len(value) > 256:
        raise InvalidRequest(f"{field} is longer than 256 characters", field=field)
    return value
