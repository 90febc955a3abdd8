"""Names and paths that display as something they are not are refused.

``evil\\u202egpj.md`` shows as ``evildm.jpg``; a zero-width space makes two names that
look the same; a division slash looks like a directory separator. SPEC §11: names and
paths refuse bidirectional controls, zero-width characters, BOM and look-alike
separators (``422 invalid_path`` for paths, the names' own error for names), naming the
code point. Checked here at the domain level and through the HTTP API.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from keepstone.errors import InvalidPath, InvalidSpaceRef
from keepstone.paths import DECEPTIVE_CHARACTERS, validate_dir_prefix, validate_doc_path
from keepstone.spaces import SpaceRef, validate_segment

#: Every character the brief names, by family (more "similar" ones are refused too).
BIDI = [0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069]
BIDI += [0x200E, 0x200F, 0x061C]
ZERO_WIDTH = [0x200B, 0x200C, 0x200D, 0x2060, 0x180E, 0xFEFF]
SLASHES = [0x2215, 0x2044, 0x29F8, 0xFF0F, 0xFF3C, 0x2216]
NAMED = BIDI + ZERO_WIDTH + SLASHES


def _label(cp: int) -> str:
    return f"U+{cp:04X}"


@pytest.mark.parametrize("cp", NAMED, ids=_label)
def test_a_path_with_a_deceptive_character_is_refused_naming_it(cp: int) -> None:
    ch = chr(cp)
    for path in (f"evil{ch}gpj.md", f"notes{ch}x/a.md", f"a/b{ch}.md", f"{ch}a.md"):
        with pytest.raises(InvalidPath) as info:
            validate_doc_path(path)
        err = info.value
        assert err.status == 422 and err.code == "invalid_path"
        assert _label(cp) in err.message
        name = unicodedata.name(ch, "")
        if name:  # e.g. "U+202E RIGHT-TO-LEFT OVERRIDE"
            assert f"{_label(cp)} {name}" in err.message
        assert "remove" in err.message  # says how to fix it
        assert err.details.get("code_point") == _label(cp)


def test_the_reported_example_names_right_to_left_override() -> None:
    with pytest.raises(InvalidPath) as info:
        validate_doc_path("evil\u202egpj.md")
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in info.value.message


@pytest.mark.parametrize("cp", NAMED, ids=_label)
def test_a_directory_prefix_with_a_deceptive_character_is_refused(cp: int) -> None:
    with pytest.raises(InvalidPath) as info:
        validate_dir_prefix(f"notes{chr(cp)}/x")
    assert _label(cp) in info.value.message


@pytest.mark.parametrize("cp", NAMED, ids=_label)
@pytest.mark.parametrize("field", ["name", "project", "bot", "user", "tenant"])
def test_a_space_name_segment_with_a_deceptive_character_is_refused(cp: int, field: str) -> None:
    with pytest.raises(InvalidSpaceRef) as info:
        validate_segment(field, f"web{chr(cp)}site")
    assert _label(cp) in info.value.message
    assert field in info.value.message
    assert info.value.details.get("field") == field


def test_a_space_ref_refuses_a_look_alike_slash_in_its_project() -> None:
    with pytest.raises(InvalidSpaceRef) as info:
        SpaceRef.build("project", "notes", tenant="t", project="acme\u2215web")
    assert "U+2215 DIVISION SLASH" in info.value.message


def test_the_table_covers_every_named_character_and_only_invisible_or_slash_like_ones() -> None:
    assert set(NAMED) <= {ord(c) for c in DECEPTIVE_CHARACTERS}
    slash_words = ("SOLIDUS", "SLASH", "DIAGONAL", "SET MINUS")
    for ch in DECEPTIVE_CHARACTERS:
        # Formatting characters (invisible or direction-changing), line separators, or
        # look-alikes of a path separator: never a letter, digit or ordinary symbol.
        name = unicodedata.name(ch, "")
        assert unicodedata.category(ch) in ("Cf", "Zl", "Zp") or any(
            word in name for word in slash_words
        ), f"U+{ord(ch):04X} {name}"


@pytest.mark.parametrize(
    "path",
    [
        "notes/café.md",  # accents
        "日本語/メモ.md",  # CJK, katakana
        "עברית/שלום.md",  # right-to-left script itself is fine: only the controls are not
        "مرحبا.md",
        "emoji/🧭-plan.md",
        "a-b_c d (1).md",
        "½ cup.md",  # a precomposed fraction, not the fraction slash
    ],
)
def test_ordinary_international_paths_still_pass(path: str) -> None:
    path = unicodedata.normalize("NFC", path)
    assert validate_doc_path(path) == path
    validate_segment("name", path.split("/")[0].removesuffix(".md"))


# --- through the HTTP API: refused with 422 invalid_path, nothing written ------------------


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    from keepstone.api.app import app_for
    from keepstone.config import Config
    from keepstone.runtime import open_runtime

    config = Config(home=tmp_path, database_url=f"sqlite:///{tmp_path / 'c.db'}", local=True)
    with TestClient(app_for(open_runtime(config))) as c:
        yield c


@pytest.mark.parametrize("cp", [0x202E, 0x200B, 0xFEFF, 0x2215, 0xFF0F], ids=_label)
def test_the_api_refuses_a_deceptive_path_and_writes_nothing(client: TestClient, cp: int) -> None:
    space = "visibility=project&name=notes&project=web"
    path = quote(f"evil{chr(cp)}gpj.md")
    got = client.put(f"/api/memory/doc?{space}&path={path}", json={"content": "hello"})
    assert got.status_code == 422, got.text
    error = got.json()["error"]
    assert error["code"] == "invalid_path"
    assert _label(cp) in error["message"]
    listing = client.get(f"/api/memory/docs?{space}")
    assert listing.status_code == 200
    assert listing.json()["documents"] == []


def test_the_api_refuses_a_deceptive_space_name(client: TestClient) -> None:
    got = client.put(
        f"/api/memory/doc?visibility=project&name={quote('notes' + chr(0x202E))}"
        "&project=web&path=a.md",
        json={"content": "hello"},
    )
    assert got.status_code in (400, 422), got.text
    assert "U+202E" in got.json()["error"]["message"]
