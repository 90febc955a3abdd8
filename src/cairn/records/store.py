"""The ``RecordStore`` interface: where team memory records live (SPEC §6, §10).

A store hands out *transactions*: :meth:`RecordStore.reading` and
:meth:`RecordStore.writing` each open one, and every method of the
:class:`RecordReader` / :class:`RecordWriter` it yields runs inside it. The records
service (:mod:`cairn.service.records`) decides everything — refusal order, plan,
limits, rate — and uses one transaction per use-case, so a search reads the team's
setting, checks the repository and runs the ranked query on one connection, in one
round of BEGIN/COMMIT. The store decides nothing; it only keeps the rules of storage:

* **Tenant scoping is structural.** Every method takes the team id; nothing reads or
  removes another team's rows.
* **Visibility is structural.** ``project_ids`` None sees every record of the team;
  a set sees only records whose repository belongs to one of those projects, and never
  a record saved without a repository (an empty set sees nothing).
* **Expiry is structural.** A record whose ``expires_at`` is not after ``now`` is never
  returned, whether or not it has been purged yet.
* **Driver failures** surface as :class:`~cairn.errors.StoreUnavailable`; an error
  raised inside the ``with`` block (a refusal) rolls the transaction back and passes
  through unchanged.
* Times are timezone-aware UTC on the way in and on the way out.

The one adapter, :class:`cairn.records.sql.SqlRecordStore`, serves SQLite and
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

from cairn.db import utc as utc  # re-exported: the records service reads times with it
from cairn.records.render import normalize_text
from cairn.secrets import mask

#: A record is kept this long after it is saved, then never returned and purged.
RETENTION = timedelta(days=365)


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
class ScoredRecord:
    """A search hit: the record and its rank (higher is better, comparable within one
    search only)."""

    record: Record
    score: float


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
    def search(self, scope: Scope, query: str, limit: int) -> list[ScoredRecord]:
        """The best ``limit`` records of ``scope`` for ``query``, best first.

        Ranked full-text search (BM25-style): the words of ``query`` are OR-ed, so a
        record matching some of them is found and records matching more (and rarer)
        ones rank first. A query with no searchable word finds nothing.
        """

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
        """Store ``records`` (made by :func:`new_record`) and index them for search."""

    @abstractmethod
    def delete(self, team_id: str, record_id: str) -> bool:
        """Remove one record of the team; False when the team has no such record."""

    @abstractmethod
    def set_enabled(self, team_id: str, enabled: bool, now: datetime) -> None:
        """Turn the team's memory on or off (its records are kept either way)."""

    @abstractmethod
    def purge_expired(self, now: datetime, limit: int) -> int:
        """Remove at most ``limit`` expired records of any team; return how many."""


class RecordStore(ABC):
    """Team memory records in one database: a transaction at a time."""

    @abstractmethod
    def reading(self) -> AbstractContextManager[RecordReader]:
        """``with store.reading() as tx:`` — one read-only transaction."""

    @abstractmethod
    def writing(self) -> AbstractContextManager[RecordWriter]:
        """``with store.writing() as tx:`` — one transaction that writes, committed when
        the block ends without an error. Concurrent writers queue rather than fail."""
