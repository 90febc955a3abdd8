"""The size of a page of an admin listing: what a caller gets unless it asks, and the most
it may ask for (the CLI's flags and the API's query parameters share them)."""

from __future__ import annotations

from typing import Final

#: A page's size unless the caller asks.
DEFAULT_PAGE: Final = 50
#: The most a caller may ask for.
MAX_PAGE: Final = 200
