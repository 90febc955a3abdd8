"""Ranked full-text search over one team's records, in one indexed query per dialect.

Text becomes index tokens here, the same way for records and for queries, and for
both dialects: words (letters and digits) are case-folded, accents are folded away,
common English words are dropped, the rest are stemmed (Snowball English), and each
is prefixed with the team's key (:func:`cairn.records.schema.team_key`). A query can
therefore only name its own team's tokens: the team condition is *inside* the index
lookup, the index yields only that team's records, and ranking never sees another
team's rows. Expiry, repository and visibility conditions (and ``team_id`` again)
sit in the same statement, before ``LIMIT``.

* SQLite: FTS5 ``MATCH '"t…w1" OR "t…w2" …'`` ranked by ``bm25()``.
* PostgreSQL: ``tsv @@ to_tsquery('simple', 't…w1 | t…w2 …')`` on the GIN index,
  ranked by ``ts_rank_cd``.

Query words are OR-ed, so a record matching some of them is still found; ranking puts
records matching more (and rarer) words first.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import snowballstemmer  # type: ignore[import-untyped]
import sqlalchemy as sa
from sqlalchemy.engine import Connection

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


@dataclass(frozen=True, slots=True)
class SearchRow:
    id: str
    repo_id: str | None
    created_at: datetime
    text: str
    score: float


def visibility_clause(project_ids: frozenset[str] | None, params: dict[str, object]) -> str:
    """SQL condition on ``r.repo_id`` for a member limited to ``project_ids``.

    Unlimited (None): no condition. Limited: only records whose repository belongs
    to one of the projects; a record with no repository never qualifies.
    """
    if project_ids is None:
        return ""
    if not project_ids:
        return " AND 1 = 0"
    names = []
    for i, pid in enumerate(sorted(project_ids)):
        params[f"vp{i}"] = pid
        names.append(f":vp{i}")
    return (
        " AND r.repo_id IN (SELECT rp.id FROM repos rp WHERE rp.team_id = :team"
        f" AND rp.project_id IN ({', '.join(names)}))"
    )


def search_rows(
    conn: Connection,
    *,
    team_id: str,
    terms: Sequence[str],
    repo_id: str | None,
    project_ids: frozenset[str] | None,
    limit: int,
    now: datetime,
) -> list[SearchRow]:
    """The team's best ``limit`` unexpired records for ``terms`` (from
    :func:`query_terms` for the same team), best first."""
    if not terms:
        return []
    params: dict[str, object] = {"team": team_id, "limit": limit}
    where = " AND r.team_id = :team AND r.expires_at > :now"
    if repo_id is not None:
        where += " AND r.repo_id = :repo"
        params["repo"] = repo_id
    where += visibility_clause(project_ids, params)
    if conn.dialect.name == "sqlite":
        params["match"] = " OR ".join(f'"{t}"' for t in terms)
        sql = (
            "SELECT r.id, r.repo_id, r.created_at, r.text, bm25(records_fts) AS rank"
            " FROM records_fts JOIN records AS r ON r.rowid_ = records_fts.rowid"
            " WHERE records_fts MATCH :match" + where + " ORDER BY rank, r.created_at DESC"
            " LIMIT :limit"
        )
        sign = -1.0  # bm25() is lower-is-better
    else:
        params["q"] = " | ".join(terms)
        sql = (
            "SELECT r.id, r.repo_id, r.created_at, r.text, ts_rank_cd(r.tsv, q.q) AS rank"
            " FROM records AS r, to_tsquery('simple', :q) AS q(q)"
            " WHERE r.tsv @@ q.q" + where + " ORDER BY rank DESC, r.created_at DESC LIMIT :limit"
        )
        sign = 1.0
    stmt = (
        sa.text(sql)
        .bindparams(sa.bindparam("now", type_=sa.DateTime(timezone=True)))
        .columns(
            sa.column("id", sa.String),
            sa.column("repo_id", sa.String),
            sa.column("created_at", sa.DateTime(timezone=True)),
            sa.column("text", sa.Text),
            sa.column("rank", sa.Float),
        )
    )
    params["now"] = now
    rows = conn.execute(stmt, params).all()
    return [
        SearchRow(row.id, row.repo_id, row.created_at, row.text, sign * float(row.rank))
        for row in rows
    ]
