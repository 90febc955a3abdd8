"""The filesystem store: a plain tree of Markdown files a person can open.

The tree's layout and the spelling of every on-disk name (how a :class:`SpaceRef` and a
document path become directory and file names) are :mod:`keepstone.store.fs_layout`; this
module does the file operations::

    <root>/<visibility>/<tenant>/[<project>/][<bot>/][<user>/]<name>/<document path>

Writes are atomic (temp file in the target directory, fsync, ``os.replace``, fsync of
the directory) and serialised across threads and processes by an exclusive
``flock``. Every path is walked one component at a time with ``O_NOFOLLOW``: a
symbolic link inside the tree is never followed.

Each space's documents are also indexed for search in a sidecar SQLite file at the
root (:mod:`keepstone.store.fs_index`). Writes and deletes never touch it (a write pays
nothing for search): :meth:`FilesystemStore.reconcile`, which every search calls first,
finds new, changed and vanished files (the store's own writes and hand edits alike), so
a document is keyword-searchable as soon as its write commits.

Every version of every document is kept in a second SQLite file at the root,
``.keepstone-history.sqlite`` (:mod:`keepstone.store.fs_history`): each mutation appends its
versions after its file operation, under the same lock, and a recount after a crash
reconciles the history with the files.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
import stat
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from keepstone.errors import (
    Conflict,
    InvalidDocument,
    InvalidPath,
    NotFound,
    StoreUnavailable,
    UnsupportedVisibility,
)
from keepstone.paths import validate_dir_prefix, validate_doc_path
from keepstone.quota import Counter, Limits, clamp, subcap_or_none
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
    Usage,
    WriteResult,
    check_move_target,
    check_precondition,
    content_etag,
)
from keepstone.store.fs_history import DocumentHistory, HistoryDb, Observed, Record, history_errors
from keepstone.store.fs_index import FsIndex, PendingChunk
from keepstone.store.fs_layout import (
    INDEX_FILE,
    LOCK_FILE,
    MAX_VERBATIM_BYTES,
    STATE_FILE,
    TEMP_PREFIX,
    TEMP_SUFFIX,
    Components,
    UsageState,
    decode_component,
    directory_named,
    document_named,
    encode_dir_prefix,
    encode_doc_path,
    encode_segment,
    space_components,
    space_depth,
    space_named,
)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ETAG_CACHE_MAX = 50_000

# An alias: the class below defines a method called ``list``.
Infos = list[DocumentInfo]
Chunks = list[ChunkRow]
Pending = list[PendingChunk]
Records = list[Record | Observed]


class FilesystemStore(DocumentHistory, MemoryStore):
    """A :class:`~keepstone.store.base.MemoryStore` over a directory tree (SPEC §10).

    ``limits`` defaults to SPEC §4's :class:`~keepstone.quota.Limits`; the CLI passes
    :meth:`keepstone.config.Config.limits` (the ``KEEPSTONE_MEMORY_*`` overrides). One
    whole-tree counter (``limits.team_quota``) is charged for every write, global included.
    ``private`` spaces are refused on every document operation (they have no durable home here).

    Counters live in ``<root>/.keepstone-usage.json``. They are self-healing: a missing,
    corrupt or *dirty* state file (a writer died between marking it and finishing) is
    rebuilt from the files by :meth:`recount`, which an operator may also call after
    editing the tree by hand.

    Every version of every document is kept beside the tree (:mod:`keepstone.store.fs_history`).
    """

    capabilities = frozenset(
        {"tree_aggregate", "multiprocess", "tenant_addressing", "platform_grants", "history"}
    )
    limits: Limits

    def __init__(self, root: str | os.PathLike[str], limits: Limits | None = None) -> None:
        self.root = Path(os.path.abspath(os.fspath(root)))
        self.limits = limits or Limits()
        self._etags: dict[tuple[int, ...], str] = {}
        self._index = FsIndex(self.root)
        self._history = HistoryDb(self.root)
        self.clock: Callable[[], datetime] = _utcnow

    # --- The interface --------------------------------------------------------------------

    def read(self, ref: SpaceRef, path: str) -> Document:
        ref = self._checked(ref)
        path = validate_doc_path(path)
        with _os_errors(path):
            got = self._read_file(space_components(ref) + encode_doc_path(path), path)
        if got is None:
            raise NotFound(f"no document {path!r} in space {ref.id}", path=path)
        data, st = got
        return _document(path, data, st)

    def _write(self, ref: SpaceRef, w: CheckedWrite) -> WriteResult:
        # No audit log here: a filesystem store is one person's local tree.
        ref = self._checked(ref)
        path, data = w.path, w.data
        space = space_components(ref)
        doc = encode_doc_path(path)
        with _os_errors(path), self._locked(), history_errors():
            state = self._load_state_locked()
            existing = self._read_file(space + doc, path)
            current = self._etag_of(existing, True)
            check_precondition(path, current, w.if_match, w.if_none_match)
            delta = len(data) - (existing[1].st_size if existing else 0)
            self._check_quota(ref, state, delta)
            conn = self._history_conn_locked()
            now, known = self._instant(conn, ref, (path, existing, current))
            records: Records = [self._observed(ref, path, existing, current, now)]
            # The file's mtime (its updated_at) is the new version's instant; the same bytes
            # again make no new version and keep the file's time.
            mtime_ns = existing[1].st_mtime_ns if existing else None
            if current != w.etag:
                version = self._version_record(ref, path, data, w.etag, now)
                records.append(version)
                mtime_ns = version.at_us * 1000

            def change() -> None:
                # The search index is not touched: the next reconcile (before any search)
                # finds the new file by its size and mtime.
                self._replace_file(space, doc, path, data, mtime_ns)
                self._record_history(conn, records, known)

            self._mutate(state, ref, delta, change)
        return WriteResult(path, len(data), w.etag, created=existing is None)

    @contextlib.contextmanager
    def import_writer(self, ref: SpaceRef, grant: PlatformGrant | None) -> Iterator[ImportWriter]:
        """One lock, one dirty mark and one flush for a whole import (``fs_import``)."""
        from keepstone.store.fs_import import import_batch

        with import_batch(self, self._checked(ref)) as write:
            yield write

    def _delete(self, ref: SpaceRef, d: CheckedDelete) -> None:
        ref = self._checked(ref)
        path = d.path
        space = space_components(ref)
        doc = encode_doc_path(path)
        with _os_errors(path), self._locked(), history_errors():
            state = self._load_state_locked()
            existing = self._read_file(space + doc, path)
            if existing is None:
                raise NotFound(f"no document {path!r} in space {ref.id}", path=path)
            current = content_etag(existing[0])
            check_precondition(path, current, d.if_match)
            delta = -existing[1].st_size
            conn = self._history_conn_locked()
            now, known = self._instant(conn, ref, (path, existing, current))
            records: Records = [self._observed(ref, path, existing, current, now)]
            records.append(self._version_record(ref, path, None, "", now))

            def change() -> None:
                self._remove_file(space, doc, path)
                self._record_history(conn, records, known)

            self._mutate(state, ref, delta, change)

    def _move(self, ref: SpaceRef, m: CheckedMove) -> WriteResult:
        ref = self._checked(ref)
        space = space_components(ref)
        src, dst = encode_doc_path(m.path), encode_doc_path(m.to)
        with _os_errors(m.path), self._locked(), history_errors():
            state = self._load_state_locked()
            existing = self._read_file(space + src, m.path)
            if existing is None:
                raise NotFound(f"no document {m.path!r} in space {ref.id}", path=m.path)
            etag = content_etag(existing[0])
            check_precondition(m.path, etag, m.if_match)
            replaced = self._read_file(space + dst, m.to)
            check_move_target(m, replaced is not None)
            delta = -replaced[1].st_size if replaced else 0
            conn = self._history_conn_locked()
            # History: the old path ends, the new one gets the content as its next version.
            now, known = self._instant(conn, ref, (m.path, existing, etag), (m.to, replaced, None))
            moved = self._version_record(ref, m.to, existing[0], etag, now)
            records: Records = [
                self._observed(ref, m.path, existing, etag, now),
                self._observed(ref, m.to, replaced, None, now),
                self._version_record(ref, m.path, None, "", now),
                moved,
            ]

            def change() -> None:
                self._rename_file(space, src, dst, m.to, moved.at_us * 1000)
                self._record_history(conn, records, known)

            self._mutate(state, ref, delta, change)
        return WriteResult(m.to, len(existing[0]), etag, created=replaced is None)

    def list(self, ref: SpaceRef, dir: str = "") -> Infos:
        ref = self._checked(ref)
        prefix = validate_dir_prefix(dir)
        out: Infos = []
        with _os_errors(prefix):
            for doc_path, comps, st in self._walk_space(ref, prefix):
                etag = self._etags.get(_stat_key(st))
                if etag is None:
                    got = self._read_file(space_components(ref) + comps, doc_path)
                    if got is None:  # removed while listing
                        continue
                    data, st = got
                    etag = self._remember_etag(st, data)
                out.append(DocumentInfo(doc_path, st.st_size, _mtime(st), etag))
        out.sort(key=lambda info: info.path)
        return out

    def usage(self, ref: SpaceRef) -> Usage:
        ref = self._checked(ref)
        state = self._peek_state()
        history_used, history_quota = self.history_usage(ref.tenant)
        return Usage(
            space_id=ref.id,
            used_bytes=state.spaces.get(ref.id, 0),
            quota_bytes=self.limits.subcap(ref.visibility),
            team_used_bytes=state.tree,
            team_quota_bytes=self.limits.team_quota,
            history_used_bytes=history_used,
            history_quota_bytes=history_quota,
        )

    def iter_documents(self, ref: SpaceRef, dir: str = "") -> Iterator[Document]:
        # Validate now, not at the first next(): a bad ref fails at the call.
        ref = self._checked(ref)
        prefix = validate_dir_prefix(dir)
        return self._iter_documents(ref, prefix)

    def _iter_documents(self, ref: SpaceRef, prefix: str) -> Iterator[Document]:
        space = space_components(ref)
        # Names only are held (sorted); each body is read when its turn comes.
        with _os_errors(prefix):
            entries = sorted((p, c) for p, c, _ in self._walk_space(ref, prefix))
        for doc_path, comps in entries:
            with _os_errors(doc_path):
                got = self._read_file(space + comps, doc_path)
            if got is not None:
                yield _document(doc_path, got[0], got[1])

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
            for doc_path, _, st in self._walk_space(ref, ""):
                yield doc_path, st.st_size, st.st_mtime_ns

        def read(doc_path: str) -> tuple[bytes, int, int] | None:
            try:
                got = self._read_file(space + encode_doc_path(doc_path), doc_path)
            except (Conflict, OSError):
                return None  # became a link, a directory or unreadable: not a document
            if got is None:
                return None
            return got[0], got[1].st_size, got[1].st_mtime_ns

        with _os_errors(""), _index_errors():
            return self._index.reconcile(ref, files(), read, progress=progress)

    def reindex(self, progress: Progress | None = None, *, rebuild: bool = False) -> int:
        """Reconcile every space of the tree (``keepstone memory reindex``) and drop the rows of
        spaces no longer on disk; ``rebuild`` starts from an empty index. Returns how many
        documents changed; ``progress(1)`` per document examined."""
        if rebuild:
            with _os_errors(""):
                self._index.rebuild()
        changed = 0
        seen: set[str] = set()
        with _os_errors(""), _index_errors():
            for ref in self._spaces():
                seen.add(ref.id)
                changed += self.reconcile(ref, progress=progress)
            changed += self._index.forget_spaces_except(seen)
        return changed

    def chunk_rows(self, ref: SpaceRef) -> Chunks:
        """The space's indexed chunks by path and sequence, as last reconciled."""
        ref = self._checked(ref)
        with _index_errors():
            return self._index.chunk_rows(ref)

    def reconciled_versions(self, refs: Sequence[SpaceRef]) -> dict[str, int]:
        """:meth:`reconcile` then :meth:`search_version` of every space of ``refs``, by
        space id (a search over several spaces)."""
        versions = {}
        for ref in refs:
            self.reconcile(ref)
            versions[ref.id] = self.search_version(ref)
        return versions

    def search_version(self, ref: SpaceRef) -> int:
        """The space's search version: it moves whenever its chunks or vectors change."""
        ref = self._checked(ref)
        with _index_errors():
            return self._index.search_version(ref)

    def pending_chunks(self, limit: int, model: str) -> Pending:
        """Up to ``limit`` chunks, across every space, to embed with ``model`` (no vector,
        or another model's), as last reconciled: local commands embed these before they
        search."""
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
        with _os_errors(""), self._locked():
            return self._recount_locked().tree

    def list_spaces(self, tenant: str) -> SpaceRefs:
        """The spaces of ``tenant`` and the global spaces that have a directory in the tree."""
        with _os_errors(""):
            found = [r for r in self._spaces() if r.tenant == tenant or r.is_global]
        return sorted(found, key=lambda r: r.id)

    def _spaces(self) -> Iterator[SpaceRef]:
        """Every space that has a directory in the tree (private spaces have none)."""
        for vis in Visibility:
            if vis is Visibility.PRIVATE:
                continue
            for values, comps in self._walk_qualifiers([vis.value], [], space_depth(vis)):
                ref = space_named(vis, values, comps)
                if ref is not None:
                    yield ref

    def _recount_locked(self) -> UsageState:
        # A writer that died between its file operation and its history insert left the
        # state dirty: the files are the truth (fs_history's rule).
        self._reconcile_history_locked()
        spaces: dict[str, int] = {}
        for ref in self._spaces():
            total = sum(st.st_size for _, _, st in self._walk_space(ref, ""))
            if total:
                spaces[ref.id] = total
        state = UsageState(sum(spaces.values()), spaces)
        self._save_state(state, sync_data=True, sync_dir=True)
        return state

    def _check_quota(self, ref: SpaceRef, state: UsageState, delta: int) -> None:
        space_cap = subcap_or_none(self.limits.subcap(ref.visibility))
        Counter("space", state.spaces.get(ref.id, 0), space_cap).check(delta)
        Counter("tree", state.tree, self.limits.team_quota).check(delta)

    def _mutate(
        self, state: UsageState, ref: SpaceRef, delta: int, change: Callable[[], None]
    ) -> None:
        """Apply ``change`` (the file operation) and charge ``delta``, crash-safely.

        The state is first marked dirty, so a process (or machine) dying between the file
        operation and the counter update leaves a state the next writer recounts. Only
        the *rename* of the dirty state must be durable (directory fsync): if its bytes
        were lost, the torn file fails to parse and is recounted just the same.
        """
        state.dirty = True
        self._save_state(state, sync_data=False, sync_dir=True)
        try:
            change()
        except BaseException:
            with contextlib.suppress(Exception):
                self._recount_locked()
            raise
        state.tree = clamp(state.tree + delta)
        used = clamp(state.spaces.get(ref.id, 0) + delta)
        if used:
            state.spaces[ref.id] = used
        else:
            state.spaces.pop(ref.id, None)
        state.dirty = False
        # A lost or torn write of this clean state leaves the dirty one: self-healing.
        self._save_state(state, sync_data=False, sync_dir=False)

    def _peek_state(self) -> UsageState:
        if not self.root.is_dir():
            return UsageState(0, {})
        with _os_errors(""):
            state = self._read_state()
            if state is not None and not state.dirty:
                return state
            with self._locked():  # wait for the writer, or heal after a dead one
                return self._load_state_locked()

    def _load_state_locked(self) -> UsageState:
        state = self._read_state()
        if state is None or state.dirty:
            state = self._recount_locked()
        return state

    def _read_state(self) -> UsageState | None:
        try:
            raw = (self.root / STATE_FILE).read_bytes()
        except FileNotFoundError:
            return None
        return UsageState.parse(raw)

    def _save_state(self, state: UsageState, *, sync_data: bool, sync_dir: bool) -> None:
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _atomic_write(fd, STATE_FILE, state.to_json(), sync_data=sync_data, sync_dir=sync_dir)
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    # --- Files ----------------------------------------------------------------------------

    def _checked(self, ref: SpaceRef) -> SpaceRef:
        if ref.visibility is Visibility.PRIVATE:
            raise UnsupportedVisibility(
                "the filesystem store has no durable home for private spaces; "
                "use another visibility (bot, project, cross_project, user, org, global)"
            )
        return ref

    def _open_dirs(self, comps: Components, path: str, *, create: bool = False) -> int | None:
        """A descriptor of the directory ``root/comps``, walked without following links.

        ``None`` when a component is absent (and ``create`` is false).
        """
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            for comp in comps:
                try:
                    nfd = os.open(comp, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        os.close(fd)
                        return None
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(comp, 0o755, dir_fd=fd)
                    nfd = os.open(comp, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        _refuse_entry(fd, comp, path)
                    raise
                os.close(fd)
                fd = nfd
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _read_file(
        self, comps: Components, path: str, *, want_data: bool = True
    ) -> tuple[bytes, os.stat_result] | None:
        """(content, stat) of the regular file ``root/comps``; None when absent."""
        dfd = self._open_dirs(comps[:-1], path)
        if dfd is None:
            return None
        try:
            try:
                fd = os.open(comps[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    _refuse_entry(dfd, comps[-1], path)
                raise
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise Conflict(
                        f"{path!r} is a directory or special file in the filesystem store, "
                        "not a document; move it aside",
                        path=path,
                    )
                data = _read_all(fd) if want_data else b""
                return data, st
            finally:
                os.close(fd)
        finally:
            os.close(dfd)

    def _replace_file(
        self, space: Components, doc: Components, path: str, data: bytes, mtime_ns: int | None
    ) -> None:
        dfd = self._open_dirs(space + doc[:-1], path, create=True)
        assert dfd is not None  # create=True always yields a directory
        try:
            _atomic_write(dfd, doc[-1], data, mtime_ns=mtime_ns)
        finally:
            os.close(dfd)

    def _rename_file(
        self, space: Components, src: Components, dst: Components, to: str, mtime_ns: int
    ) -> None:
        """``rename(2)`` within the space: atomic, replacing a file at ``dst``; the moved
        file's mtime (its ``updated_at``) becomes ``mtime_ns``, the move's instant."""
        sfd = self._open_dirs(space + src[:-1], to)
        assert sfd is not None  # the caller read the file under the lock
        try:
            dfd = self._open_dirs(space + dst[:-1], to, create=True)
            assert dfd is not None  # create=True always yields a directory
            try:
                os.rename(src[-1], dst[-1], src_dir_fd=sfd, dst_dir_fd=dfd)
                os.utime(dst[-1], ns=(mtime_ns, mtime_ns), dir_fd=dfd, follow_symlinks=False)
                os.fsync(dfd)
            finally:
                os.close(dfd)
            os.fsync(sfd)
        finally:
            os.close(sfd)
        self._tidy_dirs(space, space + src, to)

    def _remove_file(self, space: Components, doc: Components, path: str) -> None:
        comps = space + doc
        dfd = self._open_dirs(comps[:-1], path)
        if dfd is None:
            return
        try:
            os.unlink(comps[-1], dir_fd=dfd)
            os.fsync(dfd)
        finally:
            os.close(dfd)
        self._tidy_dirs(space, comps, path)

    def _tidy_dirs(self, space: Components, comps: Components, path: str) -> None:
        """Remove the empty directories a document left behind at ``comps``, up to (not
        including) the space's own directory: a person browsing the tree sees no dead
        folders."""
        for depth in range(len(comps) - 1, len(space), -1):
            parent = self._open_dirs(comps[: depth - 1], path)
            if parent is None:
                return
            try:
                os.rmdir(comps[depth - 1], dir_fd=parent)
            except OSError:
                return
            finally:
                os.close(parent)

    def _walk_space(
        self, ref: SpaceRef, prefix: str
    ) -> Iterator[tuple[str, Components, os.stat_result]]:
        """(document path, its components, stat) of each listable document under prefix."""
        start = encode_dir_prefix(prefix)
        try:
            fd = self._open_dirs(space_components(ref) + start, prefix)
        except Conflict:
            return  # a link or a file where a directory would be: nothing to list
        if fd is None:
            return
        base = prefix.split("/") if prefix else []
        yield from _walk_docs(fd, base, start, "")

    def _walk_qualifiers(
        self, comps: Components, values: Components, want: int, pending: str = ""
    ) -> Iterator[tuple[Components, Components]]:
        """(decoded segments, components) of each directory ``want`` segments down."""
        fd = self._open_dirs(comps, "")
        if fd is None:
            return
        try:
            names = [e.name for e in os.scandir(fd) if e.is_dir(follow_symlinks=False)]
        finally:
            os.close(fd)
        for name in sorted(names):
            seg, more = decode_component(name, pending, "qual")
            if seg is None and more is None:
                continue
            if more is not None:
                yield from self._walk_qualifiers([*comps, name], values, want, more)
                continue
            assert seg is not None
            found = [*values, seg]
            if len(found) == want:
                yield found, [*comps, name]
            else:
                yield from self._walk_qualifiers([*comps, name], found, want)

    @staticmethod
    def _etag_of(existing: tuple[bytes, os.stat_result] | None, with_data: bool) -> str | None:
        """The etag of a file read ``with_data`` ('' when read without); None when absent."""
        if existing is None:
            return None
        return content_etag(existing[0]) if with_data else ""

    def _remember_etag(self, st: os.stat_result, data: bytes) -> str:
        if len(self._etags) >= _ETAG_CACHE_MAX:
            self._etags.clear()
        etag = content_etag(data)
        self._etags[_stat_key(st)] = etag
        return etag


# --- Helpers --------------------------------------------------------------------------------


def _walk_docs(
    fd: int, segs: list[str], comps: list[str], pending: str
) -> Iterator[tuple[str, list[str], os.stat_result]]:
    """Recursively list regular ``.md`` files below ``fd`` (closed on return)."""
    try:
        entries = sorted(os.scandir(fd), key=lambda e: e.name)
        files: list[tuple[str, os.stat_result]] = []
        dirs: list[str] = []
        for entry in entries:
            if entry.is_symlink():
                continue
            if entry.is_file(follow_symlinks=False):
                try:
                    files.append((entry.name, entry.stat(follow_symlinks=False)))
                except FileNotFoundError:
                    continue  # renamed or removed meanwhile (a writer's temporary file)
            elif entry.is_dir(follow_symlinks=False):
                dirs.append(entry.name)
        for name, st in files:
            path = document_named(segs, comps, name, pending)
            if path is not None:
                yield path, [*comps, name], st
        for name in dirs:
            step = directory_named(name, pending)
            if step is None:
                continue
            seg, more = step
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # replaced by a link or removed meanwhile: never followed
            next_segs = segs if seg is None else [*segs, seg]
            yield from _walk_docs(sub, next_segs, [*comps, name], more or "")
    finally:
        os.close(fd)


def _refuse_entry(dir_fd: int, name: str, path: str) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise Conflict(
            f"{path!r} passes through a symbolic link in the filesystem store; the store "
            "never follows links: replace the link with a directory or file",
            path=path,
        )
    raise Conflict(
        f"{path!r} passes through a file where the store needs a directory; move it aside",
        path=path,
    )


def _atomic_write(
    dir_fd: int,
    name: str,
    data: bytes,
    *,
    sync_data: bool = True,
    sync_dir: bool = True,
    mtime_ns: int | None = None,
) -> None:
    """Write ``name`` in ``dir_fd`` all-or-nothing: temp file, fsync, rename, fsync dir;
    ``mtime_ns`` sets the file's modification time (None: now)."""
    tmp = f"{TEMP_PREFIX}{uuid.uuid4().hex}{TEMP_SUFFIX}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o644, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if mtime_ns is not None:
                os.utime(fd, ns=(mtime_ns, mtime_ns))
            if sync_data:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    if sync_dir:
        os.fsync(dir_fd)


def _read_all(fd: int) -> bytes:
    with open(fd, "rb", closefd=False) as file:
        return file.read()


def _document(path: str, data: bytes, st: os.stat_result) -> Document:
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidDocument(
            f"document {path!r} on disk is not valid UTF-8; fix or remove the file", path=path
        ) from None
    return Document(path, content, len(data), _mtime(st), content_etag(data))


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _mtime(st: os.stat_result) -> datetime:
    return datetime.fromtimestamp(st.st_mtime, UTC)


def _stat_key(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@contextlib.contextmanager
def _os_errors(path: str) -> Iterator[None]:
    """Translate operating-system failures at the adapter boundary."""
    try:
        yield
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise InvalidPath(
                f"path {path!r} is too long for the filesystem under this store's root; "
                "use shorter names",
                path=path,
            ) from exc
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StoreUnavailable("the filesystem holding the store is full") from exc
        raise StoreUnavailable(
            f"the filesystem store failed: {exc.strerror or exc} ({exc.errno})"
        ) from exc


@contextlib.contextmanager
def _index_errors() -> Iterator[None]:
    """Translate the search index's SQLite failures at the adapter boundary."""
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreUnavailable(
            f"the filesystem store's search index ({INDEX_FILE} at the store's root) failed: {exc}"
        ) from exc


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
