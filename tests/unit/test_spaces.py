"""Property-based tests of SpaceRef validation, ids and project keys (SPEC §2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepstone.errors import InvalidSpaceRef
from keepstone.paths import DECEPTIVE_CHARACTERS
from keepstone.spaces import (
    ALLOWED_VISIBILITIES,
    REQUIRED_QUALIFIERS,
    SpaceRef,
    Visibility,
    encode_workdir_key,
    validate_segment,
)

_BAD_CHARS = "/\\:\x00\x01\x1f\x7f\x85"
segments = st.text(
    alphabet=st.characters(
        blacklist_characters=_BAD_CHARS + "".join(DECEPTIVE_CHARACTERS),
        blacklist_categories=("Cc", "Cs"),
    ),
    min_size=1,
    max_size=128,
).filter(lambda s: s not in (".", ".."))
visibilities = st.sampled_from(list(Visibility))


@st.composite
def refs(draw: st.DrawFn) -> SpaceRef:
    vis = draw(visibilities)
    takes = REQUIRED_QUALIFIERS[vis]
    return SpaceRef.build(
        vis,
        draw(segments),
        tenant="" if vis is Visibility.GLOBAL else draw(segments),
        project=draw(segments) if "project" in takes else None,
        bot=draw(segments) if "bot" in takes else None,
        user=draw(segments) if "user" in takes else None,
    )


@given(refs())
def test_id_is_deterministic(ref: SpaceRef) -> None:
    rebuilt = SpaceRef.build(
        ref.visibility,
        ref.name,
        tenant=ref.tenant,
        project=ref.project or None,
        bot=ref.bot or None,
        user=ref.user or None,
    )
    assert rebuilt.id == ref.id
    assert ref.id.startswith(f"v1:{ref.visibility.value}:")
    assert ref.id.split(":") == [
        "v1",
        ref.visibility.value,
        ref.tenant,
        ref.project,
        ref.bot,
        ref.user,
        ref.name,
    ]


@given(refs(), refs())
def test_id_is_injective(a: SpaceRef, b: SpaceRef) -> None:
    assert (a.id == b.id) == (a == b)


@given(visibilities, segments, segments)
def test_qualifiers_not_taken_are_left_out(vis: Visibility, name: str, extra: str) -> None:
    takes = REQUIRED_QUALIFIERS[vis]
    ref = SpaceRef.build(vis, name, tenant="t", project=extra, bot=extra, user=extra)
    for field in ("project", "bot", "user"):
        assert getattr(ref, field) == (extra if field in takes else "")
    assert ref.tenant == ("" if vis is Visibility.GLOBAL else "t")
    assert len(ref.id.split(":")) == 7


@given(
    st.text(min_size=1, max_size=140),
    st.sampled_from(["name", "project", "bot", "user", "tenant"]),
)
def test_every_invalid_segment_is_refused(value: str, field: str) -> None:
    invalid = (
        len(value) > 128
        or value in (".", "..")
        or any(c in value for c in "/\\:")
        or any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in value)
        or any(0xD800 <= ord(c) <= 0xDFFF for c in value)
        or any(c in DECEPTIVE_CHARACTERS for c in value)
    )
    kwargs = {"tenant": "t", "project": "p", "bot": "b", "user": "u"}
    name = "n"
    if field == "name":
        name = value
    else:
        kwargs[field] = value
    vis = {"project": "bot", "bot": "bot", "user": "user", "tenant": "org", "name": "org"}[field]
    if invalid:
        with pytest.raises(InvalidSpaceRef) as info:
            SpaceRef.build(vis, name, **kwargs)
        assert info.value.details["field"] == field
    else:
        assert SpaceRef.build(vis, name, **kwargs)


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "a\\b", "a:b", "a\x00", "a\n", "x" * 129])
def test_segment_examples(bad: str) -> None:
    with pytest.raises(InvalidSpaceRef):
        validate_segment("name", bad)
    assert validate_segment("name", "x" * 128) == "x" * 128


def test_unknown_visibility_names_the_allowed_values() -> None:
    with pytest.raises(InvalidSpaceRef) as info:
        SpaceRef.build("team", "n", tenant="t")
    for allowed in ALLOWED_VISIBILITIES:
        assert allowed in info.value.message


@pytest.mark.parametrize(
    ("vis", "missing"), [("bot", "bot"), ("project", "project"), ("user", "user")]
)
def test_required_qualifiers(vis: str, missing: str) -> None:
    kwargs = {"project": "p", "bot": "b", "user": "u"}
    kwargs[missing] = ""
    with pytest.raises(InvalidSpaceRef, match=missing):
        SpaceRef.build(vis, "n", tenant="t", **kwargs)


def test_global_carries_no_tenant() -> None:
    assert SpaceRef.build("global", "n", tenant="t").tenant == ""
    with pytest.raises(InvalidSpaceRef):
        SpaceRef(Visibility.GLOBAL, "n", tenant="t")
    assert SpaceRef.build("org", "n", tenant="t").with_tenant("u").tenant == "u"


names = st.text(
    alphabet=st.characters(blacklist_characters="/\x00", blacklist_categories=["Cs"]),
    min_size=1,
    max_size=60,
).filter(lambda s: s not in (".", ".."))


@settings(max_examples=60, deadline=None)
@given(names)
def test_workdir_key_is_always_a_valid_segment(
    tmp_path_factory: pytest.TempPathFactory, name: str
) -> None:
    base = tmp_path_factory.getbasetemp()
    path = base / name
    key = encode_workdir_key(path)
    assert validate_segment("project", key) == key
    assert SpaceRef.build("project", "n", tenant="t", project=key).project == key
    stem, _, digest = key.rpartition("-")
    assert len(digest) == 12 and int(digest, 16) >= 0
    assert len(stem) <= 40


def test_workdir_key_follows_the_real_path(tmp_path: Path) -> None:
    (tmp_path / "My Repo").mkdir()
    os.symlink(tmp_path / "My Repo", tmp_path / "link")
    key = encode_workdir_key(tmp_path / "My Repo")
    assert key == encode_workdir_key(tmp_path / "link")
    assert key.startswith("MyRepo-")
    assert key != encode_workdir_key(tmp_path)
    assert encode_workdir_key("/").startswith("root-")


@given(st.integers(0xD800, 0xDFFF), st.sampled_from(["name", "project", "bot", "user", "tenant"]))
def test_lone_surrogates_are_refused(surrogate: int, field: str) -> None:
    with pytest.raises(InvalidSpaceRef) as info:
        validate_segment(field, "a" + chr(surrogate))
    assert info.value.details["field"] == field


# --- project_key: a project is a name, or a directory spelled as one ----------------------------


def test_project_key_takes_a_bare_word_as_a_name_even_where_such_a_folder_exists(
    tmp_path: Path,
) -> None:
    from keepstone.spaces import project_key

    (tmp_path / "web").mkdir()
    assert project_key("web", cwd=tmp_path) == "web"


def test_project_key_encodes_directory_spellings_and_the_current_directory(
    tmp_path: Path,
) -> None:
    from keepstone.spaces import encode_workdir_key, project_key

    (tmp_path / "web").mkdir()
    expected = encode_workdir_key(tmp_path / "web")
    assert project_key("./web", cwd=tmp_path) == expected
    assert project_key(str(tmp_path / "web")) == expected
    assert project_key(None, cwd=tmp_path / "web") == expected
    assert project_key("", cwd=tmp_path / "web") == expected


def test_project_key_refuses_a_missing_directory_and_an_invalid_name(tmp_path: Path) -> None:
    from keepstone.spaces import project_key

    with pytest.raises(InvalidSpaceRef, match="no such directory"):
        project_key("./absent", cwd=tmp_path)
    with pytest.raises(InvalidSpaceRef, match="':'"):
        project_key("we:b", cwd=tmp_path)


def test_the_current_directory_deleted_under_the_process_is_one_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from keepstone.errors import InvalidRequest
    from keepstone.spaces import current_directory, project_key

    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    assert current_directory() == str(gone)
    gone.rmdir()
    for read in (current_directory, lambda: project_key(None), lambda: project_key("")):
        with pytest.raises(InvalidRequest, match="^the current directory no longer exists") as err:
            read()
        assert "cd to a directory that exists, or pass --project" in err.value.message
        assert not isinstance(err.value, InvalidSpaceRef)  # no flag was wrong
    assert project_key("web") == "web"  # a name needs no current directory
