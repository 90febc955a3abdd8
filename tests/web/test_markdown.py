"""The Markdown renderer shows agents' documents inert: raw HTML off, unsafe URLs dropped,
an allow-list of tags and attributes, links with rel=noopener noreferrer nofollow."""

from __future__ import annotations

import re

import pytest

from keepstone.web.markdown import ALLOWED_TAGS, render


def test_headings_lists_code_and_links_render() -> None:
    html = render("# Title\n\n- one\n- two\n\n`code` and [site](https://example.com)")
    assert "<h1>Title</h1>" in html
    assert "<li>one</li>" in html
    assert "<code>code</code>" in html
    assert '<a href="https://example.com" rel="noopener noreferrer nofollow">site</a>' in html


@pytest.mark.parametrize(
    "source",
    [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "<svg><script>alert(1)</script></svg>",
        "<svg onload=alert(1)>",
        '<a href="javascript:alert(1)">x</a>',
        "<iframe src=https://example.com></iframe>",
        "<style>body{display:none}</style>",
        "</textarea><script>alert(1)</script>",
        "<div style='position:fixed'>x</div>",
    ],
)
def test_raw_html_is_text(source: str) -> None:
    html = render(source)
    for live in ("<script", "<img", "<svg", "<a ", "<iframe", "<style", "<div", "</textarea"):
        assert live not in html, html
    assert "&lt;" in html  # shown, as text


@pytest.mark.parametrize(
    "source",
    [
        "[x](javascript:alert(1))",
        "[x](JaVaScRiPt:alert(1))",
        "[x](vbscript:msgbox(1))",
        "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
        "[x](file:///etc/passwd)",
        "<javascript:alert(1)>",
        "[x]: javascript:alert(1)\n\n[y][x]",
    ],
)
def test_unsafe_link_schemes_never_become_links(source: str) -> None:
    html = render(source)
    assert "href" not in html, html
    assert "javascript:" not in html.lower().replace("&lt;", "<") or "<a" not in html


def test_data_images_and_event_attributes_are_dropped() -> None:
    html = render('![pic](data:image/png;base64,iVBORw0KGgo=) ![t](https://e.com/a.png "t")')
    assert "data:" not in html  # the sanitiser allows http, https and mailto only
    assert '<img src="https://e.com/a.png" alt="t" title="t">' in html
    assert "on" + "error" not in html


def test_mailto_and_relative_links_stay() -> None:
    html = render("[mail](mailto:a@example.com) [rel](notes/other.md)")
    assert 'href="mailto:a@example.com"' in html
    assert 'href="notes/other.md"' in html


# --- tables, task lists, fenced code -------------------------------------------------------


def test_a_table_renders_with_its_alignment_as_align() -> None:
    html = render("| a | b | c | d |\n|:--|:-:|--:|---|\n| 1 | 2 | 3 | 4 |")
    assert "<table>" in html and "<thead>" in html and "<tbody>" in html
    assert '<th align="left">a</th>' in html and '<th align="center">b</th>' in html
    assert '<td align="right">3</td>' in html and "<td>4</td>" in html
    assert "style" not in html


def test_task_list_items_are_disabled_checkboxes() -> None:
    html = render("- [ ] todo\n- [x] done\n- [X] also\n- not a task\n\n[ ] not in a list")
    assert html.count('type="checkbox"') == 3
    assert html.count('disabled="disabled"') == 3 and html.count("checked") == 2
    assert "<li>not a task</li>" in html and "<p>[ ] not in a list</p>" in html


def test_a_fenced_block_keeps_its_language_as_a_class() -> None:
    html = render("```python\nprint('x')\n```\n\n```\nplain\n```")
    assert '<pre><code class="language-python">' in html
    assert "<pre><code>plain" in html


TABLE_CELL_PAYLOADS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[x](javascript:alert(1))",
    '<td style="background:url(javascript:alert(1))">',
    "<input type=text autofocus onfocus=alert(1)>",
    "<th align=justify onclick=alert(1)>",
]


@pytest.mark.parametrize("payload", TABLE_CELL_PAYLOADS)
def test_payloads_in_table_cells_stay_text(payload: str) -> None:
    cell = payload.replace("|", "\\|")
    html = render(f"| head {cell} |\n|:-:|\n| {cell} |")
    _inert(html)
    assert html.count("<td ") == 1 and html.count("<th ") == 1


@pytest.mark.parametrize("payload", TABLE_CELL_PAYLOADS)
def test_payloads_in_task_list_items_stay_text(payload: str) -> None:
    html = render(f"- [ ] {payload}\n- [x] {payload}")
    _inert(html)
    assert html.count("<input") == 2 and 'type="text"' not in html


@pytest.mark.parametrize(
    "info",
    [
        'python" onmouseover="alert(1)',
        "python><script>alert(1)</script>",
        "language-x onclick=alert(1)",
        "js' autofocus onfocus='alert(1)",
        "a" * 80,
    ],
)
def test_payloads_in_a_code_info_string_never_become_attributes(info: str) -> None:
    html = render(f"```{info}\ncode\n```")
    _inert(html)
    classes = re.findall(r'class="([^"]*)"', html)
    assert all(re.fullmatch(r"language-[A-Za-z0-9_+#.-]{1,40}", c) for c in classes), html


def _inert(html: str) -> None:
    """Every element is one the allow-list holds, with no event, style or focus attribute,
    and every input a disabled checkbox: a payload is text, never markup."""
    for name, attributes in re.findall(r"<([a-zA-Z][a-zA-Z0-9]*)([^>]*)>", html):
        assert name in ALLOWED_TAGS, html
        assert not re.search(r"\b(on[a-z]+|style|autofocus|formaction)\s*=?", attributes), html
        if name == "input":
            assert 'type="checkbox"' in attributes and 'disabled="disabled"' in attributes
        if name in ("th", "td"):
            assert attributes in ("", ' align="left"', ' align="center"', ' align="right"'), html
