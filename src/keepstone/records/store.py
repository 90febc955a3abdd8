"""The ``RecordStore`` interface: where team memory records live (SPEC §6, §10).

A store hands out *transactions*: :meth:`RecordStore.reading` and
:meth:`RecordStore.writing` each open one, and every method of the
:class:`RecordReader` / :class:`RecordWriter` it yields runs inside it. The records
service (:mod:`keepstone.service.records`) decides everything — refusal order, plan,
limits, rate — and uses one transaction per use-case, so a search reads the team's
setting and search versions (one query), checks the repository, reads (when its cached
index is older) the rows to rank and fetches the texts of the hits on one connection:
on SQLite in one read transaction, on PostgreSQL statement by statement (at READ
COMMITTED each statement of a transaction reads its own snapshot anyway, so BEGIN and
COMMIT would only add round trips; a warm keyword search is two statements). Ranking
happens in the process (:mod:`keepstone.service.record_search`): the store finds and stores,
never ranks. The store decides nothing; it only keeps the rules of storage:

* **Tenant scoping is structural.** Every method takes the team id; nothing reads or
  removes another team's rows.
* **Visibility is structural.** ``project_ids`` None sees every record of the team;
  a set sees only records whose repository belongs to one of those projects, and never
  a record saved without a repository (an empty set sees nothing). Ranking applies the
  same rule to the rows it ranks, with :meth:`RecordReader.visible_repos`.
* **Expiry is structural.** A record whose ``expires_at`` is not after ``now`` is never
  returned, whether or not it has been purged yet (ranking masks it out by the
  ``expires_at`` of its ranking row).
* **Search versions move with the data.** Every insert, delete and purge bumps the
  team's ``terms_version`` in its own transaction, and tags what it changed with it: an
  insert its records, a delete or purge a :class:`RemovedRecord` for each record removed
  (kept :data:`REMOVALS_KEPT`); every batch of vectors stored bumps the team's
  ``vectors_version`` (teams in key order).
* **Driver failures** surface as :class:`~keepstone.errors.StoreUnavailable`; an error
  raised inside the ``with`` block (a refusal) rolls the transaction back and passes
  through unchanged.
* Times are timezone-aware UTC on the way in and on the way out.

The one adapter, :class:`keepstone.records.sql.SqlRecordStore`, serves SQLite and
PostgreSQL. :func:`new_record` is how a record is made before it is stored (masked,
normalized, expiring after :data:`RETENTION`); every path that stores a record uses it.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from keepstone.db import utc as utc  # re-exported: the records service reads times with it
from keepstone.records.render import normalize_text
from keepstone.secrets import mask

if TYPE_CHECKING:
    from keepstone.db.vectors import Float32Array

#: A record is kept this long after it is saved, then never returned and purged.
RETENTION = timedelta(days=365)
#: How long a removal stays listed (:meth:`RecordReader.removed_records`): a search whose
#: cached rows are older than the removals forgotten since reads them whole.
REMOVALS_KEPT = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Record:
    """One record as stored: ``text`` is masked and normalized, never fenced."""

    id: str
    team_id: str
    repo_id: str | None
    text: str
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class SearchVersions:
    """A team's search counters: ``terms`` moves with every insert, delete and purge of
    its records, ``vectors`` with every batch of its vectors stored and every drop of
    them all (0: never); ``vectors_reset`` is the last ``vectors`` that removed vectors
    too (a removed record's vector left in a cached matrix matches no row: ranking skips
    it)."""

    terms: int
    vectors: int
    vectors_reset: int
    #: The last ``terms`` that removed records not listed by
    #: :meth:`RecordReader.removed_records` (forgotten since, or removed by a replica of a
    #: release that lists none): rows cached before it are read again whole.
    terms_reset: int = 0


@dataclass(frozen=True, slots=True)
class SearchState:
    """What a search reads first, in one query: whether the team has memory on, and its
    search counters."""

    enabled: bool
    versions: SearchVersions


@dataclass(frozen=True, slots=True)
class RankingRow:
    """What ranking needs of a record (never its text): its analysed terms, space-joined,
    what the expiry, repository and visibility masks read, and its text's near-duplicate
    key (:func:`~keepstone.search.floor.duplicate_key`; None: stored without one)."""

    id: str
    repo_id: str | None
    terms: str
    created_at: datetime
    expires_at: datetime
    dup_key: int | None
    #: The team's ``terms_version`` of the save that stored it (0: stored before records
    #: migration 5, or by a replica of a version before it).
    terms_version: int = 0


@dataclass(frozen=True, slots=True)
class RemovedRecord:
    """A record a delete or purge removed: its id, the team's ``terms_version`` of the
    removal, and the one of the save that stored it (0: stored before records migration
    5)."""

    id: str
    version: int
    stored_version: int


@dataclass(frozen=True, slots=True)
class StoredVector:
    """A record's vector blob, and the team's ``vectors_version`` of the batch that
    stored it."""

    id: str
    blob: bytes
    version: int


@dataclass(frozen=True, slots=True)
class PendingRecord:
    """A record the indexer has to embed (no vector, or one of another model)."""

    team_id: str
    id: str
    #: What to embed: the record's (masked) text.
    search_text: str


@dataclass(frozen=True, slots=True)
class Scope:
    """Which of a team's records a read sees: those of ``team_id`` not expired at ``now``,
    of repository ``repo_id`` when given, visible to ``project_ids`` (see the module doc)."""

    team_id: str
    repo_id: str | None
    project_ids: frozenset[str] | None
    now: datetime


@dataclass(frozen=True, slots=True)
class PagePosition:
    """Where a newest-first listing stopped: the last record's time and id."""

    created_at: datetime
    record_id: str


def new_record(team_id: str, text: str, repo_id: str | None, now: datetime) -> Record:
    """The record to store for ``text``: secrets masked (``[REDACTED:<kind>]``), line
    ends normalized as CommonMark reads them, expiring :data:`RETENTION` after ``now``."""
    created = utc(now)
    return Record(
        id="rec_" + uuid.uuid4().hex,
        team_id=team_id,
        repo_id=repo_id,
        text=normalize_text(mask(text)),
        created_at=created,
        expires_at=created + RETENTION,
    )


class RecordReader(ABC):
    """The reads of one transaction (see :meth:`RecordStore.reading`)."""

    @abstractmethod
    def enabled(self, team_id: str) -> bool:
        """Whether the team has memory on (off until turned on)."""

    @abstractmethod
    def repo_project(self, team_id: str, repo_id: str) -> str | None:
        """The project of repository ``repo_id`` of this team, or None when the team
        has no such repository."""

    @abstractmethod
    def search_state(self, team_id: str) -> SearchState:
        """Whether the team has memory on and its search counters, in one query (a
        search's first read: one round trip, not two)."""

    @abstractmethod
    def team_plan(self, team_id: str) -> tuple[str, str] | None:
        """The team's org and that org's plan, or None when there is no such team (a
        save's team check, made in its write transaction)."""

    @abstractmethod
    def search_versions(self, team_id: str) -> SearchVersions:
        """The team's search counters, in one query (both 0 for a team never written)."""

    @abstractmethod
    def ranking_rows(self, team_id: str, upto: int, after: int = 0) -> list[RankingRow]:
        """The team's records stored at a ``terms_version`` after ``after`` and up to
        ``upto`` (every record of the team with ``after`` 0), expired ones included
        (ranking masks them), in the order they were stored (the version, then
        ``created_at``, then ``id``): the same order on both dialects, so equal scores
        break alike, and rows read whole or extended by the newer ones stand in the same
        order. ``upto`` is the version :meth:`search_versions` read, so what is cached
        under it holds nothing newer, which a later extension would read again."""

    @abstractmethod
    def removed_records(self, team_id: str, upto: int, after: int) -> list[RemovedRecord]:
        """The team's records removed at a ``terms_version`` after ``after`` and up to
        ``upto`` and not forgotten since (see :meth:`RecordWriter.forget_removals`): with
        :meth:`ranking_rows` of the same bounds, what turns rows cached at ``after`` into
        the rows at ``upto``."""

    @abstractmethod
    def record_vectors(
        self, team_id: str, model: str, upto: int, after: int = 0
    ) -> list[StoredVector]:
        """The team's records embedded by ``model`` in a batch whose ``vectors_version``
        is after ``after`` and at most ``upto``, in the order they were stored. Bounded
        above, so a matrix cached under version ``upto`` holds exactly the vectors up to
        it, even when a batch commits between the version read and this one."""

    def nearest_records(
        self, scope: Scope, model: str, query: Float32Array, k: int
    ) -> list[tuple[str, float]] | None:
        """The ``k`` records of ``scope`` (unexpired, of its repository, visible to it)
        embedded by ``model`` nearest to ``query``, as (id, cosine), best first, through
        the database's vector index (pgvector's HNSW); None when it has none."""
        return None

    def record_similarity(
        self, scope: Scope, model: str, query: Float32Array, ids: Sequence[str]
    ) -> list[tuple[str, float]] | None:
        """The cosine to ``query`` of the records ``ids`` of ``scope`` that ``model``
        embedded, through the database's vectors (with :meth:`nearest_records`: a search
        scores its keyword candidates on the dense side with it); None when the
        database has no vector index."""
        return None

    def count_pending(self, team_id: str, model: str) -> int:
        """How many unexpired records of the team have no vector of ``model`` (none, or
        another model's): what a search answer reports as ``pending``. 0 for a store
        that does not count."""
        return 0

    def index_min_vectors(self) -> int | None:
        """From how many vectors a team is searched through :meth:`nearest_records`
        rather than exactly in the process (None: never; ``KEEPSTONE_HNSW_MIN_VECTORS``)."""
        return None

    @abstractmethod
    def visible_repos(self, team_id: str, project_ids: frozenset[str]) -> frozenset[str]:
        """The team's repositories that belong to one of ``project_ids``."""

    @abstractmethod
    def records_by_id(self, team_id: str, ids: Sequence[str]) -> dict[str, Record]:
        """The team's records among ``ids``, by id (an id the team has no record of is
        absent)."""

    @abstractmethod
    def page(self, scope: Scope, after: PagePosition | None, limit: int) -> list[Record]:
        """Up to ``limit`` records of ``scope`` newest first (``created_at``, then ``id``,
        both descending), starting after ``after``."""

    @abstractmethod
    def signing_key(self) -> bytes:
        """The instance's key for signing list page tokens: one per database, shared by
        every replica, created with the schema."""


class RecordWriter(RecordReader):
    """The reads and writes of one write transaction (see :meth:`RecordStore.writing`)."""

    @abstractmethod
    def insert(self, records: Sequence[Record]) -> None:
        """Store ``records`` (made by :func:`new_record`) with their analysed terms
        (keyword-searchable at once; no vector yet) and bump their teams'
        ``terms_version``."""

    @abstractmethod
    def delete(self, team_id: str, record_id: str, now: datetime) -> bool:
        """Remove one record of the team (bumping its ``terms_version``, and listing the
        record removed under it); False when the team has no such record, or it had
        expired by ``now`` (gone to every reader)."""

    @abstractmethod
    def set_enabled(self, team_id: str, enabled: bool, now: datetime) -> None:
        """Turn the team's memory on or off (its records are kept either way)."""

    @abstractmethod
    def purge_expired(self, now: datetime, limit: int) -> int:
        """Remove at most ``limit`` expired records of any team, bumping each such team's
        ``terms_version`` and listing the records removed under it; return how many."""

    @abstractmethod
    def forget_removals(self, before: datetime) -> int:
        """Forget the removals listed before ``before``, whole versions at a time,
        moving each team's ``terms_reset`` past them (teams in key order); return how
        many records' listings went."""


class RecordStore(ABC):
    """Team memory records in one database: a transaction at a time."""

    @abstractmethod
    def reading(self) -> AbstractContextManager[RecordReader]:
        """``with store.reading() as tx:`` — the reads of one use-case, on one connection
        (one read transaction, or statement by statement where a transaction would add
        nothing: PostgreSQL at READ COMMITTED)."""

    @abstractmethod
    def writing(self) -> AbstractContextManager[RecordWriter]:
        """``with store.writing() as tx:`` — one transaction that writes, committed when
        the block ends without an error, and durable once the block has ended (it
        survives a crash of the process or of the machine). Concurrent writers queue
        rather than fail."""

    @abstractmethod
    def loaded(self, rows: int) -> None:
        """A bulk load of ``rows`` records has committed: where the database plans from
        gathered statistics, bring them up to date."""
