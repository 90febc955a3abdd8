"""``/docs`` and ``/redoc`` work offline.

Their pages loaded Swagger UI and ReDoc from a CDN (and fonts from Google), so without a
network they were blank. Keepstone now serves the assets itself, from a pinned package:
every URL the pages reference is same-origin, and each answers 200 with JavaScript,
CSS or an image. The app here is in-process (no socket, no network).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from fastapi.testclient import TestClient

from keepstone.api.app import app_for
from keepstone.config import Config
from keepstone.runtime import open_runtime

#: src="…", href="…" and spec-url="…" in the page, and the url: '…' / "…" the scripts are given.
_REFERENCES = re.compile(
    r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']|url\s*:\s*["']([^"']+)["']"""
)
_TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    home: Path = tmp_path_factory.mktemp("home")
    config = Config(home=home, database_url=f"sqlite:///{home / 'c.db'}", local=True)
    with TestClient(app_for(open_runtime(config))) as c:
        yield c


def _references(html: str) -> list[str]:
    return [a or b for a, b in _REFERENCES.findall(html)]


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_page_references_only_same_origin_urls(client: TestClient, page: str) -> None:
    got = client.get(page)
    assert got.status_code == 200
    assert got.headers["content-type"].startswith("text/html")
    refs = _references(got.text)
    assert refs, "the page loads its assets from somewhere"
    for ref in refs:
        parts = urlsplit(ref)
        assert not parts.scheme and not parts.netloc, f"{page} loads {ref} from elsewhere"
        assert ref.startswith("/"), ref
    # No CDN or font host named anywhere in the page, not only in attributes.
    for host in ("cdn.jsdelivr.net", "unpkg.com", "fonts.googleapis.com", "fastapi.tiangolo.com"):
        assert host not in got.text


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_every_asset_the_page_references_is_served(client: TestClient, page: str) -> None:
    html = client.get(page).text
    assets = [r for r in _references(html) if Path(urlsplit(r).path).suffix in _TYPES]
    kinds = {Path(urlsplit(r).path).suffix for r in assets}
    assert ".js" in kinds
    if page == "/docs":
        assert ".css" in kinds
    for ref in assets:
        got = client.get(urljoin(page, ref))
        assert got.status_code == 200, ref
        assert _TYPES[Path(urlsplit(ref).path).suffix] in got.headers["content-type"], ref
        assert len(got.content) > 1000, ref
    # The OpenAPI document the pages render is served too.
    spec = [r for r in _references(html) if r.endswith("openapi.json")]
    assert spec == ["/openapi.json"]
    assert client.get("/openapi.json").json()["info"]["title"] == "Keepstone"


def test_the_oauth2_redirect_page_still_answers(client: TestClient) -> None:
    got = client.get("/docs/oauth2-redirect")
    assert got.status_code == 200
    assert "cdn.jsdelivr.net" not in got.text


def test_an_unknown_asset_is_a_404_not_a_directory_listing(client: TestClient) -> None:
    assert client.get("/docs/assets/nothing-here.js").status_code == 404
    assert client.get("/docs/assets/").status_code == 404
    assert client.get("/docs/assets/../../pyproject.toml").status_code == 404
