"""SPEC §3 "Secrets" through every store, for names: a document path, a move's target, a
space's name or an archive member's name that holds a credential is refused as a body
holding one is (``422 secret_detected`` naming the field, never the secret), and nothing
is written; the rest of an archive lands."""

from __future__ import annotations

import io

import pytest

from keepstone.errors import SecretDetected
from keepstone.secrets import scan
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import MemoryStore
from tests.conformance.archives import regular, tar_gz
from tests.conformance.helpers import TEAM, project_ref

# Built by concatenation: the repository holds no literal token (tests/unit/test_secrets.py).
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
GITLAB = "glpat-" + "Xy9Zb8Wc7Vd6Ue5Tf4Sg"
SLACK = "xoxb-" + "123456789012-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx"
PATHS = {
    "github": f"notes/{GITHUB}.md",
    "gitlab": f"{GITLAB}/readme.md",
    "slack": f"tokens/{SLACK}.md",
}


def test_the_samples_are_credentials() -> None:
    assert all(scan(path) for path in PATHS.values())


@pytest.mark.parametrize("shape", sorted(PATHS))
def test_a_path_holding_a_credential_is_refused(store: MemoryStore, shape: str) -> None:
    ref = project_ref()
    with pytest.raises(SecretDetected) as info:
        store.write(ref, PATHS[shape], "hello")
    assert info.value.details["field"] == "path"
    assert "a1B2c3D4" not in info.value.message and "Xy9Zb8" not in info.value.message
    assert store.list(ref) == []
    assert store.usage(ref).used_bytes == 0


def test_a_move_to_a_path_holding_a_credential_is_refused(store: MemoryStore) -> None:
    ref = project_ref()
    store.write(ref, "plain.md", "hello")
    with pytest.raises(SecretDetected) as info:
        store.move(ref, "plain.md", PATHS["github"])
    assert info.value.details["field"] == "to"
    assert [d.path for d in store.list(ref)] == ["plain.md"]


def test_a_space_named_after_a_credential_takes_no_write(store: MemoryStore) -> None:
    ref = SpaceRef.build(Visibility.PROJECT, GITLAB, tenant=TEAM, project="p")
    with pytest.raises(SecretDetected) as info:
        store.write(ref, "a.md", "hello")
    assert info.value.details["field"] == "name"
    assert "space name" in info.value.message


def test_an_import_rejects_members_named_after_credentials_and_writes_the_rest(
    store: MemoryStore,
) -> None:
    ref = project_ref()
    members = [regular(path, "x") for path in PATHS.values()]
    members.append(regular("fine.md", "ok"))
    report = store.import_archive(ref, io.BytesIO(tar_gz(members)))
    assert report.written == ["fine.md"]
    assert len(report.rejected) == len(PATHS)
    for rejected in report.rejected:
        assert "credential" in rejected.reason
        assert "[REDACTED:" in rejected.path and "a1B2c3D4" not in rejected.path
    assert [d.path for d in store.list(ref)] == ["fine.md"]
