"""HttpMemoryStore's mapping of answers back to keepstone.errors (the e2e test drives it live)."""

from __future__ import annotations

import httpx
import pytest

from keepstone import errors
from keepstone.spaces import SpaceRef
from keepstone.store.http import HttpMemoryStore, error_from_response
from tests.serving import free_port


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (401, "unauthenticated", errors.Unauthenticated),
        (403, "member_role_required", errors.MemberRoleRequired),
        (403, "platform_authority_required", errors.PlatformAuthorityRequired),
        (404, "not_found", errors.NotFound),
        (412, "precondition_failed", errors.PreconditionFailed),
        (413, "quota_exceeded", errors.QuotaExceeded),
        (422, "invalid_path", errors.InvalidPath),
        (503, "store_unavailable", errors.StoreUnavailable),
    ],
)
def test_error_bodies_map_to_the_same_classes(status: int, code: str, cls: type) -> None:
    response = httpx.Response(
        status, json={"error": {"code": code, "message": "why", "limit": "team"}}
    )
    err = error_from_response(response)
    assert type(err) is cls and err.message == "why" and err.details == {"limit": "team"}


def test_rate_limited_keeps_retry_after() -> None:
    response = httpx.Response(
        429,
        json={"error": {"code": "rate_limited", "message": "slow down"}},
        headers={"Retry-After": "7"},
    )
    err = error_from_response(response)
    assert isinstance(err, errors.RateLimited) and err.retry_after == 7.0


def test_a_body_that_is_not_the_error_shape_maps_by_status() -> None:
    err = error_from_response(httpx.Response(404, text="<html>nope</html>"))
    assert type(err) is errors.NotFound


def test_an_unreachable_server_is_store_unavailable() -> None:
    store = HttpMemoryStore(f"http://127.0.0.1:{free_port()}", "keepstone_x", timeout=2)
    with pytest.raises(errors.StoreUnavailable):
        store.list(SpaceRef.build("project", "n", project="p"))
    store.close()


def _unreachable_store() -> HttpMemoryStore:
    return HttpMemoryStore(f"http://127.0.0.1:{free_port()}", "keepstone_x", timeout=2)


@pytest.mark.parametrize("content", ["a\x00b", "lone \udce9 surrogate", b"bytes", None])
def test_a_body_that_is_no_document_is_refused_before_any_request(content: object) -> None:
    # The server is unreachable: reaching it would be StoreUnavailable, not InvalidDocument.
    store = _unreachable_store()
    with pytest.raises(errors.InvalidDocument):
        store.write(SpaceRef.build("project", "n", project="p"), "a.md", content)  # type: ignore[arg-type]
    store.close()


def test_an_unknown_import_strategy_names_the_allowed_ones() -> None:
    import io

    store = _unreachable_store()
    with pytest.raises(errors.InvalidRequest, match="skip, overwrite, rename"):
        store.import_archive(SpaceRef.build("project", "n", project="p"), io.BytesIO(), "merge")  # type: ignore[arg-type]
    store.close()
