"""Helpers shared by the conformance tests (importable from child processes)."""

from __future__ import annotations

from dataclasses import dataclass

from cairn.quota import Limits
from cairn.spaces import SpaceRef, Visibility
from cairn.store.base import MemoryStore, Usage

TEAM = "team-a"
OTHER_TEAM = "team-b"


@dataclass(frozen=True)
class StoreSpec:
    """Where a store lives and with which limits: picklable, so a child process can
    open the very same store (``spec.open()``)."""

    kind: str
    target: str
    limits: Limits
    schema: str | None = None

    def open(self) -> MemoryStore:
        if self.kind == "fs":
            from cairn.store.fs import FilesystemStore

            return FilesystemStore(self.target, self.limits)
        from cairn.store.sql import SqlStore

        return SqlStore.open(self.target, self.limits, schema=self.schema)


def declared_capabilities(kind: str) -> frozenset[str]:
    """What the adapter of ``kind`` declares (its class attribute; never a name test)."""
    if kind == "fs":
        from cairn.store.fs import FilesystemStore

        return FilesystemStore.capabilities
    from cairn.store.sql import SqlStore

    return SqlStore.capabilities


def project_ref(tenant: str = TEAM, name: str = "notes", project: str = "proj-1") -> SpaceRef:
    return SpaceRef.build(Visibility.PROJECT, name, tenant=tenant, project=project)


def ref_for(visibility: Visibility, tenant: str = TEAM, name: str = "notes") -> SpaceRef:
    """A valid ref of any visibility, with every qualifier it takes filled in."""
    return SpaceRef.build(
        visibility, name, tenant=tenant, project="proj-1", bot="bot-1", user="user-1"
    )


Snapshot = tuple[list[tuple[str, int, str]], Usage]


def snapshot(store: MemoryStore, ref: SpaceRef) -> Snapshot:
    """What a space holds (path, size, etag) and its usage, to compare before/after."""
    return ([(d.path, d.size_bytes, d.etag) for d in store.list(ref)], store.usage(ref))


def contents(store: MemoryStore, ref: SpaceRef) -> dict[str, str]:
    return {doc.path: doc.content for doc in store.iter_documents(ref)}
