"""Structured logs: one JSON object per line, with the request id when there is one.

Only fields put there on purpose are written (message, level, logger and the
``extra`` keys the code passes): never headers, bodies, cookies or tokens.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from datetime import UTC, datetime

import orjson

#: The id of the request being served, stamped on every log line written while it runs
#: (context variables follow the request into worker threads).
current_request_id: ContextVar[str | None] = ContextVar("cairn_request_id", default=None)

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object a line. orjson, not ``json``: every request writes an access
    line, and the encoding was most of the formatter's time (docs/performance.md)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "at": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = current_request_id.get()
        if request_id is not None:
            out["request_id"] = request_id
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str, option=orjson.OPT_NON_STR_KEYS).decode("utf-8")


def configure(level: int = logging.INFO) -> None:
    """Send ``cairn.*`` logs to stderr as JSON lines (called by ``cairn serve``)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("cairn")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
