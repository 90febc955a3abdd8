"""Markdown documents as search chunks, and the snippet shown for a hit.

A document is split at its ATX headings (``#`` to ``######``; a ``#`` line inside a
fenced code block is code, not a heading). Each section runs from its heading line to
the next heading at any level and carries its *heading trail*, the headings from the
top of the document down to it, rendered ``" > "``-joined (``"Runbook > Rollback"``),
as the labelled document set names its answers. Text before the first heading, and a
document with no headings at all, has the trail ``""``.

A section longer than :data:`MAX_CHARS` is split again into windows that overlap by
about :data:`OVERLAP_CHARS`, cut at a paragraph, line, sentence or word boundary when
one is near. The bound is in characters so that this module needs no tokenizer. The
default encoder (all-MiniLM-L6-v2) reads at most 256 word pieces and was trained on
128; on the labelled documents Markdown runs at 3.6 characters per word piece on
average but at 2.0–2.5 in the densest (code-heavy) 5 % of sections, so 600 characters
is at most ~250 pieces even there: the longest of the set's 600-character chunks is
215 pieces and the encoder truncates none. Longer windows of 1,000 and 1,500 characters
(five of them past 256 pieces) scored lower in dense recall@10 and MRR on the document
set (docs/search.md, "How it ranks"). Every chunk records its character offsets in the
document, and its ``text`` is exactly ``document[start:end]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from keepstone.search.text import analyze

#: A section longer than this (characters) is split into overlapping windows.
MAX_CHARS = 600
#: Consecutive windows of one section share about this many characters.
OVERLAP_CHARS = 100
#: The trail separator of the labelled sets and of search results.
TRAIL_SEPARATOR = " > "

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
# Break candidates inside a long section, strongest first.
_BREAKS = (re.compile(r"\n[ \t]*\n"), re.compile(r"\n"), re.compile(r"[.!?;:][ \t]+"))
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Chunk:
    """One searchable piece of a document: ``text == document[start:end]``.

    ``context`` is the trail of the headings above the chunk that its text does not
    show: the parents of its section for a section's first window (which begins with
    its own heading line), the whole trail for a later window.
    """

    trail: tuple[str, ...]
    text: str
    start: int
    end: int
    context: tuple[str, ...] = ()

    @property
    def heading(self) -> str:
        """The heading trail as results and the labelled sets render it."""
        return TRAIL_SEPARATOR.join(self.trail)

    @property
    def search_text(self) -> str:
        """What both indexes are given: the context trail on a line, then the text.

        A section read without the headings above it loses what it is about ("##
        Rollback" of which runbook?); with them, dense recall@10 and MRR on the labelled
        documents rose, the keyword side unchanged (docs/search.md, "How it ranks").
        """
        if not self.context:
            return self.text
        return TRAIL_SEPARATOR.join(self.context) + "\n" + self.text


@dataclass(frozen=True, slots=True)
class _Section:
    trail: tuple[str, ...]
    start: int
    end: int


def _lines(document: str) -> Iterable[tuple[int, str]]:
    """Each line of ``document`` (without its line ending) with its start offset."""
    pos = 0
    for line in document.split("\n"):
        yield pos, line.removesuffix("\r")
        pos += len(line) + 1


def _sections(document: str) -> list[_Section]:
    """The document cut at every ATX heading outside fenced code, in order."""
    sections: list[_Section] = []
    stack: list[tuple[int, str]] = []  # (level, heading) from the top
    start = 0
    trail: tuple[str, ...] = ()
    fence: tuple[str, int] | None = None  # the open fence's character and length
    for offset, line in _lines(document):
        fenced = _FENCE.match(line)
        if fence is not None:
            # A fence closes with the same character, at least as long, nothing after it.
            if fenced and fenced.group(1)[0] == fence[0] and len(fenced.group(1)) >= fence[1]:
                if not fenced.group(2).strip():
                    fence = None
            continue
        if fenced:
            # A backtick fence's info string may not contain a backtick (CommonMark).
            if not (fenced.group(1)[0] == "`" and "`" in fenced.group(2)):
                fence = (fenced.group(1)[0], len(fenced.group(1)))
                continue
        heading = _ATX.match(line)
        if heading is None:
            continue
        if offset > start:
            sections.append(_Section(trail, start, offset))
        level = len(heading.group(1))
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, (heading.group(2) or "").strip()))
        trail = tuple(text for _, text in stack)
        start = offset
    if len(document) > start or not sections:
        sections.append(_Section(trail, start, len(document)))
    return sections


def _trimmed(document: str, start: int, end: int) -> tuple[int, int]:
    """``[start, end)`` without leading and trailing whitespace."""
    while start < end and document[start].isspace():
        start += 1
    while end > start and document[end - 1].isspace():
        end -= 1
    return start, end


def _break_before(document: str, lo: int, hi: int) -> int | None:
    """The strongest boundary in ``(lo, hi]``, latest of its kind, or None."""
    for pattern in _BREAKS:
        best = None
        for match in pattern.finditer(document, lo, hi):
            if match.end() <= hi:
                best = match.end()
        if best is not None and best > lo:
            return best
    space = None
    for match in _SPACE.finditer(document, lo, hi):
        space = match.end()
    return space if space is not None and space > lo else None


def _overlap_start(document: str, cut: int, overlap: int, floor: int) -> int:
    """Where the window after ``cut`` starts: at a line or sentence start in the first
    two thirds of the last ``overlap`` characters before ``cut``, else at the first
    word there; never at or before ``floor``."""
    lo = max(cut - overlap, floor + 1)
    hi = max(cut - overlap // 3, lo + 1)
    for pattern in (*_BREAKS[1:], _SPACE):
        match = pattern.search(document, lo, hi)
        if match is not None and match.end() < cut:
            return match.end()
    return lo


def _windows(document: str, start: int, end: int, max_chars: int, overlap: int) -> list[int]:
    """Window starts and ends ``[s0, e0, s1, e1, …]`` covering ``[start, end)``."""
    spans: list[int] = []
    pos = start
    while end - pos > max_chars:
        limit = pos + max_chars
        cut = _break_before(document, pos + max_chars // 2, limit) or limit
        spans += [pos, cut]
        # The next window starts at a boundary inside the last `overlap` characters.
        pos = _overlap_start(document, cut, overlap, pos)
    spans += [pos, end]
    return spans


def chunk_markdown(
    document: str, *, max_chars: int = MAX_CHARS, overlap: int = OVERLAP_CHARS
) -> list[Chunk]:
    """The chunks of a Markdown document, in document order.

    Sections are cut at ATX headings; each chunk's ``trail`` is its headings from the
    top, and a section's first chunk begins with its heading line. A section longer
    than ``max_chars`` becomes windows of at most ``max_chars`` characters, each
    sharing up to ``overlap`` characters with the one before. Leading and trailing
    whitespace is left out of every chunk; a blank section yields none, and a blank
    document no chunks at all.
    """
    if max_chars < 2 or not 0 <= overlap < max_chars // 2:
        raise ValueError("need max_chars >= 2 and 0 <= overlap < max_chars // 2")
    chunks: list[Chunk] = []
    for section in _sections(document):
        start, end = _trimmed(document, section.start, section.end)
        if start == end:
            continue
        spans = _windows(document, start, end, max_chars, overlap)
        for i in range(0, len(spans), 2):
            s, e = _trimmed(document, spans[i], spans[i + 1])
            if s < e:
                # A section with a trail starts at its heading line: its first window
                # shows the last heading itself.
                shown = 1 if i == 0 and section.trail else 0
                context = section.trail[: len(section.trail) - shown]
                chunks.append(Chunk(section.trail, document[s:e], s, e, context))
    return chunks


#: A snippet is at most about this many characters.
SNIPPET_CHARS = 240
# Line markers (heading, list, quote), code ticks, and emphasis at a word's edge (an
# identifier's inner underscore, as in fct_orders, stays).
_MARKUP = re.compile(
    r"^ {0,3}(?:#{1,6}[ \t]+|[-*+][ \t]+|\d+[.)][ \t]+|>[ \t]?)|`+"
    r"|(?<!\w)[*_]{1,3}(?=\w)|(?<=\w)[*_]{1,3}(?!\w)",
    re.M,
)
_TOKEN_SPAN = re.compile(r"[^\W_]+")


def _plain(text: str) -> str:
    """``text`` without Markdown markers, its whitespace collapsed."""
    return _SPACE.sub(" ", _MARKUP.sub("", text)).strip()


def snippet(text: str, query_terms: Sequence[str], *, width: int = SNIPPET_CHARS) -> str:
    """The best short window of ``text`` for a hit, as one line of plain text.

    ``query_terms`` are the query's analysed terms (:func:`keepstone.search.text.analyze`);
    each word of ``text`` is analysed the same way, and the window of about ``width``
    characters holding the most distinct query terms (the earliest such window on a
    tie) is returned, widened to word boundaries, with ``…`` where text was cut.
    """
    plain = _plain(text)
    if len(plain) <= width:
        return plain
    wanted = set(query_terms)
    spans: list[tuple[int, int, str]] = []
    for match in _TOKEN_SPAN.finditer(plain):
        found = [term for term in analyze(match.group()) if term in wanted]
        if found:
            spans.append((match.start(), match.end(), found[0]))
    best_start, best_score = 0, 0
    j = 0
    for i, (start, _, _) in enumerate(spans):
        j = max(j, i)
        while j + 1 < len(spans) and spans[j + 1][1] - start <= width:
            j += 1
        score = len({term for _, _, term in spans[i : j + 1]})
        if score > best_score:
            best_start, best_score = start, score
    if best_score:
        # Lead into the first matched word with a little context, from a word start.
        best_start = max(0, best_start - width // 6)
    best_start = min(best_start, len(plain) - width)
    if best_start > 0:
        space = plain.find(" ", best_start)
        best_start = space + 1 if 0 <= space < best_start + width // 4 else best_start
    stop = best_start + width
    if stop < len(plain):
        space = plain.rfind(" ", best_start, stop)
        stop = space if space > best_start + width // 2 else stop
    prefix = "…" if best_start > 0 else ""
    suffix = "…" if stop < len(plain) else ""
    return prefix + plain[best_start:stop].strip() + suffix
