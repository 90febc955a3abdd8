"""How record text becomes search-index tokens, for records and queries alike.

Text becomes index tokens here, the same way for records and for queries, and for
both dialects: words (letters and digits) are case-folded, accents are folded away,
common English words are dropped, the rest are stemmed (Snowball English), and each
is prefixed with the team's key (:func:`cairn.records.schema.team_key`). A query can
therefore only name its own team's tokens: the team condition is *inside* the index
lookup, the index yields only that team's records, and ranking never sees another
team's rows. Expiry, repository and visibility conditions (and ``team_id`` again)
sit in the same statement, before ``LIMIT`` (see :mod:`cairn.records.sql`, which
runs it: FTS5 ``bm25()`` on SQLite, ``ts_rank_cd`` over a GIN index on PostgreSQL).
"""

from __future__ import annotations

import functools
import re
import unicodedata

import snowballstemmer  # type: ignore[import-untyped]

from cairn.records.schema import team_key

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
