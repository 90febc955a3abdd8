"""Use-cases over knowledge spaces (SPEC §5): the verbs every face shares.

:class:`SpaceService` wraps one :class:`~cairn.store.base.MemoryStore`. Reads take the
space the caller named (:func:`cairn.service.access.space_ref` stamps it with the
caller's team, so a ref can only name the caller's own spaces); mutations also take
the caller, whose right to change the space is decided by
:func:`~cairn.service.access.authorize_space_mutation` and carried to the store as an
argument. A global mutation, its usage charge and its audit row commit together in
the store's one transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from cairn.documents import (
    Document,
    DocumentInfo,
    ImportReport,
    ImportStrategy,
    Usage,
    WriteResult,
    parse_import_strategy,
)
from cairn.paths import validate_dir_prefix
from cairn.principal import Principal
from cairn.service.access import authorize_space_mutation
from cairn.spaces import SpaceRef
from cairn.store.base import MemoryStore, Progress


class SpaceService:
    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def read(self, ref: SpaceRef, path: str) -> Document:
        """The document at ``path``; ``404 not_found`` when absent."""
        return self.store.read(ref, path)

    def list(self, ref: SpaceRef, dir: str = "") -> list[DocumentInfo]:
        """The documents under directory prefix ``dir`` ('' = all), sorted by path."""
        return self.store.list(ref, validate_dir_prefix(dir))

    def usage(self, ref: SpaceRef) -> Usage:
        """Bytes used against the space's sub-cap and its team (or instance) aggregate."""
        return self.store.usage(ref)

    def write(
        self,
        who: Principal,
        ref: SpaceRef,
        path: str,
        content: str,
        *,
        if_match: str | None = None,
    ) -> WriteResult:
        """Create or replace a document (``created`` says which) as ``who``."""
        grant = authorize_space_mutation(who, ref)
        return self.store.write(ref, path, content, if_match=if_match, grant=grant)

    def delete(
        self, who: Principal, ref: SpaceRef, path: str, *, if_match: str | None = None
    ) -> None:
        """Remove a document as ``who``; ``404 not_found`` when absent."""
        grant = authorize_space_mutation(who, ref)
        self.store.delete(ref, path, if_match=if_match, grant=grant)

    def export(self, ref: SpaceRef, sink: BinaryIO, *, progress: Progress | None = None) -> int:
        """Stream the space into ``sink`` as a gzipped tarball; return the document count."""
        return self.store.export(ref, sink, progress=progress)

    def import_archive(
        self,
        who: Principal,
        ref: SpaceRef,
        source: BinaryIO,
        strategy: ImportStrategy | str = ImportStrategy.SKIP,
        *,
        progress: Progress | None = None,
    ) -> ImportReport:
        """Merge a gzipped tarball into the space under ``strategy``, as ``who``."""
        how = parse_import_strategy(strategy)
        grant = authorize_space_mutation(who, ref, importing=True)
        return self.store.import_archive(ref, source, how, grant=grant, progress=progress)

    def close(self) -> None:
        """Release the store's connections (a CLI process's last step)."""
        self.store.close()

    def iter_documents(self, ref: SpaceRef) -> Iterator[Document]:
        """Every document of the space with its content, streamed, sorted by path."""
        return self.store.iter_documents(ref)
