"""The ``MemoryStore`` interface: one contract, several adapters.

Every adapter (filesystem, SQLite, PostgreSQL) implements the six abstract methods
below and passes the one conformance suite in ``tests/conformance/`` unchanged.
Export and import are built on them here, once, so every adapter streams and
validates archives the same way (see :mod:`cairn.store.archive`).

Rules every adapter keeps (SPEC §2-§4, §10):

* Every method takes the full :class:`~cairn.spaces.SpaceRef` and validates it
  again (``ref.validated()``) and every path (``validate_doc_path``) before any I/O.
  A non-global ref without a tenant is refused by the SQL stores before any I/O.
* ``write`` and ``delete`` call :func:`authorize_space_write` first: a ``global``
  mutation needs the platform authority of the current context.
* A write that grows the tree is checked against the document cap, the space
  sub-cap, and the team aggregate (or, for global, the instance aggregate with the
  writing team debited for attribution) atomically with the write. A refusal is
  :class:`~cairn.errors.QuotaExceeded` naming the limit, bytes used, quota, need.
* Content is UTF-8 Markdown; a body with a credential of a published shape is
  refused with :class:`~cairn.errors.SecretDetected` (``cairn.secrets``).
* ``etag`` is a content hash: equal content gives an equal etag.
"""

from __future__ import annotations

import contextlib
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import BinaryIO

from cairn.errors import InvalidDocument, InvalidRequest, PlatformAuthorityRequired
from cairn.spaces import SpaceRef


@dataclass(frozen=True, slots=True)
class DocumentInfo:
    """What a listing says of one document. ``updated_at`` is timezone-aware UTC."""

    path: str
    size_bytes: int
    updated_at: datetime
    etag: str


@dataclass(frozen=True, slots=True)
class Document:
    """One document with its content."""

    path: str
    content: str
    size_bytes: int
    updated_at: datetime
    etag: str

    @property
    def info(self) -> DocumentInfo:
        return DocumentInfo(self.path, self.size_bytes, self.updated_at, self.etag)


@dataclass(frozen=True, slots=True)
class WriteResult:
    path: str
    size_bytes: int
    etag: str
    created: bool


@dataclass(frozen=True, slots=True)
class Usage:
    """Bytes used against quotas for one space.

    ``quota_bytes`` is the space's sub-cap (0 = none). ``team_*`` is the team
    aggregate for a team space; for a ``global`` space it is the instance aggregate;
    for the filesystem store it is the whole-tree aggregate.
    """

    space_id: str
    used_bytes: int
    quota_bytes: int
    team_used_bytes: int
    team_quota_bytes: int


class ImportStrategy(StrEnum):
    SKIP = "skip"
    OVERWRITE = "overwrite"
    RENAME = "rename"


def parse_import_strategy(strategy: ImportStrategy | str) -> ImportStrategy:
    """The strategy named by ``strategy``, or InvalidRequest naming the allowed values."""
    try:
        return ImportStrategy(strategy)
    except ValueError:
        allowed = ", ".join(s.value for s in ImportStrategy)
        raise InvalidRequest(
            f"unknown import strategy {strategy!r}; use one of: {allowed}", field="strategy"
        ) from None


@dataclass(frozen=True, slots=True)
class Rejected:
    path: str
    reason: str


@dataclass(slots=True)
class ImportReport:
    written: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)
    rejected: list[Rejected] = field(default_factory=list)


def encode_document(content: object) -> bytes:
    """The UTF-8 bytes of a document body, or InvalidDocument naming what is wrong.

    Every adapter stores exactly these bytes, so they agree on what a document is: text,
    no NUL (PostgreSQL cannot store one), no lone surrogate.
    """
    if not isinstance(content, str):
        raise InvalidDocument(
            f"content must be text (a str), not {type(content).__name__}; send UTF-8 Markdown"
        )
    if "\x00" in content:
        raise InvalidDocument("content may not contain NUL characters; remove them and retry")
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidDocument(
            f"content is not valid Unicode at character {exc.start} (a lone surrogate); "
            "send UTF-8 Markdown"
        ) from None


def content_etag(data: bytes) -> str:
    """The etag of a document body: a content hash (quoted form is the HTTP layer's job)."""
    return hashlib.sha256(data).hexdigest()[:32]


# --- Platform write authority -------------------------------------------------------------
#
# A mutation of a global space is a platform act. The authority is a fact of the
# context, set only where it has just been proven: `grep with_platform_write_authority`
# is the audit of who grants it (the HTTP auth layer, the local CLI import).


@dataclass(frozen=True, slots=True)
class PlatformGrant:
    """Who proved platform authority, for the audit log (``admin-token``, ``user:<id>``...)."""

    actor: str


_platform_grant: ContextVar[PlatformGrant | None] = ContextVar(
    "cairn_platform_write_authority", default=None
)


@contextlib.contextmanager
def with_platform_write_authority(actor: str) -> Iterator[PlatformGrant]:
    """Grant platform write authority for the duration of the block.

    Call it only right where the authority has just been proven.
    """
    grant = PlatformGrant(actor)
    token = _platform_grant.set(grant)
    try:
        yield grant
    finally:
        _platform_grant.reset(token)


def current_platform_grant() -> PlatformGrant | None:
    return _platform_grant.get()


# --- Attribution of global writes -----------------------------------------------------------
#
# A global ref carries no tenant, so a store cannot tell which team wrote to it. The
# boundary that knows the caller's active team (the HTTP layer, per request) names it
# here; the SQL stores then debit that team's counter for the bytes of a global write
# (attribution, never enforcement) and credit it on a shrink or delete. Unset (the
# admin token, the local CLI) means no team is debited.

_attribution_team: ContextVar[str | None] = ContextVar("cairn_attribution_team", default=None)


@contextlib.contextmanager
def with_attribution_team(team_id: str | None) -> Iterator[None]:
    """Attribute global writes in this block to ``team_id`` (``None`` or '' = nobody)."""
    token = _attribution_team.set(team_id or None)
    try:
        yield
    finally:
        _attribution_team.reset(token)


def current_attribution_team() -> str | None:
    """The team global writes are attributed to in this context, if any."""
    return _attribution_team.get()


def authorize_space_write(ref: SpaceRef) -> None:
    """AuthorizeSpaceWrite: refuse a global mutation without platform authority."""
    if ref.is_global and _platform_grant.get() is None:
        raise PlatformAuthorityRequired(
            "writing to a global space needs platform authority (a super-admin or the admin token)"
        )


# --- The interface -------------------------------------------------------------------------


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
    """

    capabilities: frozenset[str] = frozenset()

    @abstractmethod
    def read(self, ref: SpaceRef, path: str) -> Document:
        """The document at ``path``; :class:`~cairn.errors.NotFound` when absent."""

    @abstractmethod
    def write(
        self,
        ref: SpaceRef,
        path: str,
        content: str,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> WriteResult:
        """Create or replace the document at ``path``.

        ``if_match``: refuse with PreconditionFailed unless the current etag equals it
        (an absent document never matches). ``if_none_match``: refuse with
        PreconditionFailed when the document exists (create-only).
        """

    @abstractmethod
    def delete(self, ref: SpaceRef, path: str, *, if_match: str | None = None) -> None:
        """Remove the document at ``path`` and credit its size; NotFound when absent."""

    @abstractmethod
    def list(self, ref: SpaceRef, dir: str = "") -> list[DocumentInfo]:
        """Documents under directory prefix ``dir`` ('' = all), sorted by path."""

    @abstractmethod
    def usage(self, ref: SpaceRef) -> Usage:
        """Bytes used and quotas for the space (an unknown space uses 0 bytes)."""

    @abstractmethod
    def iter_documents(self, ref: SpaceRef, dir: str = "") -> Iterator[Document]:
        """Every document under ``dir`` with its content, sorted by path, streamed:
        an adapter holds at most a bounded number of documents in memory at once."""

    # --- Built on the six above ---------------------------------------------------------

    def exists(self, ref: SpaceRef, path: str) -> bool:
        from cairn.errors import NotFound

        try:
            self.read(ref, path)
        except NotFound:
            return False
        return True

    def export(self, ref: SpaceRef, sink: BinaryIO) -> int:
        """Write the space to ``sink`` as a gzipped tarball; return the document count."""
        from cairn.store.archive import export_space

        return export_space(self, ref, sink)

    def import_archive(
        self,
        ref: SpaceRef,
        source: BinaryIO,
        strategy: ImportStrategy = ImportStrategy.SKIP,
    ) -> ImportReport:
        """Merge a gzipped tarball into the space under ``strategy`` (see archive module)."""
        from cairn.store.archive import import_space

        return import_space(self, ref, source, strategy)

    def close(self) -> None:  # noqa: B027 - optional hook, most adapters hold nothing
        """Release connections, pools or locks."""
