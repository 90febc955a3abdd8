"""Credential detection and masking (SPEC §3 "Secrets", §6 "Secrets").

The guard recognises credentials by the *published shape* of each provider's tokens
(prefix, length, alphabet and, where the provider publishes one, a checksum or an
inner structure), never by guessing at randomness. That is what lets it run on an
agent's ordinary prose without refusing it: a note saying "rotated the GitHub token"
passes, a pasted ``ghp_…`` token does not. A credential with no published shape (a
bare password, an internal token) is deliberately not recognised; see
``docs/secrets.md`` for the list of kinds and the decisions behind them.

Three functions are the whole interface:

* :func:`scan` lists the :class:`Finding` s of a text (kind, 1-based line, and the
  character span of the secret itself), sorted by start and never overlapping.
* :func:`check_no_secrets` raises :class:`~cairn.errors.SecretDetected` naming the kind
  and the line of the first finding, and never the secret itself. Document writes and
  archive imports call it.
* :func:`mask` replaces each secret with ``[REDACTED:<kind>]``. Records and search
  queries are masked before they are stored, logged or sent anywhere.

Cost is linear in the length of the text. Every pattern starts with a literal (so the
regex engine's prefix search skips ordinary prose at memory speed) or sits behind a
keyword prefilter, every repetition is bounded, and no quantified group contains
another repetition, so no input can make a pattern backtrack more than a constant
amount per position (``tests/unit/test_secrets.py`` checks the patterns' structure and
runs adversarial inputs; ``bench/bench_secrets.py`` prints the throughput).

The table of shapes is :mod:`cairn.secret_shapes`; this module is the engine that runs
it, plus the two shapes a single pattern cannot express (private key blocks and Discord
bot tokens).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from cairn.errors import SecretDetected
from cairn.secret_shapes import DETECTORS as _DETECTORS
from cairn.secret_shapes import FILLER, Detector, b64url_decode, rx

__all__ = ["KINDS", "Finding", "check_no_secrets", "mask", "scan"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One credential found in a text.

    ``kind`` is the snake_case name of the credential's shape (``github_personal_access_token``,
    ``private_key``, …); ``line`` is 1-based; ``start``/``end`` delimit the secret itself
    (``text[start:end]``), not the words around it: for ``aws_secret_access_key=…`` only the
    value, for a URL only the password.
    """

    kind: str
    line: int
    start: int
    end: int


_WORD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


# A Discord bot token is base64(bot user id) "." 6 characters "." 27-38 characters. The
# search anchors on the literal dot of the ".xxxxxx." middle (a pattern that started with
# the first part's character class would be tried at every letter of the text) and then
# walks back over the first part, at most 28 characters.
_DISCORD_TAIL = re.compile(r"\.[A-Za-z0-9_-]{6}+\.[A-Za-z0-9_-]{27,38}+(?![A-Za-z0-9_-])")
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def _discord_bot_tokens(text: str) -> list[tuple[int, int]]:
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


KINDS: frozenset[str] = frozenset(
    {k for d in _DETECTORS for k in (d.kinds.values() if d.kinds else (d.kind,))}
    | {"private_key", "discord_bot_token"}
)
"""Every kind :func:`scan` can report."""


# --- private key blocks ----------------------------------------------------------------

# The one pattern with an overlapping repetition: bounded to 40, before a literal.
_PEM_HEADER = re.compile(r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_BODY = rx(r"[A-Za-z0-9+/]{40}")
_PEM_MIN_BODY = rx(r"[A-Za-z0-9+/]{4}")
_PEM_RUN = rx(r"[A-Za-z0-9+/=\r\n]{0,262144}")
_PEM_LOOKAHEAD = 1024


def _private_keys(text: str) -> list[tuple[int, int]]:
    """Spans of private key blocks: a whole BEGIN…END block with key material in it, or a
    header followed by key material whose footer was cut off (a truncated paste).

    A header quoted alone in prose ("the file starts with -----BEGIN … PRIVATE KEY-----")
    is not a key. Linear: each search for a footer or the next header resumes where the
    last one stopped, so repeated headers cannot make the scan quadratic.
    """
    spans: list[tuple[int, int]] = []
    claimed = 0
    next_end = -2  # cached position of the next "-----END" (-1: none left)
    for m in _PEM_HEADER.finditer(text):
        if m.start() < claimed:
            continue
        body_from = m.end()
        if next_end != -1 and next_end < body_from:
            next_end = text.find("-----END", body_from)
        end_at = next_end
        if end_at != -1:
            # A BEGIN between here and that footer means this block has no footer of its own.
            if text.find("-----BEGIN", body_from, end_at) != -1:
                end_at = -1
        if end_at != -1:
            if not _PEM_MIN_BODY.search(text, body_from, end_at):
                continue
            close = text.find("-----", end_at + 8, end_at + 80)
            stop = close + 5 if close != -1 else end_at + 8
            spans.append((m.start(), stop))
            claimed = stop
            continue
        # Key material must follow the header (after armor lines such as "Version:"),
        # before anything else that starts with dashes.
        limit = text.find("-----", body_from, body_from + _PEM_LOOKAHEAD)
        if limit == -1:
            limit = min(len(text), body_from + _PEM_LOOKAHEAD)
        body = _PEM_BODY.search(text, body_from, limit)
        if body is None:
            continue
        run = _PEM_RUN.match(text, body.start())
        stop = run.end() if run else body.end()
        if stop < len(text) and text[stop] not in "\r\n":
            # The run ran into a word of the following prose: stop at the line before it.
            nl = text.rfind("\n", body.end(), stop)
            stop = nl if nl != -1 else stop
        while stop > body.end() and text[stop - 1] in "\r\n":
            stop -= 1
        spans.append((m.start(), stop))
        claimed = stop
    return spans


# --- the engine ------------------------------------------------------------------------


class _Present:
    """Which keywords occur in a text, each looked up once."""

    __slots__ = ("_folded", "_seen", "_text")

    def __init__(self, text: str) -> None:
        self._text = text
        self._folded: str | None = None
        self._seen: dict[tuple[str, bool], bool] = {}

    def folded(self) -> str:
        # Lower-casing is only for finding keywords; spans come from the original text.
        if self._folded is None:
            self._folded = self._text.lower()
        return self._folded

    def any(self, keywords: Iterable[str], fold: bool) -> bool:
        for kw in keywords:
            key = (kw, fold)
            hit = self._seen.get(key)
            if hit is None:
                hit = kw in (self.folded() if fold else self._text)
                self._seen[key] = hit
            if hit:
                return True
        return False


def _is_filler(value: str) -> bool:
    tail = value[-16:]
    return len(tail) >= 8 and set(tail) <= FILLER


def _positions(haystack: str, keywords: Iterable[str]) -> list[int]:
    found: list[int] = []
    for kw in keywords:
        pos = haystack.find(kw)
        while pos != -1:
            found.append(pos)
            pos = haystack.find(kw, pos + 1)
    found.sort()
    return found


def _anchored(det: Detector, text: str, haystack: str) -> Iterator[re.Match[str]]:
    assert det.keywords is not None
    last_end = -1
    if det.offsets:
        for pos in _positions(haystack, det.keywords):
            for back in det.offsets:
                if back <= pos and pos - back >= last_end:
                    m = det.pattern.match(text, pos - back)
                    if m is not None:
                        last_end = m.end()
                        yield m
                        break
        return
    windows: list[tuple[int, int]] = []
    for pos in _positions(haystack, det.keywords):
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


def _matches(det: Detector, text: str, present: _Present) -> Iterable[re.Match[str]]:
    if not det.anchored:
        return det.pattern.finditer(text)
    haystack = present.folded() if det.fold else text
    if len(haystack) != len(text):
        # A few characters change length when lower-cased; then positions do not carry
        # over and the whole text is searched instead (correct, just slower).
        return det.pattern.finditer(text)
    return _anchored(det, text, haystack)


def _raw(text: str) -> list[tuple[int, int, int, str]]:
    """Every match of every detector as ``(start, end, priority, kind)``, overlaps included."""
    found: list[tuple[int, int, int, str]] = []
    if not text:
        return found
    present = _Present(text)
    for priority, det in enumerate(_DETECTORS):
        if det.keywords is not None and not present.any(det.keywords, det.fold):
            continue
        for m in _matches(det, text, present):
            if det.bounded and m.start() > 0 and text[m.start() - 1] in _WORD:
                continue
            if det.check is not None and not det.check(m):
                continue
            start, end = m.span(det.group)
            if not det.filler_ok and _is_filler(text[start:end]):
                continue
            found.append((start, end, priority, det.kind_of(m)))
    if "PRIVATE KEY" in text:
        found.extend((s, e, -1, "private_key") for s, e in _private_keys(text))
    late = len(_DETECTORS)
    found.extend((s, e, late, "discord_bot_token") for s, e in _discord_bot_tokens(text))
    return found


def scan(text: str) -> list[Finding]:
    """Every credential in ``text``, sorted by start, none overlapping another.

    Where two shapes overlap the earlier one wins, then the longer, then the more
    specific (a private key block over a token inside it). Runs in time linear in
    ``len(text)``; an empty list means the text is clean.
    """
    raw = sorted(_raw(text), key=lambda r: (r[0], r[0] - r[1], r[2]))
    out: list[Finding] = []
    last_end = 0
    line, line_pos = 1, 0
    for start, end, _priority, kind in raw:
        if start < last_end:
            continue
        line += text.count("\n", line_pos, start)
        line_pos = start
        out.append(Finding(kind, line, start, end))
        last_end = end
    return out


def check_no_secrets(text: str) -> None:
    """Refuse ``text`` if it holds a credential of a published shape.

    Raises :class:`~cairn.errors.SecretDetected` (422 ``secret_detected``) whose message
    names the kind and the 1-based line of the first finding, and how many there are,
    but never the secret; ``details`` carry ``kind`` and ``line``.
    """
    found = scan(text)
    if found:
        first = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise SecretDetected(
            f"content contains a credential ({first.kind}) on line {first.line}{more}; remove "
            "it (store where to find it instead, e.g. an environment variable name) and retry",
            kind=first.kind,
            line=first.line,
        )


_MIN_REPEAT = 12  # a found secret this long is masked wherever else it appears verbatim
_MAX_VALUES = 64
_MAX_ROUNDS = 8


def mask(text: str) -> str:
    """``text`` with every credential replaced by ``[REDACTED:<kind>]``.

    Only the secret span is replaced (``password=[REDACTED:…]`` keeps the words around
    it). Overlapping findings are merged into one marker. A secret found once is also
    masked where it appears again verbatim without a word boundary (``xAKIA…``), and the
    result is scanned again until it is clean, so ``scan(mask(text)) == []`` and no
    scanned secret survives in the output.
    """
    for _ in range(_MAX_ROUNDS):
        raw = _raw(text)
        if not raw:
            return text
        spans = [(s, e, p, k) for s, e, p, k in raw]
        values = {text[s:e]: k for s, e, _p, k in raw if e - s >= _MIN_REPEAT}
        if len(values) <= _MAX_VALUES:
            for value, kind in values.items():
                pos = text.find(value)
                while pos != -1:
                    spans.append((pos, pos + len(value), len(_DETECTORS), kind))
                    pos = text.find(value, pos + len(value))
        spans.sort(key=lambda r: (r[0], r[0] - r[1], r[2]))
        parts: list[str] = []
        last = 0
        cur_start, cur_end, cur_kind = -1, -1, ""
        for start, end, _priority, kind in spans:
            if start < cur_end:
                cur_end = max(cur_end, end)
                continue
            if cur_start >= 0:
                parts.append(text[last:cur_start])
                parts.append(f"[REDACTED:{cur_kind}]")
                last = cur_end
            cur_start, cur_end, cur_kind = start, end, kind
        parts.append(text[last:cur_start])
        parts.append(f"[REDACTED:{cur_kind}]")
        parts.append(text[cur_end:])
        text = "".join(parts)
    return text
