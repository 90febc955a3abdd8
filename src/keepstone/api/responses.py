"""The JSON answer of the document routes, encoded by orjson.

The same bytes as Starlette's ``JSONResponse`` (compact separators, UTF-8 text as is),
encoded many times faster, which shows on listings and searches (docs/performance.md,
"The request path").
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi.responses import JSONResponse


class FastJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)
