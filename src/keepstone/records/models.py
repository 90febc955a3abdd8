"""The field limits of team memory records (SPEC §6), checked by
:mod:`keepstone.service.records` once for every face, and the shape of a stored id."""

from __future__ import annotations

from keepstone.text import CONTROL

MAX_TEXT = 8000
MAX_QUERY = 1000
MAX_LIMIT = 50
DEFAULT_LIMIT = 10
MAX_ID = 64


def is_clean_id(value: str) -> bool:
    """An id as stored: 1-64 characters, no control character, valid Unicode."""
    if not 1 <= len(value) <= MAX_ID or CONTROL.search(value):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
