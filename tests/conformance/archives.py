"""Builders of tar.gz archives, well-formed and hostile, for the import tests."""

from __future__ import annotations

import gzip
import io
import tarfile
from functools import cache

Member = tuple[tarfile.TarInfo, bytes | None]


def regular(name: str, data: bytes | str) -> Member:
    body = data.encode("utf-8") if isinstance(data, str) else data
    info = tarfile.TarInfo(name)
    info.size = len(body)
    info.mode = 0o644
    return info, body


def special(name: str, kind: bytes, linkname: str = "") -> Member:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 3
    return info, None


def tar_bytes(members: list[Member], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(
        fileobj=buf, mode="w", format=fmt, encoding="utf-8", errors="surrogateescape"
    ) as tar:
        for info, body in members:
            tar.addfile(info, io.BytesIO(body) if body is not None else None)
    return buf.getvalue()


def tar_gz(members: list[Member], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    return gzip.compress(tar_bytes(members, fmt), compresslevel=1)


def _gzip_stream(parts: list[tuple[bytes, int]]) -> bytes:
    """A gzip file of each ``bytes`` repeated ``n`` times.

    Each part is compressed once and its gzip member repeated: a concatenation of gzip
    members is one valid gzip file, so a bomb costs nothing to build.
    """
    return b"".join(gzip.compress(chunk, compresslevel=9) * times for chunk, times in parts)


@cache
def bomb_declared(size: int = 1 << 30) -> bytes:
    """About 1 MB of gzip: one member ``bomb.md`` of ``size`` zero bytes."""
    header = tarfile.TarInfo("bomb.md")
    header.size = size
    block = header.tobuf(tarfile.PAX_FORMAT)
    zeros = b"\0" * (1 << 20)
    return _gzip_stream([(block, 1), (zeros, size >> 20), (b"\0" * 1024, 1)])


@cache
def bomb_trailing(size: int = 1 << 30) -> bytes:
    """About 1 MB of gzip: a small valid archive followed by ``size`` zero bytes."""
    small = tar_bytes([regular("small.md", "tiny")])
    zeros = b"\0" * (1 << 20)
    return _gzip_stream([(small, 1), (zeros, size >> 20)])


@cache
def tiny_members(count: int, suffix: str = ".md", size: int = 10) -> bytes:
    return tar_gz([regular(f"n/{i:05d}{suffix}", "x" * size) for i in range(count)])


@cache
def many_members(count: int) -> bytes:
    """``count`` empty members (all named ``n.md``), built without tarfile's per-member cost."""
    header = tarfile.TarInfo("n.md").tobuf(tarfile.USTAR_FORMAT)
    thousands, rest = divmod(count, 1000)
    return _gzip_stream([(header * 1000, thousands), (header * rest + b"\0" * 1024, 1)])
