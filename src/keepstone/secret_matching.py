"""Running one credential detector over a text where its triggers are, and confirming what
it matches: the middle stage of :mod:`keepstone.secrets`' engine.

The engine first finds where every detector's literal prefixes and keywords occur (one
search for them all); this module then runs each triggered
:class:`~keepstone.secret_shapes.Detector` only there — :func:`at_prefixes` for a detector
whose every match starts with a prefix, :func:`anchored` for one anchored on keywords —
with the same matches as its pattern searching the whole text, and :func:`findings` keeps
the matches that are credentials (word-bounded, checked, not filler). The Discord bot
token, which has no literal to trigger it, is :func:`discord_bot_tokens`. Only
:mod:`keepstone.secrets` (and its tests' reference engine) should import it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from keepstone.secret_shapes import FILLER, Detector, b64url_decode

_WORD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def _is_filler(value: str) -> bool:
    tail = value[-16:]
    return len(tail) >= 8 and set(tail) <= FILLER


# Trying a pattern at one position from Python costs about what the regex engine's own
# search spends skipping this many characters of text.
_MATCH_COST = 256


def at_prefixes(det: Detector, text: str, positions: list[int]) -> Iterable[re.Match[str]]:
    """What ``det.pattern.finditer(text)`` yields, for a pattern whose every match starts
    at one of ``positions`` (sorted): the leftmost match, then the leftmost from where it
    ended. Where the positions are dense the engine's own search from the first one is
    cheaper than a call per position; it finds the same matches, since none can start
    before the first position."""
    first = positions[0]
    if len(positions) * _MATCH_COST > len(text) - first:
        return det.pattern.finditer(text, first)
    return _each_prefix(det, text, positions)


def _each_prefix(det: Detector, text: str, positions: list[int]) -> Iterator[re.Match[str]]:
    last_end = -1
    for pos in positions:
        if pos < last_end:
            continue
        m = det.pattern.match(text, pos)
        if m is not None:
            last_end = m.end()
            yield m


def anchored(det: Detector, text: str, positions: list[int]) -> Iterator[re.Match[str]]:
    """Matches of an anchored detector around its keyword ``positions`` (sorted)."""
    last_end = -1
    if det.offsets:
        for pos in positions:
            for back in det.offsets:
                if back <= pos and pos - back >= last_end:
                    m = det.pattern.match(text, pos - back)
                    if m is not None:
                        last_end = m.end()
                        yield m
                        break
        return
    windows: list[tuple[int, int]] = []
    for pos in positions:
        hi = min(len(text), pos + det.reach)
        if windows and pos <= windows[-1][1]:
            windows[-1] = (windows[-1][0], hi)  # merged: every character searched once
        else:
            windows.append((pos, hi))
    for lo, hi in windows:
        for m in det.pattern.finditer(text, lo, hi):
            if m.start() < last_end:
                continue
            if m.end() == hi < len(text):
                # The window's end stood in for the end of the text in the trailing
                # lookahead: confirm against the whole text.
                full = det.pattern.match(text, m.start())
                if full is None:
                    continue
                m = full
            last_end = m.end()
            yield m


def keyword_positions(haystack: str, keywords: Iterable[str]) -> list[int]:
    """Sorted positions of every occurrence of every keyword, found one keyword at a time."""
    found: list[int] = []
    for kw in keywords:
        pos = haystack.find(kw)
        while pos != -1:
            found.append(pos)
            pos = haystack.find(kw, pos + 1)
    found.sort()
    return found


def findings(
    det: Detector, priority: int, text: str, matches: Iterable[re.Match[str]]
) -> Iterator[tuple[int, int, int, str]]:
    """The findings among ``det``'s ``matches``: word-bounded, checked, not filler."""
    for m in matches:
        if det.bounded and m.start() > 0 and text[m.start() - 1] in (det.continues or _WORD):
            continue
        if det.check is not None and not det.check(m):
            continue
        start, end = m.span(det.group)
        if not det.filler_ok and _is_filler(text[start:end]):
            continue
        yield start, end, priority, det.kind_of(m)


# A Discord bot token is base64(bot user id) "." 6 characters "." 27-38 characters. The
# search anchors on the literal dot of the ".xxxxxx." middle (a pattern that started with
# the first part's character class would be tried at every letter of the text) and then
# walks back over the first part, at most 28 characters.
_DISCORD_TAIL = re.compile(r"\.[A-Za-z0-9_-]{6}+\.[A-Za-z0-9_-]{27,38}+(?![A-Za-z0-9_-])")
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def discord_bot_tokens(text: str) -> list[tuple[int, int]]:
    """Spans of Discord bot tokens in ``text``: a shape with no literal for the engine to
    search for, so it is run on every text, and confirmed by decoding its first part."""
    spans: list[tuple[int, int]] = []
    for m in _DISCORD_TAIL.finditer(text):
        dot = m.start()
        i = dot
        while i > 0 and dot - i <= 28 and text[i - 1] in _TOKEN_CHARS:
            i -= 1
        first = text[i:dot]
        if not 24 <= len(first) <= 28 or first[0] not in "MNO":
            continue
        raw = b64url_decode(first)
        # The first part decodes to the bot's numeric user id (a snowflake).
        if raw is not None and raw.isdigit() and 15 <= len(raw) <= 21:
            spans.append((i, m.end()))
    return spans
