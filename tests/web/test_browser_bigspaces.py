"""A big space and the richer Markdown in a real headless Chromium against a real
``keepstone serve``, on SQLite and PostgreSQL (the fixtures of ``test_browser``): a space of
2,000 documents paged, sorted, filtered and a folder collapsed with scripts off; a table,
a task list and code rendered with XSS payloads in the cells inert; the light and dark
screenshots docs/ui.md shows (dark: ``prefers-color-scheme`` emulated over CDP)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.api.world import tarball
from tests.web.test_browser import (
    PASSWORD,
    Site,
    Tab,
    database,
    expect,
    people,
    shot,
    site,
)

__all__ = ["database", "people", "site"]  # the fixtures this module uses

pytestmark = [pytest.mark.browser, pytest.mark.slow]

BIG = 2_000
#: The dark palette's page background (keepstone.css, prefers-color-scheme: dark).
DARK_BG = "rgb(22, 24, 26)"


def _member_key(site: Site) -> dict[str, str]:
    with site.admin() as admin:
        made = admin.post(
            "/api/admin/api-keys",
            json={"user_id": site.users["member"], "team_id": site.team_id, "name": "big space"},
        )
        assert made.status_code == 201, made.text
        return {"Authorization": f"Bearer {made.json()['key']}"}


def _import_big(site: Site, space: dict[str, str]) -> None:
    archive = tarball({f"folder-{i % 4}/note-{i:04}.md": f"# {i}\n" for i in range(BIG)})
    r = httpx.post(
        f"{site.base}/api/memory/import",
        params=space,
        content=archive,
        headers={**_member_key(site), "Content-Type": "application/gzip"},
        timeout=120,
    )
    assert r.status_code < 300, r.text


def _dark(page: Any) -> None:
    """The page as a browser set to dark shows it (CDP ``Emulation.setEmulatedMedia``)."""
    cdp = page.context.new_cdp_session(page)
    cdp.send(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
    )
    expect(page.locator("body")).to_have_css("background-color", DARK_BG)


def _sign_in_without_scripts(browser: Any, site: Site) -> Any:
    context = browser.new_context(java_script_enabled=False)
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.set_viewport_size({"width": 1100, "height": 900})
    page.goto(f"{site.base}/signin")
    page.get_by_label("Email").fill(site.emails["member"])
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()
    return page


def test_a_space_of_2000_documents_pages_sorts_filters_and_collapses_without_scripts(
    browser: Any, site: Site
) -> None:
    space = {"name": "big", "project": "web"}
    _import_big(site, space)
    page = _sign_in_without_scripts(browser, site)
    try:
        page.goto(f"{site.base}/t/{site.team_id}/space?name=big&project=web")
        docs = page.get_by_role("navigation", name="Documents", exact=True)
        expect(docs.locator("a")).to_have_count(100)
        names = sorted(f"folder-{i % 4}/note-{i:04}.md" for i in range(BIG))
        expect(docs.locator("a").first).to_have_text(names[0].split("/")[1])
        shot(page, "space-big")
        # A folder collapses: its documents are hidden, no script involved.
        first_folder = docs.locator("details").first
        first_folder.locator("summary").click()
        expect(first_folder.locator("a").first).to_be_hidden()
        for _ in range(2):
            page.get_by_role("link", name="Next page").click()
        expect(docs.locator("a").first).to_have_text(names[200].split("/")[1])
        expect(page.get_by_role("link", name="First page")).to_be_visible()
        # By last change, then filtered to one.
        page.get_by_label("Sort by").select_option("updated")
        page.get_by_role("button", name="Show", exact=True).click()
        expect(docs.locator("details")).to_have_count(0)
        expect(docs.locator("a")).to_have_count(100)
        page.get_by_label("Path contains").fill("NOTE-1234")
        page.get_by_role("button", name="Show", exact=True).click()
        expect(docs.locator("a")).to_have_count(1)
        expect(docs.locator("a")).to_have_text("folder-2/note-1234.md")
        expect(docs).to_contain_text("B · changed")
        expect(page.locator("meter.doc")).to_have_count(0)
        # Scripts off, a document opens, and a search is a plain form too.
        docs.locator("a").first.click()
        expect(page.locator("article h1")).to_have_text("1234")
        page.goto(f"{site.base}/t/{site.team_id}/search?name=big&project=web")
        page.get_by_label("Search space big").fill("1234")
        page.get_by_role("button", name="Search", exact=True).click()
        expect(page.get_by_role("region", name="Documents")).to_contain_text("note-1234.md")
        page.goto(f"{site.base}/t/{site.team_id}/space?name=big&project=web")
        _dark(page)
        shot(page, "space-big-dark")
    finally:
        page.context.close()


PAYLOADS = (
    "| <script>window.__xss = 1</script> | <img src=x onerror=window.__xss=2> | [x](javascript:x) |"
)
TABLE = f"""# Deploy checklist

| step | who | done |
|:-----|:---:|-----:|
{PAYLOADS}
| roll out | ops | yes |

- [x] build the image
- [ ] tell the team <svg onload="window.__xss = 4">

```python
print("ship it")
```
"""


def test_a_table_task_list_and_code_render_with_payloads_inert(
    people: Callable[[], Tab],
) -> None:
    tab = people()
    site = tab.site
    r = httpx.put(
        f"{site.base}/api/memory/doc",
        params={"name": "notes", "project": "web", "path": "checklist.md"},
        json={"content": TABLE},
        headers=_member_key(site),
    )
    assert r.status_code in (200, 201), r.text
    page = tab.sign_in("member")
    page.goto(f"{site.base}/t/{site.team_id}/doc?name=notes&project=web&path=checklist.md")
    article = page.locator("article")
    expect(article.locator("table th")).to_have_count(3)
    expect(article.locator("table tbody tr")).to_have_count(2)
    expect(article.locator("th").nth(2)).to_have_css("text-align", "right")
    expect(article.locator("td").first).to_have_text("<script>window.__xss = 1</script>")
    expect(article.locator("td").nth(1)).to_contain_text("<img src=x")
    expect(article.locator("input[type=checkbox][disabled]")).to_have_count(2)
    expect(article.locator("input[type=checkbox]").first).to_be_checked()
    expect(article.locator("code.language-python")).to_have_text('print("ship it")\n')
    assert article.locator("img, svg, script, td a").count() == 0
    assert page.evaluate("window.__xss") is None
    shot(page, "document-table")
    _dark(page)
    shot(page, "document-table-dark")
