"""Materialise a space into a directory and fold the directory's edits back.

The fold-back is what makes auto-memory durable, so it is careful in three ways:

* It persists what it can, one file at a time: a secret-shaped body, a quota
  refusal, an unreadable file, a symlink or a non-Markdown file is reported by name
  and skipped, and the rest still lands.
* It changes a document only from the state the run started with (``if_match`` on
  the etag read at materialisation), so a concurrent run's newer note is never
  silently overwritten or deleted; the conflict is reported instead. A run hydrated
  from the past (:func:`materialise_as_of`) guards the same way on the LIVE etag each
  document had at hydration: its edits land on the live space unless someone changed
  the document since.
* It is bounded in time, by a budget that grows with the amount to persist
  (:func:`sync_budget`), so an interrupted run neither hangs nor loses a large memory.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from keepstone.documents import content_etag
from keepstone.errors import InvalidPath, KeepstoneError, NotFound, PreconditionFailed
from keepstone.paths import DOC_SUFFIX, validate_doc_path
from keepstone.principal import Principal
from keepstone.service.access import console_principal
from keepstone.service.spaces import SpaceService
from keepstone.spaces import SpaceRef

Warn = Callable[[str], None]

#: Seconds the fold-back may always take, plus per file and per MiB to persist.
BASE_SECONDS = 15.0
SECONDS_PER_FILE = 0.25
SECONDS_PER_MIB = 5.0


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """A document as materialised: the etag a write back must match (None: the document
    was not live, so a write back creates it) and the hash of the bytes put on disk
    ('' when none were: a live document the run did not see, hydrated from the past)."""

    etag: str | None
    disk_hash: str

    @property
    def on_disk(self) -> bool:
        return self.disk_hash != ""


#: What the directory held when the command started, by document path.
Snapshot = dict[str, SnapshotEntry]


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


def sync_deadline(directory: str | os.PathLike[str]) -> float:
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
    return time.monotonic() + sync_budget(total, files)


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
    snap: Snapshot = {}
    for doc in service.iter_documents(ref):
        target = _target(root, doc.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = doc.content.encode("utf-8")
        target.write_bytes(data)
        snap[doc.path] = SnapshotEntry(doc.etag, content_etag(data))
    return snap


def materialise_as_of(
    service: SpaceService, ref: SpaceRef, directory: str | os.PathLike[str], at: datetime
) -> Snapshot:
    """Write every document of the space as it was at ``at`` into ``directory`` (which must
    exist), for ``keepstone run --as-of``.

    The snapshot guards the write back on the live space: each path records the etag its
    LIVE document had at hydration (listed first, so a change made while hydrating makes
    the write back refused rather than lost), also for a live document that did not exist
    at ``at`` (not on disk: a file the agent creates there replaces it only if it is still
    that version). A document that existed at ``at`` but is not live has no etag: writing
    it back creates it again, as a new note of today's run would be."""
    root = Path(directory)
    live = {info.path: info.etag for info in service.list(ref)}
    snap: Snapshot = {path: SnapshotEntry(etag, "") for path, etag in live.items()}
    for info in service.list_as_of(ref, at):
        doc = service.read_as_of(ref, info.path, at)
        target = _target(root, doc.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = doc.content.encode("utf-8")
        target.write_bytes(data)
        snap[doc.path] = SnapshotEntry(live.get(doc.path), content_etag(data))
    return snap


def _scan(root: Path, report: SyncReport, warn: Warn) -> tuple[list[tuple[str, bytes]], set[str]]:
    """``(path, bytes)`` of the regular Markdown files under ``root``, and every relative
    name that exists at all (a skipped entry is not a deletion)."""
    found: list[tuple[str, bytes]] = []
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
            data, reason = _read_document(os.path.join(dirpath, name), rel)
            if data is None:
                skip(rel, reason)
            else:
                found.append((rel, data))
    return found, present


def _read_document(full: str, rel: str) -> tuple[bytes | None, str]:
    """The bytes of the regular Markdown file ``full`` at document path ``rel``, or None
    and the reason it is skipped."""
    try:
        st = os.lstat(full)
        if stat.S_ISLNK(st.st_mode):
            return None, "a symlink; symlinks are not persisted"
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file"
        if not rel.endswith(DOC_SUFFIX):
            return None, "not Markdown; only .md files are persisted"
        validate_doc_path(rel)
        with open(full, "rb") as fh:
            return fh.read(), ""
    except InvalidPath as exc:
        return None, exc.message
    except OSError as exc:
        return None, f"unreadable ({exc.strerror})"


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
    Never raises a :class:`~keepstone.errors.KeepstoneError`: each refusal is a warning and
    an entry of ``failed``.
    """
    report = SyncReport()
    found, present = _scan(Path(directory), report, warn)
    # The run's changes are the agent run's in the history (docs/history.md, "Activity").
    actor = replace(
        who if who is not None else console_principal(ref.user or "local"), agent_run=True
    )
    folding = _Folding(service, ref, actor, report, deadline, warn)
    for path in sorted(set(snapshot) - present):
        folding.delete(path, snapshot[path])
    for path, data in found:
        folding.write(path, data, snapshot.get(path))
    return report


@dataclass(frozen=True, slots=True)
class _Folding:
    """One fold-back under way: each removed or changed file persisted, or reported."""

    service: SpaceService
    ref: SpaceRef
    actor: Principal
    report: SyncReport
    deadline: float
    warn: Warn

    def delete(self, path: str, gone: SnapshotEntry) -> None:
        """Remove the document of a file the run removed, if it is still as it was."""
        if not gone.on_disk or gone.etag is None:
            return  # never on disk (not removed by the run), or not live (nothing to remove)
        if self._out_of_time(path):
            return
        try:
            self.service.delete(self.actor, self.ref, path, if_match=gone.etag)
            self.report.deleted.append(path)
        except NotFound:
            self.report.deleted.append(path)
        except PreconditionFailed as exc:
            self._fail(path, "delete refused: " + _changed_since(exc, gone))
        except KeepstoneError as exc:
            self._fail(path, f"delete refused: {exc.code}: {exc.message}")

    def write(self, path: str, data: bytes, before: SnapshotEntry | None) -> None:
        """Write a file the run added or changed, if its document is still as it was."""
        if before is not None and before.disk_hash == content_etag(data):
            return
        if self._out_of_time(path):
            return
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError:
            self._fail(path, "not valid UTF-8 text")
            return
        if_match = before.etag if before else None
        try:
            self.service.write(self.actor, self.ref, path, content, if_match=if_match)
            self.report.written.append(path)
        except PreconditionFailed as exc:
            self._fail(path, _changed_since(exc, before))
        except KeepstoneError as exc:
            self._fail(path, f"{exc.code}: {exc.message}")

    def _fail(self, path: str, reason: str) -> None:
        self.report.failed.append((path, reason))
        self.warn(f"{path}: not persisted: {reason}")

    def _out_of_time(self, path: str) -> bool:
        if time.monotonic() > self.deadline:
            self._fail(path, "the sync ran out of its time bound")
            return True
        return False


def _changed_since(exc: PreconditionFailed, before: SnapshotEntry | None) -> str:
    """A refusal of a guarded write back, said as what happened: someone changed the live
    document after this run loaded it."""
    if before is None or not before.on_disk:
        seen = "this run did not see it (it is newer than the memory the run started from)"
    else:
        seen = "the live document changed after this run loaded its memory"
    return f"{exc.code}: {seen}; the run's version is kept in the memory directory"
