"""Materialise a space into a directory and fold the directory's edits back.

The fold-back is what makes auto-memory durable, so it is careful in three ways:

* It persists what it can, one file at a time: a secret-shaped body, a quota
  refusal, an unreadable file, a symlink or a non-Markdown file is reported by name
  and skipped, and the rest still lands.
* It changes a document only from the state the run started with (``if_match`` on
  the etag read at materialisation), so a concurrent run's newer note is never
  silently overwritten or deleted; the conflict is reported instead.
* It is bounded in time, by a budget that grows with the amount to persist
  (:func:`sync_budget`), so an interrupted run neither hangs nor loses a large memory.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cairn.documents import content_etag
from cairn.errors import CairnError, InvalidPath, NotFound
from cairn.paths import DOC_SUFFIX, validate_doc_path
from cairn.principal import Principal
from cairn.service.access import console_principal
from cairn.service.spaces import SpaceService
from cairn.spaces import SpaceRef

Warn = Callable[[str], None]

#: Seconds the fold-back may always take, plus per file and per MiB to persist.
BASE_SECONDS = 15.0
SECONDS_PER_FILE = 0.25
SECONDS_PER_MIB = 5.0


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """A document as materialised: the store's etag and the hash of the bytes on disk."""

    etag: str
    disk_hash: str


@dataclass(slots=True)
class Snapshot:
    """What the directory held when the command started, by document path."""

    entries: dict[str, SnapshotEntry] = field(default_factory=dict)


@dataclass(slots=True)
class SyncReport:
    """What the fold-back did. ``failed`` holds Markdown that should have landed and
    did not (the directory is then kept so nothing is lost)."""

    written: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


def sync_budget(total_bytes: int, files: int) -> float:
    """Seconds allowed for a fold-back of ``files`` documents totalling ``total_bytes``."""
    return BASE_SECONDS + SECONDS_PER_FILE * files + SECONDS_PER_MIB * total_bytes / (1 << 20)


def sync_deadline(directory: str | os.PathLike[str], now: float | None = None) -> float:
    """A ``time.monotonic()`` deadline for folding ``directory`` back."""
    total, files = 0, 0
    for root, _dirs, names in os.walk(directory):
        for name in names:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
                files += 1
    start = time.monotonic() if now is None else now
    return start + sync_budget(total, files)


def _target(directory: Path, path: str) -> Path:
    target = (directory / path).resolve()
    if not target.is_relative_to(directory.resolve()):
        raise InvalidPath(f"document {path!r} would land outside the memory directory")
    return target


def materialise(
    service: SpaceService, ref: SpaceRef, directory: str | os.PathLike[str]
) -> Snapshot:
    """Write every document of the space into ``directory`` (which must exist)."""
    root = Path(directory)
    snap = Snapshot()
    for doc in service.iter_documents(ref):
        target = _target(root, doc.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = doc.content.encode("utf-8")
        target.write_bytes(data)
        snap.entries[doc.path] = SnapshotEntry(doc.etag, content_etag(data))
    return snap


@dataclass(frozen=True, slots=True)
class _Found:
    path: str
    data: bytes


def _scan(root: Path, report: SyncReport, warn: Warn) -> tuple[list[_Found], set[str]]:
    """Regular Markdown files under ``root``, and every relative name that exists at all
    (a skipped entry is not a deletion)."""
    found: list[_Found] = []
    present: set[str] = set()

    def skip(rel: str, reason: str) -> None:
        report.skipped.append((rel, reason))
        warn(f"{rel}: skipped: {reason}")

    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        for d in sorted(dirnames):
            if os.path.islink(os.path.join(dirpath, d)):
                present.add(prefix + d)
                skip(prefix + d, "a symlink (to a directory); symlinks are not persisted")
        dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(dirpath, d)))
        for name in sorted(filenames):
            rel = prefix + name
            present.add(rel)
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError as exc:
                skip(rel, f"unreadable ({exc.strerror})")
                continue
            if stat.S_ISLNK(st.st_mode):
                skip(rel, "a symlink; symlinks are not persisted")
                continue
            if not stat.S_ISREG(st.st_mode):
                skip(rel, "not a regular file")
                continue
            if not name.endswith(DOC_SUFFIX):
                skip(rel, "not Markdown; only .md files are persisted")
                continue
            try:
                validate_doc_path(rel)
            except InvalidPath as exc:
                skip(rel, exc.message)
                continue
            try:
                with open(full, "rb") as fh:
                    data = fh.read()
            except OSError as exc:
                skip(rel, f"unreadable ({exc.strerror})")
                continue
            found.append(_Found(rel, data))
    return found, present


def fold_back(
    service: SpaceService,
    ref: SpaceRef,
    directory: str | os.PathLike[str],
    snapshot: Snapshot,
    *,
    deadline: float,
    warn: Warn,
    who: Principal | None = None,
) -> SyncReport:
    """Persist the directory's additions, changes and deletions into the space, as
    ``who`` (default: the local console).

    Deletions run first so that a run which tidied up frees quota for its new notes.
    Never raises a :class:`~cairn.errors.CairnError`: each refusal is a warning and
    an entry of ``failed``.
    """
    root = Path(directory)
    report = SyncReport()
    found, present = _scan(root, report, warn)
    actor = who if who is not None else console_principal(ref.user or "local")

    def fail(path: str, reason: str) -> None:
        report.failed.append((path, reason))
        warn(f"{path}: not persisted: {reason}")

    def out_of_time(path: str) -> bool:
        if time.monotonic() > deadline:
            fail(path, "the sync ran out of its time bound")
            return True
        return False

    for path in sorted(set(snapshot.entries) - present):
        if out_of_time(path):
            continue
        try:
            service.delete(actor, ref, path, if_match=snapshot.entries[path].etag)
            report.deleted.append(path)
        except NotFound:
            report.deleted.append(path)
        except CairnError as exc:
            fail(path, f"delete refused: {exc.code}: {exc.message}")

    for item in found:
        before = snapshot.entries.get(item.path)
        if before is not None and before.disk_hash == content_etag(item.data):
            continue
        if out_of_time(item.path):
            continue
        try:
            content = item.data.decode("utf-8")
        except UnicodeDecodeError:
            fail(item.path, "not valid UTF-8 text")
            continue
        try:
            etag = before.etag if before else None
            service.write(actor, ref, item.path, content, if_match=etag)
            report.written.append(item.path)
        except CairnError as exc:
            fail(item.path, f"{exc.code}: {exc.message}")
    return report
