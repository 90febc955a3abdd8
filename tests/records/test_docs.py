"""docs/records.md names every records route, error code and setting, so it cannot drift."""

from __future__ import annotations

from pathlib import Path

from fastapi.routing import APIRoute

from keepstone.api.routes.records import router
from keepstone.errors import (
    CsrfRequired,
    Forbidden,
    InvalidRequest,
    MemoryOff,
    PlanRequired,
    RateLimited,
    RecordNotFound,
    RepoNotFound,
    StoreUnavailable,
    TeamNotFound,
    Unauthenticated,
)

DOC = (Path(__file__).resolve().parents[2] / "docs" / "records.md").read_text(encoding="utf-8")


def test_every_route_is_documented() -> None:
    for route in router.routes:
        assert isinstance(route, APIRoute)
        path = route.path
        for method in route.methods or ():
            assert f"| {method} | `{path}` |" in DOC, (method, path)


def test_every_error_code_and_setting_is_documented() -> None:
    for cls in (
        Unauthenticated,
        TeamNotFound,
        Forbidden,
        CsrfRequired,
        InvalidRequest,
        PlanRequired,
        MemoryOff,
        RepoNotFound,
        RecordNotFound,
        RateLimited,
        StoreUnavailable,
    ):
        assert f"{cls.status} {cls.code}" in DOC or f"`{cls.status} {cls.code}`" in DOC, cls
    for name in (
        "KEEPSTONE_SERVICE_TOKEN",
        "KEEPSTONE_REDIS_URL",
        "KEEPSTONE_REDIS_PREFIX",
        "KEEPSTONE_RECORDS_PURGE_INTERVAL",
        "keepstone records add",
        "keepstone records purge",
    ):
        assert name in DOC, name
