"""The ``MemoryStore`` interface: one contract, several adapters.

Every adapter (filesystem, SQLite, PostgreSQL, a Keepstone server over HTTP) implements
the abstract methods below and passes the one conformance suite in
``tests/conformance/`` unchanged. What every write shares is written here once:
:meth:`MemoryStore.write`, :meth:`MemoryStore.delete` and :meth:`MemoryStore.move`
validate the paths, check platform authority, encode the body, bound its size and scan it
for secrets, then hand the checked values to the adapter's ``_write`` / ``_delete`` /
``_move``. Export and import
are built on the same methods (see :mod:`keepstone.store.archive`).

Rules every adapter keeps (SPEC §2-§4, §10):

* Every method takes the full :class:`~keepstone.spaces.SpaceRef`, valid by construction.
  A non-global ref without a tenant is refused by the SQL stores before any I/O.
* A ``global`` mutation needs a :class:`~keepstone.documents.PlatformGrant`, passed as the
  ``grant`` argument by the service that proved the caller's authority; without one it
  is :class:`~keepstone.errors.PlatformAuthorityRequired`. The SQL stores write the audit
  row of a global mutation in the mutation's own transaction.
* A write that grows the tree is checked against the document cap, the space
  sub-cap, and the team aggregate (or, for global, the instance aggregate with the
  grant's attribution team debited) atomically with the write. A refusal is
  :class:`~keepstone.errors.QuotaExceeded` naming the limit, bytes used, quota, need.
* Content is UTF-8 Markdown; a body with a credential of a published shape is
  refused with :class:`~keepstone.errors.SecretDetected` (``keepstone.secrets``).
* ``etag`` is a content hash: equal content gives an equal etag.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import BinaryIO, Protocol, runtime_checkable

from keepstone.activity import ChangePage, FeedQuery, changing
from keepstone.config import DEFAULT_EXPORT_GZIP_LEVEL
from keepstone.document_pages import PageAsk
from keepstone.documents import (
    MAX_VERSION,
    Document,
    DocumentInfo,
    Edit,
    ImportReport,
    ImportStrategy,
    PlatformGrant,
    StoredBytes,
    Usage,
    VersionInfo,
    WriteResult,
    apply_edit,
    content_etag,
    encode_document,
    version_as_of,
)
from keepstone.errors import InvalidRequest, InvalidSpaceRef, NotFound, PreconditionFailed
from keepstone.paging import Page
from keepstone.paths import validate_dir_prefix, validate_doc_path
from keepstone.quota import Limits, check_document_size
from keepstone.secrets import check_names_free_of_secrets, check_no_secrets
from keepstone.spaces import SpaceRef
from keepstone.store.archive import export_space, import_space
from keepstone.store.prelude import (
    UNCONDITIONAL,
    CheckedDelete,
    CheckedEdit,
    CheckedMove,
    CheckedWrite,
    ImportAsk,
    ImportWriter,
    Progress,
    WriteTerms,
    authorize_space_write,
    check_move_target,
    check_precondition,
    check_space_names,
)
from keepstone.store.reserve import DiskReserve

__all__ = [
    "CheckedDelete",
    "CheckedEdit",
    "CheckedMove",
    "CheckedWrite",
    "ChunkRow",
    "Document",
    "DocumentInfo",
    "ImportAsk",
    "ImportReport",
    "ImportStrategy",
    "ImportWriter",
    "MemoryStore",
    "PlatformGrant",
    "Progress",
    "SpaceRefs",
    "StoredBytes",
    "Usage",
    "WriteResult",
    "WriteTerms",
    "authorize_space_write",
    "check_move_target",
    "check_precondition",
    "content_etag",
    "encode_document",
]

#: How many times an edit without ``if_match`` reads the document and applies itself
#: before it gives up on a document its writers change faster than it can be written.
EDIT_ATTEMPTS = 5


#: Aliases: the class below defines a method called ``list``.
Versions = list[VersionInfo]
Infos = list[DocumentInfo]


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """One indexed chunk of a document, as a store's search index holds it.

    ``heading`` is the chunk's heading trail (``"Runbook > Rollback"``, ``""`` before the
    first heading), ``text`` the chunk's own text, ``terms`` its analysed terms
    (:func:`keepstone.search.text.analyze` of its ``search_text``) joined by single spaces,
    ``embedding`` the vector blob (:mod:`keepstone.db.vectors`) or None until it is
    embedded, and ``model`` the model that made the vector (None with no vector).
    ``stamp`` is new whenever the row is written, from an index that says which chunks
    changed (:class:`keepstone.store.index.ChunkStamps`); 0 from one that does not.
    """

    path: str
    seq: int
    heading: str
    text: str
    terms: str
    embedding: bytes | None
    model: str | None
    stamp: int = 0


def space_of_id(space_id: str) -> SpaceRef | None:
    """The ref whose :attr:`~keepstone.spaces.SpaceRef.id` is ``space_id`` (a store's own
    stored id), or None for text that is not one."""
    parts = space_id.split(":")
    if len(parts) != 7 or parts[0] != "v1":
        return None
    _, vis, tenant, project, bot, user, name = parts
    try:
        ref = SpaceRef(vis, name, tenant, project, bot, user)  # type: ignore[arg-type]
    except InvalidSpaceRef:
        return None
    return ref if ref.id == space_id else None


#: Spaces, as list_spaces answers them (an alias: the store defines a method called ``list``).
SpaceRefs = list[SpaceRef]


# --- The interface -------------------------------------------------------------------------


@runtime_checkable
class ListsAsJson(Protocol):
    """A store that renders a whole listing itself, as the JSON array of the documents'
    wire form (what :meth:`~keepstone.documents.DocumentInfo.as_json` gives, in path
    order): a large listing then costs no object per document. With ``at_most``, None
    when the listing holds more documents than that."""

    def list_json(self, ref: SpaceRef, dir: str = "", at_most: int | None = None) -> str | None: ...


class MemoryStore(ABC):
    """A store of Markdown documents in spaces, with quotas.

    ``capabilities`` names optional behaviour the conformance suite may rely on:

    * ``"private"`` — serves ``private`` spaces (the filesystem store refuses them
      with ``unsupported_visibility``).
    * ``"team_aggregate"`` — one counter per team, plus a tenant-less instance
      counter for global writes (SQL stores).
    * ``"tree_aggregate"`` — one whole-tree counter charged for every write
      (filesystem store).
    * ``"multiprocess"`` — safe for writers in several OS processes at once.
    * ``"tenant_addressing"`` — serves the space of whatever ``ref.tenant`` names, so
      one store holds several teams' spaces side by side (filesystem and SQL stores).
      A client of a server (``HttpMemoryStore``) lacks it: the server stamps the
      tenant and user from the credential, and only the caller's own team is reachable.
    * ``"history"`` — keeps every version of every document: ``versions``,
      ``read_version``, ``read_as_of``, ``list_as_of`` answer.
    * ``"platform_grants"`` — refuses a ``global`` mutation that comes without a
      :class:`~keepstone.documents.PlatformGrant` itself. A client of a server lacks it:
      the server decides from the caller's credential (and audits), and before any field
      (a caller without authority hears ``403``, never a ``422``), so such a store sends a
      global mutation's fields unchecked (:meth:`MemoryStore.checked_path`).
    * ``"stored_totals"`` — sums what it holds across every team and global space
      (:class:`keepstone.store.index.StoredTotals`). A client of a server lacks it: it sees
      only its caller's spaces.
    """

    capabilities: frozenset[str] = frozenset()

    #: What every store that keeps its documents itself (not a client of a server) declares.
    KEEPS_ITS_OWN: frozenset[str] = frozenset(
        {"multiprocess", "tenant_addressing", "platform_grants", "history", "stored_totals"}
    )

    @abstractmethod
    def read(self, ref: SpaceRef, path: str) -> Document:
        """The document at ``path``; :class:`~keepstone.errors.NotFound` when absent."""

    @abstractmethod
    def _write(self, ref: SpaceRef, w: CheckedWrite) -> WriteResult:
        """Store a write whose path, authority, encoding, size and secrets the prelude of
        :meth:`write` has checked."""

    @abstractmethod
    def _delete(self, ref: SpaceRef, d: CheckedDelete) -> None:
        """Remove the document of a delete the prelude of :meth:`delete` has checked."""

    @abstractmethod
    def _move(self, ref: SpaceRef, m: CheckedMove) -> WriteResult:
        """Give the document at ``m.path`` the path ``m.to`` in one atomic step (checked by
        the prelude of :meth:`move`); answer as a write of ``m.to`` would."""

    @abstractmethod
    def list(self, ref: SpaceRef, dir: str = "") -> list[DocumentInfo]:
        """Documents under directory prefix ``dir`` ('' = all), sorted by path."""

    def list_page(self, ref: SpaceRef, ask: PageAsk) -> Page[DocumentInfo]:
        """The page ``ask`` of the documents under ``ask.dir``, in its order. This one
        pages the whole listing; a store that can read one page alone does."""
        return ask.of(self.list(ref, ask.dir))

    @abstractmethod
    def usage(self, ref: SpaceRef, *, index: bool = True) -> Usage:
        """Bytes used and quotas for the space (an unknown space uses 0 bytes); with
        ``index=False`` its ``index_bytes`` stays 0 and the index is not read (a listing
        of many spaces shows only their documents' bytes)."""

    @abstractmethod
    def iter_documents(self, ref: SpaceRef, dir: str = "") -> Iterator[Document]:
        """Every document under ``dir`` with its content, sorted by path, streamed:
        an adapter holds at most a bounded number of documents in memory at once."""

    # --- History: every version of every document, live included ---------------------------
    #
    # An adapter that keeps history declares the ``history`` capability and answers the
    # three methods below; the rest of the history is built on them.

    def _versions(self, ref: SpaceRef, path: str) -> Versions:
        """Every version of the document at the canonical ``path``, newest first (the live
        one first when it exists; deletion markers included); [] when it never had one."""
        raise _no_history()

    def _read_version(self, ref: SpaceRef, path: str, version: int) -> Document | None:
        """The content of ``version`` of ``path`` (``updated_at`` = when it became
        current), None when there is no such version, it was pruned, or it is a deletion."""
        raise _no_history()

    def _list_as_of(self, ref: SpaceRef, at: datetime, prefix: str) -> Infos:
        """The documents the space held at ``at`` under directory prefix ``prefix``, as
        :meth:`list` would have answered then (``updated_at`` = when each version became
        current), sorted by path."""
        raise _no_history()

    def history_usage(self, tenant: str) -> tuple[int, int]:
        """(stored bytes of the versions that are no longer current, the cap they are held
        to) of the history counter team ``tenant``'s spaces answer to — what
        :meth:`usage` reports as ``history_*``. (0, 0) here, for a store that keeps no
        history; an adapter that keeps it overrides this (one with a single tree-wide
        counter answers the same for every tenant)."""
        return 0, 0

    # --- Built on the abstract methods above ------------------------------------------

    #: The limits this store enforces itself, or None when a server behind it does.
    limits: Limits | None = None
    #: The room this store keeps for deletes on a full disk (:mod:`keepstone.store.reserve`),
    #: or None when its data is not on a local disk (a server's, a PostgreSQL's).
    reserve: DiskReserve | None = None

    def write(
        self,
        ref: SpaceRef,
        path: str,
        content: str,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
        grant: PlatformGrant | None = None,
    ) -> WriteResult:
        """Create or replace the document at ``path``.

        ``if_match``: refuse with PreconditionFailed unless the current etag equals it
        (an absent document never matches). ``if_none_match``: refuse with
        PreconditionFailed when the document exists (create-only). ``grant``: the
        platform authority a ``global`` space needs (see the module's rules).
        """
        checked = self.check_write(ref, path, content, WriteTerms(if_match, if_none_match, grant))
        if self.reserve is None:
            return self._write(ref, checked)
        return self.reserve.refusing(lambda: self._write(ref, checked))

    def edit(
        self,
        ref: SpaceRef,
        path: str,
        edit: Edit,
        *,
        if_match: str | None = None,
        grant: PlatformGrant | None = None,
    ) -> WriteResult:
        """Apply ``edit`` to the document at ``path`` (:func:`~keepstone.documents.apply_edit`)
        and write the whole new text, as :meth:`write` checks it. The write is conditional on
        the etag read, so a change made meanwhile by anyone is never overwritten: without
        ``if_match`` the edit is applied again to the newer text (:data:`EDIT_ATTEMPTS`
        reads at most, then PreconditionFailed); with it, the document must still have that
        etag, and a change is PreconditionFailed. A store in front of a server (the HTTP
        store) sends the edit itself instead, in one request (its :meth:`_edit`)."""
        return self._edit(ref, CheckedEdit(self.checked_path(ref, path), edit, if_match, grant))

    def _edit(self, ref: SpaceRef, e: CheckedEdit) -> WriteResult:
        """Read, apply and write back the edit ``e`` (:meth:`edit`). A caller who named no
        version asked for the edit of the document as it is when the edit lands, so a write
        between this read and the write-back sends it round again, to the newer text: the
        answer is the one it would have had a moment later (a ``404`` when it was deleted, an
        ``invalid_edit`` when its text no longer holds ``old``), never a ``412`` it could only
        answer by sending the same edit again."""
        for _ in range(EDIT_ATTEMPTS):
            doc = self.read(ref, e.path)
            check_precondition(doc.path, doc.etag, e.if_match)
            content = apply_edit(doc.content, e.edit, doc.path)
            try:
                return self.write(ref, doc.path, content, if_match=doc.etag, grant=e.grant)
            except PreconditionFailed:
                if e.if_match is not None:
                    raise
        raise PreconditionFailed(
            f"{e.path!r} changed {EDIT_ATTEMPTS} times while this edit was applied to it; "
            "send the edit again when its writers pause",
            path=e.path,
        )

    def check_write(
        self, ref: SpaceRef, path: str, content: str, terms: WriteTerms = UNCONDITIONAL
    ) -> CheckedWrite:
        """The prelude of :meth:`write`: path, authority, encoding, size and secrets (in
        the content and in the names it is written under); ``terms`` ride along."""
        if_match, if_none_match, grant = terms
        if self.server_decides(ref):
            data = encode_document(content)
            return CheckedWrite(path, content, data, content_etag(data), *terms)
        path = validate_doc_path(path)
        check_names_free_of_secrets({"path": path})
        check_space_names(ref)
        self.check_authority(ref, grant)
        data = encode_document(content)
        if self.limits is not None:
            check_document_size(len(data), self.limits.max_document)
        check_no_secrets(content)
        if self.reserve is not None:
            self.reserve.ensure()
        return CheckedWrite(path, content, data, content_etag(data), if_match, if_none_match, grant)

    def delete(
        self,
        ref: SpaceRef,
        path: str,
        *,
        if_match: str | None = None,
        grant: PlatformGrant | None = None,
    ) -> None:
        """Remove the document at ``path`` and credit its size; NotFound when absent."""
        self.check_authority(ref, grant)
        checked = CheckedDelete(self.checked_path(ref, path), if_match, grant)
        if self.reserve is None:
            return self._delete(ref, checked)
        # A delete writes before it frees (a log, a history version): on a full disk it
        # runs again in the room the reserve leaves.
        return self.reserve.retrying(lambda: self._delete(ref, checked))

    def move(
        self,
        ref: SpaceRef,
        path: str,
        to: str,
        *,
        if_match: str | None = None,
        overwrite: bool = False,
        grant: PlatformGrant | None = None,
    ) -> WriteResult:
        """Move the document at ``path`` to ``to`` within the space, atomically: its content
        and etag are unchanged, its ``updated_at`` is the time of the move, and no reader
        ever sees it at both paths or at neither.

        NotFound when ``path`` holds no document; PreconditionFailed unless its etag equals
        ``if_match`` (when given); AlreadyExists when ``to`` holds a document, unless
        ``overwrite`` (then that document is replaced and its size credited). The answer is
        the document at ``to`` (``created`` False when it replaced one). A global move needs
        ``grant`` and is audited as ``memory.global_move``.
        """
        self.check_authority(ref, grant)
        src, dst = self.checked_path(ref, path), self.checked_path(ref, to)
        if not self.server_decides(ref):
            check_names_free_of_secrets({"to": dst})
            if src == dst:
                raise InvalidRequest(
                    f"the document is already at {src!r}; give the new path to move it to",
                    path=src,
                )
        checked = CheckedMove(src, dst, if_match, overwrite, grant)
        with changing(action="move"):
            if self.reserve is None:
                return self._move(ref, checked)
            self.reserve.ensure()
            return self.reserve.refusing(lambda: self._move(ref, checked))

    def versions(self, ref: SpaceRef, path: str) -> Versions:
        """The document's versions newest first, live included; NotFound when
        the path never held a document (or its history was pruned away)."""
        path = validate_doc_path(path)
        found = self._versions(ref, path)
        if not found:
            raise NotFound(f"{path!r} has no history in space {ref.id}", path=path)
        return found

    def read_version(self, ref: SpaceRef, path: str, version: int) -> Document:
        """The document as it was at ``version``; NotFound when there is no such version
        (or it was pruned), or it is a deletion."""
        path = validate_doc_path(path)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise InvalidRequest(f"version must be a whole number from 1, not {version!r}")
        if version > MAX_VERSION:  # as the API refuses it (SQLite could not even bind it)
            raise InvalidRequest(f"version must be a whole number from 1 to {MAX_VERSION}")
        found = self._read_version(ref, path, version)
        if found is None:
            raise NotFound(
                f"{path!r} has no version {version} with content in space {ref.id}; "
                "list its versions to see which exist",
                path=path,
                version=version,
            )
        return found

    def read_as_of(self, ref: SpaceRef, path: str, at: datetime) -> Document:
        """The document as it was at the instant ``at``; NotFound when it did not exist
        then."""
        path = validate_doc_path(path)
        current = version_as_of(self._versions(ref, path), _aware(at))
        found = None if current is None else self._read_version(ref, path, current.version)
        if found is None:
            raise NotFound(
                f"there was no document at {path!r} in space {ref.id} at {_aware(at).isoformat()}",
                path=path,
            )
        return found

    def list_as_of(self, ref: SpaceRef, at: datetime, dir: str = "") -> Infos:
        """The documents under ``dir`` as the space held them at the instant ``at``."""
        return self._list_as_of(ref, _aware(at), validate_dir_prefix(dir))

    def iter_documents_as_of(
        self, ref: SpaceRef, at: datetime, dir: str = ""
    ) -> Iterator[Document]:
        """Every document under ``dir`` as it was at ``at``, with its content, by path."""
        for info in self.list_as_of(ref, at, dir):
            found = self._read_version_at(ref, info, at)
            if found is not None:
                yield found

    def _read_version_at(self, ref: SpaceRef, info: DocumentInfo, at: datetime) -> Document | None:
        current = version_as_of(self._versions(ref, info.path), _aware(at))
        return None if current is None else self._read_version(ref, info.path, current.version)

    def server_decides(self, ref: SpaceRef) -> bool:
        """Whether a mutation of ``ref`` goes to a server that checks its fields itself: a
        global one, on a store that does not decide platform authority (a client of a
        server). The server refuses a caller without authority before any field."""
        return ref.is_global and "platform_grants" not in self.capabilities

    def checked_path(self, ref: SpaceRef, path: str) -> str:
        """A mutation's ``path`` made canonical, or as given where :meth:`server_decides`."""
        return path if self.server_decides(ref) else validate_doc_path(path)

    def check_authority(self, ref: SpaceRef, grant: PlatformGrant | None) -> None:
        """Refuse a global mutation without a grant, where this store decides authority."""
        if "platform_grants" in self.capabilities:
            authorize_space_write(ref, grant)

    def exists(self, ref: SpaceRef, path: str) -> bool:
        try:
            self.read(ref, path)
        except NotFound:
            return False
        return True

    def export(
        self,
        ref: SpaceRef,
        sink: BinaryIO,
        *,
        progress: Progress | None = None,
        gzip_level: int = DEFAULT_EXPORT_GZIP_LEVEL,
    ) -> int:
        """Write the space to ``sink`` as a gzipped tarball; return the document count.

        ``progress(1)`` is called per document (an adapter that streams a server's
        archive may not call it). ``gzip_level``: 0-9 (``KEEPSTONE_EXPORT_GZIP_LEVEL``; an
        adapter that streams a server's archive takes the server's)."""
        return self._export(ref, sink, progress, gzip_level)

    def _export(self, ref: SpaceRef, sink: BinaryIO, progress: Progress | None, level: int) -> int:
        """The tarball of :meth:`export`, made here from :meth:`iter_documents`."""
        return export_space(self, ref, sink, progress=progress, gzip_level=level)

    def import_archive(
        self,
        ref: SpaceRef,
        source: BinaryIO,
        strategy: ImportStrategy = ImportStrategy.SKIP,
        *,
        grant: PlatformGrant | None = None,
        progress: Progress | None = None,
        total: Progress | None = None,
    ) -> ImportReport:
        """Merge a gzipped tarball into the space under ``strategy`` (see archive module);
        ``total(n)`` once with the member count before any write, then ``progress(1)`` per
        member handled (an adapter that streams to a server may call neither)."""
        return self._import(ref, source, ImportAsk(strategy, grant, progress, total))

    def _import(self, ref: SpaceRef, source: BinaryIO, ask: ImportAsk) -> ImportReport:
        """The merge of :meth:`import_archive`, member by member through
        :meth:`import_writer`."""
        return import_space(
            self, ref, source, ask.strategy, grant=ask.grant, progress=ask.progress, total=ask.total
        )

    @contextlib.contextmanager
    def import_writer(self, ref: SpaceRef, grant: PlatformGrant | None) -> Iterator[ImportWriter]:
        """The writes of one import into ``ref``, as one batch where the adapter can make a
        batch cheaper than as many single writes (the filesystem store takes its lock and
        marks its counters once, and makes the batch durable once, at the end).

        Each call takes a write past :meth:`check_write` (the prelude ran once, in the
        archive's pass over the member) and refuses it exactly as :meth:`_write` would
        (the archive lists it under ``rejected`` and goes on); what escapes the ``with``
        block ends the batch. By default each call is a plain :meth:`_write`.
        """

        def write(w: CheckedWrite) -> WriteResult:
            return self._write(ref, w)

        yield write

    def list_spaces(self, tenant: str) -> SpaceRefs:
        """The spaces of team ``tenant`` ('': of no team) that hold documents, and every
        global space that does, sorted by id (a space emptied since may still be listed):
        the candidates of a search over every space a caller may read
        (``scope=readable``). Deciding which of them the caller may read is the access
        model's (:func:`keepstone.service.access.readable_spaces`), never the store's. An
        adapter with ``tenant_addressing`` answers it; a client of a server refuses (the
        server lists and decides itself)."""
        raise InvalidRequest(
            "this store cannot list spaces: a Keepstone server searches every space you may "
            "read itself (scope=readable)"
        )

    def reindex(self, progress: Progress | None = None, *, rebuild: bool = False) -> int:
        """Bring this store's search index in line with its documents (``rebuild``: from
        empty); return how many documents were (re)indexed, ``progress(1)`` per document.
        A store that keeps no index of its own (a client of a server) refuses."""
        raise InvalidRequest(
            "this store keeps no search index of its own: a Keepstone server indexes its "
            "documents itself; drop --server to reindex the local store"
        )

    def activity(self, refs: Sequence[SpaceRef], query: FeedQuery) -> ChangePage:
        """The changes of the spaces ``refs`` (of one team, or one global space; a client of
        a server: [] for every space the server lets the caller read) that ``query`` asks
        for, newest first; each
        change carries its raw actor (``Change.who``) for the service to name
        (docs/history.md, "Activity")."""
        raise _no_history()

    def close(self) -> None:  # noqa: B027 - optional hook, most adapters hold nothing
        """Release connections, pools or locks."""


def _aware(at: datetime) -> datetime:
    """``at`` as an aware instant in UTC: a naive one is taken as UTC. In UTC because a
    SQL store compares it with stored UTC timestamps, which SQLite does as text."""
    return at.astimezone(UTC) if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _no_history() -> InvalidRequest:
    return InvalidRequest("this store keeps no history of its documents")
