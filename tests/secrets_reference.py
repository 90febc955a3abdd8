"""The secret detector's reference engine: a test oracle for ``keepstone.secrets``.

Every detector searches the whole text (or its keywords' positions in it), the slow and
obvious way, as the engine did before the one-pass trigger search. The tests check that
``keepstone.secrets._raw`` finds exactly what :func:`raw_reference` finds, and
``bench/bench_secrets.py`` prints the throughput of both. It lives with the tests, not in
the package: nothing in Keepstone runs it. It uses the engine's own pieces (the
detectors' order, the anchored search, the two shapes no single pattern expresses) on
purpose: it is the same detectors, searched another way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from keepstone import secrets
from keepstone.secret_matching import anchored, discord_bot_tokens, findings, keyword_positions
from keepstone.secret_shapes import DETECTORS


def raw_reference(text: str) -> list[tuple[int, int, int, str]]:
    """What ``keepstone.secrets._raw`` returns, computed the slow, obvious way."""
    found: list[tuple[int, int, int, str]] = []
    if not text:
        return found
    folded_text: str | None = None
    for priority, det in enumerate(DETECTORS):
        matches: Iterable[re.Match[str]]
        if det.anchored:
            assert det.keywords is not None
            if det.fold and folded_text is None:
                folded_text = text.lower()
            haystack = folded_text if det.fold and folded_text is not None else text
            if not any(kw in haystack for kw in det.keywords):
                continue
            if len(haystack) != len(text):
                matches = det.pattern.finditer(text)
            else:
                matches = anchored(det, text, keyword_positions(haystack, det.keywords))
        else:
            matches = det.pattern.finditer(text)
        found.extend(findings(det, priority, text, matches))
    if "PRIVATE KEY" in text:
        found.extend((s, e, -1, "private_key") for s, e in secrets._private_keys(text))
    late = len(DETECTORS)
    found.extend((s, e, late, "discord_bot_token") for s, e in discord_bot_tokens(text))
    return found
