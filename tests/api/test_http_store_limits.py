"""What a client of a server cannot send (a URL past httpx's 64 KiB) is refused as a
KeepstoneError naming what to shorten, as a local store refuses the same call, never
httpx's own exception escaping to the caller (an agent framework's tool runner)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from keepstone import errors
from keepstone.store.http import HttpMemoryStore
from tests.api.world import World
from tests.conformance.helpers import AppTransport


@pytest.fixture
def member(world: World, client: TestClient) -> Iterator[HttpMemoryStore]:
    store = HttpMemoryStore(
        str(client.base_url), world.keys["member"], transport=AppTransport(client)
    )
    try:
        yield store
    finally:
        store.close()


def test_a_path_too_long_for_a_url_is_the_paths_refusal(
    member: HttpMemoryStore, world: World
) -> None:
    with pytest.raises(errors.InvalidPath):
        member.read(world.team_ref(), "x" * 70_000 + ".md")


def test_a_query_too_long_for_a_url_is_invalid_request(
    member: HttpMemoryStore, world: World
) -> None:
    with pytest.raises(errors.InvalidRequest, match="too long to send"):
        member.search(world.team_ref(), "hello " * 12_000, 10, "", {})
