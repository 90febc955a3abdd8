"""The filesystem store's search index: a sidecar SQLite file beside the tree.

``<root>/.keepstone-index.sqlite`` (:data:`~keepstone.store.fs_layout.INDEX_FILE`) holds, per
document, its space (the ref's fields, so a space's rows can be selected), its path,
the ``size`` and ``mtime_ns`` it had when indexed, its content etag, and its chunks
(:func:`keepstone.search.chunking.chunk_markdown`: sequence number, heading trail, the
context trail the chunk's text does not show, text, analysed terms, a vector blob NULL
until embedded, the model that made it, the bytes the row holds for search,
:func:`~keepstone.store.index.chunk_bytes`, summed per space from an index of their
own, and a stamp drawn anew whenever the row is written, whose sums per document tell a
search which documents changed: :class:`~keepstone.store.index.ChunkStamps`), plus one
version counter per space that moves whenever the space's searchable rows change.

The index is *derived data*. The files are the truth; the index follows them, and only
through a reconcile:

* The store's writes and deletes never touch the index (a write pays nothing for
  search). :meth:`FsIndex.reconcile`, which the store runs before every search, is what
  indexes them, so a document is keyword-searchable as soon as its write commits.
* :meth:`FsIndex.reconcile` compares a space's files (the store's own safe walk) with
  the index by ``(size, mtime_ns)``, re-chunks changed and new files, drops the rows of
  vanished ones and bumps the space's version when anything changed: writes through the
  store and hand edits of the plain tree alike are found before a search. A row written
  within :data:`RACY_NS` of its file's mtime is re-read once (an edit in the same clock
  tick keeps size and mtime); a file only touched keeps its chunks and vectors. Each
  batch is written with a compare-and-set on the row it replaces, so two reconciles
  racing (threads or processes) never overwrite each other's newer row.
* The sidecar is created by the first reconcile (a search, ``keepstone memory reindex``):
  a tree that is never searched never grows one. A deleted sidecar is noticed (its
  inode changed or vanished) and a corrupt one is deleted and rebuilt by the next
  reconcile.

Several processes may share the file (WAL, ``busy_timeout``); each thread holds its own
connection. Version counters never go back, even across a rebuilt sidecar: a bump
sets ``max(version + 1, now in microseconds)``, so a cache stamped with an old version
is never served for new rows.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from keepstone.documents import content_etag
from keepstone.search.chunking import TRAIL_SEPARATOR, chunk_markdown
from keepstone.search.text import analyze
from keepstone.spaces import SpaceRef
from keepstone.store.base import ChunkRow
from keepstone.store.fs_layout import INDEX_FILE
from keepstone.store.index import DIGEST_PRIMES, chunk_bytes, new_stamp
from keepstone.store.sidecar import SqliteSidecar, write_transaction

log = logging.getLogger("keepstone.store")

#: Bumped when the schema or what a chunk row holds changes: an older sidecar is rebuilt,
#: but for one of the layout before (:data:`STAMPED_FROM`), which gains its stamps in place.
SCHEMA_VERSION = "3"
#: The layout whose chunks lack only their stamps (a column added, 0 on every row).
STAMPED_FROM = "2"
#: Files re-chunked per reconcile transaction.
_BATCH = 64

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spaces (
    space_id TEXT PRIMARY KEY,
    visibility TEXT NOT NULL, tenant TEXT NOT NULL, project TEXT NOT NULL,
    bot TEXT NOT NULL, user TEXT NOT NULL, name TEXT NOT NULL,
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    space_id TEXT NOT NULL, path TEXT NOT NULL,
    size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, etag TEXT NOT NULL,
    indexed_ns INTEGER NOT NULL,
    PRIMARY KEY (space_id, path)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS chunks (
    space_id TEXT NOT NULL, path TEXT NOT NULL, seq INTEGER NOT NULL,
    heading TEXT NOT NULL, context TEXT NOT NULL, text TEXT NOT NULL, terms TEXT NOT NULL,
    embedding BLOB, model TEXT, stored_bytes INTEGER NOT NULL, stamp INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (space_id, path, seq)
);
CREATE INDEX IF NOT EXISTS chunks_space_bytes ON chunks (space_id, stored_bytes);
CREATE INDEX IF NOT EXISTS chunks_space_stamps ON chunks (space_id, path, stamp);
CREATE INDEX IF NOT EXISTS chunks_space_model ON chunks (space_id, model);
"""

#: A file whose mtime is this close to when its row was written may have been edited
#: again within the same timestamp tick (the "racy" case of git's index): the next
#: reconcile reads it once more and compares etags. Above any filesystem's clock tick.
RACY_NS = 100_000_000

#: (size, mtime_ns, etag, indexed_ns) of an indexed document.
Indexed = tuple[int, int, str, int]
#: (seq, heading, context, text, terms, stored_bytes) of one chunk to insert.
_NewChunk = tuple[int, str, str, str, str, int]
#: What a reconcile reads of one file: (content, size, mtime_ns), or None when gone.
ReadFile = Callable[[str], tuple[bytes, int, int] | None]


@dataclass(frozen=True, slots=True)
class PendingChunk:
    """A chunk whose vector is missing or made by another model.

    ``context`` is the heading trail its text does not show (" > "-joined, '' for none);
    ``etag`` is the document's content etag when the chunk was read, so a vector
    computed for content that changed meanwhile is not stored.
    """

    space_id: str
    path: str
    seq: int
    etag: str
    context: str
    text: str

    @property
    def search_text(self) -> str:
        """What to embed: ``keepstone.search.chunking.Chunk.search_text`` of the chunk."""
        return f"{self.context}\n{self.text}" if self.context else self.text


def chunk_document(content: str) -> list[_NewChunk]:
    """The chunk rows of one document's content."""
    rows: list[_NewChunk] = []
    for seq, chunk in enumerate(chunk_markdown(content)):
        context = TRAIL_SEPARATOR.join(chunk.context)
        terms = " ".join(analyze(chunk.search_text))
        size = chunk_bytes(chunk.heading, context, chunk.text, terms)
        rows.append((seq, chunk.heading, context, chunk.text, terms, size))
    return rows


def _start_over_on_new_layout(conn: sqlite3.Connection) -> None:
    """Drop the index's rows when they were written in another layout (the spaces'
    versions are kept, so they never go back)."""
    conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
    got = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    if got is not None and got[0] == STAMPED_FROM:  # vectors kept: nothing to embed again
        conn.execute("ALTER TABLE chunks ADD COLUMN stamp INTEGER NOT NULL DEFAULT 0")
    elif got is None or got[0] != SCHEMA_VERSION:
        conn.execute("DROP TABLE IF EXISTS chunks")
        conn.execute("DROP TABLE IF EXISTS documents")
    if got is None or got[0] != SCHEMA_VERSION:
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema', ?)",
            (SCHEMA_VERSION,),
        )


class FsIndex(SqliteSidecar):
    """The sidecar index of one filesystem store (see the module doc)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root / INDEX_FILE, "search index")

    # --- Connections ------------------------------------------------------------------------

    def _unreadable(self) -> str:
        self._delete_files()  # derived data: the next reconcile indexes the files again
        return "rebuilding it"

    def _connect(self) -> sqlite3.Connection:
        return self._connect_with(_SCHEMA, _start_over_on_new_layout)

    # --- Reconcile ---------------------------------------------------------------------------

    def reconcile(
        self,
        ref: SpaceRef,
        files: Iterable[tuple[str, int, int]],
        read: ReadFile,
        *,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Bring ``ref``'s rows in line with ``files`` and return how many documents changed.

        ``files`` are the space's (path, size, mtime_ns) from the store's walk; ``read``
        reads one of them. A corrupt sidecar is deleted and rebuilt."""
        try:
            return self._reconcile(ref, files, read, progress)
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as exc:
            log.warning("search index %s is corrupt (%s); rebuilding it", self.path, exc)
            self._reset()
            return self._reconcile(ref, files, read, progress)

    def _reconcile(
        self,
        ref: SpaceRef,
        files: Iterable[tuple[str, int, int]],
        read: ReadFile,
        progress: Callable[[int], None] | None,
    ) -> int:
        conn = self._conn(create=True)
        assert conn is not None
        indexed = _indexed(conn, ref.id)
        changed = 0
        seen: set[str] = set()
        batch: list[tuple[str, Indexed | None, bytes, int, int]] = []
        for path, size, mtime in files:
            seen.add(path)
            if progress is not None:
                progress(1)
            old = indexed.get(path)
            if old is not None and old[:2] == (size, mtime) and old[3] - mtime >= RACY_NS:
                continue
            got = read(path)
            if got is None:  # removed meanwhile: the next reconcile drops its rows
                continue
            batch.append((path, old, *got))
            if len(batch) >= _BATCH:
                changed += self._apply(conn, ref, batch, [])
                batch = []
        gone = [(path, row) for path, row in indexed.items() if path not in seen]
        changed += self._apply(conn, ref, batch, gone)
        return changed

    def _apply(
        self,
        conn: sqlite3.Connection,
        ref: SpaceRef,
        batch: Sequence[tuple[str, Indexed | None, bytes, int, int]],
        gone: Sequence[tuple[str, Indexed]],
    ) -> int:
        if not batch and not gone:
            return 0
        # Chunk outside the transaction: other connections wait only for the inserts.
        prepared: list[tuple[str, Indexed | None, int, int, str, str | None]] = []
        for path, old, data, size, mtime in batch:
            try:
                content: str | None = data.decode("utf-8")
            except UnicodeDecodeError:
                content = None  # not a readable document: indexed with no chunks
            prepared.append((path, old, size, mtime, content_etag(data), content))
        changed = 0
        with write_transaction(conn):
            for path, old, size, mtime, etag, content in prepared:
                if _current(conn, ref.id, path) != old:
                    continue  # another reconcile got there first; its row is newer
                changed += self._put(conn, ref, path, size, mtime, etag, content or "")
            dropped = 0
            for path, old_row in gone:
                if _current(conn, ref.id, path) == old_row:
                    dropped += self._drop(conn, ref.id, path)
            if dropped:
                _bump(conn, ref)
        return changed + dropped

    def forget_spaces_except(self, keep: set[str]) -> int:
        """Drop the rows of every space not in ``keep`` (spaces gone from the tree)."""
        conn = self._conn(create=True)
        assert conn is not None
        dropped = 0
        with write_transaction(conn):
            for (space_id,) in conn.execute("SELECT DISTINCT space_id FROM documents").fetchall():
                if space_id in keep:
                    continue
                dropped += conn.execute(
                    "DELETE FROM documents WHERE space_id = ?", (space_id,)
                ).rowcount
                conn.execute("DELETE FROM chunks WHERE space_id = ?", (space_id,))
                _bump_id(conn, space_id)
        return dropped

    def rebuild(self) -> None:
        """Delete the sidecar; the next reconcile builds it from the files."""
        self._reset()

    # --- Row changes (inside a transaction) ----------------------------------------------------

    def _put(
        self,
        conn: sqlite3.Connection,
        ref: SpaceRef,
        path: str,
        size: int,
        mtime: int,
        etag: str,
        content: str,
    ) -> int:
        """Store a document's row and chunks; 1 when its searchable rows changed."""
        row = conn.execute(
            "SELECT etag FROM documents WHERE space_id = ? AND path = ?", (ref.id, path)
        ).fetchone()
        conn.execute(
            "INSERT OR REPLACE INTO documents (space_id, path, size, mtime_ns, etag, indexed_ns) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (ref.id, path, size, mtime, etag, time.time_ns()),
        )
        if row is not None and row[0] == etag:
            return 0  # same content (touched or rewritten): chunks and vectors stand
        conn.execute("DELETE FROM chunks WHERE space_id = ? AND path = ?", (ref.id, path))
        conn.executemany(
            "INSERT INTO chunks (space_id, path, seq, heading, context, text, terms, "
            "stored_bytes, stamp) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(ref.id, path, *chunk, new_stamp()) for chunk in chunk_document(content)],
        )
        _bump(conn, ref)
        return 1

    @staticmethod
    def _drop(conn: sqlite3.Connection, space_id: str, path: str) -> int:
        gone = conn.execute(
            "DELETE FROM documents WHERE space_id = ? AND path = ?", (space_id, path)
        ).rowcount
        conn.execute("DELETE FROM chunks WHERE space_id = ? AND path = ?", (space_id, path))
        return 1 if gone else 0

    # --- Reads --------------------------------------------------------------------------------

    def chunk_rows(self, ref: SpaceRef, paths: Sequence[str] | None = None) -> list[ChunkRow]:
        """Every chunk of the space (of the documents ``paths`` only, when given), by path
        then sequence (as last reconciled)."""
        conn = self._conn(create=False)
        if conn is None or paths is not None and not paths:
            return []
        which, args = "", [ref.id]
        if paths is not None:
            which, args = f" AND path IN ({', '.join('?' * len(paths))})", [ref.id, *paths]
        return [
            ChunkRow(path, seq, heading, text, terms, None if v is None else bytes(v), model, stamp)
            for path, seq, heading, text, terms, v, model, stamp in conn.execute(
                "SELECT path, seq, heading, text, terms, embedding, model, stamp FROM chunks "
                f"WHERE space_id = ?{which} ORDER BY path, seq",
                args,
            )
        ]

    def chunk_digests(self, ref: SpaceRef) -> dict[str, tuple[int, int, int]]:
        """Each document of the space that has chunks, with the digest of its chunks'
        stamps (:func:`keepstone.store.index.stamp_digest`), from ``chunks_space_stamps``."""
        conn = self._conn(create=False)
        if conn is None:
            return {}
        p, q = DIGEST_PRIMES
        rows = conn.execute(
            "SELECT path, count(*), sum(stamp % ?), sum(stamp % ?) FROM chunks "
            "WHERE space_id = ? GROUP BY path",
            (p, q, ref.id),
        )
        return {path: (int(n), int(first), int(second)) for path, n, first, second in rows}

    def search_version(self, ref: SpaceRef) -> int:
        """The space's version: it moves whenever the space's chunks or vectors change."""
        conn = self._conn(create=False)
        if conn is None:
            return 0
        row = conn.execute("SELECT version FROM spaces WHERE space_id = ?", (ref.id,)).fetchone()
        return int(row[0]) if row else 0

    def index_bytes(self, space_id: str | None = None) -> int:
        """The bytes the chunks of the space ``space_id`` hold (None: of every space),
        summed from ``chunks_space_bytes`` alone; 0 before the sidecar is made."""
        conn = self._conn(create=False)
        if conn is None:
            return 0
        if space_id is None:
            got = conn.execute("SELECT coalesce(sum(stored_bytes), 0) FROM chunks")
        else:
            query = "SELECT coalesce(sum(stored_bytes), 0) FROM chunks WHERE space_id = ?"
            got = conn.execute(query, (space_id,))
        return int(got.fetchone()[0])

    # --- Embedding ----------------------------------------------------------------------------

    def count_backlog(self, model: str) -> int:
        """How many chunks of every space have no vector of ``model``."""
        conn = self._conn(create=False)
        if conn is None:
            return 0
        # A chunk has a vector exactly when it has a model (both are set, and cleared, together).
        query = "SELECT count(*) FROM chunks WHERE model IS NOT ?"
        return int(conn.execute(query, (model,)).fetchone()[0])

    def count_pending(self, space_ids: Sequence[str], model: str) -> int:
        """How many chunks of the spaces ``space_ids`` have no vector of ``model``, counted
        in ``chunks_space_model`` alone (a chunk has a vector exactly when it has a model):
        every search of a space asks, and the vectors beside are not read."""
        conn = self._conn(create=False)
        if conn is None:
            return 0
        query = "SELECT count(*) FROM chunks WHERE space_id = ? AND model IS NOT ?"
        return sum(int(conn.execute(query, (sid, model)).fetchone()[0]) for sid in space_ids)

    def pending(self, limit: int, model: str) -> list[PendingChunk]:
        """Up to ``limit`` chunks with no vector, or a vector of another model."""
        conn = self._conn(create=False)
        if conn is None:
            return []
        rows = conn.execute(
            "SELECT c.space_id, c.path, c.seq, d.etag, c.context, c.text FROM chunks c "
            "JOIN documents d ON d.space_id = c.space_id AND d.path = c.path "
            "WHERE c.embedding IS NULL OR c.model IS NOT ? "
            "ORDER BY c.space_id, c.path, c.seq LIMIT ?",
            (model, limit),
        ).fetchall()
        return [PendingChunk(*row) for row in rows]

    def store_embeddings(
        self, rows: Sequence[PendingChunk], blobs: Sequence[bytes], model: str
    ) -> int:
        """Store ``blobs[i]``, made by ``model``, as the vector of ``rows[i]``, in one
        transaction.

        A chunk whose document changed since :meth:`pending` read it (another etag) is
        skipped. The versions of the spaces that gained vectors move. Returns the count
        stored."""
        if len(rows) != len(blobs):
            raise ValueError(f"{len(rows)} chunks but {len(blobs)} vectors")
        conn = self._conn(create=False)
        if conn is None or not rows:
            return 0
        stored = 0
        spaces: set[str] = set()
        with write_transaction(conn):
            for chunk, blob in zip(rows, blobs, strict=True):
                n = conn.execute(
                    "UPDATE chunks SET embedding = ?, model = ?, stamp = ?, "
                    "stored_bytes = stored_bytes - coalesce(length(embedding), 0) + ? "
                    "WHERE space_id = ? AND path = ? AND seq = ? AND EXISTS ("
                    " SELECT 1 FROM documents d WHERE d.space_id = chunks.space_id"
                    " AND d.path = chunks.path AND d.etag = ?)",
                    (
                        *(blob, model, new_stamp(), len(blob)),
                        *(chunk.space_id, chunk.path, chunk.seq, chunk.etag),
                    ),
                ).rowcount
                if n:
                    stored += n
                    spaces.add(chunk.space_id)
            for space_id in spaces:
                _bump_id(conn, space_id)
        return stored


# --- Helpers --------------------------------------------------------------------------------


def _current(conn: sqlite3.Connection, space_id: str, path: str) -> Indexed | None:
    row = conn.execute(
        "SELECT size, mtime_ns, etag, indexed_ns FROM documents WHERE space_id = ? AND path = ?",
        (space_id, path),
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]), str(row[2]), int(row[3]))


def _indexed(conn: sqlite3.Connection, space_id: str) -> dict[str, Indexed]:
    return {
        path: (int(size), int(mtime), str(etag), int(at))
        for path, size, mtime, etag, at in conn.execute(
            "SELECT path, size, mtime_ns, etag, indexed_ns FROM documents WHERE space_id = ?",
            (space_id,),
        )
    }


def _now_us() -> int:
    return time.time_ns() // 1000


def _bump_id(conn: sqlite3.Connection, space_id: str) -> None:
    """Move the version of the space ``space_id``, which has a row, forward."""
    conn.execute(
        "UPDATE spaces SET version = MAX(version + 1, ?) WHERE space_id = ?",
        (_now_us(), space_id),
    )


def _bump(conn: sqlite3.Connection, ref: SpaceRef) -> None:
    """Move the space's version forward (creating its row with the ref's fields)."""
    conn.execute(
        "INSERT INTO spaces (space_id, visibility, tenant, project, bot, user, name, version) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (space_id) DO UPDATE SET version = MAX(version + 1, excluded.version)",
        (
            ref.id,
            ref.visibility.value,
            ref.tenant,
            ref.project,
            ref.bot,
            ref.user,
            ref.name,
            _now_us(),
        ),
    )
