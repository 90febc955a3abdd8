"""Document paths: one document, one spelling (SPEC §3).

:func:`validate_doc_path` is the single validator every boundary and every store
runs. A path that is valid but not canonical is refused with an error that names
the canonical form, so a caller (or a model) can correct itself.
"""

from __future__ import annotations

import re
import unicodedata

from keepstone.errors import InvalidPath
from keepstone.text import CONTROL

MAX_PATH_BYTES = 512
MAX_PATH_SEGMENTS = 16
DOC_SUFFIX = ".md"

#: Lone surrogates (e.g. a JSON "\udce9" escape) are not Unicode text and cannot be stored.
_SURROGATE = re.compile("[\ud800-\udfff]")
_DRIVE = re.compile(r"^[A-Za-z]:")


def _chars(*spans: tuple[int, int]) -> frozenset[str]:
    return frozenset(chr(cp) for lo, hi in spans for cp in range(lo, hi + 1))


#: Characters that make a name or path display as something it is not (SPEC §11), by
#: family; each family says why, in the error that names the character.
_DECEPTIVE_FAMILIES: tuple[tuple[frozenset[str], str], ...] = (
    (
        # Embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069), the marks
        # (LRM, RLM, ALM): "evil\u202egpj.md" displays as "evildm.jpg".
        _chars((0x202A, 0x202E), (0x2066, 0x2069), (0x200E, 0x200F), (0x061C, 0x061C)),
        "a bidirectional control, which makes the text display in another order than it is",
    ),
    (
        # Zero-width space/joiners, word joiner, invisible operators, Mongolian vowel
        # separator, BOM (zero-width no-break space), soft hyphen, interlinear annotation.
        _chars(
            (0x200B, 0x200D),
            (0x2060, 0x2064),
            (0x180E, 0x180E),
            (0xFEFF, 0xFEFF),
            (0x00AD, 0x00AD),
            (0xFFF9, 0xFFFB),
        ),
        "an invisible character, which makes two different names look the same",
    ),
    (
        _chars((0x2028, 0x2029)),
        "a line or paragraph separator, which breaks the name across lines",
    ),
    (
        # Division slash, fraction slash, set minus, big (reverse) solidus, reverse
        # solidus operator, fullwidth and small (reverse) solidus, box-drawing and
        # mathematical diagonals.
        _chars(
            (0x2044, 0x2044),
            (0x2215, 0x2216),
            (0x29F5, 0x29F5),
            (0x29F8, 0x29F9),
            (0xFF0F, 0xFF0F),
            (0xFF3C, 0xFF3C),
            (0xFE68, 0xFE68),
            (0x2571, 0x2572),
            (0x27CB, 0x27CB),
            (0x27CD, 0x27CD),
        ),
        "a look-alike of '/' or '\\', which makes one segment look like several",
    ),
)
#: Every character :func:`deceptive_character` finds.
DECEPTIVE_CHARACTERS: frozenset[str] = frozenset().union(*(f for f, _ in _DECEPTIVE_FAMILIES))
_DECEPTIVE = re.compile("[" + "".join(sorted(DECEPTIVE_CHARACTERS)) + "]")


def deceptive_character(text: str) -> tuple[str, str] | None:
    """The first character of ``text`` that makes it display as something it is not, as
    ``("U+202E RIGHT-TO-LEFT OVERRIDE", why)``; None when there is none."""
    m = _DECEPTIVE.search(text)
    if m is None:
        return None
    ch = m.group()
    why = next(reason for family, reason in _DECEPTIVE_FAMILIES if ch in family)
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X}" + (f" {name}" if name else ""), why


#: What text from outside (a path, an archive member's name) must not be shown as is:
#: control characters, and those that make it display as something it is not.
_UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f" + "".join(sorted(DECEPTIVE_CHARACTERS)) + "]")


def shown(text: str) -> str:
    """``text`` with each character that would not show as itself escaped (``\\u202e``),
    so a refusal, a report or a page reads it as what it is (a right-to-left override
    would reverse the rest of its line)."""
    return _UNSHOWABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _refuse_deceptive(what: str, text: str) -> None:
    found = deceptive_character(text)
    if found is not None:
        label, why = found
        raise InvalidPath(
            f"{what} contains {label}, {why}; remove it (type the name again by hand)",
            code_point=label.split(" ", 1)[0],
        )


def canonical_form(path: str) -> str | None:
    """The canonical spelling of ``path``, or None when no repair makes sense.

    Repairs only what has exactly one reading: ``./`` prefixes, empty segments,
    ``.`` segments, a trailing ``/`` and a non-NFC form.
    """
    norm = unicodedata.normalize("NFC", path)
    parts = [p for p in norm.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def validate_doc_path(path: object) -> str:
    """Return ``path`` when it is a valid canonical document path, else raise InvalidPath."""
    if not isinstance(path, str):
        raise InvalidPath("path must be a string")
    if path == "":
        raise InvalidPath("path is empty; give a relative path ending in .md, e.g. 'MEMORY.md'")
    if CONTROL.search(path):
        raise InvalidPath("path may not contain NUL or control characters")
    if _SURROGATE.search(path):
        raise InvalidPath("path is not valid Unicode (it contains a lone surrogate); send UTF-8")
    _refuse_deceptive("path", path)
    if "\\" in path:
        raise InvalidPath(f"path {path!r} may not contain '\\'; separate segments with '/'")
    if path.startswith("/") or _DRIVE.match(path):
        raise InvalidPath(f"path {path!r} is absolute; give a path relative to the space")
    segments = path.split("/")
    if ".." in segments:
        raise InvalidPath(f"path {path!r} may not contain a '..' segment")
    canonical = canonical_form(path)
    if canonical is None:
        raise InvalidPath(f"path {path!r} names no document; give e.g. 'MEMORY.md'")
    if canonical != path:
        # Name the canonical form only when it is itself a valid path; otherwise the
        # caller needs the reason the canonical form fails (too long, not .md, ...).
        try:
            validate_doc_path(canonical)
        except InvalidPath as exc:
            raise InvalidPath(f"path {path!r} is not canonical and {exc.message}") from None
        raise InvalidPath(f"path {path!r} is not canonical; use {canonical!r}", canonical=canonical)
    if not path.endswith(DOC_SUFFIX) or segments[-1] == DOC_SUFFIX:
        raise InvalidPath(f"path {path!r} must name a Markdown document ending in '.md'")
    size = len(path.encode("utf-8"))
    if size > MAX_PATH_BYTES:
        raise InvalidPath(f"path is {size} bytes long; the limit is {MAX_PATH_BYTES}")
    if len(segments) > MAX_PATH_SEGMENTS:
        raise InvalidPath(
            f"path is {len(segments)} segments deep; the limit is {MAX_PATH_SEGMENTS}"
        )
    return path


def check_path_prefix(prefix: object) -> str:
    """A search's ``path_prefix`` (the start of the paths it keeps, any text a path may
    begin with): ``422 invalid_path`` for one no path could begin with — not text, or
    holding a control character, a backslash, a lone surrogate or a deceptive character."""
    if not isinstance(prefix, str):
        raise InvalidPath("path_prefix must be a string", field="path_prefix")
    _refuse_unprintable("path_prefix", prefix, field="path_prefix")
    return prefix


def _refuse_unprintable(what: str, text: str, **details: str) -> None:
    """Refuse ``text`` that no path holds: a backslash, NUL or another control character,
    a lone surrogate, or a character that makes it display as something it is not."""
    if CONTROL.search(text) or "\\" in text or _SURROGATE.search(text):
        raise InvalidPath(
            f"{what} may not contain '\\', NUL, control characters or lone surrogates",
            **details,
        )
    _refuse_deceptive(what, text)


def validate_dir_prefix(prefix: object) -> str:
    """Validate a directory prefix for listing: ``''`` (the whole space) or ``a/b``.

    A trailing ``/`` is refused like any other non-canonical spelling.
    """
    if prefix is None or prefix == "":
        return ""
    if not isinstance(prefix, str):
        raise InvalidPath("dir must be a string")
    _refuse_unprintable("dir", prefix)
    if prefix.startswith("/") or _DRIVE.match(prefix):
        raise InvalidPath(f"dir {prefix!r} is absolute; give a directory relative to the space")
    if ".." in prefix.split("/"):
        raise InvalidPath(f"dir {prefix!r} may not contain a '..' segment")
    canonical = canonical_form(prefix)
    if canonical is None:
        return ""
    if canonical != prefix:
        try:  # refuse for the canonical form's own reason when it is invalid too
            validate_dir_prefix(canonical)
        except InvalidPath as exc:
            raise InvalidPath(f"dir {prefix!r} is not canonical and {exc.message}") from None
        raise InvalidPath(
            f"dir {prefix!r} is not canonical; use {canonical!r}", canonical=canonical
        )
    if len(prefix.encode("utf-8")) > MAX_PATH_BYTES:
        raise InvalidPath(f"dir is longer than {MAX_PATH_BYTES} bytes")
    return prefix


def in_dir(path: str, prefix: str) -> bool:
    """Whether document ``path`` lies under directory ``prefix`` ('' is the whole space)."""
    return prefix == "" or path.startswith(prefix + "/")
