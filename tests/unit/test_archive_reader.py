"""The import's inflating reader (``keepstone.store.archive._CountingReader``): it inflates a
block ahead of the tar reader's small reads, and still counts and bounds what it hands
out, so a bomb is stopped one block past its bound and an archive just within it passes."""

from __future__ import annotations

import gzip
import io

import pytest

from keepstone.errors import ImportTooLarge
from keepstone.store import archive
from keepstone.store.archive import _INFLATE_AHEAD, _CountingReader


def _reader(data: bytes, limit: int) -> _CountingReader:
    return _CountingReader(io.BytesIO(gzip.compress(data)), lambda: limit)


def test_small_reads_hand_out_the_stream_exactly() -> None:
    data = bytes(range(256)) * 3_000  # several blocks ahead, not a multiple of one
    reader = _reader(data, len(data))
    got = bytearray()
    while chunk := reader.read(10_240):
        assert len(chunk) <= 10_240
        got += chunk
    assert bytes(got) == data and reader.count == len(data)


def test_a_stream_exactly_at_its_bound_passes() -> None:
    data = b"x" * (3 * _INFLATE_AHEAD + 17)
    reader = _reader(data, len(data))
    while reader.read(10_240):
        pass
    assert reader.count == len(data)


def test_a_bomb_is_refused_one_block_past_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    inflated: list[int] = []
    real = gzip.GzipFile.read

    def counted(self: gzip.GzipFile, size: int = -1) -> bytes:
        out = real(self, size)
        inflated.append(len(out))
        return out

    monkeypatch.setattr(archive.gzip.GzipFile, "read", counted)
    limit = 100_000
    reader = _reader(b"\0" * (64 * _INFLATE_AHEAD), limit)
    with pytest.raises(ImportTooLarge, match=str(limit)):
        while reader.read(10_240):
            pass
    assert reader.count <= limit + 10_240
    assert sum(inflated) <= limit + _INFLATE_AHEAD + 10_240
