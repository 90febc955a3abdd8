"""Quota defaults and arithmetic (SPEC §4). Pure: no I/O.

Counters hold bytes. A write is charged its size delta; a shrink or a delete
credits; a counter driven negative clamps to zero. A quota of 0 on a space
sub-cap means "no sub-cap" (global), while the tree aggregate and document cap
overrides of the filesystem store treat 0 literally (refuse every growth).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from keepstone.errors import DocumentTooLarge, InvalidRequest, QuotaExceeded
from keepstone.spaces import Visibility


class HistoryLimits(NamedTuple):
    """How much history a team keeps; None for each means the store's default
    (``history_days`` 30, ``history_versions`` 50 per document, ``history_quota_bytes``
    the team's quota)."""

    history_days: int | None = None
    history_versions: int | None = None
    history_quota_bytes: int | None = None


#: Every history limit at the store's default.
DEFAULT_HISTORY_LIMITS = HistoryLimits()

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

#: DefaultMaxDocumentSize: the cap on one document, in UTF-8 bytes.
DEFAULT_MAX_DOCUMENT_SIZE = 2 * MiB
#: DefaultOrgAggregateQuota: the default ceiling of each team's counter.
DEFAULT_TEAM_AGGREGATE_QUOTA = 1 * GiB
#: Default ceiling of the tenant-less instance counter (global writes).
DEFAULT_INSTANCE_QUOTA = 1 * GiB

#: Default sub-cap per visibility; 0 = no sub-cap, never a refusal.
DEFAULT_SUBCAPS: dict[Visibility, int] = {
    Visibility.PRIVATE: 64 * MiB,
    Visibility.BOT: 256 * MiB,
    Visibility.PROJECT: 256 * MiB,
    Visibility.CROSS_PROJECT: 512 * MiB,
    Visibility.USER: 128 * MiB,
    Visibility.ORG: 1 * GiB,
    Visibility.GLOBAL: 0,
}


def default_quota_for(visibility: Visibility) -> int:
    """DefaultQuotaFor: the sub-cap of a space of this visibility (0 = none)."""
    return DEFAULT_SUBCAPS[visibility]


def clamp(value: int) -> int:
    """A counter never goes below zero."""
    return value if value > 0 else 0


@dataclass(frozen=True, slots=True)
class Counter:
    """One quota counter: what it names, bytes used, and its ceiling.

    ``quota`` of ``None`` means unbounded; a quota of 0 refuses every growth (callers
    turn a space sub-cap of 0 into ``None`` with :func:`subcap_or_none`).
    """

    limit: str
    used: int
    quota: int | None

    def check(self, delta: int) -> None:
        """Raise QuotaExceeded when growing this counter by ``delta`` passes its quota."""
        if delta <= 0 or self.quota is None:
            return
        if self.used + delta > self.quota:
            raise QuotaExceeded(
                f"{self.limit} quota exceeded: {self.used} of {self.quota} bytes used, "
                f"the write needs {delta} more",
                limit=self.limit,
                used_bytes=self.used,
                quota_bytes=self.quota,
                needed_bytes=delta,
            )


def subcap_or_none(quota: int) -> int | None:
    """A space sub-cap of 0 means no cap."""
    return None if quota <= 0 else quota


def check_document_size(size: int, max_doc: int = DEFAULT_MAX_DOCUMENT_SIZE) -> None:
    """Refuse a document over the per-document cap (``max_doc`` 0 refuses non-empty)."""
    if size > max_doc:
        raise DocumentTooLarge(
            f"document is {size} bytes; the limit is {max_doc} bytes",
            limit="document",
            size_bytes=size,
            quota_bytes=max_doc,
        )


#: History defaults: versions per document, days kept.
DEFAULT_HISTORY_VERSIONS = 50
DEFAULT_HISTORY_DAYS = 30


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits a store enforces.

    The SQL stores use these as defaults (a team's counter starts at ``team_quota``;
    the admin API re-caps teams and the instance in the database). The filesystem
    store has one whole-tree aggregate, ``team_quota``, charged for every write.
    """

    max_document: int = DEFAULT_MAX_DOCUMENT_SIZE
    subcaps: tuple[tuple[Visibility, int], ...] = tuple(DEFAULT_SUBCAPS.items())
    team_quota: int = DEFAULT_TEAM_AGGREGATE_QUOTA
    instance_quota: int = DEFAULT_INSTANCE_QUOTA
    #: History: versions kept per document (the live one included), days a
    #: replaced version is kept, and the bytes of replaced versions a team may keep (None:
    #: the team's quota). Per-team values set by the admin API override them.
    history_versions: int = DEFAULT_HISTORY_VERSIONS
    history_days: int = DEFAULT_HISTORY_DAYS
    history_quota: int | None = None

    def subcap(self, visibility: Visibility) -> int:
        """The sub-cap of a space of this visibility (0 = none)."""
        return dict(self.subcaps).get(visibility, DEFAULT_SUBCAPS[visibility])

    def with_subcap(self, visibility: Visibility, quota: int) -> Limits:
        return replace(self, subcaps=tuple({**dict(self.subcaps), visibility: quota}.items()))


#: The largest quota, of documents or of history bytes, anyone may set: well inside the signed
#: 64-bit integer a database keeps it in (and past any disk).
MAX_QUOTA_BYTES = 2**62


def check_quota_bytes(quota_bytes: int) -> int:
    """``quota_bytes`` when it is a quota that can be set (0 to :data:`MAX_QUOTA_BYTES`), else
    ``400 invalid_request`` saying the range."""
    if isinstance(quota_bytes, bool) or not 0 <= quota_bytes <= MAX_QUOTA_BYTES:
        raise InvalidRequest(
            f"a quota must be a whole number of bytes from 0 to {MAX_QUOTA_BYTES} "
            f"(got {quota_bytes})",
            field="memory_quota_bytes",
        )
    return quota_bytes
