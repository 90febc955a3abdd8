"""How a stored version's content is packed: one format for both stores' history.

* under :data:`COMPRESS_FROM` bytes: the text as it is, after a zero byte (no compressed
  stream starts with one). Compressing a small version costs more than the rest of its
  history step, to save a few hundred bytes;
* from :data:`COMPRESS_FROM` up: a zstd frame at level 1 (it carries its content size). On
  notes, zstd level 1 packs as tight as zlib level 1 or tighter at about a tenth of the CPU
  (100 KB of prose: 0.1 ms against 1.4 ms, ``bench/bench_history.py``), and that was most of
  a large write's history cost;
* versions written before zstd are zlib streams (``78 01``) and stay readable.

The format is told by its first bytes, so rows of every era read back and nothing is
rewritten.
"""

from __future__ import annotations

import threading
import zlib
from typing import Final

import zstandard

#: A version smaller than this is stored as it is.
COMPRESS_FROM: Final = 4096
_RAW: Final = b"\x00"
_ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
_LEVEL: Final = 1

#: zstandard's (de)compressor objects are not for concurrent use: one per thread.
_local = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    found: zstandard.ZstdCompressor | None = getattr(_local, "compressor", None)
    if found is None:
        found = _local.compressor = zstandard.ZstdCompressor(level=_LEVEL)
    return found


def _decompressor() -> zstandard.ZstdDecompressor:
    found: zstandard.ZstdDecompressor | None = getattr(_local, "decompressor", None)
    if found is None:
        found = _local.decompressor = zstandard.ZstdDecompressor()
    return found


def pack_version(data: bytes) -> bytes:
    """``data`` as a version is stored."""
    if len(data) < COMPRESS_FROM:
        return _RAW + data
    return _compressor().compress(data)


def unpack_version(stored: bytes) -> bytes:
    """The content of a stored version, whichever era packed it."""
    if stored[:1] == _RAW:
        return stored[1:]
    if stored[:4] == _ZSTD_MAGIC:
        return _decompressor().decompress(stored)
    return zlib.decompress(stored)
