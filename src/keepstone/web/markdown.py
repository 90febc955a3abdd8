"""Markdown to HTML that is safe to show: agents write these documents.

Two locks, so a slip in one is caught by the other: markdown-it renders CommonMark with
raw HTML *disabled* (``<script>`` stays text), GitHub's tables and task lists added, and
its link check refuses ``javascript:``/``vbscript:``/``file:``/``data:`` URLs
(``data:image/png|gif|jpeg|webp`` aside, for images); then nh3 (the ammonia sanitiser)
keeps only an allow-list of tags and attributes and the URL schemes http, https and
mailto (relative links stay), and puts ``rel="noopener noreferrer nofollow"`` on every
link. No ``style`` and no event attribute survive, which the page's
Content-Security-Policy backs up. The few attributes kept beyond links and images take
only known values: a table cell's ``align`` (left, center, right), a task's checkbox
(always ``type="checkbox"`` and ``disabled``), and a code block's ``class`` when it is
``language-<name>``.
"""

from __future__ import annotations

import re

import nh3
from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token

#: The tags CommonMark and GitHub's tables and task lists produce (raw HTML off).
ALLOWED_TAGS = frozenset(
    {
        "a", "blockquote", "br", "code", "em", "h1", "h2", "h3", "h4", "h5", "h6",
        "hr", "img", "li", "ol", "p", "pre", "strong", "ul",
        "table", "thead", "tbody", "tr", "th", "td", "input",
    }
)  # fmt: skip
ALLOWED_ATTRIBUTES: dict[str, set[str]] = {
    "a": {"href", "title"},
    "img": {"src", "alt", "title"},
    "ol": {"start"},
    "code": {"class"},
}
#: Attributes kept only with one of these values (left out of ALLOWED_ATTRIBUTES).
ALLOWED_VALUES: dict[str, dict[str, set[str]]] = {
    "th": {"align": {"left", "center", "right"}},
    "td": {"align": {"left", "center", "right"}},
    "input": {"checked": {"", "checked"}},
}
#: What a task's checkbox always is, whatever the source says.
FORCED_VALUES = {"input": {"type": "checkbox", "disabled": "disabled"}}
URL_SCHEMES = frozenset({"http", "https", "mailto"})
LINK_REL = "noopener noreferrer nofollow"
_LANGUAGE = re.compile(r"language-[A-Za-z0-9_+#.-]{1,40}")
_ALIGN = re.compile(r"text-align:(left|center|right)")
_TASK = re.compile(r"\[([ xX])\] ")


def _code_class(tag: str, attribute: str, value: str) -> str | None:
    """A ``class`` is kept on ``code`` when it names a language, and nowhere else."""
    if attribute != "class":
        return value
    return value if tag == "code" and _LANGUAGE.fullmatch(value) else None


def _tables_and_tasks(state: StateCore) -> None:
    """A table cell's alignment as ``align`` (markdown-it writes a ``style``, which the
    sanitiser drops), and a list item opening with ``[ ]`` or ``[x]`` as a checkbox."""
    tokens = state.tokens
    for i, token in enumerate(tokens):
        if token.type in ("th_open", "td_open"):
            found = _ALIGN.fullmatch(str(token.attrs.pop("style", "")))
            if found:
                token.attrs["align"] = found.group(1)
        elif token.type == "inline" and i >= 2 and tokens[i - 2].type == "list_item_open":
            _task(token)


def _task(inline: Token) -> None:
    children = inline.children or []
    first = children[0] if children else None
    found = _TASK.match(first.content) if first is not None and first.type == "text" else None
    if first is None or found is None:
        return
    first.content = first.content[found.end() :]
    box = Token("html_inline", "", 0)
    checked = " checked" if found.group(1) in "xX" else ""
    box.content = f'<input type="checkbox" disabled{checked}> '
    children.insert(0, box)


_md = MarkdownIt("commonmark", {"html": False}).enable("table")
_md.core.ruler.push("keepstone_tables_and_tasks", _tables_and_tasks)


def render(text: str) -> str:
    """``text`` (Markdown) as sanitised HTML, ready to put into a page unescaped."""
    raw = _md.render(text)
    return nh3.clean(
        raw,
        tags=set(ALLOWED_TAGS),
        attributes=ALLOWED_ATTRIBUTES,
        tag_attribute_values=ALLOWED_VALUES,
        set_tag_attribute_values=FORCED_VALUES,
        attribute_filter=_code_class,
        url_schemes=set(URL_SCHEMES),
        link_rel=LINK_REL,
        strip_comments=True,
    )
