"""Markdown chunking (keepstone.search.chunking): sections at ATX headings outside code
fences, heading trails, character offsets, long sections in overlapping windows, and
the snippet of a hit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepstone.search.chunking import MAX_CHARS, OVERLAP_CHARS, Chunk, chunk_markdown, snippet
from keepstone.search.text import query_terms

DATA = Path(__file__).resolve().parent.parent / "data"


def trails(document: str, **kwargs: int) -> list[str]:
    return [c.heading for c in chunk_markdown(document, **kwargs)]


def test_sections_at_headings_with_trails() -> None:
    doc = (
        "Before any heading.\n\n# Runbook\n\nIntro.\n\n## Rollback\n\nSteps.\n\n"
        "### Known failures ###\n\nOne.\n\n## Deploy\n\nGo.\n\n# Appendix\n\nMore.\n"
    )
    assert trails(doc) == [
        "",
        "Runbook",
        "Runbook > Rollback",
        "Runbook > Rollback > Known failures",
        "Runbook > Deploy",
        "Appendix",
    ]
    chunks = chunk_markdown(doc)
    assert chunks[2].text == "## Rollback\n\nSteps."
    assert chunks[3].trail == ("Runbook", "Rollback", "Known failures")


def test_hash_lines_in_code_fences_are_not_headings() -> None:
    doc = (
        "# Setup\n\n```bash\n# install\npip install x\n```\n\n"
        "~~~~\n## not a heading\n~~~\n## still code: a shorter fence does not close\n~~~~\n\n"
        "  ```\n# indented fence, still code\n  ```\n"
        "## Real\n\n#hashtag is text\n###\n"
    )
    assert trails(doc) == ["Setup", "Setup > Real", "Setup > Real > "]


def test_an_unclosed_fence_runs_to_the_end() -> None:
    assert trails("# A\n\n```\n# code\n\n## more code\n") == ["A"]


def test_skipped_levels_and_going_back_up() -> None:
    doc = "# A\n#### deep\nx\n## B\ny\n### C\nz\n# D\nw\n"
    assert trails(doc) == ["A", "A > deep", "A > B", "A > B > C", "D"]


def test_search_text_carries_the_headings_the_chunk_does_not_show() -> None:
    doc = "Intro.\n# Runbook\n\nx\n## Rollback\n\n" + "step one. " * 80 + "\n"
    chunks = chunk_markdown(doc, max_chars=300, overlap=50)
    assert [c.context for c in chunks[:3]] == [(), (), ("Runbook",)]
    assert chunks[0].search_text == "Intro."
    assert chunks[1].search_text == "# Runbook\n\nx"
    assert chunks[2].search_text == "Runbook\n" + chunks[2].text
    later = [c for c in chunks if c.heading == "Runbook > Rollback"][1:]
    assert later and all(c.search_text == "Runbook > Rollback\n" + c.text for c in later)


def test_heading_markup_is_kept_as_the_labels_keep_it() -> None:
    assert trails("# Index schema\n\n## Analyzer `english_folded`\n\ntext\n") == [
        "Index schema",
        "Index schema > Analyzer `english_folded`",
    ]


def test_no_headings_is_one_chunk_with_an_empty_trail() -> None:
    chunks = chunk_markdown("just some notes\nover two lines\n")
    assert chunks == [Chunk((), "just some notes\nover two lines", 0, 30)]
    assert chunks[0].heading == ""


def test_blank_documents_and_sections_make_no_chunks() -> None:
    assert chunk_markdown("") == []
    assert chunk_markdown("  \n\n\t\n") == []
    assert trails("# Empty\n\n## Full\ntext\n") == ["Empty", "Empty > Full"]


def test_crlf_line_endings() -> None:
    doc = "# A\r\nx\r\n## B\r\ny\r\n"
    chunks = chunk_markdown(doc)
    assert [c.heading for c in chunks] == ["A", "A > B"]
    assert all(doc[c.start : c.end] == c.text for c in chunks)


def test_long_sections_split_with_overlap_and_keep_their_trail() -> None:
    paragraphs = [f"Paragraph {i}: " + "lorem ipsum dolor sit amet " * 12 for i in range(10)]
    doc = "# Notes\n\n## Long\n\n" + "\n\n".join(paragraphs) + "\n\n## Short\n\nend\n"
    chunks = chunk_markdown(doc, max_chars=600, overlap=100)
    long = [c for c in chunks if c.heading == "Notes > Long"]
    assert len(long) >= 5
    assert long[0].text.startswith("## Long")
    for before, after in zip(long, long[1:], strict=False):
        assert after.start < before.end  # they overlap
        assert before.end - after.start <= 100
    assert all(len(c.text) <= 600 for c in chunks)
    assert chunks[-1].heading == "Notes > Short"


def test_a_long_line_without_spaces_is_cut_hard() -> None:
    chunks = chunk_markdown("x" * 2500, max_chars=1000, overlap=150)
    assert [(c.start, c.end) for c in chunks] == [(0, 1000), (850, 1850), (1700, 2500)]


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError):
        chunk_markdown("x", max_chars=100, overlap=60)


# --- properties -------------------------------------------------------------------------

_words = st.text(alphabet="abcdefgh #`~\t", min_size=0, max_size=30)
_blocks = st.one_of(
    st.tuples(st.just("heading"), st.integers(1, 6), st.text("abc `x", min_size=1, max_size=8)),
    st.tuples(st.just("text"), st.just(0), st.lists(_words, max_size=6).map("\n".join)),
    st.tuples(
        st.just("fence"),
        st.integers(3, 5),
        st.lists(st.sampled_from(["# in code", "## x", "text", "~~~", ""]), max_size=4).map(
            "\n".join
        ),
    ),
)


def _render(blocks: list[tuple[str, int, str]]) -> tuple[str, list[str]]:
    """A document and the trails of its sections that hold something, computed simply."""
    lines: list[str] = []
    expected: list[str] = []
    stack: list[tuple[int, str]] = []
    section_has_text = False
    current = ""
    for kind, n, body in blocks:
        if kind == "heading":
            if section_has_text:
                expected.append(current)
            while stack and stack[-1][0] >= n:
                stack.pop()
            title = body.strip()
            stack.append((n, title))
            current = " > ".join(t for _, t in stack)
            lines.append("#" * n + " " + body)
            section_has_text = True  # the heading line itself
        elif kind == "text":
            # Lines starting with "#" in free text could be headings: indent them past 3.
            for line in body.split("\n"):
                lines.append("    " + line if line.lstrip().startswith(("#", "`", "~")) else line)
            section_has_text = section_has_text or bool(body.strip())
        else:
            lines += ["`" * n, *body.split("\n"), "`" * n]
            section_has_text = True
    if section_has_text:
        expected.append(current)
    return "\n".join(lines) + "\n", expected


@settings(max_examples=300, deadline=None)
@given(st.lists(_blocks, max_size=12))
def test_trails_follow_headings_and_skip_fences(blocks: list[tuple[str, int, str]]) -> None:
    doc, expected = _render(blocks)
    assert trails(doc, max_chars=10_000, overlap=100) == expected


_any_text = st.text(
    alphabet=st.sampled_from(list("ab #`~\n\n\r. -") + ["é", "東", "\u2028"]), max_size=1500
)


@settings(max_examples=300, deadline=None)
@given(_any_text, st.integers(40, 400), st.data())
def test_offsets_cover_the_document(doc: str, max_chars: int, data: st.DataObject) -> None:
    overlap = data.draw(st.integers(0, max_chars // 2 - 1))
    chunks = chunk_markdown(doc, max_chars=max_chars, overlap=overlap)
    covered = [False] * len(doc)
    previous = None
    for c in chunks:
        assert doc[c.start : c.end] == c.text
        assert c.text == c.text.strip() and c.text
        assert len(c.text) <= max_chars
        if previous is not None:
            assert previous.start < c.start
        previous = c
        for i in range(c.start, c.end):
            covered[i] = True
    assert all(covered[i] or doc[i].isspace() for i in range(len(doc)))


def test_windows_fit_the_encoder_on_the_labelled_documents() -> None:
    """MAX_CHARS keeps every chunk of the labelled documents small (see the module doc)."""
    lines = (DATA / "docs_corpus.jsonl").read_text(encoding="utf-8").splitlines()
    docs = [json.loads(line) for line in lines]
    chunks = [c for d in docs for c in chunk_markdown(d["content"])]
    assert max(len(c.text) for c in chunks) <= MAX_CHARS
    assert OVERLAP_CHARS < MAX_CHARS // 2
    assert len(chunks) >= len(docs)


# --- snippets ---------------------------------------------------------------------------


def test_snippet_of_a_short_chunk_is_its_plain_text() -> None:
    text = "## Rollback\n\n- run `make rollback`\n- **then** purge the CDN"
    assert snippet(text, query_terms("rollback")) == "Rollback run make rollback then purge the CDN"


def test_snippet_keeps_identifiers_whole() -> None:
    text = "## Alert: `marts_stale`\n\nThe *fct_orders* mart is __late__ again."
    assert snippet(text, query_terms("marts_stale")) == (
        "Alert: marts_stale The fct_orders mart is late again."
    )


def test_snippet_finds_the_window_with_the_query_terms() -> None:
    text = (
        "# Payments\n\n"
        + "Unrelated words about the office plants and lunch. " * 12
        + "The refund webhook never arrived because the signing secret had rotated. "
        + "More unrelated words about holidays and travel plans. " * 12
    )
    got = snippet(text, query_terms("refund webhook signing secret"))
    assert "refund webhook never arrived because the signing secret" in got
    assert got.startswith("…") and got.endswith("…")
    assert len(got) <= 242
    assert "#" not in got and "\n" not in got


def test_snippet_without_matches_is_the_start() -> None:
    text = "First words here. " + "filler " * 100
    got = snippet(text, query_terms("absent"))
    assert got.startswith("First words here.") and got.endswith("…")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=800), st.lists(st.text(max_size=10), max_size=4))
def test_snippet_is_short_plain_text(text: str, words: list[str]) -> None:
    got = snippet(text, query_terms(" ".join(words)), width=120)
    assert len(got) <= 122
    assert "\n" not in got
