"""Archive checks that do not depend on the adapter (pass 1 of an import).

Pass 1 asks the store only for ``usage``; what it refuses does not depend on the
adapter, so these (slower) checks run once, over the filesystem store, instead of
once per adapter like the rest of the suite.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keepstone.errors import ImportTooLarge, InvalidArchive
from keepstone.quota import Limits
from keepstone.spaces import Visibility
from keepstone.store.archive import MAX_IMPORT_MEMBERS, import_space
from keepstone.store.fs import FilesystemStore
from tests.conformance.archives import many_members, regular, special, tar_bytes
from tests.conformance.helpers import project_ref, snapshot


def test_member_count_ceiling(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path, Limits().with_subcap(Visibility.PROJECT, 64 << 10))
    ref = project_ref()
    store.write(ref, "existing.md", "kept")
    before = snapshot(store, ref)
    with pytest.raises(ImportTooLarge, match=str(MAX_IMPORT_MEMBERS)):
        import_space(store, ref, io.BytesIO(many_members(MAX_IMPORT_MEMBERS + 1)), "skip")
    assert snapshot(store, ref) == before


BASE_TAR = tar_bytes(
    [
        regular("a.md", "hello"),
        regular("long/" + "x" * 150 + ".md", "y" * 700),
        special("l.md", tarfile.SYMTYPE, "a.md"),
        regular("\u00e9.md", "z"),
    ]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.integers(0, len(BASE_TAR) - 1), st.integers(0, 255)), max_size=6),
    st.integers(0, len(BASE_TAR)),
    st.booleans(),
)
def test_mangled_archives_fail_cleanly(
    tmp_path_factory: pytest.TempPathFactory,
    edits: list[tuple[int, int]],
    cut: int,
    mangle_gzip: bool,
) -> None:
    """Any corruption ends in a report or InvalidArchive/ImportTooLarge, never a crash,
    and a refused archive writes nothing."""
    store = FilesystemStore(tmp_path_factory.mktemp("fuzz"), Limits())
    ref = project_ref()
    if mangle_gzip:
        data = bytearray(gzip.compress(BASE_TAR))
        edits = [(pos % len(data), value) for pos, value in edits]
        cut = cut % (len(data) + 1)
    else:
        data = bytearray(BASE_TAR)
    for pos, value in edits:
        data[pos] = value
    data = data[:cut] if cut else data
    upload = bytes(data) if mangle_gzip else gzip.compress(bytes(data))
    try:
        report = import_space(store, ref, io.BytesIO(upload), "overwrite")
    except (InvalidArchive, ImportTooLarge):
        assert store.list(ref) == []
        return
    assert sorted(report.written) == [d.path for d in store.list(ref)]
