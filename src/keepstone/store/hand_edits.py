"""A store whose documents are plain files a person may edit by hand: what ``keepstone
doctor`` asks of it, by capability rather than by the store's class.

Writes through the store keep its usage counters and its history; an edit of the tree
with an editor keeps neither. A store that can be edited so (the filesystem store)
implements :class:`HandEditedStore`, and the doctor brings both back in line with the
files. A store whose documents only its own writes change (SQL, a server's client)
does not.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class HandEditedStore(Protocol):
    """A store of plain files that may be edited by hand."""

    def recount(self) -> int:
        """Recompute every usage counter from the documents on disk; return the
        whole tree's total in bytes."""
        ...

    def reconcile_history(self) -> int:
        """Record every hand edit (changed, new and removed files) as a version of its
        document's history; return how many were recorded."""
        ...


__all__ = ["HandEditedStore"]
