"""Use-cases over knowledge spaces: the only thing the API, CLI, MCP and tools call.

:class:`SpaceService` wraps one :class:`~cairn.store.base.MemoryStore`. It adds what
is not the store's job: the audit trail of global mutations (SPEC §5 "Global") and
the verbs every interface shares (read / write / list / delete / usage / export /
import). Authorization of team roles happens at the boundary that knows the
identity; platform authority for global is checked by the store itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from cairn.paths import validate_dir_prefix, validate_doc_path
from cairn.spaces import SpaceRef
from cairn.store.base import (
    Document,
    DocumentInfo,
    ImportReport,
    ImportStrategy,
    MemoryStore,
    Usage,
    WriteResult,
    current_platform_grant,
)


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One platform-scoped audit row: ``memory.global_write|global_delete|global_import``."""

    action: str
    actor: str
    space_id: str
    path: str


AuditSink = Callable[[AuditEvent], None]


def _no_audit(_event: AuditEvent) -> None:
    return None


class SpaceService:
    """The knowledge-space verbs, shared by every interface."""

    def __init__(self, store: MemoryStore, audit: AuditSink = _no_audit) -> None:
        self.store = store
        self._audit = audit

    def read(self, ref: SpaceRef, path: str) -> Document:
        return self.store.read(ref.validated(), validate_doc_path(path))

    def list(self, ref: SpaceRef, dir: str = "") -> list[DocumentInfo]:
        return self.store.list(ref.validated(), validate_dir_prefix(dir))

    def usage(self, ref: SpaceRef) -> Usage:
        return self.store.usage(ref.validated())

    def write(
        self,
        ref: SpaceRef,
        path: str,
        content: str,
        *,
        if_match: str | None = None,
    ) -> WriteResult:
        result = self.store.write(
            ref.validated(), validate_doc_path(path), content, if_match=if_match
        )
        self._audit_global(ref, "memory.global_write", path)
        return result

    def delete(self, ref: SpaceRef, path: str, *, if_match: str | None = None) -> None:
        self.store.delete(ref.validated(), validate_doc_path(path), if_match=if_match)
        self._audit_global(ref, "memory.global_delete", path)

    def export(self, ref: SpaceRef, sink: BinaryIO) -> int:
        return self.store.export(ref.validated(), sink)

    def import_archive(
        self, ref: SpaceRef, source: BinaryIO, strategy: ImportStrategy = ImportStrategy.SKIP
    ) -> ImportReport:
        report = self.store.import_archive(ref.validated(), source, strategy)
        if report.written or report.renamed:
            self._audit_global(ref, "memory.global_import", "")
        return report

    def _audit_global(self, ref: SpaceRef, action: str, path: str) -> None:
        if not ref.is_global:
            return
        grant = current_platform_grant()
        actor = grant.actor if grant else "unknown"
        self._audit(AuditEvent(action=action, actor=actor, space_id=ref.id, path=path))
