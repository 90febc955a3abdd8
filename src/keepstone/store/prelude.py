"""What the store interface and its archives share: a mutation as the write prelude has
checked it, the checks every adapter makes past it in the same words, and what an archive
needs of a store.

:meth:`keepstone.store.base.MemoryStore.write` (and ``delete``, ``move``) runs the prelude
once — path, authority, encoding, document cap, secrets — and hands an adapter a
:class:`CheckedWrite` (:class:`CheckedDelete`, :class:`CheckedMove`); ``edit`` hands it a
:class:`CheckedEdit`, whose text is checked when it is written. An import runs the
same prelude per member (:mod:`keepstone.store.archive`) and hands each
:class:`CheckedWrite` to the adapter's :data:`ImportWriter`. ``base`` calls the archive
functions and the archive calls a store (:class:`ArchiveStore`), so what both need lives
here, below both. A global mutation on a client of a server is the exception: the server
checks its fields after the caller's authority, so the prelude passes them on as given
(:meth:`~keepstone.store.base.MemoryStore.server_decides`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from keepstone.documents import (
    Document,
    Edit,
    ImportStrategy,
    PlatformGrant,
    Usage,
    WriteResult,
)
from keepstone.errors import AlreadyExists, PlatformAuthorityRequired, PreconditionFailed
from keepstone.quota import Limits
from keepstone.secrets import check_names_free_of_secrets
from keepstone.spaces import SpaceRef


def check_space_names(ref: SpaceRef) -> None:
    """Refuse a space whose names hold a credential (``422 secret_detected`` naming the
    field): before any write into it, and once before an import reads its archive."""
    _space_names_clean(ref.name, ref.project, ref.bot)


@functools.lru_cache(maxsize=4096)
def _space_names_clean(name: str, project: str, bot: str) -> bool:
    """:func:`check_space_names`, remembered once clean (a space is written many times, and
    its names never change)."""
    check_names_free_of_secrets({"name": name, "project": project, "bot": bot}, "space")
    return True


class WriteTerms(NamedTuple):
    """What a write is conditional on, and the authority it comes with: ``if_match`` the
    etag the document must have, ``if_none_match`` that there is none (create-only),
    ``grant`` the platform authority a ``global`` space needs."""

    if_match: str | None = None
    if_none_match: bool = False
    grant: PlatformGrant | None = None


#: A write on no condition, without platform authority.
UNCONDITIONAL = WriteTerms()


@dataclass(frozen=True, slots=True)
class CheckedWrite:
    """A write past the prelude: canonical ``path``, ``content`` and its UTF-8 ``data``
    within the document cap and free of secrets, its ``etag``, and the authority."""

    path: str
    content: str
    data: bytes
    etag: str
    if_match: str | None
    if_none_match: bool
    grant: PlatformGrant | None


@dataclass(frozen=True, slots=True)
class CheckedDelete:
    """A delete past the prelude: canonical ``path``, its condition and its authority."""

    path: str
    if_match: str | None
    grant: PlatformGrant | None


@dataclass(frozen=True, slots=True)
class CheckedEdit:
    """An edit past the prelude: canonical ``path``, the edit to apply, its condition and
    its authority (checked with the edited text, when that is written)."""

    path: str
    edit: Edit
    if_match: str | None
    grant: PlatformGrant | None


@dataclass(frozen=True, slots=True)
class CheckedMove:
    """A move past the prelude: canonical, distinct ``path`` and ``to``, the condition on
    the document at ``path``, whether a document at ``to`` may be replaced, the authority."""

    path: str
    to: str
    if_match: str | None
    overwrite: bool
    grant: PlatformGrant | None


#: Writes one document of an import: a :class:`CheckedWrite` made by
#: :meth:`~keepstone.store.base.MemoryStore.check_write` (so the writer never checks path,
#: authority, encoding, size or secrets again), refusing what
#: :meth:`~keepstone.store.base.MemoryStore._write` would refuse: the precondition
#: (``if_none_match``), the quota, what cannot be written there (see ``import_writer``).
ImportWriter = Callable[[CheckedWrite], WriteResult]

#: Called with a count of documents done, for a progress bar.
Progress = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class ImportAsk:
    """How an archive is merged into a space: ``strategy`` for a path that holds a
    document already, the ``grant`` a global space needs, and a progress bar's callbacks
    (``total(n)`` once with the member count, ``progress(1)`` per member handled)."""

    strategy: ImportStrategy | str = ImportStrategy.SKIP
    grant: PlatformGrant | None = None
    progress: Progress | None = None
    total: Progress | None = None


class ArchiveStore(Protocol):
    """What an export and an import use of a store (:mod:`keepstone.store.archive`): the
    part of the :class:`~keepstone.store.base.MemoryStore` interface archives are built on;
    every adapter is one."""

    @property
    def limits(self) -> Limits | None: ...

    def iter_documents(self, ref: SpaceRef, dir: str = "") -> Iterator[Document]: ...

    def usage(self, ref: SpaceRef, *, index: bool = True) -> Usage: ...

    def check_authority(self, ref: SpaceRef, grant: PlatformGrant | None) -> None: ...

    def check_write(
        self, ref: SpaceRef, path: str, content: str, terms: WriteTerms = UNCONDITIONAL
    ) -> CheckedWrite: ...

    def import_writer(
        self, ref: SpaceRef, grant: PlatformGrant | None
    ) -> contextlib.AbstractContextManager[ImportWriter]: ...


def authorize_space_write(ref: SpaceRef, grant: PlatformGrant | None) -> None:
    """Refuse a global mutation that comes without proven platform authority."""
    if ref.is_global and grant is None:
        raise PlatformAuthorityRequired(
            "writing to a global space needs platform authority (a super-admin or the admin token)"
        )


def check_move_target(m: CheckedMove, target_exists: bool) -> None:
    """Refuse a move onto an existing document unless it may replace it (the one wording
    every adapter gives)."""
    if target_exists and not m.overwrite:
        raise AlreadyExists(
            f"there is already a document at {m.to!r}; move to another path, or pass "
            "overwrite to replace it",
            path=m.to,
        )


def check_precondition(
    path: str, current_etag: str | None, if_match: str | None, if_none_match: bool = False
) -> None:
    """Refuse with PreconditionFailed unless the document's state meets the condition.

    ``current_etag`` is None when the document is absent; ``if_match`` demands that etag
    (an absent document never matches); ``if_none_match`` demands absence.
    """
    if if_match is not None and current_etag != if_match:
        if current_etag is None:
            raise PreconditionFailed(
                f"{path!r} does not exist, so it cannot match etag {if_match!r}", path=path
            )
        raise PreconditionFailed(
            f"{path!r} changed meanwhile (its etag is now {current_etag!r}); "
            "read it again and retry",
            path=path,
            etag=current_etag,
        )
    if if_none_match and current_etag is not None:
        raise PreconditionFailed(
            f"{path!r} already exists; drop the create-only condition to replace it", path=path
        )
