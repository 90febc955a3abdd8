"""Property-based tests of the document path validator (SPEC §3)."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from keepstone.errors import InvalidPath
from keepstone.paths import (
    DECEPTIVE_CHARACTERS,
    MAX_PATH_BYTES,
    MAX_PATH_SEGMENTS,
    canonical_form,
    in_dir,
    validate_dir_prefix,
    validate_doc_path,
)

segment_chars = st.characters(
    # Deceptive characters (bidi controls, zero-width, look-alike slashes) have their own tests.
    blacklist_characters="/\\" + "".join(DECEPTIVE_CHARACTERS),
    blacklist_categories=("Cc", "Cs"),
    max_codepoint=0x2FFFF,
)
segments = st.text(alphabet=segment_chars, min_size=1, max_size=12).filter(
    lambda s: s not in (".", "..")
)
valid_paths = (
    st.builds(
        lambda dirs, stem: "/".join([*dirs, stem + ".md"]),
        st.lists(segments, max_size=5),
        segments,
    )
    .map(lambda p: unicodedata.normalize("NFC", p))
    .filter(
        lambda p: (
            p == unicodedata.normalize("NFC", p) and p[:2].rstrip(":").isalpha() is not False
        )  # keep drive-like prefixes out below
    )
)


def _is_drive(p: str) -> bool:
    return len(p) >= 2 and p[1] == ":" and p[0].isascii() and p[0].isalpha()


@given(valid_paths)
def test_valid_canonical_paths_pass_unchanged(path: str) -> None:
    assume(not _is_drive(path))
    assume(len(path.encode()) <= MAX_PATH_BYTES)
    assume(all(seg not in (".", "..") for seg in path.split("/")))
    assume(unicodedata.normalize("NFC", path) == path)
    assert validate_doc_path(path) == path
    assert canonical_form(path) == path


@given(
    valid_paths, st.sampled_from(["./{}", "{}/", "a//{}", "./a/./{}", "a/{}".replace("a/", "a//")])
)
def test_non_canonical_errors_name_a_form_that_validates(path: str, shape: str) -> None:
    assume(not _is_drive(path))
    assume(len(path.encode()) <= MAX_PATH_BYTES - 8)
    spelled = shape.format(path)
    assume(spelled != path)
    with pytest.raises(InvalidPath) as info:
        validate_doc_path(spelled)
    canonical = info.value.details.get("canonical")
    assert canonical is not None
    assert canonical == path.removeprefix("./") or canonical == "a/" + path
    assert f"use {canonical!r}" in info.value.message
    assert validate_doc_path(canonical) == canonical


@given(st.text(alphabet="aeiouAEIOU\u0301\u0308\u0327cn~", min_size=1, max_size=10))
def test_non_nfc_is_refused_with_the_nfc_form(stem: str) -> None:
    path = stem + ".md"
    nfc = unicodedata.normalize("NFC", path)
    assume(nfc != path)
    with pytest.raises(InvalidPath) as info:
        validate_doc_path(path)
    assert info.value.details["canonical"] == nfc
    assert validate_doc_path(nfc) == nfc


@given(st.text(max_size=40))
def test_anything_accepted_is_canonical_and_safe(path: str) -> None:
    try:
        accepted = validate_doc_path(path)
    except InvalidPath:
        return
    parts = accepted.split("/")
    assert accepted.endswith(".md")
    assert not accepted.startswith("/") and "\\" not in accepted
    assert all(p not in ("", ".", "..") for p in parts)
    assert unicodedata.normalize("NFC", accepted) == accepted
    assert all(ord(c) >= 0x20 and not 0x7F <= ord(c) <= 0x9F for c in accepted)
    assert len(accepted.encode()) <= MAX_PATH_BYTES and len(parts) <= MAX_PATH_SEGMENTS


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/a.md",
        "C:/a.md",
        "c:a.md",
        "../a.md",
        "a/../b.md",
        "a\\b.md",
        "a\x00.md",
        "a\n.md",
        "a.txt",
        "a.MD",
        ".md",
        "a/.md",
        "dir/",
        ".",
        "..",
        "a.md\x85",
    ],
)
def test_invalid_examples(path: str) -> None:
    with pytest.raises(InvalidPath):
        validate_doc_path(path)


def test_byte_and_segment_limits() -> None:
    at_limit = "a" * (MAX_PATH_BYTES - 3) + ".md"
    assert validate_doc_path(at_limit) == at_limit
    with pytest.raises(InvalidPath, match=str(MAX_PATH_BYTES)):
        validate_doc_path("a" + at_limit)
    multibyte = "\u00e9" * ((MAX_PATH_BYTES - 3) // 2) + ".md"  # counted in UTF-8 bytes
    assert len(multibyte.encode()) <= MAX_PATH_BYTES
    validate_doc_path(multibyte)
    with pytest.raises(InvalidPath):
        validate_doc_path("\u00e9" + multibyte)
    deep = "d/" * (MAX_PATH_SEGMENTS - 1) + "x.md"
    assert validate_doc_path(deep) == deep
    with pytest.raises(InvalidPath, match=str(MAX_PATH_SEGMENTS)):
        validate_doc_path("d/" + deep)


@given(st.lists(segments, min_size=1, max_size=4).map("/".join))
def test_dir_prefix(prefix: str) -> None:
    prefix = unicodedata.normalize("NFC", prefix)
    assume(not _is_drive(prefix) and all(s not in (".", "..") for s in prefix.split("/")))
    assume(len(prefix.encode()) <= MAX_PATH_BYTES)
    assert validate_dir_prefix(prefix) == prefix
    with pytest.raises(InvalidPath) as info:
        validate_dir_prefix(prefix + "/")
    assert info.value.details["canonical"] == prefix
    assert in_dir(prefix + "/x.md", prefix)
    assert not in_dir(prefix + "x/y.md", prefix)
    assert in_dir("anything.md", "")


@pytest.mark.parametrize("bad", ["/abs", "../up", "a\\b", "a\x00", "C:/x"])
def test_dir_prefix_refusals(bad: str) -> None:
    with pytest.raises(InvalidPath):
        validate_dir_prefix(bad)
    assert validate_dir_prefix("") == "" and validate_dir_prefix(None) == ""
