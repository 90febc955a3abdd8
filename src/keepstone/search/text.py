"""The keyword side's text analysis: one function for documents, records and queries.

:func:`analyze` turns any text into index terms, and the same terms feed the reference
BM25 (:mod:`keepstone.search.bm25`) and both SQL dialects, so nothing about a word's
spelling can rank differently on SQLite and on PostgreSQL:

1. Unicode NFKC, then case folding (``Straße`` → ``strasse``), then accents folded
   away (NFKD, combining marks dropped: ``café`` → ``cafe``).
2. Words are runs of letters and digits (``e2e``, ``v2``, ``401`` are words; ``_``,
   ``-`` and ``.`` split them). Han and kana characters, written without spaces, are
   one term each, as Lucene's standard tokenizer does, so a CJK sentence is not one
   giant unmatchable "word"; Hangul, written with spaces, is kept in words.
3. Function words (:data:`STOPWORDS`: articles, pronouns, auxiliaries, conjunctions,
   question words, the commonest prepositions) are dropped. Words that carry meaning
   in a paraphrase — negations (``not``, ``no``), direction and time (``after``,
   ``before``, ``now``, ``over``), quantity (``all``, ``more``, ``few``) — are kept.
4. Snowball English stemming (``timeouts`` → ``timeout``); a word longer than
   :data:`MAX_WORD` (a hash, a base64 blob) is not a term.
5. Terms are ASCII: a term with other characters is spelled ``u`` + the hex of its
   UTF-8, which every SQL tokenizer keeps whole whatever its locale.

Each choice was measured on the three labelled sets (docs/search.md, "How it ranks"):
stemming gained recall@10 on records and chats and cost a little on documents; keeping
every word was the worst choice on every set, while dropping the function words,
dropping the usual longer list and down-weighting function words came out about even;
this one needs no weights in SQL and keeps the words paraphrases turn on.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

import snowballstemmer  # type: ignore[import-untyped]

#: Longer "words" (hashes, base64 blobs) are not terms.
MAX_WORD = 48
#: At most this many distinct terms of a query are searched (the rest are ignored).
MAX_QUERY_TERMS = 32

# Han ideographs, kana and the CJK symbol blocks: one term per character.
_CJK_CHARS = (
    "\u2e80-\u2fdf\u3005\u3007\u3021-\u3029\u3038-\u303c\u3040-\u30ff\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
)
_TOKEN = re.compile(rf"[{_CJK_CHARS}]|(?:(?![{_CJK_CHARS}])[^\W_])+")

#: English function words: dropped from documents and queries alike. Meaning-bearing
#: words of the usual longer lists (not, no, nor, after, before, again, now, once, until,
#: while, further, off, out, over, under, up, down, against, all, only, same, other, more,
#: most, few, very, too) are deliberately absent: a paraphrase often hinges on them.
STOPWORDS = frozenset(
    """a about also am an and any are as at be been being both but by can could did do
    does doesn don each for from had has have having he her here hers him his how i if
    in into is it its just me my of on or our own she should so some such t than that
    the their them then there these they this those through to was we were what when
    where which who whom why will with would you your""".split()
)

_stemmer = snowballstemmer.stemmer("english")


def fold(text: str) -> str:
    """``text`` case-folded and accent-folded (compatibility forms unified first)."""
    folded = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text).casefold())
    return unicodedata.normalize("NFC", "".join(c for c in folded if not unicodedata.combining(c)))


def _ascii(term: str) -> str:
    return term if term.isascii() else "u" + term.encode("utf-8").hex()


@functools.lru_cache(maxsize=131072)
def _stemmed(word: str) -> str:
    return _ascii(str(_stemmer.stemWord(word)))


@functools.lru_cache(maxsize=131072)
def _unstemmed(word: str) -> str:
    return _ascii(word)


@dataclass(frozen=True, slots=True)
class Analyzer:
    """A text-to-terms recipe. Keepstone uses one, :data:`ANALYZER`; the others exist so
    ``bench/bench_search_study.py`` can measure the alternatives."""

    stem: bool = True
    stopwords: frozenset[str] = STOPWORDS

    def spans(self, text: str) -> list[tuple[str, int, int]]:
        """Each term of ``text`` with the offsets of its word in ``fold(text)``."""
        folded = fold(text)
        term = _stemmed if self.stem else _unstemmed
        out: list[tuple[str, int, int]] = []
        for match in _TOKEN.finditer(folded):
            word = match.group()
            if len(word) > MAX_WORD or word in self.stopwords:
                continue
            out.append((term(word), match.start(), match.end()))
        return out

    def terms(self, text: str) -> list[str]:
        """The index terms of ``text``, in order, repeats kept."""
        return [term for term, _, _ in self.spans(text)]

    def query_terms(self, query: str) -> list[str]:
        """The distinct terms of ``query``, in order, at most :data:`MAX_QUERY_TERMS`."""
        seen: dict[str, None] = {}
        for term in self.terms(query):
            seen.setdefault(term, None)
            if len(seen) >= MAX_QUERY_TERMS:
                break
        return list(seen)


#: The analysis Keepstone indexes and searches with (chosen by measurement).
ANALYZER = Analyzer()


def analyze(text: str) -> list[str]:
    """The index terms of ``text`` (a document, a record or a query), repeats kept."""
    return ANALYZER.terms(text)


def query_terms(query: str) -> list[str]:
    """The distinct terms of ``query`` in order, at most :data:`MAX_QUERY_TERMS`."""
    return ANALYZER.query_terms(query)
