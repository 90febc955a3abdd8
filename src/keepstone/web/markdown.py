"""Markdown to HTML that is safe to show: agents write these documents.

Two locks, so a slip in one is caught by the other: markdown-it renders CommonMark with
raw HTML *disabled* (``<script>`` stays text) and its link check refuses
``javascript:``/``vbscript:``/``file:``/``data:`` URLs (``data:image/png|gif|jpeg|webp``
aside, for images); then nh3 (the ammonia sanitiser) keeps only an allow-list of tags and
attributes and the URL schemes http, https and mailto (relative links stay), and puts
``rel="noopener noreferrer nofollow"`` on every link. No ``style``, no event attribute,
no ``class`` survives, which the page's Content-Security-Policy backs up.
"""

from __future__ import annotations

import nh3
from markdown_it import MarkdownIt

#: The tags CommonMark produces (raw HTML off), and nothing else.
ALLOWED_TAGS = frozenset(
    {
        "a", "blockquote", "br", "code", "em", "h1", "h2", "h3", "h4", "h5", "h6",
        "hr", "img", "li", "ol", "p", "pre", "strong", "ul",
    }
)  # fmt: skip
ALLOWED_ATTRIBUTES: dict[str, set[str]] = {
    "a": {"href", "title"},
    "img": {"src", "alt", "title"},
    "ol": {"start"},
}
URL_SCHEMES = frozenset({"http", "https", "mailto"})
LINK_REL = "noopener noreferrer nofollow"

_md = MarkdownIt("commonmark", {"html": False})


def render(text: str) -> str:
    """``text`` (Markdown) as sanitised HTML, ready to put into a page unescaped."""
    raw = _md.render(text)
    return nh3.clean(
        raw,
        tags=set(ALLOWED_TAGS),
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=set(URL_SCHEMES),
        link_rel=LINK_REL,
        strip_comments=True,
    )
