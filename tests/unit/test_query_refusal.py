"""The query-string check refuses exactly what parsing every query would refuse.

``refusal_of_query`` parses a query only when its bytes could decode to a control
character; these tests compare it with the same check parsing every query.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepstone.api import middleware
from keepstone.api.middleware import refusal_of_query

_FRAGMENTS = [
    "a",
    "path",
    "=",
    "&",
    "+",
    "%",
    "%2F",
    "%2f",
    "docs",
    ".md",
    "%20",
    "%25",
    "%00",
    "%0a",
    "%1F",
    "%1g",
    "%7F",
    "%7f",
    "%7",
    "%80",
    "%C2",
    "%c2",
    "%C2%80",
    "%c2%9f",
    "%C2%A0",
    "%C2%7F",
    "%E2%80%8B",
    "%C3%A9",
    "%",
    "C2",
    "%%",
    "%C2%",
    "\x00",
    "\x1f",
    "\x7f",
    "\x85",
    "\x9f",
    "\xa0",
    "\xc2",
    "\xff",
    "é",
]


def _parsed_always(path: str, query: bytes) -> str | None:
    """The check with every query parsed: the reference."""
    every = re.compile(rb"")
    saved, middleware._CONTROL_BYTES = middleware._CONTROL_BYTES, every
    try:
        refused = refusal_of_query(path, query)
    finally:
        middleware._CONTROL_BYTES = saved
    return None if refused is None else str(refused)


def _same(path: str, query: bytes) -> None:
    refused = refusal_of_query(path, query)
    assert (None if refused is None else str(refused)) == _parsed_always(path, query)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(_FRAGMENTS), max_size=12),
    st.sampled_from(["/api/memory/doc", "/api/admin/users", "/t/x/doc"]),
)
def test_a_query_of_fragments_is_refused_as_parsing_it_refuses(
    pieces: list[str], path: str
) -> None:
    _same(path, "".join(pieces).encode("latin-1", errors="ignore"))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_any_bytes_are_refused_as_parsing_them_refuses(query: bytes) -> None:
    _same("/api/admin/users", query)


@pytest.mark.parametrize(
    "query",
    [b"name=%C2%85", b"a=%00", b"%1Fkey=v", b"a=%7f", b"a=\x85", b"a=b%0Ac"],
)
def test_an_encoded_or_raw_control_character_is_refused(query: bytes) -> None:
    assert refusal_of_query("/api/admin/users", query) is not None


def test_a_percent_encoded_path_is_not_parsed() -> None:
    # The check's reason to exist cheaply: clients encode '/' in a document's path.
    assert middleware._CONTROL_BYTES.search(b"name=notes&path=docs%2F042.md") is None
    assert refusal_of_query("/api/memory/doc", b"name=notes&path=docs%2F042.md") is None
