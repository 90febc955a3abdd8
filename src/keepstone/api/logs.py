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
current_request_id: ContextVar[str | None] = ContextVar("keepstone_request_id", default=None)

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


class JsonLinesHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure` installs: :class:`JsonFormatter`'s lines on a stream.

    It also writes a line from its fields directly (:meth:`write_fields`), the same line
    the logger would write, for the access line of every request: a ``LogRecord``, the
    logger's and handler's dispatch and the formatter were a measurable share of a GET
    doc (docs/performance.md has the figure)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())

    def write_fields(self, logger: str, message: str, fields: dict[str, object]) -> None:
        """The line of an INFO record of ``logger`` with ``message`` and ``fields`` as its
        ``extra`` (keys that are a record's own attributes are not among them)."""
        out: dict[str, object] = {
            "at": datetime.now(UTC).isoformat(),
            "level": logging.getLevelName(logging.INFO).lower(),
            "logger": logger,
            "message": message,
        }
        request_id = current_request_id.get()
        if request_id is not None:
            out["request_id"] = request_id
        out.update(fields)
        line = orjson.dumps(out, default=str, option=orjson.OPT_NON_STR_KEYS).decode("utf-8")
        with self.lock:  # type: ignore[union-attr]
            try:
                self.stream.write(line + self.terminator)
                self.flush()
            except Exception:  # as emit(): a broken stream never fails the request
                self.handleError(logging.makeLogRecord({"msg": message, "name": logger}))


def direct_handler(logger: logging.Logger) -> JsonLinesHandler | None:
    """The handler that would write ``logger``'s INFO lines, when that is the one of
    :func:`configure` alone with nothing else to consult (no filter, no other handler,
    no level above INFO): then :meth:`JsonLinesHandler.write_fields` writes the line
    the logger would. Else None: log through ``logger``."""
    if logger.handlers or logger.filters or not logger.propagate:
        return None
    parent = logger.parent
    if parent is None or not logger.isEnabledFor(logging.INFO):
        return None
    handlers = parent.handlers
    if len(handlers) != 1 or parent.propagate or parent.filters:
        return None
    handler = handlers[0]
    if type(handler) is not JsonLinesHandler or handler.filters or handler.level > logging.INFO:
        return None
    return handler


def configure(level: int = logging.INFO) -> None:
    """Send ``keepstone.*`` logs to stderr as JSON lines (called by ``keepstone serve``)."""
    handler = JsonLinesHandler()
    root = logging.getLogger("keepstone")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
