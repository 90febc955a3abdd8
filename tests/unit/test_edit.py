"""Edits of a document's text: replace one exact occurrence, insert at a line."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keepstone.documents import Insert, Replace, apply_edit
from keepstone.errors import InvalidEdit

NOTE = "# Deploys\n\nstaging first\nthen production\n"


def test_replace_changes_the_one_occurrence() -> None:
    assert apply_edit(NOTE, Replace("staging first", "canary first"), "m.md") == (
        "# Deploys\n\ncanary first\nthen production\n"
    )


def test_replace_refuses_an_ambiguous_match_naming_its_lines() -> None:
    with pytest.raises(InvalidEdit) as refused:
        apply_edit("a\nx\nb\nx\nx\n", Replace("x", "y"), "m.md")
    assert refused.value.details["reason"] == "ambiguous"
    assert refused.value.details["lines"] == [2, 4, 5]
    assert "3 times" in refused.value.message and "lines 2, 4, 5" in refused.value.message


def test_replace_refuses_absent_and_empty_text() -> None:
    with pytest.raises(InvalidEdit, match="does not occur") as absent:
        apply_edit(NOTE, Replace("Staging first", "x"), "m.md")
    assert absent.value.details["reason"] == "no_match"
    with pytest.raises(InvalidEdit) as empty:
        apply_edit(NOTE, Replace("", "x"), "m.md")
    assert empty.value.details["reason"] == "empty"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (0, "new\n# Deploys\n\nstaging first\nthen production\n"),
        (1, "# Deploys\nnew\n\nstaging first\nthen production\n"),
        (4, "# Deploys\n\nstaging first\nthen production\nnew\n"),
    ],
)
def test_insert_puts_whole_lines_after_the_line(line: int, expected: str) -> None:
    assert apply_edit(NOTE, Insert(line, "new"), "m.md") == expected


def test_insert_into_text_without_a_final_line_break_and_into_nothing() -> None:
    assert apply_edit("a\nb", Insert(2, "c"), "m.md") == "a\nb\nc"
    assert apply_edit("a\nb", Insert(1, "c"), "m.md") == "a\nc\nb"
    assert apply_edit("", Insert(0, "first"), "m.md") == "first"


def test_insert_refuses_a_line_past_the_end() -> None:
    with pytest.raises(InvalidEdit, match="has 4 line") as refused:
        apply_edit(NOTE, Insert(5, "x"), "m.md")
    assert refused.value.details == {"path": "m.md", "reason": "line_out_of_range", "lines": 4}
    with pytest.raises(InvalidEdit):
        apply_edit(NOTE, Insert(-1, "x"), "m.md")


_LINE = st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=8)


@given(st.lists(_LINE, min_size=1, max_size=6), st.lists(_LINE, min_size=1, max_size=3), st.data())
def test_insert_places_the_lines_at_that_index(
    lines: list[str], new: list[str], data: st.DataObject
) -> None:
    content = "".join(f"{line}\n" for line in lines)
    at = data.draw(st.integers(0, len(lines)))
    # Each inserted line ends with its line break: "x\n" is one line, as in the document.
    edited = apply_edit(content, Insert(at, "".join(f"{line}\n" for line in new)), "m.md")
    assert edited.split("\n")[:-1] == lines[:at] + new + lines[at:]
