"""Checks of the text a caller sends, one of each for every face: control characters and
whole numbers.

* :data:`CONTROL` — the control characters no name, id, email, path or query parameter may
  hold: C0 (NUL to U+001F), DEL and C1 (U+0080 to U+009F). PostgreSQL refuses NUL in any
  text (a 500 if it got that far) and SQLite would store it; the others render as nothing
  or move the cursor in a terminal, in a log or on a page.
* :func:`clean_text` refuses them in a field with ``400 invalid_request`` naming the field;
  :func:`no_nul` refuses only NUL, for a body of text (tabs and newlines belong there).
* :func:`parse_int` reads a whole number as the ASCII digits it is written with, where
  Python's ``int()`` also takes ``1_0`` (ten), other scripts' digits, full-width ``＋５``
  and surrounding spaces; :func:`parse_decimal` reads a number with a point or an exponent
  the same way (``float()`` takes all of those, and ``nan`` and ``inf`` as well).
"""

from __future__ import annotations

import re

from keepstone.errors import InvalidRequest

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_WHOLE = re.compile(r"[0-9]+")
_SIGNED = re.compile(r"-?[0-9]+")
_DECIMAL = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def control_in(value: str) -> str | None:
    """The first control character of ``value`` as ``U+XXXX``, or None when it has none."""
    found = CONTROL.search(value)
    return None if found is None else f"U+{ord(found.group()):04X}"


def clean_text(field: str, value: str) -> str:
    """``value`` when it holds no control character, else ``400 invalid_request``."""
    bad = control_in(value)
    if bad is not None:
        raise InvalidRequest(
            f"{field} may not contain NUL or other control characters (found {bad}); "
            "remove it and retry",
            field=field,
        )
    return value


def no_nul(field: str, value: str) -> str:
    """``value`` when it holds no NUL (a body of text: tabs and newlines stay)."""
    if "\x00" in value:
        raise InvalidRequest(
            f"{field} may not contain NUL characters (U+0000); remove them and retry",
            field=field,
        )
    return value


def is_whole_number(raw: str, *, negative: bool = False) -> bool:
    """Whether ``raw`` is ASCII digits only (after one ``-`` when ``negative``)."""
    return (_SIGNED if negative else _WHOLE).fullmatch(raw) is not None


def parse_int(field: str, raw: str, *, negative: bool = False, what: str = "") -> int:
    """``raw`` as a whole number written in ASCII digits, with a leading ``-`` only when
    ``negative``; else ``400 invalid_request`` naming ``field`` (``what`` ends the message,
    e.g. ``"a version number from 1"``)."""
    if not is_whole_number(raw, negative=negative):
        form = "digits 0-9" + (" (a leading '-' for a negative one)" if negative else "")
        raise InvalidRequest(
            f"{field} must be a whole number written with {form}, not {raw!r}"
            + (f"; send {what}" if what else ""),
            field=field,
        )
    return int(raw)


def parse_decimal(raw: str) -> float | None:
    """``raw`` as a number written in ASCII (digits, a sign, one point, an exponent), or
    None when it is not one: the caller refuses it, naming its field."""
    return float(raw) if _DECIMAL.fullmatch(raw) else None


def counted(number: int, noun: str) -> str:
    """``number`` and ``noun``, plural but for one: ``1 chunk``, ``2 chunks``, ``0 hand
    edits`` (``noun`` is the singular; a plural adds ``s``)."""
    return f"{number} {noun}{'' if number == 1 else 's'}"
