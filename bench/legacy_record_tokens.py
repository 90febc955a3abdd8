"""The records search tokens of Keepstone before records were ranked in the process (records
migration 1): team-prefixed, Snowball-stemmed words with the longer stop list. Kept here,
out of the product, only so ``bench_search_study.py`` can measure them beside the chosen
analysis (its "FTS5, the records tokens of today" rows); records now store
``keepstone.search.text.analyze`` terms (docs/search.md, "How it ranks").
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata

import snowballstemmer  # type: ignore[import-untyped]

#: At most this many distinct words of a query are searched (the rest are ignored).
MAX_TERMS = 32
#: Longer "words" (hashes, base64 blobs) are not indexed.
MAX_WORD = 48

_WORD = re.compile(r"[^\W_]+")

# Words too common to help ranking; dropping them keeps OR queries from touching
# most of a team's records.
STOPWORDS = frozenset(
    """a about after again all also am an and any are as at be been before being both
    but by can could did do does doesn don each few for from further had has have
    having he her here hers him his how i if in into is it its just me more most my
    no nor not now of off on once only or other our out over own same she should so
    some such t than that the their them then there these they this those through to
    too under until up very was we were what when where which while who whom why will
    with would you your""".split()
)

_stemmer = snowballstemmer.stemmer("english")


def team_key(team_id: str) -> str:
    """``t`` and 11 hex digits of SHA-256 of the team id: every token's prefix."""
    return "t" + hashlib.sha256(team_id.encode("utf-8")).hexdigest()[:11]


@functools.lru_cache(maxsize=65536)
def _token(word: str) -> str:
    """One folded word as its index form (without the team prefix)."""
    stem = str(_stemmer.stemWord(word))
    if not stem.isascii():
        # Every tokenizer keeps an ASCII letters-and-digits token whole, whatever the
        # database's locale; other scripts are spelled as the hex of their UTF-8.
        stem = "u" + stem.encode("utf-8").hex()
    return stem


def words(text: str) -> list[str]:
    """The searchable words of ``text``: folded, accent-free, stop words dropped."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return [w for w in _WORD.findall(folded) if w not in STOPWORDS and len(w) <= MAX_WORD]


def index_terms(team_id: str, text: str) -> str:
    """The ``terms`` column of a record: its words as the team's index tokens."""
    key = team_key(team_id)
    return " ".join(key + _token(w) for w in words(text))


def query_terms(team_id: str, query: str) -> list[str]:
    """The distinct index tokens of ``query`` for ``team_id``, in order."""
    key = team_key(team_id)
    seen: dict[str, None] = {}
    for w in words(query):
        seen.setdefault(key + _token(w), None)
        if len(seen) >= MAX_TERMS:
            break
    return list(seen)
