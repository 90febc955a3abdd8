"""What a search answers: its hits, best first, and how much of what it searched was not
yet embedded (docs/search.md, "Freshness")."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


class Found(list[T]):
    """The hits of a search, best first (a list, so callers that iterate hits keep
    working), and ``pending``: how many chunks or records of the searched scope wait for
    a vector of the embedder's model, so were searched by keyword only (0 with
    keyword-only search); ``hint``: when there are no hits, the one line that says why and
    what to try (None when something was found)."""

    pending: int
    hint: str | None

    def __init__(self, hits: Iterable[T] = (), pending: int = 0, hint: str | None = None) -> None:
        super().__init__(hits)
        self.pending = pending
        self.hint = None if self else hint

    def __repr__(self) -> str:
        return f"Found({list.__repr__(self)}, pending={self.pending}, hint={self.hint!r})"


def pending_of(found: object) -> int:
    """The ``pending`` of ``found`` when it is a :class:`Found`, else 0."""
    return found.pending if isinstance(found, Found) else 0


__all__ = ["Found", "pending_of"]
