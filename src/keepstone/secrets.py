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
* :func:`check_no_secrets` raises :class:`~keepstone.errors.SecretDetected` naming the kind
  and the line of the first finding, never the secret. Document writes and archive
  imports call it, and :func:`check_names_free_of_secrets` on the names they write under.
* :func:`mask` replaces each secret with ``[REDACTED:<kind>]``. Records and search
  queries are masked before they are stored, logged or sent anywhere.

Cost is linear in the length of the text. Every pattern starts with one of its declared
literal prefixes or is anchored on keywords; all prefixes and keywords are searched for
together (grouped by a rare character they share: about twenty passes, instead of one or
two per detector) and each detector then runs only where it is triggered, with the same
findings as each searching the whole text (the previous engine, kept in the tests as
``tests/secrets_reference.py``, is what they compare with).
Every repetition is bounded and no quantified group contains another repetition, so no
input can make a pattern backtrack more than a constant amount per position
(``tests/unit/test_secrets.py`` checks the patterns' structure and runs adversarial
inputs; ``bench/bench_secrets.py`` prints the throughput of both engines).

The table of shapes is :mod:`keepstone.secret_shapes`; this module is the engine that runs
it, plus private key blocks, a shape a single pattern cannot express. Running one
detector where it is triggered, and confirming its matches, is
:mod:`keepstone.secret_matching`, with the other such shape, the Discord bot token.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from keepstone.errors import SecretDetected
from keepstone.secret_matching import (
    anchored,
    at_prefixes,
    discord_bot_tokens,
    findings,
    keyword_positions,
)
from keepstone.secret_shapes import DETECTORS as _DETECTORS
from keepstone.secret_shapes import rx

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
#
# One search finds every trigger: each literal-prefix detector's prefixes, the keywords
# of the anchored detectors that look them up case-sensitively, and "PRIVATE KEY". A
# second one over the lower-cased text finds the case-insensitive keywords. Each detector
# then runs only where its triggers are, instead of every detector searching the whole
# text (about sixty passes). The result is the same as a full search: a literal-prefix match
# can only start at one of its prefixes, and the anchored detectors were only ever run
# at their keywords.

_PEM_TRIGGER = "PRIVATE KEY"
_PEM = -1  # owner id of the private key gate among the trigger literals

# The regex engine searches for a pattern that starts with one literal character at
# memory speed, but for a pattern that starts with any of several characters it tests
# each character of the text in turn, several times slower; and its cost at each place
# where the first character does occur is about that of a hundred characters skipped.
# So the literals are grouped by an *anchor* character they contain, one pattern per
# group: the anchor, then lookbehind and lookahead for the rest of each literal. Anchors
# are characters that are rare in prose and shared by many literals, in this order of
# preference (a literal with several joins the first: "Q~" shares Q with "IQoJb3JpZ2lu", one
# search of the text fewer); a literal with none of them is searched for on its own.
# Capitals that start several literals ("A") or ":" would save more searches but stop at
# every such character: a text of nothing but "A"s would scan several times slower, a cost
# any writer could impose, so they are not anchors.
_ANCHORS = "_-.QJKG~"


class _Group:
    """The literals anchored on one character, and the pattern that finds them.

    A group of one literal is searched for from its anchor on (the regex engine's fast
    literal search stops only where the anchor occurs) and confirmed backwards, and
    every match is an occurrence. In a larger group each alternative ends with an empty
    capture group, so ``lastindex`` names the literal that matched; ``also[k]`` lists the
    other literals that can occur at the same anchor (``"sk-"`` inside ``"sk-ant-"``),
    checked one by one.
    """

    __slots__ = ("also", "anchor", "literals", "pattern", "single")

    def __init__(
        self, anchor: str, members: list[tuple[str, int]], *, consume: bool = True
    ) -> None:
        # With ``consume=False`` every match is the anchor alone (the rest of each literal
        # is looked at, not consumed), so patterns on other anchors can be joined to it.
        # The order of the alternatives in ``pattern`` (and so of their groups): literals
        # that start with the anchor first, see ``_alternatives``.
        members = sorted(members, key=lambda member: member[1] != 0)
        self.anchor = anchor  # every match of ``pattern`` starts with it
        self.literals = tuple(members)
        self.also = tuple(
            tuple(
                (other, j)
                for other, j in members
                if other != literal and _agree(literal, i, other, j)
            )
            for literal, i in members
        )
        literal, i = members[0]
        # Matching the rest of the literal after the anchor consumes it; that must not
        # swallow the anchor of an overlapping next occurrence (a literal that repeats
        # itself within that length, like "abab").
        self.single = (
            consume
            and len(members) == 1
            and not any(literal.startswith(literal[d:]) for d in range(1, len(literal) - i))
        )
        if self.single:
            before = f"(?<={re.escape(literal)})" if i else ""
            self.pattern = re.compile(re.escape(literal[i:]) + before)
            return
        alts: list[str] = []
        for literal, i in members:
            before = f"(?<={re.escape(literal[: i + 1])})" if i else ""
            after = f"(?={re.escape(literal[i + 1 :])})" if i + 1 < len(literal) else ""
            alts.append(before + after + "()")
        self.pattern = re.compile(re.escape(anchor) + _alternatives(anchor, members, alts))


def _agree(a: str, i: int, b: str, j: int) -> bool:
    """Whether ``a`` and ``b`` can both occur with their anchors (``a[i]``, ``b[j]``) at
    the same place of a text: they agree wherever they overlap."""
    shift = j - i  # b starts this many characters before a
    return all(b[k + shift] == ch for k, ch in enumerate(a) if 0 <= k + shift < len(b))


def _alternatives(anchor: str, members: list[tuple[str, int]], alts: list[str]) -> str:
    at_start = [alt for (_, i), alt in zip(members, alts, strict=True) if not i]
    inside = [(lit, i, alt) for (lit, i), alt in zip(members, alts, strict=True) if i]
    branches = list(at_start)
    if inside:
        # A one-character test first (the character before the anchor) rejects most
        # anchors of prose before the alternatives are tried one by one.
        first = ""
        if len(inside) > 2:
            chars = "".join(re.escape(c) for c in sorted({lit[i - 1] for lit, i, _ in inside}))
            first = f"(?<=[{chars}]{re.escape(anchor)})"
        branches.append(first + "(?:" + "|".join(alt for _, _, alt in inside) + ")")
    return "(?:" + "|".join(branches) + ")"


def _groups(literals: Iterable[str]) -> list[_Group]:
    grouped: dict[str, list[tuple[str, int]]] = {}
    alone: list[tuple[str, int]] = []
    for literal in sorted(set(literals)):
        anchor = next((a for a in _ANCHORS if a in literal), "")
        if anchor:
            grouped.setdefault(anchor, []).append((literal, literal.index(anchor)))
        else:
            # At least two characters from the anchor on: the regex engine then checks the
            # second one in its fast scan instead of trying a match at every anchor.
            rarest = max(range(max(1, len(literal) - 1)), key=lambda i: _rarity(literal[i]))
            alone.append((literal, rarest))
    groups = [_Group(a, members) for a, members in sorted(grouped.items())]
    groups += [_Group(literal[i], [(literal, i)]) for literal, i in alone]
    return groups


# Characters from the most to the least frequent in prose and Markdown (lower-case letters
# in their English order, digits, capitals); anything else counts as rarer still.
_COMMONNESS = " \netaoinshrdlcumwfgypbv.,kjxqz-/:0123456789ETAOINSHRDLCUMWFGYPBVKJXQZ"


def _rarity(ch: str) -> int:
    rank = _COMMONNESS.find(ch)
    return len(_COMMONNESS) if rank == -1 else rank


def _owners(pairs: Iterable[tuple[str, int]]) -> dict[str, tuple[int, ...]]:
    owners: dict[str, list[int]] = {}
    for literal, owner in pairs:
        owners.setdefault(literal, []).append(owner)
    return {literal: tuple(ids) for literal, ids in owners.items()}


_EXACT_OWNERS = _owners(
    [
        (literal, index)
        for index, det in enumerate(_DETECTORS)
        for literal in ((det.keywords or ()) if det.anchored else det.prefixes)
        if not (det.anchored and det.fold)
    ]
    + [(_PEM_TRIGGER, _PEM)]
)
_FOLDED_OWNERS = _owners(
    (kw, index)
    for index, det in enumerate(_DETECTORS)
    if det.anchored and det.fold
    for kw in det.keywords or ()
)


class _OnePass:
    """The literals of ``groups`` in one pattern, for short texts.

    Searching a text once per group costs a call and a pass per group, a fixed cost that
    is most of a short text's search. Here the literals are regrouped by anchor character
    (two groups may share one: ``://`` and ``:A``) in groups whose every match is the
    anchor alone, and those groups are alternatives of one pattern: the regex engine tests
    each character against the set of anchors (several times slower per character than
    one literal's search, but in one pass), and a match never covers the anchor of
    another, so the pass finds every group's matches. ``index[lastindex]`` names the group
    and the literal of a match.
    """

    __slots__ = ("groups", "index", "pattern")

    def __init__(self, groups: list[_Group]) -> None:
        by_anchor: dict[str, list[tuple[str, int]]] = {}
        for group in groups:
            by_anchor.setdefault(group.anchor, []).extend(group.literals)
        self.groups = [_Group(a, members, consume=False) for a, members in by_anchor.items()]
        self.index: dict[int, tuple[int, int]] = {}
        for g, group in enumerate(self.groups):
            for k in range(len(group.literals)):
                self.index[len(self.index) + 1] = (g, k)
        self.pattern = re.compile("|".join(f"(?:{g.pattern.pattern})" for g in self.groups))
        assert self.pattern.groups == len(self.index)


_FOLDED_DETECTORS = frozenset(i for ids in _FOLDED_OWNERS.values() for i in ids)
_EXACT_GROUPS = _groups(_EXACT_OWNERS)
_FOLDED_GROUPS = _groups(_FOLDED_OWNERS)
_EXACT_ONE_PASS = _OnePass(_EXACT_GROUPS)
_FOLDED_ONE_PASS = _OnePass(_FOLDED_GROUPS)


# Above this many occurrences per character of text, a group's literals are too dense
# to visit one by one from Python (runs of "sk-sk-sk-…"): its owners fall back to
# searching the whole text, as every detector once did.
_DENSE = 1 / 256


# Below this many characters one pass of a :class:`_OnePass` pattern is cheaper than a
# pass per group (the two cross at about 2 KB).
_ONE_PASS_BELOW = 2 * 1024


def _find(
    text: str,
    groups: list[_Group],
    one_pass: _OnePass,
    owners: dict[str, tuple[int, ...]],
    limit: bool = True,
) -> tuple[dict[int, list[int]], set[int]]:
    """Where each owner's literals occur in ``text``: sorted start positions per owner (a
    detector's index, or :data:`_PEM`), overlapping occurrences included; and (with
    ``limit``) the owners whose literals were too dense to list (:data:`_DENSE`), which
    must search ``text`` themselves."""
    found: dict[int, list[int]] = {}
    dense: set[int] = set()
    budget = 64 + int(len(text) * _DENSE) if limit else len(text)
    if len(text) < _ONE_PASS_BELOW:
        hits = [0] * len(one_pass.groups)
        for m in one_pass.pattern.finditer(text):
            g, k = one_pass.index[m.lastindex]  # type: ignore[index]  # every alternative has one
            hits[g] += 1
            if hits[g] <= budget:
                _note(found, owners, one_pass.groups[g], k, m.start(), text)
            elif hits[g] == budget + 1:
                dense.update(o for lit, _ in one_pass.groups[g].literals for o in owners[lit])
    else:
        hop = len(text) >= _HOP_FROM
        for group in groups:
            matches = _hopping(group, text) if hop else group.pattern.finditer(text)
            if group.single:
                literal, i = group.literals[0]
                starts = [m.start() - i for m in itertools.islice(matches, budget + 1)]
                if len(starts) > budget:
                    dense.update(owners[literal])
                    continue
                for owner in owners[literal] if starts else ():
                    found.setdefault(owner, []).extend(starts)
                continue
            for hit, m in enumerate(matches):
                if hit == budget:
                    dense.update(o for lit, _ in group.literals for o in owners[lit])
                    break
                _note(found, owners, group, m.lastindex - 1, m.start(), text)  # type: ignore[operator]
    for positions in found.values():
        positions.sort()
    return found, dense


def _note(
    found: dict[int, list[int]],
    owners: dict[str, tuple[int, ...]],
    group: _Group,
    k: int,
    at: int,
    text: str,
) -> None:
    """A match of ``group``'s ``k``-th literal with its anchor at ``at``: that literal's
    start, and the start of each other literal of the group that occurs there too."""
    literal, i = group.literals[k]
    for owner in owners[literal]:
        found.setdefault(owner, []).append(at - i)
    for other, j in group.also[k]:
        if at >= j and text.startswith(other, at - j):
            for owner in owners[other]:
                found.setdefault(owner, []).append(at - j)


# The regex engine's search for a pattern's first character tests the text one character at
# a time; ``str.find`` of one character runs at memory speed, many times as fast. Hopping
# from one occurrence of a group's anchor to the next and trying the pattern there from
# Python costs about what the engine spends scanning this many characters: sparser anchors
# are hopped to, denser ones leave the rest of the text to the engine's own search. Below
# ``_HOP_FROM`` characters the hops cannot repay the calls they make. (Hopping more than
# halves the scan of a large note without the rarer anchors, and changes nothing on prose
# where they are everywhere.)
_HOP_COST = 512
_HOP_FROM = 16 * 1024


def _hopping(group: _Group, text: str) -> Iterator[re.Match[str]]:
    """What ``group.pattern.finditer(text)`` yields (every match starts with
    ``group.anchor``), found by hopping between anchors while they are sparse."""
    anchor, pattern = group.anchor, group.pattern
    pos = text.find(anchor)
    hops = 0
    while pos != -1:
        hops += 1
        if hops * _HOP_COST > pos + 8 * _HOP_COST:
            yield from pattern.finditer(text, pos)
            return
        m = pattern.match(text, pos)
        if m is None:
            pos = text.find(anchor, pos + 1)
        else:
            yield m
            pos = text.find(anchor, m.end())  # no match is empty: m.end() > pos


# Below this many characters (names, paths) a text is first searched once for any literal,
# which most hold none of; a longer text that does would pay that search twice.
_SHORT_BELOW = 256


def _raw(text: str) -> list[tuple[int, int, int, str]]:
    """Every match of every detector as ``(start, end, priority, kind)``, overlaps included,
    in detector order (``mask`` relies on that order when one value has two kinds)."""
    folded_text = text.lower() if _FOLDED_OWNERS else text
    if len(text) < _SHORT_BELOW and not (
        _EXACT_ONE_PASS.pattern.search(text) or _FOLDED_ONE_PASS.pattern.search(folded_text)
    ):  # Most names and paths: no detector is triggered, only the Discord shape can match.
        return _discord(text)
    found: list[tuple[int, int, int, str]] = []
    exact, dense = _find(text, _EXACT_GROUPS, _EXACT_ONE_PASS, _EXACT_OWNERS)
    # A few characters change length when lower-cased; then positions in the lower-cased
    # text do not carry over, and those detectors search the whole text instead (correct,
    # just slower) when one of their keywords occurs at all.
    aligned = len(folded_text) == len(text)
    # The keyword detectors visit every keyword position anyway: no limit.
    folded = (
        _find(folded_text, _FOLDED_GROUPS, _FOLDED_ONE_PASS, _FOLDED_OWNERS, limit=False)[0]
        if aligned
        else {}
    )
    # Only the detectors something triggered, in detector order: the others find nothing.
    triggered = exact.keys() | dense | (folded.keys() if aligned else _FOLDED_DETECTORS)
    for priority in sorted(triggered):
        if priority == _PEM:
            continue
        det = _DETECTORS[priority]
        matches: Iterable[re.Match[str]]
        if det.anchored and det.fold:
            if aligned:
                matches = anchored(det, text, folded[priority])
            elif any(kw in folded_text for kw in det.keywords or ()):
                matches = det.pattern.finditer(text)
            else:
                continue
        elif priority in dense:
            if det.anchored:
                matches = anchored(det, text, keyword_positions(text, det.keywords or ()))
            else:
                matches = det.pattern.finditer(text)
        elif det.anchored:
            matches = anchored(det, text, exact[priority])
        else:
            matches = at_prefixes(det, text, exact[priority])
        found.extend(findings(det, priority, text, matches))
    if _PEM in exact or _PEM in dense:
        found.extend((s, e, -1, "private_key") for s, e in _private_keys(text))
    return found + _discord(text)


def _discord(text: str) -> list[tuple[int, int, int, str]]:
    """:func:`_raw`'s rows of Discord bot tokens, after every detector's."""
    return [(s, e, len(_DETECTORS), "discord_bot_token") for s, e in discord_bot_tokens(text)]


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

    Raises :class:`~keepstone.errors.SecretDetected` (422 ``secret_detected``) whose message
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


def check_names_free_of_secrets(names: Mapping[str, str], what: str = "") -> None:
    """Refuse a name holding a credential (a path; a space's, project's or bot's name):
    names are listed, searched and exported to every reader of the space. ``names`` maps
    each field to its value (``what``: whose, e.g. "space"); SecretDetected names the
    field and the kind, never the secret."""
    for field, value in names.items():
        if found := scan(value):
            kind, whose = found[0].kind, f"{what} " if what else ""
            hint = "names are shown to everyone who may read the space: choose one without it"
            message = f"the {whose}{field} contains a credential ({kind}); {hint} and retry"
            raise SecretDetected(message, kind=kind, field=field)


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
                parts += [text[last:cur_start], f"[REDACTED:{cur_kind}]"]
                last = cur_end
            cur_start, cur_end, cur_kind = start, end, kind
        parts += [text[last:cur_start], f"[REDACTED:{cur_kind}]", text[cur_end:]]
        text = "".join(parts)
    return text
