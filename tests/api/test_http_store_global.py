"""A global mutation through the HTTP store (``keepstone memory --server``, ``Memory.connect``)
is answered in the server's order: a caller without platform authority hears ``403
platform_authority_required`` whatever its fields hold, as on every other face, and one
with authority hears the server's own refusal of a bad field."""

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
