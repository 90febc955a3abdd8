"""What a client of a server (``keepstone memory --server``, ``Memory.connect``) refuses,
and in what order, as the server and every other face answer the same call: a global
mutation by a caller without platform authority is ``403 platform_authority_required``
whatever its fields hold (one with authority hears the server's own refusal of a bad
field); what it cannot send (a URL past httpx's 64 KiB) is a KeepstoneError naming what to
shorten, never httpx's own exception escaping to the caller (an agent framework's tool
runner)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from keepstone import errors
from keepstone.documents import Replace
from keepstone.spaces import SpaceRef
from keepstone.store.http import HttpMemoryStore
from tests.api.world import ADMIN_TOKEN, World
from tests.conformance.helpers import AppTransport

GLOBAL = SpaceRef.build("global", "handbook")
#: A credential's shape (an AWS access key id): refused in a document's text.
SECRET = "AKIAQ7X2KDZLMNPZT4RV"


@pytest.fixture
def member(world: World, client: TestClient) -> Iterator[HttpMemoryStore]:
    store = HttpMemoryStore(
        str(client.base_url), world.keys["member"], transport=AppTransport(client)
    )
    try:
        yield store
    finally:
        store.close()


@pytest.mark.parametrize(
    "mutation",
    [
        lambda s: s.write(GLOBAL, "../x.md", "fine"),
        lambda s: s.write(GLOBAL, "ok.md", f"key {SECRET}"),
        lambda s: s.write(GLOBAL, f"{SECRET}.md", "fine"),
        lambda s: s.edit(GLOBAL, "../x.md", Replace("a", "b")),
        lambda s: s.delete(GLOBAL, "../x.md"),
        lambda s: s.move(GLOBAL, "ok.md", "../x.md"),
        lambda s: s.move(GLOBAL, "ok.md", "ok.md"),
    ],
    ids=["path", "secret", "secret-path", "edit", "delete", "move", "move-in-place"],
)
def test_a_caller_without_authority_hears_403_whatever_the_fields(
    member: HttpMemoryStore, mutation: object
) -> None:
    with pytest.raises(errors.PlatformAuthorityRequired):
        mutation(member)  # type: ignore[operator]


def test_a_caller_with_authority_hears_the_servers_refusal_of_a_field(
    client: TestClient,
) -> None:
    admin = HttpMemoryStore(str(client.base_url), ADMIN_TOKEN, transport=AppTransport(client))
    try:
        with pytest.raises(errors.InvalidPath):
            admin.write(GLOBAL, "../x.md", "fine")
        with pytest.raises(errors.SecretDetected):
            admin.write(GLOBAL, "ok.md", f"key {SECRET}")
        assert admin.write(GLOBAL, "ok.md", "fine").path == "ok.md"
    finally:
        admin.close()


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
