"""KEEPSTONE_EXPORT_GZIP_LEVEL (read once, checked with a clear error, used by every export),
and the member count a client of a server shows as its import's total."""

from __future__ import annotations

import gzip
import io
import tarfile
from datetime import UTC, datetime

import pytest

from keepstone.config import DEFAULT_EXPORT_GZIP_LEVEL, Config
from keepstone.documents import Document
from keepstone.errors import InvalidRequest
from keepstone.service.spaces import SpaceService
from keepstone.store.archive import count_members, write_archive
from keepstone.store.fs import FilesystemStore


def test_the_default_is_the_fast_level() -> None:
    assert Config.from_env({}).export_gzip_level == DEFAULT_EXPORT_GZIP_LEVEL == 1
    assert Config.from_env({"KEEPSTONE_EXPORT_GZIP_LEVEL": " 9 "}).export_gzip_level == 9
    assert Config.from_env({"KEEPSTONE_EXPORT_GZIP_LEVEL": ""}).export_gzip_level == 1


@pytest.mark.parametrize("text", ["fast", "10", "-1", "1.5"])
def test_a_bad_level_names_the_variable(text: str) -> None:
    with pytest.raises(InvalidRequest, match=r"KEEPSTONE_EXPORT_GZIP_LEVEL=.*0 \(no compression\)"):
        Config.from_env({"KEEPSTONE_EXPORT_GZIP_LEVEL": text})


@pytest.mark.parametrize("level", [-1, 10, True, "6", None])
def test_a_bad_level_in_code_is_refused_before_anything_is_written(level: object) -> None:
    sink = io.BytesIO()
    with pytest.raises(InvalidRequest, match="KEEPSTONE_EXPORT_GZIP_LEVEL"):
        write_archive([], sink, gzip_level=level)  # type: ignore[arg-type]
    assert sink.getvalue() == b""


def test_the_service_refuses_a_bad_level_at_start(tmp_path: object) -> None:
    store = FilesystemStore(f"{tmp_path}/spaces")
    with pytest.raises(InvalidRequest, match="KEEPSTONE_EXPORT_GZIP_LEVEL"):
        SpaceService(store, export_gzip_level=11)


def test_the_level_changes_the_compression_not_the_archive() -> None:
    when = datetime(2026, 1, 2, tzinfo=UTC)
    body = "the same sentence, again and again. " * 4000
    docs = [Document(f"d{i}.md", body, len(body), when, "e") for i in range(3)]
    made = {}
    for level in (0, 1, 9):
        sink = io.BytesIO()
        assert write_archive(docs, sink, gzip_level=level) == 3
        made[level] = sink.getvalue()
    # The same tar inside (a whole number of tar records, as tarfile writes them) ...
    inner = {level: gzip.decompress(data) for level, data in made.items()}
    assert inner[0] == inner[1] == inner[9] and len(inner[0]) % tarfile.RECORDSIZE == 0
    with tarfile.open(fileobj=io.BytesIO(made[1]), mode="r:gz") as tar:
        assert tar.getnames() == ["d0.md", "d1.md", "d2.md"]
    # ... compressed less at 0 (stored) than at 1, and at 1 no smaller than at 9.
    assert len(made[0]) > len(made[1]) >= len(made[9])


def test_a_client_counts_the_members_of_a_file_and_leaves_it_where_it_was() -> None:
    when = datetime(2026, 1, 2, tzinfo=UTC)
    sink = io.BytesIO()
    write_archive([Document(f"d{i}.md", "x", 1, when, "e") for i in range(5)], sink)
    source = io.BytesIO(b"lead" + sink.getvalue())
    source.seek(4)
    assert count_members(source) == 5
    assert source.tell() == 4


class _Pipe(io.BytesIO):
    def seekable(self) -> bool:
        return False


# gzip.compress stamps the time into the header: fixed ids keep the test's name the same in
# every pytest-xdist worker, which collect at different moments and must agree.
@pytest.mark.parametrize(
    "data",
    [b"not gzip at all", gzip.compress(b"not a tar" * 100, mtime=0)],
    ids=["not gzip", "gzip of no tar"],
)
def test_no_count_for_a_broken_archive_the_server_will_refuse(data: bytes) -> None:
    source = io.BytesIO(data)
    assert count_members(source) is None and source.tell() == 0


def test_no_count_for_a_pipe_which_cannot_be_read_twice() -> None:
    sink = io.BytesIO()
    write_archive([], sink)
    assert count_members(_Pipe(sink.getvalue())) is None
