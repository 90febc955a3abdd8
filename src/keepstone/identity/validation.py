"""Checks of identity input: roles, plans, names, emails, ids. Each refusal names the field
and what it takes; no name, email or id may hold a control character (:mod:`keepstone.text`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from keepstone.errors import InvalidRequest, NotFound
from keepstone.principal import OrgRole, Plan, TeamRole
from keepstone.text import clean_text

E = TypeVar("E", bound=StrEnum)


def _parse(enum: type[E], value: object, field: str, what: str) -> E:
    try:
        return enum(str(value))
    except ValueError:
        allowed = ", ".join(member.value for member in enum)
        raise InvalidRequest(
            f"{field} {value!r} is not {what}; use one of: {allowed}", field=field
        ) from None


def parse_team_role(value: object) -> TeamRole:
    return _parse(TeamRole, value, "role", "a team role")


def parse_org_role(value: object) -> OrgRole:
    return _parse(OrgRole, value, "role", "an org role")


def parse_plan(value: object) -> Plan:
    return _parse(Plan, value, "plan", "a known plan")


def clean_name(field: str, value: str, *, required: bool = True) -> str:
    value = clean_text(field, value).strip()
    if required and not value:
        raise InvalidRequest(f"{field} must not be empty", field=field)
    if len(value) > 256:
        raise InvalidRequest(f"{field} is longer than 256 characters", field=field)
    return value


def clean_email(value: str) -> str:
    """An email as stored and looked up: trimmed, lower case, no control character."""
    return clean_text("email", value).strip().lower()


def clean_ids(**ids: str) -> None:
    """Refuse an id holding a control character, naming its field (``user_id=...``)."""
    for field, value in ids.items():
        clean_text(field, value)


def row_by_id(conn: Connection, table: sa.Table, row_id: str, what: str) -> dict[str, Any]:
    """The row of ``table`` with id ``row_id``; NotFound naming ``what`` when absent (an id
    holding a control character is refused first, naming ``<what>_id``)."""
    clean_ids(**{f"{what}_id": row_id})
    row = conn.execute(sa.select(table).where(table.c.id == row_id)).mappings().first()
    if row is None:
        raise NotFound(f"no {what} with id {row_id!r}")
    return dict(row)
