"""The Markdown renderer shows agents' documents inert: raw HTML off, unsafe URLs dropped,
an allow-list of tags and attributes, links with rel=noopener noreferrer nofollow."""

from __future__ import annotations

import pytest

from keepstone.web.markdown import render


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
