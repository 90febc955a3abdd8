"""Documents: what a space holds, and what reading, writing and importing one reports.

Plain values shared by every layer: the stores return them, the services pass them on,
the faces render them. No I/O here.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

from keepstone.errors import InvalidDocument, InvalidEdit, InvalidRequest
from keepstone.wire import Jsonable


@dataclass(frozen=True, slots=True)
class DocumentInfo(Jsonable):
    """What a listing says of one document. ``updated_at`` is timezone-aware UTC."""

    path: str
    size_bytes: int
    updated_at: datetime
    etag: str


@dataclass(frozen=True, slots=True)
class Document:
    """One document with its content."""

    path: str
    content: str
    size_bytes: int
    updated_at: datetime
    etag: str

    @property
    def info(self) -> DocumentInfo:
        return DocumentInfo(self.path, self.size_bytes, self.updated_at, self.etag)


@dataclass(frozen=True, slots=True)
class WriteResult(Jsonable):
    path: str
    size_bytes: int
    etag: str
    created: bool


@dataclass(frozen=True, slots=True)
class Replace:
    """Replace the one exact occurrence of ``old`` with ``new`` (an ambiguous or absent
    ``old`` is refused: an edit never guesses which occurrence was meant)."""

    old: str
    new: str


@dataclass(frozen=True, slots=True)
class Insert:
    """Insert ``text`` as whole lines after line ``line`` (0 = at the top; the document's
    line count = at the end)."""

    line: int
    text: str


#: The highest version number a document can have: past the version column's range (a
#: 32-bit integer), so a larger one names no version on any store or face.
MAX_VERSION = 2**31 - 1

#: One change to a document's text, applied by :func:`apply_edit`.
Edit = Replace | Insert

#: The lines an ambiguous match names, at most.
_MAX_LINES_NAMED = 10


def edit_of(old: object, new: object, insert_line: object, text: object) -> Edit:
    """The edit these four arguments describe (``old`` and ``new``, or ``insert_line`` and
    ``text``, the others None), or an error saying which of its two forms to use: the
    arguments of ``Memory.edit`` and the body of ``POST /api/memory/doc/edit``."""
    if insert_line is None and text is None:
        if isinstance(old, str) and isinstance(new, str):
            return Replace(old, new)
    elif old is None and new is None:
        if isinstance(insert_line, int) and not isinstance(insert_line, bool):
            if isinstance(text, str):
                return Insert(insert_line, text)
    raise InvalidRequest(
        "edit takes old and new (text: replace the one exact occurrence of old) or "
        "insert_line and text (a line number and text: insert after that line), not a mix"
    )


def apply_edit(content: str, edit: Edit, path: str) -> str:
    """``content`` with ``edit`` applied, or :class:`~keepstone.errors.InvalidEdit` saying why
    it cannot apply and how to make it apply (``path`` names the document)."""
    if isinstance(edit, Replace):
        return _replace(content, edit, path)
    return _insert(content, edit, path)


def _replace(content: str, edit: Replace, path: str) -> str:
    if not edit.old:
        raise InvalidEdit(
            "the text to replace is empty; give the exact text to replace, or insert at a line",
            path=path,
            reason="empty",
        )
    count = content.count(edit.old)
    if count == 0:
        raise InvalidEdit(
            f"the text to replace does not occur in {path}; read the document again and copy "
            "the text exactly, spaces and line breaks included",
            path=path,
            reason="no_match",
        )
    if count > 1:
        lines: list[int] = []
        start = 0
        while len(lines) < _MAX_LINES_NAMED and (at := content.find(edit.old, start)) >= 0:
            lines.append(content.count("\n", 0, at) + 1)
            start = at + 1
        named = ", ".join(map(str, lines)) + (", ..." if count > len(lines) else "")
        raise InvalidEdit(
            f"the text to replace occurs {count} times in {path} (at lines {named}); include "
            "more of the surrounding text so that it occurs exactly once",
            path=path,
            reason="ambiguous",
            occurrences=count,
            lines=lines,
        )
    return content.replace(edit.old, edit.new, 1)


def _insert(content: str, edit: Insert, path: str) -> str:
    parts = content.split("\n") if content else []
    if content.endswith("\n"):
        parts.pop()  # the empty string after the last line break is not a line
    total = len(parts)
    if isinstance(edit.line, bool) or not 0 <= edit.line <= total:
        raise InvalidEdit(
            f"line {edit.line} is outside {path}, which has {total} line(s): insert at 0 for the "
            f"top, {total} for the end, or a line in between",
            path=path,
            reason="line_out_of_range",
            lines=total,
        )
    head = "".join(f"{p}\n" for p in parts[: edit.line])
    rest = parts[edit.line :]
    ends_with_break = content.endswith("\n")
    tail = "".join(f"{p}\n" for p in rest) if ends_with_break else "\n".join(rest)
    # The inserted lines end with a line break where any line follows them, and where the
    # document ended with one (it keeps doing so).
    follows = bool(rest) or ends_with_break
    text = edit.text + "\n" if follows and not edit.text.endswith("\n") else edit.text
    return head + text + tail


@dataclass(frozen=True, slots=True)
class VersionInfo(Jsonable):
    """One version of a document in its space's history.

    ``version`` counts from 1 per path and is never reused. ``at`` is when the version
    became current (for a deletion, when the document was deleted). ``actor`` names who
    made the change (``user:<id>``, ``user:<id> key:<id>``, ``admin-token``, ``local-cli``,
    ``hand-edit``, ...). A ``deleted`` version is a deletion marker: the path held no
    document from ``at`` until the next version; its ``etag`` is '' and ``size_bytes`` 0.
    """

    version: int
    etag: str
    size_bytes: int
    at: datetime
    actor: str
    deleted: bool = False

    #: The API's shape: ``{"version", "etag", "size", "at", "actor", "deleted"}``.
    wire_names: ClassVar[Mapping[str, str | None]] = {"size_bytes": "size"}


#: Who the mutations of this context are made by, for the history (``VersionInfo.actor``).
_ACTOR: contextvars.ContextVar[str] = contextvars.ContextVar("keepstone_actor", default="")


@contextlib.contextmanager
def acting_as(actor: str) -> Iterator[None]:
    """Attribute the document changes made inside the block to ``actor`` in the history.

    Ambient on purpose, unlike authority (a :class:`PlatformGrant` is an argument): the
    actor decides nothing, it is only recorded, and every write path (write, delete, move,
    each document of an import) records it without threading it through each signature.
    The service sets it around each mutation from the caller's identity.
    """
    token = _ACTOR.set(actor)
    try:
        yield
    finally:
        _ACTOR.reset(token)


def current_actor() -> str:
    """The actor :func:`acting_as` set ('unknown' outside any)."""
    return _ACTOR.get() or "unknown"


def version_as_of(versions: list[VersionInfo], at: datetime) -> VersionInfo | None:
    """The version current at ``at`` among ``versions`` (newest first), None when the
    document did not exist then (no version yet, or a deletion)."""
    for v in versions:
        if v.at <= at:
            return None if v.deleted else v
    return None


def unified_diff(path: str, old: str, new: str, old_label: str, new_label: str) -> str:
    """A unified diff of two versions' texts, labelled ``a/<path> (<old_label>)`` and
    ``b/<path> (<new_label>)``; '' when they are equal."""
    import difflib

    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{path} ({old_label})",
        tofile=f"b/{path} ({new_label})",
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Usage(Jsonable):
    """Bytes used against quotas for one space.

    ``quota_bytes`` is the space's sub-cap (0 = none). ``team_*`` is the team
    aggregate for a team space; for a ``global`` space it is the instance aggregate;
    for the filesystem store it is the whole-tree aggregate.

    ``history_*`` counts apart from the live bytes, team-wide like ``team_*``:
    the stored bytes of the versions that are no longer current, and the cap they are held
    to (0 and 0 for a store that keeps no history).

    ``index_bytes`` is what the space's search index holds for it: each chunk's heading,
    context, text, analysed terms and vector, as last indexed (0 before a first search or
    reindex). It counts against no quota: a write is never refused for the index's size
    (docs/operations.md, "Stored bytes").
    """

    space_id: str
    used_bytes: int
    quota_bytes: int
    team_used_bytes: int
    team_quota_bytes: int
    history_used_bytes: int = 0
    history_quota_bytes: int = 0
    index_bytes: int = 0


@dataclass(frozen=True, slots=True)
class StoredBytes(Jsonable):
    """What a whole store holds, every team and global space together: the documents'
    bytes (the sum of every space's ``used_bytes``) and the search index's (the sum of
    every space's ``index_bytes``): the operator's figures (``keepstone doctor``)."""

    document_bytes: int
    index_bytes: int


class ImportStrategy(StrEnum):
    SKIP = "skip"
    OVERWRITE = "overwrite"
    RENAME = "rename"


def parse_import_strategy(strategy: ImportStrategy | str) -> ImportStrategy:
    """The strategy named by ``strategy``, or InvalidRequest naming the allowed values."""
    try:
        return ImportStrategy(strategy)
    except ValueError:
        allowed = ", ".join(s.value for s in ImportStrategy)
        raise InvalidRequest(
            f"unknown import strategy {strategy!r}; use one of: {allowed}", field="strategy"
        ) from None


@dataclass(frozen=True, slots=True)
class Rejected:
    path: str
    reason: str


@dataclass(slots=True)
class ImportReport:
    written: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)
    rejected: list[Rejected] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def encode_document(content: object) -> bytes:
    """The UTF-8 bytes of a document body, or InvalidDocument naming what is wrong.

    Every adapter stores exactly these bytes, so they agree on what a document is: text,
    no NUL (PostgreSQL cannot store one), no lone surrogate.
    """
    if not isinstance(content, str):
        raise InvalidDocument(
            f"content must be text (a str), not {type(content).__name__}; send UTF-8 Markdown"
        )
    if "\x00" in content:
        raise InvalidDocument("content may not contain NUL characters; remove them and retry")
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidDocument(
            f"content is not valid Unicode at character {exc.start} (a lone surrogate); "
            "send UTF-8 Markdown"
        ) from None


def content_etag(data: bytes) -> str:
    """The etag of a document body: a content hash (quoted form is the HTTP layer's job)."""
    return hashlib.sha256(data).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class PlatformGrant:
    """Platform authority proven for one mutation of a ``global`` space.

    Passed as an argument (never ambient state) from the service, which proved it, to
    the store, which refuses a global mutation without one. ``actor`` names the caller
    in the audit log (``admin-token``, ``user:<id>``, ``local``); ``attribution_team``
    is the caller's active team, debited for the bytes of the write (attribution, not
    enforcement), or None.
    """

    actor: str
    attribution_team: str | None = None
    #: True while an archive import writes under this grant (audited as an import).
    importing: bool = False
