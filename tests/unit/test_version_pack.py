"""The packing of stored versions (keepstone.store.version_pack): every size round-trips, the
format follows the size, and the zlib streams of earlier versions still read."""

from __future__ import annotations

import zlib
from concurrent.futures import ThreadPoolExecutor

from hypothesis import given
from hypothesis import strategies as st

from keepstone.store.version_pack import COMPRESS_FROM, pack_version, unpack_version


@given(st.binary(max_size=3 * COMPRESS_FROM))
def test_every_content_round_trips(data: bytes) -> None:
    assert unpack_version(pack_version(data)) == data


@given(st.text(min_size=1, max_size=2 * COMPRESS_FROM))
def test_zlib_streams_of_earlier_versions_read(text: str) -> None:
    data = text.encode()
    assert unpack_version(zlib.compress(data, 1)) == data


def test_small_versions_are_kept_as_they_are_large_ones_compressed() -> None:
    small = b"x" * (COMPRESS_FROM - 1)
    assert pack_version(small) == b"\x00" + small
    assert pack_version(b"") == b"\x00"
    large = b"a line of notes\n" * 1000
    packed = pack_version(large)
    assert packed[:4] == b"\x28\xb5\x2f\xfd"  # a zstd frame
    assert len(packed) < len(large) // 10


def test_threads_pack_and_unpack_at_once() -> None:
    bodies = [(f"thread {i} " * 2000).encode() for i in range(16)]

    def round_trip(data: bytes) -> bool:
        return all(unpack_version(pack_version(data)) == data for _ in range(50))

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(round_trip, bodies))
