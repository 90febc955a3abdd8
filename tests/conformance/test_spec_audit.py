"""SPEC statements no other conformance test pins, checked on every adapter.

- §2: a space's id is exactly ``v1:<visibility>:<tenant>:<project>:<bot>:<user>:<name>``,
  empty strings for absent fields, a qualifier the visibility does not take left out,
  and every store reports that id.
- §3: the path limits are inclusive: a path of exactly 512 bytes and one exactly 16
  segments deep are documents like any other; the default document cap is exactly
  2 MiB (``DefaultMaxDocumentSize``).
- §5: an import under ``rename`` takes the smallest free ``n >= 1``, not one past the
  largest taken, and an incoming name already of the form ``<stem>-<n>.md`` gets its own
  suffix.
"""

from __future__ import annotations

import io

import pytest

from keepstone.errors import DocumentTooLarge
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import ImportStrategy, MemoryStore
from tests.conformance.archives import regular, tar_gz
from tests.conformance.helpers import TEAM, USER, contents, project_ref

#: visibility → the id of the space named "n" when every qualifier is offered.
EXPECTED_IDS = {
    Visibility.PRIVATE: f"v1:private:{TEAM}::::n",
    Visibility.BOT: f"v1:bot:{TEAM}:p:b::n",
    Visibility.PROJECT: f"v1:project:{TEAM}:p:::n",
    Visibility.CROSS_PROJECT: f"v1:cross_project:{TEAM}::::n",
    Visibility.USER: f"v1:user:{TEAM}:::{USER}:n",
    Visibility.ORG: f"v1:org:{TEAM}::::n",
    Visibility.GLOBAL: "v1:global:::::n",
}


def test_space_ids_have_the_specified_shape(store: MemoryStore) -> None:
    assert set(EXPECTED_IDS) == set(Visibility)
    for vis, expected in EXPECTED_IDS.items():
        tenant = "" if vis is Visibility.GLOBAL else TEAM
        ref = SpaceRef.build(vis, "n", tenant=tenant, project="p", bot="b", user=USER)
        assert ref.id == expected
        if vis is Visibility.PRIVATE and "private" not in store.capabilities:
            continue  # the filesystem store refuses private spaces (test_documents)
        assert store.usage(ref).space_id == expected


def test_paths_at_the_limits_are_documents(store: MemoryStore) -> None:
    ref = project_ref()
    longest = "a" * 202 + "/" + "\u00e9" * 153 + ".md"  # 202 + 1 + 306 + 3 bytes
    deepest = "/".join(["d"] * 15) + "/x.md"
    assert len(longest.encode()) == 512 and deepest.count("/") + 1 == 16
    for path in (longest, deepest):
        assert store.write(ref, path, "edge").created
        assert store.read(ref, path).content == "edge"
    assert [d.path for d in store.list(ref)] == sorted([longest, deepest])


def test_the_default_document_cap_is_two_mebibytes(store: MemoryStore) -> None:
    ref = project_ref()
    cap = 2 * 1024 * 1024
    assert store.write(ref, "full.md", "x" * cap).size_bytes == cap
    with pytest.raises(DocumentTooLarge) as info:
        store.write(ref, "over.md", "x" * (cap + 1))
    assert info.value.details["quota_bytes"] == cap
    assert [d.path for d in store.list(ref)] == ["full.md"]


def test_rename_takes_the_smallest_free_suffix(store: MemoryStore) -> None:
    ref = project_ref()
    store.write(ref, "b.md", "old b")
    store.write(ref, "b-2.md", "old b-2")
    archive = tar_gz([regular("b.md", "new b"), regular("b-2.md", "new b-2")])
    report = store.import_archive(ref, io.BytesIO(archive), ImportStrategy("rename"))
    assert report.renamed == {"b.md": "b-1.md", "b-2.md": "b-2-1.md"}
    assert report.written == [] and report.skipped == [] and report.rejected == []
    assert contents(store, ref) == {
        "b.md": "old b",
        "b-1.md": "new b",
        "b-2.md": "old b-2",
        "b-2-1.md": "new b-2",
    }
