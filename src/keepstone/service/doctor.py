"""The probes of ``keepstone doctor`` that reach into a component: a database's migrations, the
local store's usage counters, what a store holds in all, a Redis. Each answers plainly or raises a
:class:`~keepstone.errors.KeepstoneError` saying what is wrong; ``keepstone.cli.doctor`` turns the
answers into ok / warn / FAIL lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.engine import Engine

from keepstone.config import DEFAULT_REDIS_TIMEOUT_SECONDS
from keepstone.db import applied_versions
from keepstone.errors import InvalidRequest
from keepstone.records.ratelimit import ping, redis_client
from keepstone.schema import all_migrations
from keepstone.spaces import SpaceRef
from keepstone.store.base import MemoryStore, StoredBytes
from keepstone.store.hand_edits import HandEditedStore
from keepstone.store.index import StoredTotals


@dataclass(frozen=True, slots=True)
class MigrationState:
    """What a database holds against what this Keepstone knows: ``pending`` migrations not
    yet applied, ``unknown`` applied ones this Keepstone has never heard of (a newer Keepstone
    migrated it). Each is ``component:version``."""

    pending: tuple[str, ...]
    unknown: tuple[str, ...]


def migration_state(engine: Engine) -> MigrationState:
    """Read the database's migration record (it also proves the database answers)."""
    applied = applied_versions(engine)
    known = {(m.component, m.version) for m in all_migrations()}
    pending = [
        f"{m.component}:{m.version}"
        for m in all_migrations()
        if (m.component, m.version) not in applied
    ]
    unknown = sorted(f"{c}:{v}" for c, v in applied - known)
    return MigrationState(tuple(pending), tuple(unknown))


@dataclass(frozen=True, slots=True)
class Recount:
    """The local store's whole-tree total before and after recounting it from its files,
    and how many spaces' own totals changed."""

    before: int
    after: int
    spaces_changed: int

    @property
    def changed(self) -> bool:
        return self.before != self.after or self.spaces_changed > 0


#: Any space will do to read the tree's total: the filesystem store's aggregate is the tree's.
_PROBE = SpaceRef.build("global", "doctor")


def recount_local_store(store: MemoryStore, tenant: str) -> Recount:
    """Recount the filesystem store's usage counters from the files on disk (after hand
    edits, which bypass them); ``tenant`` is whose spaces are compared one by one. A store
    that is never edited by hand (:class:`~keepstone.store.hand_edits.HandEditedStore`) is
    refused."""
    if not isinstance(store, HandEditedStore):
        raise InvalidRequest("only the local filesystem store keeps counters to recount")
    spaces = store.list_spaces(tenant)
    before = {ref.id: store.usage(ref, index=False).used_bytes for ref in spaces}
    tree_before = store.usage(_PROBE, index=False).team_used_bytes
    tree_after = store.recount()
    after = {ref.id: store.usage(ref, index=False).used_bytes for ref in store.list_spaces(tenant)}
    changed = sum(
        1 for key in before.keys() | after.keys() if before.get(key, 0) != after.get(key, 0)
    )
    return Recount(tree_before, tree_after, changed)


def record_hand_edits(store: MemoryStore) -> int:
    """Record every hand edit of the filesystem store's tree (changed, added and removed
    files) as a version of its document's history; returns how many were recorded. A
    store that is never edited by hand is refused."""
    if not isinstance(store, HandEditedStore):
        raise InvalidRequest("only the local filesystem store is edited by hand")
    return store.reconcile_history()


def ping_redis(url: str, timeout: float = DEFAULT_REDIS_TIMEOUT_SECONDS) -> None:
    """One PING to the Redis at ``url``; :class:`StoreUnavailable` when it does not answer
    within ``timeout`` seconds."""
    try:
        client = redis_client(url, timeout)
    except ValueError as exc:  # not a redis:// URL
        raise InvalidRequest(f"KEEPSTONE_REDIS_URL is not a Redis URL: {exc}") from exc
    try:
        ping(client)
    finally:
        client.close()


def stored_totals(store: object) -> StoredBytes | None:
    """The document and search-index bytes of every space of ``store``, when it can sum
    them (:class:`~keepstone.store.index.StoredTotals`); None when it cannot."""
    return store.stored_totals() if isinstance(store, StoredTotals) else None
