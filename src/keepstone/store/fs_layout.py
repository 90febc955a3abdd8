"""How the filesystem store spells its tree on disk: pure naming, no I/O.

Layout under the store's root (the CLI uses ``$KEEPSTONE_HOME/spaces``)::

    <root>/<visibility>/<tenant>/[<project>/][<bot>/][<user>/]<name>/<document path>
    <root>/.keepstone-usage.json    quota counters (tree total + one total per space)
    <root>/.keepstone.lock          the lock every writer takes (fcntl.flock)
    <root>/.keepstone-index.sqlite  the search index, derived from the files (plus SQLite's
                                    ``-wal`` / ``-shm`` companions); see
                                    :mod:`keepstone.store.fs_index`
    <root>/.keepstone-reserve       room kept for deletes on a full disk
                                    (:mod:`keepstone.store.reserve`)

Only the qualifiers the visibility takes appear, in that order, so
``bot/local/myrepo-1a2b3c4d5e6f/whats-next/default/MEMORY.md`` is the document
``MEMORY.md`` of bot ``whats-next``'s space ``default``.

Every on-disk name is an injective encoding of one segment (see :func:`encode_segment`):
ordinary names are kept verbatim; an empty tenant (``global``) is ``_``; a segment that
would be ambiguous or too long for a file name (starts with ``~``, equals ``_``, is
over 200 UTF-8 bytes, or is a *directory* of a document path ending in ``.md``) is
spelled with ``~`` markers and, when long, split over nested directories. So two
different refs never share a directory, a document ``a.md`` and a directory ``a.md/``
can coexist, and any valid path fits the 255-byte file-name limit.
:func:`decode_component` reads one name back. The counters file's format
(:class:`UsageState`) is here too; :mod:`keepstone.store.fs_tree` does every file operation.

The store's own files live only at the root, beside the visibility directories, and
start with ``.``: no walk ever looks for documents there (a walk starts at a visibility
directory), and none ends in ``.md``, so :func:`document_named` would refuse them even
inside a space.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from keepstone.errors import InvalidPath
from keepstone.paths import validate_doc_path
from keepstone.spaces import REQUIRED_QUALIFIERS, SpaceRef, Visibility

STATE_FILE = ".keepstone-usage.json"
LOCK_FILE = ".keepstone.lock"
INDEX_FILE = ".keepstone-index.sqlite"
#: Room kept for deletes on a full disk (:mod:`keepstone.store.reserve`).
RESERVE_FILE = ".keepstone-reserve"
TEMP_PREFIX = ".keepstone-tmp-"
TEMP_SUFFIX = ".tmp"
#: Longest segment (UTF-8 bytes) kept verbatim as one file name; longer ones are split.
MAX_VERBATIM_BYTES = 200
#: The qualifiers of a space, in the order their directories nest.
QUALIFIER_ORDER = ("project", "bot", "user")
_STATE_VERSION = 1

#: On-disk name components, relative to the store root or to a space's directory.
Components = list[str]

# --- Name encoding --------------------------------------------------------------------------
#
# Markers: "~+" continues a long segment in the next component; the last component
# of an escaped segment is "~." (document file), "~d" (directory of a document path)
# or "~q" (a space qualifier or name). "_" alone is the empty tenant.

_FINAL_MARK = {"file": "~.", "dir": "~d", "qual": "~q"}


def _chunks(segment: str) -> list[str]:
    out: list[str] = []
    current, size = "", 0
    for ch in segment:
        n = len(ch.encode("utf-8", "surrogatepass"))
        if current and size + n > MAX_VERBATIM_BYTES:
            out.append(current)
            current, size = "", 0
        current += ch
        size += n
    out.append(current)
    return out


def encode_segment(segment: str, kind: str) -> list[str]:
    """The on-disk components of one segment; ``kind`` is ``file``, ``dir`` or ``qual``."""
    if kind == "qual" and segment == "":
        return ["_"]
    verbatim = (
        not segment.startswith("~")
        and segment != "_"
        and len(segment.encode("utf-8")) <= MAX_VERBATIM_BYTES
        and not (kind == "dir" and segment.endswith(".md"))
    )
    if verbatim:
        return [segment]
    parts = _chunks(segment)
    return ["~+" + p for p in parts[:-1]] + [_FINAL_MARK[kind] + parts[-1]]


def encode_doc_path(path: str) -> list[str]:
    """The on-disk components of a (validated) document path, relative to its space."""
    directory, _, name = path.rpartition("/")
    return encode_dir_prefix(directory) + encode_segment(name, "file")


def encode_dir_prefix(prefix: str) -> list[str]:
    """The on-disk components of a directory prefix ('' is the space's own directory)."""
    segments = prefix.split("/") if prefix else []
    return [comp for seg in segments for comp in encode_segment(seg, "dir")]


def _qualifiers(visibility: Visibility) -> list[str]:
    """The qualifier fields a space of ``visibility`` spells, in directory order."""
    takes = REQUIRED_QUALIFIERS[visibility]
    return [field for field in QUALIFIER_ORDER if field in takes]


def space_components(ref: SpaceRef) -> list[str]:
    """The on-disk components of a space's directory, relative to the store root."""
    out = [ref.visibility.value]
    out.extend(encode_segment(ref.tenant, "qual"))
    for field in _qualifiers(ref.visibility):
        out.extend(encode_segment(getattr(ref, field), "qual"))
    out.extend(encode_segment(ref.name, "qual"))
    return out


def decode_component(name: str, pending: str, kind: str) -> tuple[str | None, str | None]:
    """(a completed segment, or the continued partial segment); (None, None) = not ours."""
    if name.startswith("~+") and len(name) > 2:
        return None, pending + name[2:]
    if name.startswith(_FINAL_MARK[kind]):
        return pending + name[2:], None
    if name.startswith("~") or pending:
        return None, None
    if kind == "qual" and name == "_":
        return "", None
    return name, None


def space_depth(visibility: Visibility) -> int:
    """How many segments (tenant, qualifiers, name) a space of ``visibility`` spells."""
    return 2 + len(_qualifiers(visibility))


def space_named(visibility: Visibility, segments: list[str], comps: Components) -> SpaceRef | None:
    """The space whose directory is ``comps`` (decoded as ``segments``), or None.

    None when the directory is not one the store would have made for that space.
    """
    fields = ["tenant", *_qualifiers(visibility)]
    quals = dict(zip(fields, segments[:-1], strict=True))
    try:
        ref = SpaceRef(visibility=visibility, name=segments[-1], **quals)
    except Exception:  # a directory the store did not make: not a space
        return None
    return ref if space_components(ref) == comps else None


def document_named(segs: list[str], comps: list[str], name: str, pending: str) -> str | None:
    """The document path the file ``name`` spells, or None if it is not one of the store's.

    ``comps`` are the on-disk components of its directory (relative to the space),
    ``segs`` their decoded segments and ``pending`` a long segment continued into it.
    """
    seg, _ = decode_component(name, pending, "file")
    if seg is None:
        return None
    path = "/".join([*segs, seg])
    try:
        validate_doc_path(path)
    except InvalidPath:
        return None  # temp files, non-Markdown files, foreign names
    if encode_doc_path(path) != [*comps, name]:
        return None  # a name the store would spell differently: not one of its documents
    return path


def directory_named(name: str, pending: str) -> tuple[str | None, str | None] | None:
    """``(segment, None)`` or ``(None, continued segment)`` a directory ``name`` spells.

    None when the store would not have made that directory.
    """
    seg, more = decode_component(name, pending, "dir")
    if seg is None and more is None:
        return None
    if seg is not None and encode_segment(seg, "dir")[-1] != name:
        return None  # e.g. a hand-made 'x.md/' directory the store would spell '~dx.md'
    return seg, more


@dataclass(slots=True)
class UsageState:
    """The quota counters: the whole-tree total and one total per space id."""

    tree: int
    spaces: dict[str, int]
    dirty: bool = False

    def to_json(self) -> bytes:
        body: dict[str, object] = {"version": _STATE_VERSION, "dirty": self.dirty}
        body.update(tree=self.tree, spaces=dict(sorted(self.spaces.items())))
        return json.dumps(body, indent=1).encode("utf-8")

    @classmethod
    def parse(cls, raw: bytes) -> UsageState | None:
        try:
            body = json.loads(raw)
            tree = body["tree"]
            spaces = body["spaces"]
            ok = (
                body.get("version") == _STATE_VERSION
                and isinstance(tree, int)
                and tree >= 0
                and isinstance(spaces, dict)
                and all(isinstance(k, str) and isinstance(v, int) for k, v in spaces.items())
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        if not ok:
            return None
        return cls(tree, {str(k): int(v) for k, v in spaces.items()}, bool(body.get("dirty")))
