"""The keyword side's analysis (keepstone.search.text): one function for documents,
records and queries, whose terms both SQL dialects keep whole."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from keepstone.search.text import (
    ANALYZER,
    MAX_QUERY_TERMS,
    MAX_WORD,
    STOPWORDS,
    Analyzer,
    analyze,
    fold,
    query_terms,
)


def test_case_and_accents_fold() -> None:
    assert fold("Café NAÏVE Straße Ångström") == "cafe naive strasse angstrom"
    assert analyze("CAFÉ") == analyze("cafe") == ["cafe"]
    assert analyze("ﬁle") == analyze("file")  # compatibility ligature


def test_words_keep_digits_and_split_at_punctuation() -> None:
    assert analyze("e2e v2 HTTP/2 401 fct_orders x-request-id") == [
        "e2e",
        "v2",
        "http",
        "2",
        "401",
        "fct",
        "order",
        "x",
        "request",
        "id",
    ]


def test_snowball_stemming() -> None:
    assert analyze("timeouts retried deploying") == ["timeout", "retri", "deploy"]
    assert Analyzer(stem=False).terms("timeouts retried") == ["timeouts", "retried"]


def test_function_words_are_dropped_and_meaning_words_kept() -> None:
    assert analyze("What did we do after the outage") == ["after", "outag"]
    assert analyze("the deploy did not roll back before noon") == [
        "deploy",
        "not",
        "roll",
        "back",
        "befor",
        "noon",
    ]
    assert all(analyze(w) == [] for w in STOPWORDS)
    assert Analyzer(stopwords=frozenset()).terms("What did we do") == ["what", "did", "we", "do"]
    assert query_terms("no retries only once") == ["no", "retri", "onli", "onc"]


def test_a_query_of_function_words_only_has_no_terms() -> None:
    assert query_terms("what is it that you did") == []


def test_cjk_is_one_term_per_character() -> None:
    kanji = analyze("東京の障害")
    assert len(kanji) == 5
    assert analyze("障害") == kanji[3:]  # a query word finds the sentence
    assert len(analyze("한국어 문서")) == 2  # Hangul is written with spaces: words
    assert analyze("deploy東京") == ["deploy", *analyze("東京")]


def test_terms_are_ascii_and_overlong_words_are_dropped() -> None:
    assert analyze("Ελληνικά") == ["u" + "ελληνικα".encode().hex()]
    assert analyze("x" * (MAX_WORD + 1) + " ok") == ["ok"]


def test_query_terms_are_distinct_in_order_and_capped() -> None:
    assert query_terms("Deploy deploys DEPLOYED the") == ["deploy"]
    many = " ".join(f"w{i}" for i in range(100))
    assert query_terms(many) == [f"w{i}" for i in range(MAX_QUERY_TERMS)]


def test_the_module_functions_are_the_default_analyzer() -> None:
    text = "Rotated the signing secret; webhooks resumed"
    assert analyze(text) == ANALYZER.terms(text)
    assert query_terms(text) == ANALYZER.query_terms(text)


_TERM = re.compile(r"[a-z0-9]+")


@given(st.text(max_size=200))
def test_every_term_is_a_lowercase_ascii_word(text: str) -> None:
    # Both SQL tokenizers (FTS5 unicode61, PostgreSQL 'simple') keep such a token whole.
    for term in analyze(text):
        assert _TERM.fullmatch(term), term


@given(st.text(max_size=200))
def test_analysis_is_the_same_for_a_document_and_a_query(text: str) -> None:
    assert set(query_terms(text)) <= set(analyze(text))


@given(st.text(max_size=100), st.text(max_size=100))
def test_terms_of_joined_texts_are_the_terms_of_each(a: str, b: str) -> None:
    assert analyze(a + " " + b) == analyze(a) + analyze(b)


@given(st.text(max_size=200))
def test_spans_point_at_words_of_the_folded_text(text: str) -> None:
    folded = fold(text)
    for term, start, end in ANALYZER.spans(text):
        assert 0 <= start < end <= len(folded)
        assert ANALYZER.terms(folded[start:end]) == [term]
