"""The gates of the team memory records' use-cases (SPEC §6): each field's limits, the
plan, the team's on/off setting and the repository a request names.

:class:`~keepstone.service.records.RecordService` runs them in the contract's order (its
module docstring draws it); every face reaches them through it, so each limit is checked
here, once.
"""

from __future__ import annotations

from keepstone.errors import InvalidRequest, MemoryOff, PlanRequired, RepoNotFound
from keepstone.records.models import MAX_ID, MAX_LIMIT, MAX_TEXT, is_clean_id
from keepstone.records.store import RecordReader
from keepstone.service.access import TeamAccess
from keepstone.text import no_nul


def check_text(text: object, field: str = "text", most: int = MAX_TEXT) -> None:
    if not isinstance(text, str) or not 1 <= len(text) <= most or not _is_unicode(text):
        raise InvalidRequest(
            f"field {field!r} must be 1 to {most:,} characters of valid Unicode text",
            field=field,
        )
    no_nul(field, text)  # tabs and newlines are text; NUL is refused on every store


def check_limit(limit: object) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(
            f"field 'limit' must be a whole number 1 to {MAX_LIMIT}", field="limit"
        )


def check_repo_id(repo_id: object) -> None:
    if repo_id is not None and not (isinstance(repo_id, str) and is_clean_id(repo_id)):
        raise InvalidRequest(
            f"field 'repo_id' must be an id of 1 to {MAX_ID} printable characters",
            field="repo_id",
        )


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")  # a lone surrogate (a JSON "\ud800" escape) is not text
    except UnicodeEncodeError:
        return False
    return True


def check_plan(access: TeamAccess) -> None:
    """Refuse a team whose org's plan has no team memory. How to change the plan is said
    only to a caller who can (a super-admin); the others learn whom to ask."""
    if access.plan_allows:
        return
    reason = (
        f"the plan {access.plan!r} does not include team memory; it comes with pro_plus and "
        "enterprise"
    )
    if access.operator:
        raise PlanRequired(
            f"{reason}; change the org's plan: PATCH /api/admin/orgs/{access.org_id} with a "
            f"plan, or keepstone admin set-plan --org {access.org_id} --plan pro_plus"
        )
    raise PlanRequired(f"{reason}; an instance admin changes the org's plan")


def check_memory_on(tx: RecordReader, team_id: str) -> None:
    if not tx.enabled(team_id):
        raise memory_off()


def memory_off() -> MemoryOff:
    return MemoryOff("team memory is off for this team; a workspace owner or admin turns it on")


def check_repo(tx: RecordReader, access: TeamAccess, repo_id: str) -> None:
    # An id no repository can have never reaches the driver.
    project = tx.repo_project(access.team_id, repo_id) if is_clean_id(repo_id) else None
    if project is None:
        raise RepoNotFound(
            f"repository {repo_id!r} is not a repository of this team; "
            "search without repo_id, or use a repository of this team",
            field="repo_id",
        )
    if access.project_ids is not None and project not in access.project_ids:
        raise RepoNotFound(
            f"repository {repo_id!r} is not in one of your projects; search without "
            "repo_id, or ask a workspace owner or admin for access",
            field="repo_id",
        )
