"""A space's chunk rows as a document search holds them between searches: the rows, their
BM25 index and the position of each chunk (docs/search.md, "How it ranks").

A search reads a space's rows again only when the space's ``search_version`` moved past the
rows it holds, and then as little as it can:

* From an index that says which chunks changed (:class:`~keepstone.store.index.ChunkStamps`:
  the SQL store and the filesystem store's sidecar), it reads each document's digest of its
  chunks' stamps, compares them with the digests of the rows it holds, and reads the chunks
  of the documents that differ only. A write then costs the next search its own document's
  chunks, not the space's; past :data:`MAX_CHANGED_DOCUMENTS` the space is read whole.
  The cached matrix of vectors is then patched as well (:func:`patched_entry`).
* From any other index, it reads the space's rows whole and keeps the BM25 index of the
  chunks whose terms are unchanged.

Either way the BM25 index is patched (the chunks gone or rewritten taken out, the new ones
added) while at least half of it stands, and scores as one built from the rows.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from keepstone.db.vectors import decode_many
from keepstone.search import hybrid
from keepstone.search.bm25 import BM25Index
from keepstone.search.cache import Entry
from keepstone.spaces import SpaceRef
from keepstone.store.base import ChunkRow
from keepstone.store.index import ChunkStamps, SearchIndex, stamp_digest

#: Past this many documents changed since the rows held, the space is read whole: one
#: statement over the space beats a long list of paths.
MAX_CHANGED_DOCUMENTS = 256

BoolArray = npt.NDArray[np.bool_]
IndexArray = npt.NDArray[np.int64]
Digest = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class SpaceRows:
    """A space's chunks at one version, their BM25 index, and the row of each cached
    vector (through the chunk's (path, seq))."""

    rows: list[ChunkRow]
    index: BM25Index
    row_map: hybrid.RowMap
    #: Each chunk's row number by its (path, seq), and how many vectors each model has.
    position: Positions
    vectors: dict[str | None, int]
    #: Each document's digest of its rows' stamps: what an index's digests are compared
    #: with (:func:`keepstone.store.index.stamp_digest`).
    digests: dict[str, Digest]
    #: Rows patched from earlier ones: those rows' map, the row each of them is now (-1:
    #: gone or rewritten), and where the rows new since then start.
    base: hybrid.RowMap | None = None
    moved: IndexArray | None = None
    added_from: int = 0


def space_rows(index: SearchIndex, ref: SpaceRef, was: SpaceRows | None) -> SpaceRows:
    """The rows of the space ``ref`` as they are now (read after its version), made from
    ``was`` (the rows held of an earlier version, if any) where that saves work."""
    if was is not None and isinstance(index, ChunkStamps):
        now, held = index.chunk_digests(ref), was.digests
        changed = {path for path, digest in now.items() if held.get(path) != digest}
        changed.update(path for path in held if path not in now)
        if not changed:
            return was  # the version moved, the rows did not (a write of the same text)
        if len(changed) <= MAX_CHANGED_DOCUMENTS:
            fresh = index.chunk_rows_of(ref, sorted(changed))
            keep = np.fromiter((r.path not in changed for r in was.rows), bool, len(was.rows))
            digests = {p: d for p, d in was.digests.items() if p not in changed}
            digests.update(_digests(fresh))
            patched = _patched(was, keep, fresh, digests=digests)
            if patched is None:
                return _built(_kept(was, keep) + fresh)
            # Kept rows keep their order, first: the vectors cached for ``was`` still serve.
            moved = np.where(keep, np.cumsum(keep, dtype=np.int64) - 1, -1)
            return dataclasses.replace(
                patched, base=was.row_map, moved=moved, added_from=len(patched.rows) - len(fresh)
            )
    return _read_whole(index.chunk_rows(ref), was)


def _read_whole(rows: list[ChunkRow], was: SpaceRows | None) -> SpaceRows:
    """The rows of a whole read, keeping ``was``'s BM25 index for the chunks whose terms
    are unchanged when most of them are: its rows are then the kept chunks in their old
    order, the new ones after them (ties are ordered by path and position when ranked,
    not by this order)."""
    if was is None:
        return _built(rows)
    # The fresh row of each old chunk still there with the same terms, by old position.
    same: list[ChunkRow | None] = [None] * len(was.rows)
    added: list[ChunkRow] = []
    position = was.position.as_dict()
    for row in rows:
        at = position.get((row.path, row.seq))
        if at is not None and was.rows[at].terms == row.terms:
            same[at] = row
        else:
            added.append(row)
    kept = [row for row in same if row is not None]
    if not added and len(kept) == len(was.rows):
        # Only vectors changed (the indexer stored a batch): the BM25 index stands.
        return SpaceRows(kept, was.index, was.row_map, was.position, _models(kept), _digests(kept))
    keep = np.fromiter((row is not None for row in same), dtype=bool, count=len(same))
    return _patched(was, keep, added, kept) or _built(kept + added)


def _patched(
    was: SpaceRows,
    keep: BoolArray,
    added: list[ChunkRow],
    kept: list[ChunkRow] | None = None,
    *,
    digests: dict[str, Digest] | None = None,
) -> SpaceRows | None:
    """``was`` less its rows not in ``keep``, plus ``added``, over its BM25 index patched
    the same way; None when less than half of it would stand (a fresh build is cheaper).
    ``digests``: the rows' (else computed from them)."""
    standing = int(keep.sum())
    if 2 * standing < standing + len(added):
        return None
    rows = (kept if kept is not None else _kept(was, keep)) + added
    index = was.index.without(keep).extended([row.terms.split() for row in added])
    return _indexed(rows, index, digests)


def _kept(was: SpaceRows, keep: BoolArray) -> list[ChunkRow]:
    return [row for row, k in zip(was.rows, keep.tolist(), strict=True) if k]


def _built(rows: list[ChunkRow]) -> SpaceRows:
    return _indexed(rows, BM25Index([row.terms.split() for row in rows]))


def _indexed(
    rows: list[ChunkRow], index: BM25Index, digests: dict[str, Digest] | None = None
) -> SpaceRows:
    """The held rows ``rows`` over ``index``, whose documents are ``rows`` in order."""
    position = Positions(rows)
    if digests is None:
        digests = _digests(rows)
    return SpaceRows(rows, index, hybrid.RowMap(position, split), position, _models(rows), digests)


class Positions(Mapping[Hashable, int]):
    """Each row's number by its chunk's (path, seq), made on first use: a search of a
    space under pgvector's index, or a cached matrix made from other rows, asks it; a
    search after a write whose matrix was patched from these rows' never does."""

    __slots__ = ("_made", "_rows")

    def __init__(self, rows: Sequence[ChunkRow]) -> None:
        self._rows = rows
        self._made: dict[Hashable, int] | None = None

    def as_dict(self) -> dict[Hashable, int]:
        made = self._made
        if made is None:  # two threads may both make it: the same dict, one kept
            made = self._made = {(row.path, row.seq): i for i, row in enumerate(self._rows)}
        return made

    def get(self, key: Hashable, default: Any = None) -> Any:
        return self.as_dict().get(key, default)

    def __getitem__(self, key: Hashable) -> int:
        return self.as_dict()[key]

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self._rows)


def _models(rows: Sequence[ChunkRow]) -> dict[str | None, int]:
    return dict(Counter(row.model for row in rows if row.embedding is not None))


def _digests(rows: Sequence[ChunkRow]) -> dict[str, Digest]:
    stamps: dict[str, list[int]] = {}
    for row in rows:
        stamps.setdefault(row.path, []).append(row.stamp)
    return {path: stamp_digest(of_path) for path, of_path in stamps.items()}


def vector_entry(rows: SpaceRows, model: str, dim: int) -> Entry:
    """The matrix of the vectors of ``model`` that ``rows`` hold, made from them (their
    map knows the row of each vector)."""
    at = _embedded(rows.rows, model)
    entry = _entry_of(rows.rows, at, dim)
    rows.row_map.made(entry, np.array(at, dtype=np.int64))
    return entry


def patched_entry(rows: SpaceRows, stale: Entry, model: str, dim: int) -> Entry | None:
    """``stale`` brought up to ``rows`` without decoding it again, when it was made from
    the rows these were patched from: the vectors of chunks gone or rewritten stay in its
    matrix, matching no row (their ids a chunk can never have), and the new rows' vectors
    are appended. None (load it whole) when it was made from other rows, or when half its
    vectors would match nothing."""
    if rows.base is None or rows.moved is None:
        return None
    was = rows.base.made_from(stale)
    if was is None:
        return None
    now = np.where(was >= 0, rows.moved[np.maximum(was, 0)], -1)
    new = _embedded(rows.rows, model, rows.added_from)
    gone = now < 0
    if 2 * int(gone.sum()) > len(now) + len(new):
        return None
    ids = stale.ids.copy()
    ids[gone] = GONE
    entry = stale.extended(_entry_of(rows.rows, new, dim), ids=ids)
    rows.row_map.made(entry, np.concatenate([now, np.array(new, dtype=np.int64)]))
    return entry


def _embedded(rows: Sequence[ChunkRow], model: str, start: int = 0) -> list[int]:
    """The positions, from ``start``, of the rows holding a vector of ``model``."""
    return [
        i
        for i in range(start, len(rows))
        if rows[i].embedding is not None and rows[i].model == model
    ]


def _entry_of(rows: Sequence[ChunkRow], at: Sequence[int], dim: int) -> Entry:
    ids = np.array([join(rows[i].path, rows[i].seq) for i in at], dtype=object)
    return Entry(ids, decode_many([rows[i].embedding or b"" for i in at], dim))


#: The id of a cached vector whose chunk is gone: no chunk's (path, seq) is ("", -1).
GONE = "\x00-1"


def join(path: str, seq: int) -> str:
    """A chunk's id in a cached vector entry."""
    return f"{path}\x00{seq}"


def split(key: object) -> tuple[str, int]:
    """The (path, seq) of a chunk id made by :func:`join`."""
    path, _, seq = str(key).rpartition("\x00")
    return path, int(seq)
