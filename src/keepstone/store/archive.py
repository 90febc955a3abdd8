"""Export and import of a space as a gzipped tarball (SPEC §5 "Export/import").

Built once on the :class:`~keepstone.store.base.MemoryStore` interface, so every adapter
streams and validates archives the same way; ``MemoryStore.export`` and
``MemoryStore.import_archive`` call the two functions here.

Export
    :func:`export_space` streams a PAX tar through ``gzip`` (level
    ``KEEPSTONE_EXPORT_GZIP_LEVEL``, 1 by default: chosen for throughput) over
    ``store.iter_documents``: one regular-file member per document at its path, mode
    0644, mtime = ``updated_at`` (whole seconds), uid/gid 0 and no owner names. At most
    one document is held in memory at a time, whatever the size of the space.

Import
    :func:`import_space` never extracts anything to disk. It spools the *compressed*
    upload (a :class:`tempfile.SpooledTemporaryFile`: a copy of the upload, in memory
    while small) and makes two streaming passes over it:

    1. **validate** — decompress and walk every tar header, counting decompressed bytes
       as they are produced, without keeping any content. Anything wrong with the
       archive as a whole stops the import here, before a single write:
       not gzip, not tar, corrupt or truncated (:class:`~keepstone.errors.InvalidArchive`,
       422); past the bound (:class:`~keepstone.errors.ImportTooLarge`, 413). The bound is
       checked while decompressing, so a gzip bomb is refused as soon as it passes the
       bound, never expanded further.
    2. **write** — walk the archive again; check each acceptable member once with
       ``store.check_write`` (path, authority, encoding, size, secrets: the prelude of
       every write) and hand the resulting :class:`~keepstone.store.base.CheckedWrite` to
       ``store.import_writer``, which adds only what a write adds past its prelude (the
       precondition, the quota, one transaction or flush per batch). What is wrong with
       one member lands in ``ImportReport.rejected`` with a reason; the rest lands.

The bound
    The content of an archive (the sum of the members' declared sizes) may not exceed
    what the space could possibly hold: its effective quota from ``store.usage`` — the
    smaller of the space sub-cap (0 = none) and the team / tree / instance aggregate —
    and never :data:`IMPORT_HARD_CEILING`. The decompressed stream as a whole may exceed
    the content only by :data:`HEADER_ALLOWANCE` per member plus :data:`STREAM_SLACK`
    (headers, padding, the end-of-archive blocks). At most :data:`MAX_IMPORT_MEMBERS`
    members.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import IO, BinaryIO, Final, TypeVar

from keepstone.config import DEFAULT_EXPORT_GZIP_LEVEL
from keepstone.documents import (
    Document,
    ImportReport,
    ImportStrategy,
    PlatformGrant,
    Rejected,
    parse_import_strategy,
)
from keepstone.errors import (
    Conflict,
    DocumentTooLarge,
    ImportTooLarge,
    InvalidArchive,
    InvalidRequest,
    KeepstoneError,
    MemoryOff,
    PreconditionFailed,
    TooLarge,
    Unprocessable,
)
from keepstone.paths import DOC_SUFFIX, validate_doc_path
from keepstone.quota import DEFAULT_MAX_DOCUMENT_SIZE, GiB, KiB, MiB, check_document_size
from keepstone.secrets import mask
from keepstone.spaces import SpaceRef
from keepstone.store.prelude import (
    ArchiveStore,
    CheckedWrite,
    ImportWriter,
    Progress,
    WriteTerms,
    check_space_names,
)

#: No import ever decompresses to more than this, whatever the quotas say.
IMPORT_HARD_CEILING: Final = 2 * GiB
#: No import has more members than this (directories, links and rejects included).
MAX_IMPORT_MEMBERS: Final = 100_000
#: Decompressed bytes allowed per member on top of its content: the ustar header, a
#: PAX or GNU long-name extension for a 512-byte path, and the padding to 512 bytes.
HEADER_ALLOWANCE: Final = 4 * KiB
#: Decompressed bytes allowed once per archive: end-of-archive blocks, record padding,
#: and the read-ahead of the tar reader.
STREAM_SLACK: Final = 64 * KiB
#: A PAX or GNU long-name header extension larger than this is not a real archive.
MAX_HEADER_EXTENSION: Final = 64 * KiB
#: The compressed upload is kept in memory up to this size, then on a temporary file.
SPOOL_IN_MEMORY: Final = 1 * MiB

_CHUNK: Final = 64 * KiB
#: How much of an archive is inflated at a time (:class:`_CountingReader`); 64 and 128
#: KiB measured alike, 1 MiB slower than no read-ahead at all.
_INFLATE_AHEAD: Final = 128 * KiB
_T = TypeVar("_T")
_ACCEPTED_TYPES: Final = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
_HEADER_EXTENSIONS: Final = (
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
)
# Not part of tarfile's declared API (nor its stubs), but stable since Python 3.2.
_EOF_HEADER: type[tarfile.HeaderError] = tarfile.EOFHeaderError  # type: ignore[attr-defined]
_EMPTY_HEADER: type[tarfile.HeaderError] = tarfile.EmptyHeaderError  # type: ignore[attr-defined]
_TRUNCATED_HEADER: type[tarfile.HeaderError] = tarfile.TruncatedHeaderError  # type: ignore[attr-defined]


# --- Export --------------------------------------------------------------------------------


def export_space(
    store: ArchiveStore,
    ref: SpaceRef,
    sink: BinaryIO,
    *,
    progress: Progress | None = None,
    gzip_level: int = DEFAULT_EXPORT_GZIP_LEVEL,
) -> int:
    """Stream the space as a gzipped tarball into ``sink``; return the document count.

    ``sink`` only needs ``write``; nothing is sought. Memory stays flat: the tar stream
    is written as documents arrive from ``store.iter_documents``.
    """
    return write_archive(store.iter_documents(ref), sink, progress=progress, gzip_level=gzip_level)


def write_archive(
    docs: Iterable[Document],
    sink: BinaryIO,
    *,
    progress: Progress | None = None,
    gzip_level: int = DEFAULT_EXPORT_GZIP_LEVEL,
) -> int:
    """Stream ``docs`` (sorted by path) as a gzipped tarball into ``sink``: the one archive
    format of every export (a space now, or as it was at an instant).

    Each member is one PAX header (``TarInfo.tobuf``), its bytes and the padding to a
    block, handed to the compressor in one piece: ``tarfile``'s own stream writer would
    copy each body through 10 KiB buffers and always deflate at level 9, the slowest.
    ``gzip_level`` (``KEEPSTONE_EXPORT_GZIP_LEVEL``) is 1 by default: on notes, level 1
    deflates several times faster than 6 for an archive about a fifth larger.
    """
    level = check_gzip_level(gzip_level)
    count = written = 0
    # No file name and a zero time in the gzip header: the same space gives the same bytes.
    with gzip.GzipFile(filename="", mode="wb", fileobj=sink, compresslevel=level, mtime=0) as gz:
        for doc in docs:
            data = doc.content.encode("utf-8")
            info = tarfile.TarInfo(doc.path)
            info.type = tarfile.REGTYPE
            info.size = len(data)
            info.mode = 0o644
            info.mtime = int(doc.updated_at.timestamp())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
            padding = _padding(len(data))
            gz.write(header)
            gz.write(data)
            gz.write(padding)
            written += len(header) + len(data) + len(padding)
            count += 1
            if progress is not None:
                progress(1)
        # The end-of-archive marker (two zero blocks), then zeros to a whole tar record,
        # as tarfile ends its archives.
        written += 2 * tarfile.BLOCKSIZE
        gz.write(bytes(2 * tarfile.BLOCKSIZE + (-written % tarfile.RECORDSIZE)))
    return count


def check_gzip_level(level: object) -> int:
    """``level`` when it is a gzip level (0 = stored, 9 = smallest), else InvalidRequest."""
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 9:
        raise InvalidRequest(
            f"the export gzip level must be a whole number from 0 (no compression) to 9 "
            f"(smallest), not {level!r}; set KEEPSTONE_EXPORT_GZIP_LEVEL accordingly",
        )
    return level


def _padding(size: int) -> bytes:
    return bytes(-size % tarfile.BLOCKSIZE)


# --- Import --------------------------------------------------------------------------------


def import_space(
    store: ArchiveStore,
    ref: SpaceRef,
    source: BinaryIO,
    strategy: ImportStrategy | str = ImportStrategy.SKIP,
    *,
    grant: PlatformGrant | None = None,
    progress: Progress | None = None,
    total: Progress | None = None,
) -> ImportReport:
    """Merge the gzipped tarball read from ``source`` into the space.

    ``total(n)`` is called once with the archive's member count, after it is read and
    checked and before anything is written; then ``progress(1)`` once per member
    handled (written, skipped, renamed or rejected), so the two meet at the end.

    ``strategy``: ``skip`` keeps an existing document, ``overwrite`` replaces it,
    ``rename`` writes the incoming one to ``<stem>-<n>.md`` with the smallest free
    ``n >= 1``. Raises InvalidArchive / ImportTooLarge (nothing written) for what is
    wrong with the archive as a whole, PlatformAuthorityRequired for a global space
    without authority, SecretDetected for a space whose names hold a credential;
    everything wrong with one member is reported in ``rejected``.
    """
    strategy = parse_import_strategy(strategy)
    store.check_authority(ref, grant)
    check_space_names(ref)  # one refusal for the request, not one per member
    if grant is not None:
        grant = replace(grant, importing=True)
    content_bound = _content_bound(store, ref)
    stream_bound = min(
        content_bound + MAX_IMPORT_MEMBERS * HEADER_ALLOWANCE + STREAM_SLACK, IMPORT_HARD_CEILING
    )
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as spool:
        # gzip adds a few bytes per 16 KiB stored block at worst; anything beyond that
        # cannot decompress within the bound, so stop copying it.
        _spool(source, spool, stream_bound + stream_bound // 100 + STREAM_SLACK)
        spool.seek(0)
        members = _validate(spool, content_bound)
        if total is not None:
            total(members)
        spool.seek(0)
        return _write_members(store, ref, spool, strategy, grant, progress)


def _content_bound(store: ArchiveStore, ref: SpaceRef) -> int:
    """What the space could possibly hold: min(sub-cap (0 = none), aggregate, ceiling)."""
    usage = store.usage(ref, index=False)
    bound = min(IMPORT_HARD_CEILING, max(usage.team_quota_bytes, 0))
    if usage.quota_bytes > 0:
        bound = min(bound, usage.quota_bytes)
    return bound


def _spool(source: BinaryIO, spool: IO[bytes], limit: int) -> None:
    copied = 0
    while chunk := source.read(_CHUNK):
        copied += len(chunk)
        if copied > limit:
            raise ImportTooLarge(
                f"the archive is larger than {limit} bytes compressed, more than this space "
                "could hold; import a smaller archive or raise the quota",
                limit_bytes=limit,
            )
        spool.write(chunk)


class _CountingReader:
    """The decompressed stream, counted as it is handed out, refused past its bound.

    The tar reader asks for 10 KiB at a time, and inflating so little at a time costs
    Python's gzip layers more than zlib's work (docs/performance.md, "Export and import"):
    the stream is inflated :data:`_INFLATE_AHEAD` at a time and handed out from that.
    ``GzipFile.read(n)`` inflates at most ``n`` bytes, so nothing beyond one read ahead is
    ever expanded past the bound; the bound is checked against what was handed out, as
    the tar reader's members are counted.
    """

    def __init__(self, compressed: IO[bytes], limit: Callable[[], int]) -> None:
        self._gz = gzip.GzipFile(fileobj=compressed, mode="rb")
        self._limit = limit
        self.count = 0
        self._ahead = b""
        self._at = 0

    def read(self, size: int = -1, /) -> bytes:
        if size < 0:
            size = _CHUNK
        if self._at >= len(self._ahead):
            self._ahead, self._at = self._gz.read(max(size, _INFLATE_AHEAD)), 0
        data = self._ahead[self._at : self._at + size]
        self._at += len(data)
        self.count += len(data)
        limit = self._limit()
        if self.count > limit:
            raise ImportTooLarge(
                f"the archive expands past {limit} bytes, more than this space could hold; "
                "import a smaller archive or raise the quota",
                limit_bytes=limit,
            )
        return data

    # The rest of the file protocol tarfile's type declares; a stream is never written.
    def write(self, b: bytes, /) -> int:
        raise io.UnsupportedOperation("read-only stream")

    def tell(self) -> int:
        return self.count

    def seek(self, pos: int, /) -> int:
        raise io.UnsupportedOperation("not seekable")

    def close(self) -> None:
        self._gz.close()


class _GuardedTarInfo(tarfile.TarInfo):
    """Refuses oversized PAX / GNU long-name extensions before tarfile reads them whole."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _HEADER_EXTENSIONS and self.size > MAX_HEADER_EXTENSION:
            raise InvalidArchive(
                f"the archive has a {self.size}-byte header extension; "
                f"the limit is {MAX_HEADER_EXTENSION} bytes",
            )
        result: tarfile.TarInfo = super()._proc_member(tarfile_)  # type: ignore[misc]
        return result


def _members(reader: _CountingReader) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]]:
    """Every member of the tar stream, in order, then a check that it ended properly.

    Unlike ``TarFile.next`` this keeps no list of members, and tells a proper end of
    archive (a zero block) from a stream that stops short or turns to garbage.
    """
    tar = tarfile.open(
        fileobj=reader,
        mode="r|",
        tarinfo=_GuardedTarInfo,
        encoding="utf-8",
        errors="surrogateescape",
    )
    # The first header was read by ``open``; tarfile keeps it until the first next().
    member: tarfile.TarInfo | None = tar.firstmember  # type: ignore[attr-defined]
    tar.firstmember = None  # type: ignore[attr-defined]
    while member is not None:
        yield tar, member
        if tar.offset != tar.fileobj.tell():
            # Skip the rest of the member's data (stream mode reads through it).
            tar.fileobj.seek(tar.offset - 1)
            if not tar.fileobj.read(1):
                raise InvalidArchive("the archive is truncated inside a member's data")
        try:
            member = tar.tarinfo.fromtarfile(tar)
        except _EOF_HEADER:
            member = None
        except (_EMPTY_HEADER, _TRUNCATED_HEADER):
            raise InvalidArchive(
                "the archive is truncated: it stops before its end-of-archive marker"
            ) from None
        except tarfile.HeaderError as exc:
            raise InvalidArchive(f"the archive has a corrupt member header: {exc}") from None


def _validate(spool: IO[bytes], content_bound: int) -> int:
    """Pass 1: the archive is gzip, tar, complete, and within the bound; its member count."""
    members = 0
    declared = 0

    def stream_limit() -> int:
        return min(
            content_bound + max(members, 1) * HEADER_ALLOWANCE + STREAM_SLACK,
            IMPORT_HARD_CEILING,
        )

    reader = _CountingReader(spool, stream_limit)
    try:
        for _tar, member in _members(reader):
            members += 1
            if members > MAX_IMPORT_MEMBERS:
                raise ImportTooLarge(
                    f"the archive has more than {MAX_IMPORT_MEMBERS} members; split it",
                    limit_members=MAX_IMPORT_MEMBERS,
                )
            declared += max(member.size, 0)
            if declared > content_bound:
                raise ImportTooLarge(
                    f"the archive holds more than {content_bound} bytes of content, more "
                    "than this space could hold; import a smaller archive or raise the quota",
                    limit_bytes=content_bound,
                )
        # Read to the end of the gzip stream: this checks its CRC and length trailer,
        # and counts trailing bytes (a bomb can hide after the end-of-archive marker).
        while reader.read(_CHUNK):
            pass
    except KeepstoneError:
        raise
    except (tarfile.TarError, gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise InvalidArchive(_archive_error(exc)) from None
    finally:
        reader.close()
    return members


def count_members(source: BinaryIO) -> int | None:
    """The member count of the gzipped tarball ``source`` from where it stands, which is
    left there; None when ``source`` cannot seek back or is not a sound archive (then
    whoever imports it says what is wrong). For a client's progress total: the server
    that imports the archive checks it itself."""
    try:
        if not source.seekable():
            return None
        start = source.tell()
    except (OSError, ValueError):
        return None
    reader = _CountingReader(source, lambda: IMPORT_HARD_CEILING)
    try:
        count = 0
        for _ in _members(reader):
            count += 1
            if count > MAX_IMPORT_MEMBERS:
                return None
        return count
    except (KeepstoneError, tarfile.TarError, gzip.BadGzipFile, EOFError, zlib.error, OSError):
        return None
    finally:
        reader.close()
        source.seek(start)


def _archive_error(exc: BaseException) -> str:
    if isinstance(exc, gzip.BadGzipFile):
        return "the upload is not a gzip file; send a .tar.gz archive"
    if isinstance(exc, EOFError):
        return "the archive is truncated: the gzip stream ends early"
    if isinstance(exc, zlib.error):
        return "the archive is corrupt: the gzip data does not decompress"
    if isinstance(exc, tarfile.ReadError) and str(exc) in ("empty file", "truncated header"):
        return "the archive is not a tar archive (or is empty); send a .tar.gz archive"
    return f"the archive is not a valid tar archive ({exc}); send a .tar.gz archive"


def _write_members(
    store: ArchiveStore,
    ref: SpaceRef,
    spool: IO[bytes],
    strategy: ImportStrategy,
    grant: PlatformGrant | None,
    progress: Progress | None,
) -> ImportReport:
    """Pass 2: check each acceptable member once, and send it through the store's import
    writer."""
    report = ImportReport()
    reader = _CountingReader(spool, lambda: IMPORT_HARD_CEILING)

    terms = WriteTerms(None, strategy is not ImportStrategy.OVERWRITE, grant)

    def check(path: str, text: str) -> CheckedWrite:
        # The prelude of every write (path, authority, encoding, size, secrets, etag), run
        # once per member: the writer takes its CheckedWrite and never runs it again.
        return store.check_write(ref, path, text, terms)

    try:
        with store.import_writer(ref, grant) as write:
            _write_each(reader, check, write, store_max_document(store), strategy, report, progress)
    except (tarfile.TarError, gzip.BadGzipFile, EOFError, zlib.error) as exc:
        # Pass 1 read the very same bytes; this means the spool itself failed.
        raise InvalidArchive(_archive_error(exc)) from None
    finally:
        reader.close()
    return report


def store_max_document(store: ArchiveStore) -> int:
    """The store's document cap, to skip reading an oversized member into memory."""
    return store.limits.max_document if store.limits else DEFAULT_MAX_DOCUMENT_SIZE


def _write_each(
    reader: _CountingReader,
    check: Callable[[str, str], CheckedWrite],
    write: ImportWriter,
    max_doc: int,
    strategy: ImportStrategy,
    report: ImportReport,
    progress: Progress | None,
) -> None:
    """Each member, in archive order: written, skipped, renamed, or rejected with a reason.

    Linear in the number of members: one pass over the archive, constant work per member
    besides its own write (``seen`` is a set; the report's lists only grow)."""
    seen: set[str] = set()
    for tar, member in _ticking(_members(reader), progress):
        shown = _shown_name(member.name)
        reason = _type_reason(member)
        if reason is not None:
            report.rejected.append(Rejected(shown, reason))
            continue
        try:
            member.name.encode("utf-8")
        except UnicodeEncodeError:
            report.rejected.append(Rejected(shown, "the member name is not valid UTF-8"))
            continue
        try:
            path = validate_doc_path(member.name.removeprefix("./"))
        except KeepstoneError as exc:
            report.rejected.append(Rejected(shown, exc.message))
            continue
        if path in seen:
            report.rejected.append(
                Rejected(path, "duplicate: the archive names this path more than once")
            )
            continue
        seen.add(path)
        try:
            check_document_size(member.size, max_doc)
        except DocumentTooLarge as exc:
            report.rejected.append(Rejected(path, exc.message))
            continue
        extracted = tar.extractfile(member)
        data = extracted.read() if extracted is not None else b""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            report.rejected.append(
                Rejected(path, f"the content is not valid UTF-8 (byte {exc.start})")
            )
            continue
        try:
            _write_one(write, check(path, text), strategy, report)
        except MemoryOff:
            raise  # the whole space refuses writes: not this member's fault
        except (TooLarge, Unprocessable, Conflict) as exc:
            # Unprocessable: what the prelude refuses (a secret, a NUL); Conflict: what the
            # store cannot safely write there (a symbolic link or a file planted where the
            # path needs a directory): this member only. A name holding a credential is
            # listed masked: the report is shown and logged.
            report.rejected.append(Rejected(mask(path), exc.message))


def _ticking(items: Iterator[_T], progress: Progress | None) -> Iterator[_T]:
    """``items``, with ``progress(1)`` once the loop is done with each one, however it
    ended (written, or rejected by a ``continue``): the count meets the total."""
    for item in items:
        yield item
        if progress is not None:
            progress(1)


def _write_one(
    write: ImportWriter, w: CheckedWrite, strategy: ImportStrategy, report: ImportReport
) -> None:
    """``w`` (create-only unless ``overwrite``) under the strategy; a rename writes the
    same checked content at another validated path, never checking it again."""
    path = w.path
    try:
        # Create-only: the existence check and the write are one atomic step.
        write(w)
        report.written.append(path)
        return
    except PreconditionFailed:
        if strategy is not ImportStrategy.RENAME:
            report.skipped.append(path)
            return
    stem = path[: -len(DOC_SUFFIX)]
    n = 1
    while True:
        candidate = validate_doc_path(f"{stem}-{n}{DOC_SUFFIX}")
        try:
            write(replace(w, path=candidate))
        except PreconditionFailed:
            n += 1
            continue
        report.renamed[path] = candidate
        return


def _type_reason(member: tarfile.TarInfo) -> str | None:
    """Why a member is not a regular file, or None when it is one."""
    if member.type in _ACCEPTED_TYPES and not member.isdir():
        return None
    kinds = (
        (member.issym(), "a symbolic link"),
        (member.islnk(), "a hard link"),
        (member.isdir(), "a directory"),
        (member.ischr(), "a character device"),
        (member.isblk(), "a block device"),
        (member.isfifo(), "a FIFO"),
        (member.type == tarfile.GNUTYPE_SPARSE, "a sparse file"),
    )
    kind = next((kind for hit, kind in kinds if hit), f"of unsupported type {member.type!r}")
    return f"the member is {kind}; only regular .md files are imported"


def _shown_name(name: str) -> str:
    """A member name safe to report: undecodable bytes become U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
