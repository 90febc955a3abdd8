"""The filesystem store: a plain tree of Markdown files a person can open.

The tree's layout and the spelling of every on-disk name (how a :class:`SpaceRef` and a
document path become directory and file names) are :mod:`keepstone.store.fs_layout`; this
module does the file operations::

    <root>/<visibility>/<tenant>/[<project>/][<bot>/][<user>/]<name>/<document path>

Writes are atomic (temp file in the target directory, fsync, ``os.replace``, fsync of
the directory: :mod:`keepstone.store.fs_files`) and serialised across threads and
processes by an exclusive ``flock``. Every path is walked one component at a time with
``O_NOFOLLOW``: a symbolic link inside the tree is never followed
(:mod:`keepstone.store.fs_tree`). The quota counters are
:mod:`keepstone.store.fs_counters`'s, an import's batch :mod:`keepstone.store.fs_import`'s.

Each space's documents are also indexed for search in a sidecar SQLite file at the
root (:mod:`keepstone.store.fs_index`). Writes and deletes never touch it (a write pays
nothing for search): :meth:`FilesystemStore.reconcile`, which every search calls first,
finds new, changed and vanished files (the store's own writes and hand edits alike), so
a document is keyword-searchable as soon as its write commits.

Every version of every document is kept in a second SQLite file at the root,
``.keepstone-history.sqlite`` (:mod:`keepstone.store.fs_versions`,
:mod:`keepstone.store.fs_history`): each mutation appends its versions after its file
operation, under the same lock, and a recount after a crash reconciles the history with
the files.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path

from keepstone.activity import ChangePage, FeedQuery
from keepstone.documents import VersionInfo
from keepstone.errors import (
    Conflict,
    StoreUnavailable,
    UnsupportedVisibility,
    no_document,
)
from keepstone.paths import validate_dir_prefix, validate_doc_path
from keepstone.quota import DEFAULT_HISTORY_LIMITS, HistoryLimits, Limits
from keepstone.search.claim import EmbeddingClaim
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import (
    CheckedDelete,
    CheckedMove,
    CheckedWrite,
    ChunkRow,
    Document,
    DocumentInfo,
    ImportWriter,
    MemoryStore,
    PlatformGrant,
    Progress,
    SpaceRefs,
    StoredBytes,
    Usage,
    WriteResult,
    check_move_target,
    check_precondition,
    content_etag,
)
from keepstone.store.fs_counters import Counters
from keepstone.store.fs_files import document_of, mtime_of, os_errors, sidecar_errors, stat_key
from keepstone.store.fs_history import Observed, Record, history_errors
from keepstone.store.fs_import import import_batch
from keepstone.store.fs_index import FsIndex, PendingChunk
from keepstone.store.fs_layout import (
    INDEX_FILE,
    LOCK_FILE,
    MAX_VERBATIM_BYTES,
    RESERVE_FILE,
    STATE_FILE,
    TEMP_PREFIX,
    TEMP_SUFFIX,
    Components,
    UsageState,
    encode_doc_path,
    encode_segment,
    space_components,
)
from keepstone.store.fs_tree import FileTree, Found
from keepstone.store.fs_versions import TreeHistory
from keepstone.store.reserve import DEFAULT_RESERVE_BYTES, DiskReserve

log = logging.getLogger("keepstone.store")

_ETAG_CACHE_MAX = 50_000

# Aliases: the class below defines a method called ``list``.
Infos = list[DocumentInfo]
Versions = list[VersionInfo]
Chunks = list[ChunkRow]
Pending = list[PendingChunk]
Records = list[Record | Observed]


class FilesystemStore(MemoryStore):
    """A :class:`~keepstone.store.base.MemoryStore` over a directory tree (SPEC §10).

    ``limits`` defaults to SPEC §4's :class:`~keepstone.quota.Limits`; the CLI passes
    :meth:`keepstone.config.Config.limits` (the ``KEEPSTONE_MEMORY_*`` overrides). One
    whole-tree counter (``limits.team_quota``) is charged for every write, global included.
    ``private`` spaces are refused on every document operation (they have no durable home here).

    Counters live in ``<root>/.keepstone-usage.json``. They are self-healing: a missing,
    corrupt or *dirty* state file (a writer died between marking it and finishing) is
    rebuilt from the files by :meth:`recount`, which an operator may also call after
    editing the tree by hand.

    Every version of every document is kept beside the tree (:mod:`keepstone.store.fs_versions`).
    """

    capabilities = MemoryStore.KEEPS_ITS_OWN | {"tree_aggregate"}
    limits: Limits
    #: Whether changes append versions (as on SqlStore: off only to measure history's cost).
    keeps_history = True
    reserve: DiskReserve

    def __init__(
        self,
        root: str | os.PathLike[str],
        limits: Limits | None = None,
        *,
        reserve_bytes: int = DEFAULT_RESERVE_BYTES,
    ) -> None:
        self.root = Path(os.path.abspath(os.fspath(root)))
        self.limits = limits or Limits()
        self.reserve = DiskReserve(self.root / RESERVE_FILE, "the memory tree", reserve_bytes)
        self._etags: dict[tuple[int, ...], str] = {}
        self._tree = FileTree(self.root)
        self._index = FsIndex(self.root)
        self._history = TreeHistory(self._tree, self.limits, self._now, self.keeps_history)
        self._counters = Counters(self._tree, self._history, self.limits)
        #: What "now" is for a new version (a test gives the store a clock of its own).
        self.clock: Callable[[], datetime] = _utcnow

    def _now(self) -> datetime:
        return self.clock()

    # --- The interface --------------------------------------------------------------------

    def read(self, ref: SpaceRef, path: str) -> Document:
        ref = self._checked(ref)
        path = validate_doc_path(path)
        with os_errors(path):
            got = self._tree.read_file(space_components(ref) + encode_doc_path(path), path)
        if got is None:
            raise no_document(path, ref.id)
        data, st = got
        return document_of(path, data, st)

    def _write(self, ref: SpaceRef, w: CheckedWrite) -> WriteResult:
        # No audit log here: a filesystem store is one person's local tree.
        ref = self._checked(ref)
        path, data = w.path, w.data
        history = self._history
        with self._changing(ref, path) as (state, space, doc, existing):
            current = content_etag(existing[0]) if existing else None
            check_precondition(path, current, w.if_match, w.if_none_match)
            delta = len(data) - (existing[1].st_size if existing else 0)
            self._counters.check_quota(ref, state, delta)
            conn = history.connection_locked()
            now, known = history.instant(conn, ref, (path, existing, current))
            records: Records = [history.observed(ref, path, existing, current, now)]
            # The file's mtime (its updated_at) is the new version's instant; the same bytes
            # again make no new version and keep the file's time.
            mtime_ns = existing[1].st_mtime_ns if existing else None
            if current != w.etag:
                version = history.version_record(ref, path, data, w.etag, now)
                records.append(version)
                mtime_ns = version.at_us * 1000

            def change() -> None:
                # The search index is not touched: the next reconcile (before any search)
                # finds the new file by its size and mtime. Unrecorded, the write did not
                # happen (a full disk refuses it there): the file is then as it was.
                # An old file up to a quarter of the reserve is held for the undo, which
                # writes it again on a full disk in the room the reserve gives back.
                replaced = self._tree.replace_file_undoably(
                    space,
                    doc,
                    path,
                    data,
                    mtime_ns,
                    existing,
                    self.reserve.size // 4,
                    self.reserve.release,
                )
                try:
                    history.record(conn, records, known)
                except BaseException:
                    replaced.undo()
                    raise
                replaced.keep()

            self._counters.mutate(state, ref, delta, change)
        return WriteResult(path, len(data), w.etag, created=existing is None)

    @contextlib.contextmanager
    def import_writer(self, ref: SpaceRef, grant: PlatformGrant | None) -> Iterator[ImportWriter]:
        """One lock, one dirty mark and one flush for a whole import (``fs_import``)."""
        ref = self._checked(ref)
        with import_batch(self._tree, self._counters, self._history, ref) as write:
            yield write

    def _delete(self, ref: SpaceRef, d: CheckedDelete) -> None:
        ref = self._checked(ref)
        path = d.path
        history = self._history
        with self._changing(ref, path) as (state, space, doc, existing):
            if existing is None:
                raise no_document(path, ref.id)
            current = content_etag(existing[0])
            check_precondition(path, current, d.if_match)
            delta = -existing[1].st_size
            conn = history.connection_locked()
            now, known = history.instant(conn, ref, (path, existing, current))
            records: Records = [history.observed(ref, path, existing, current, now)]
            records.append(history.version_record(ref, path, None, "", now))

            def change() -> None:
                self._remove_file(space, doc, path)
                history.record(conn, records, known)

            self._counters.mutate(state, ref, delta, change)

    def _move(self, ref: SpaceRef, m: CheckedMove) -> WriteResult:
        ref = self._checked(ref)
        dst = encode_doc_path(m.to)
        history = self._history
        with self._changing(ref, m.path) as (state, space, src, existing):
            if existing is None:
                raise no_document(m.path, ref.id)
            etag = content_etag(existing[0])
            check_precondition(m.path, etag, m.if_match)
            replaced = self._tree.read_file(space + dst, m.to)
            check_move_target(m, replaced is not None)
            delta = -replaced[1].st_size if replaced else 0
            conn = history.connection_locked()
            # History: the old path ends, the new one gets the content as its next version.
            now, known = history.instant(
                conn, ref, (m.path, existing, etag), (m.to, replaced, None)
            )
            moved = history.version_record(ref, m.to, existing[0], etag, now)
            records: Records = [
                history.observed(ref, m.path, existing, etag, now),
                history.observed(ref, m.to, replaced, None, now),
                history.version_record(ref, m.path, None, "", now),
                moved,
            ]

            def change() -> None:
                self._rename_file(space, src, dst, m.to, moved.at_us * 1000)
                history.record(conn, records, known)

            self._counters.mutate(state, ref, delta, change)
        return WriteResult(m.to, len(existing[0]), etag, created=replaced is None)

    def list(self, ref: SpaceRef, dir: str = "") -> Infos:
        ref = self._checked(ref)
        prefix = validate_dir_prefix(dir)
        out: Infos = []
        with os_errors(prefix):
            for doc_path, comps, st in self._tree.walk_space(ref, prefix):
                etag = self._etags.get(stat_key(st))
                if etag is None:
                    got = self._tree.read_file(space_components(ref) + comps, doc_path)
                    if got is None:  # removed while listing
                        continue
                    data, st = got
                    etag = self._remember_etag(st, data)
                out.append(DocumentInfo(doc_path, st.st_size, mtime_of(st), etag))
        out.sort(key=lambda info: info.path)
        return out

    def usage(self, ref: SpaceRef, *, index: bool = True) -> Usage:
        ref = self._checked(ref)
        state = self._counters.peek()
        history_used, history_quota = self.history_usage(ref.tenant)
        index_bytes = 0
        if index:
            with _index_errors():
                index_bytes = self._index.index_bytes(ref.id)
        return Usage(
            space_id=ref.id,
            used_bytes=state.spaces.get(ref.id, 0),
            quota_bytes=self.limits.subcap(ref.visibility),
            team_used_bytes=state.tree,
            team_quota_bytes=self.limits.team_quota,
            history_used_bytes=history_used,
            history_quota_bytes=history_quota,
            index_bytes=index_bytes,
        )

    def stored_totals(self) -> StoredBytes:
        """The tree's document bytes (its counter) and its index's bytes, every space's."""
        with _index_errors():
            return StoredBytes(self._counters.peek().tree, self._index.index_bytes())

    def iter_documents(self, ref: SpaceRef, dir: str = "") -> Iterator[Document]:
        # Validate now, not at the first next(): a bad ref fails at the call.
        ref = self._checked(ref)
        prefix = validate_dir_prefix(dir)
        return self._iter_documents(ref, prefix)

    def _iter_documents(self, ref: SpaceRef, prefix: str) -> Iterator[Document]:
        space = space_components(ref)
        # Names only are held (sorted); each body is read when its turn comes.
        with os_errors(prefix):
            entries = sorted((p, c) for p, c, _ in self._tree.walk_space(ref, prefix))
        for doc_path, comps in entries:
            with os_errors(doc_path):
                got = self._tree.read_file(space + comps, doc_path)
            if got is not None:
                yield document_of(doc_path, got[0], got[1])

    # --- The search index -----------------------------------------------------------------

    def reconcile(self, ref: SpaceRef, *, progress: Progress | None = None) -> int:
        """Bring the space's search index in line with its files; return how many
        documents changed. Writes never update the index, so this is what indexes them:
        it finds new, changed and vanished files, written through the store or by hand
        (by size and mtime, re-reading a file changed within the same clock tick);
        called before every search. Creates the index on first use."""
        ref = self._checked(ref)
        space = space_components(ref)

        def files() -> Iterator[tuple[str, int, int]]:
            for doc_path, _, st in self._tree.walk_space(ref, ""):
                yield doc_path, st.st_size, st.st_mtime_ns

        def read(doc_path: str) -> tuple[bytes, int, int] | None:
            try:
                got = self._tree.read_file(space + encode_doc_path(doc_path), doc_path)
            except (Conflict, OSError):
                return None  # became a link, a directory or unreadable: not a document
            if got is None:
                return None
            return got[0], got[1].st_size, got[1].st_mtime_ns

        with os_errors(""), _index_errors():
            return self._index.reconcile(ref, files(), read, progress=progress)

    def reindex(self, progress: Progress | None = None, *, rebuild: bool = False) -> int:
        """Reconcile every space of the tree (``keepstone memory reindex``) and drop the rows of
        spaces no longer on disk; ``rebuild`` starts from an empty index. Returns how many
        documents changed; ``progress(1)`` per document examined."""
        if rebuild:
            with os_errors(""):
                self._index.rebuild()
        changed = 0
        seen: set[str] = set()
        with os_errors(""), _index_errors():
            for ref in self._tree.spaces():
                seen.add(ref.id)
                changed += self.reconcile(ref, progress=progress)
            changed += self._index.forget_spaces_except(seen)
        return changed

    def chunk_rows(self, ref: SpaceRef) -> Chunks:
        """The space's indexed chunks by path and sequence, as last reconciled."""
        ref = self._checked(ref)
        with _index_errors():
            return self._index.chunk_rows(ref)

    def chunk_rows_of(self, ref: SpaceRef, paths: Sequence[str]) -> Chunks:
        """The chunks of the documents ``paths`` of the space, as last reconciled."""
        with _index_errors():
            return self._index.chunk_rows(self._checked(ref), paths)

    def chunk_digests(self, ref: SpaceRef) -> dict[str, tuple[int, int, int]]:
        """Each document's digest of its chunks' stamps, as last reconciled
        (:class:`keepstone.store.index.ChunkStamps`)."""
        with _index_errors():
            return self._index.chunk_digests(self._checked(ref))

    def reconciled_versions(self, refs: Sequence[SpaceRef]) -> dict[str, int]:
        """:meth:`reconcile` then :meth:`search_version` of every space of ``refs``, by
        space id (a search over several spaces)."""
        versions = {}
        for ref in refs:
            # Indexing writes: on a full disk (no reserve, or no room) the search goes on
            # over what is indexed, and what changed since is found once there is room.
            try:
                self.reserve.ensure()
                self.reconcile(ref)
            except StoreUnavailable as exc:
                if not self.reserve.says_full(exc):
                    raise
                log.warning("disk full: searching %s without indexing it first", ref.id)
            versions[ref.id] = self.reserve.retrying(functools.partial(self.search_version, ref))
        return versions

    def search_version(self, ref: SpaceRef) -> int:
        """The space's search version: it moves whenever its chunks or vectors change."""
        ref = self._checked(ref)
        with _index_errors():
            return self._index.search_version(ref)

    def count_backlog(self, model: str) -> int:
        """How many chunks of the tree, as last reconciled, have no vector of ``model``
        (``keepstone doctor``; a local command embeds them as it searches)."""
        with _index_errors():
            return self._index.count_backlog(model)

    def count_pending(self, refs: Sequence[SpaceRef], model: str) -> int:
        """How many chunks of the spaces ``refs``, as last reconciled, have no vector of
        ``model`` (:class:`keepstone.store.index.PendingCount`)."""
        checked = [self._checked(ref) for ref in refs]
        with _index_errors():
            return self._index.count_pending([ref.id for ref in checked], model)

    def pending_chunks(self, limit: int, model: str) -> Pending:
        """Up to ``limit`` chunks, across every space, to embed with ``model`` (no vector,
        or another model's), as last reconciled: local commands embed these to search."""
        with _index_errors():
            return self._index.pending(limit, model)

    @contextlib.contextmanager
    def claim_pending_chunks(self, limit: int, model: str) -> Iterator[ChunkClaim]:
        """Up to ``limit`` pending chunks (:meth:`pending_chunks`) to embed, as the SQL
        store claims them: the vectors given to the claim are stored when its block exits
        normally (one process indexes a tree, so nothing is locked meanwhile; a chunk
        whose document changed is left alone)."""
        claim = ChunkClaim(list(self.pending_chunks(limit, model)), model, _chunk_key)
        yield claim
        if claim.stored:
            self.store_embeddings(
                [row for row, _ in claim.stored], [blob for _, blob in claim.stored], model
            )

    def store_embeddings(
        self, rows: Sequence[PendingChunk], blobs: Sequence[bytes], model: str
    ) -> int:
        """Store ``blobs[i]`` (made by ``model``) as the vector of ``rows[i]`` (from
        :meth:`pending_chunks`) in one transaction, moving the spaces' versions; a chunk
        whose document changed since it was read is left alone. Returns the count stored."""
        with _index_errors():
            return self._index.store_embeddings(rows, blobs, model)

    def close(self) -> None:
        self._index.close()
        self._history.close()

    # --- Counters -------------------------------------------------------------------------

    def recount(self) -> int:
        """Recompute every counter from the documents on disk and rewrite the state file.

        Runs under the writers' lock. Called on its own when the state file is missing,
        corrupt or left dirty by a writer that died mid-write; call it after adding or
        editing files by hand. Returns the whole-tree total in bytes.
        """
        with os_errors(""), self._tree.locked():
            return self._counters.recount_locked().tree

    def list_spaces(self, tenant: str) -> SpaceRefs:
        """The spaces of ``tenant`` and the global spaces that have a directory in the tree."""
        with os_errors(""):
            found = [r for r in self._tree.spaces() if r.tenant == tenant or r.is_global]
        return sorted(found, key=lambda r: r.id)

    # --- History (keepstone.store.fs_versions) ---------------------------------------------

    def _versions(self, ref: SpaceRef, path: str) -> Versions:
        ref = self._checked(ref)
        return self._history.versions(ref, path, settle=self._counters.load_locked)

    def activity(self, refs: Sequence[SpaceRef], query: FeedQuery) -> ChangePage:
        ids = [self._checked(ref).id for ref in refs]
        return self._history.activity(ids, query)

    def _read_version(self, ref: SpaceRef, path: str, version: int) -> Document | None:
        return self._history.read_version(self._checked(ref), path, version)

    def _list_as_of(self, ref: SpaceRef, at: datetime, prefix: str) -> Infos:
        return self._history.list_as_of(self._checked(ref), at, prefix)

    def history_usage(self, tenant: str) -> tuple[int, int]:
        """(bytes of replaced versions kept, the history quota) of the tree: one aggregate,
        whatever ``tenant``."""
        return self._history.usage()

    def reconcile_history(self) -> int:
        """Record every hand edit of the tree (changed, new and removed files) as a
        version, actor ``hand-edit`` (``keepstone doctor``); returns how many were recorded."""
        if not self.root.is_dir():
            return 0
        with os_errors(""), self._tree.locked():
            found = self._history.reconcile_locked()
            with history_errors():
                self._counters.load_locked()
        return found

    def prune_history(self, tenant: str | None = None) -> int:
        """Drop replaced versions older than ``history_days`` (never a path's newest
        version); the tree is one aggregate, so ``tenant`` is not used. Returns the count."""
        return self._history.prune()

    def set_history_limits(
        self, tenant: str, limits: HistoryLimits = DEFAULT_HISTORY_LIMITS
    ) -> None:
        """Set the tree's history limits (None: the store's ``limits``); the tree is one
        aggregate, so they hold for every team in it."""
        self._history.set_limits(limits)

    # --- The file operation of each mutation (done before its history insert) -----------

    def _remove_file(self, space: Components, doc: Components, path: str) -> None:
        self._tree.remove_file(space, doc, path)

    def _rename_file(
        self, space: Components, src: Components, dst: Components, to: str, mtime_ns: int
    ) -> None:
        self._tree.rename_file(space, src, dst, to, mtime_ns)

    # --- Helpers of the interface ------------------------------------------------------------

    @contextlib.contextmanager
    def _changing(
        self, ref: SpaceRef, path: str
    ) -> Iterator[tuple[UsageState, Components, Components, Found | None]]:
        """The tree locked for a change of the document at ``path`` (OS and history
        errors translated): the usage counters, the space's and the document's path
        components, and the document's bytes and stat as they are (None: no document)."""
        space, doc = space_components(ref), encode_doc_path(path)
        with os_errors(path), self._tree.locked(), history_errors():
            state = self._counters.load_locked()
            yield state, space, doc, self._tree.read_file(space + doc, path)

    def _checked(self, ref: SpaceRef) -> SpaceRef:
        if ref.visibility is Visibility.PRIVATE:
            raise UnsupportedVisibility(
                "the filesystem store has no durable home for private spaces; "
                "use another visibility (bot, project, cross_project, user, org, global)"
            )
        return ref

    def _remember_etag(self, st: os.stat_result, data: bytes) -> str:
        if len(self._etags) >= _ETAG_CACHE_MAX:
            self._etags.clear()
        etag = content_etag(data)
        self._etags[stat_key(st)] = etag
        return etag


# --- Helpers --------------------------------------------------------------------------------


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _index_errors() -> AbstractContextManager[None]:
    """Translate the search index's SQLite failures at the adapter boundary."""
    return sidecar_errors("search index", INDEX_FILE)


# The layout's public names stay importable from here (``keepstone.store.fs`` predates the split).
__all__ = [
    "LOCK_FILE",
    "MAX_VERBATIM_BYTES",
    "STATE_FILE",
    "TEMP_PREFIX",
    "TEMP_SUFFIX",
    "FilesystemStore",
    "encode_doc_path",
    "encode_segment",
    "space_components",
]


#: Chunks of the sidecar index claimed to embed (the claim shape every index shares).
ChunkClaim = EmbeddingClaim[PendingChunk]


def _chunk_key(row: PendingChunk) -> tuple[str, str, int]:
    return row.space_id, row.path, row.seq
