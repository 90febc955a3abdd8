"""The access line written without a LogRecord is the line the logger would write, and it is
written so only while the logging setup is the one ``cairn serve`` installs."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cairn.api.app import create_app
from cairn.api.logs import JsonLinesHandler, configure, current_request_id, direct_handler
from tests.api.conftest import make_settings

FIELDS: dict[str, object] = {
    "request_id": "r-1",
    "method": "PUT",
    "route": "/api/memory/doc",
    "status": 201,
    "duration_ms": 0.85,
    "actor": "user:u1",
    "team": None,
}


@pytest.fixture
def configured() -> Iterator[io.StringIO]:
    """``configure()`` as ``cairn serve`` calls it, its stream captured; undone after."""
    root = logging.getLogger("cairn")
    saved = (root.handlers[:], root.level, root.propagate)
    configure()
    stream = io.StringIO()
    handler = root.handlers[0]
    assert isinstance(handler, JsonLinesHandler)
    handler.setStream(stream)
    try:
        yield stream
    finally:
        root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]


def _alone() -> None:
    """Only configure()'s handler on ``cairn``: pytest's capture adds its own for each
    phase of a test, after the fixture ran (it removes them itself)."""
    root = logging.getLogger("cairn")
    root.handlers[:] = [h for h in root.handlers if type(h) is JsonLinesHandler]


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_the_direct_line_is_the_loggers_line(configured: io.StringIO) -> None:
    _alone()
    access = logging.getLogger("cairn.access")
    handler = direct_handler(access)
    assert handler is not None

    access.info("request", extra=FIELDS)
    handler.write_fields(access.name, "request", FIELDS)
    token = current_request_id.set("outer")  # as the formatter, the request's id first
    try:
        access.info("request", extra={"method": "GET"})
        handler.write_fields(access.name, "request", {"method": "GET"})
    finally:
        current_request_id.reset(token)

    logged, direct, logged_in, direct_in = _lines(configured)
    for a, b in ((logged, direct), (logged_in, direct_in)):
        assert list(a) == list(b)  # the same keys in the same order
        assert {**a, "at": None} == {**b, "at": None}
    assert direct_in["request_id"] == "outer"


@pytest.mark.parametrize(
    "change",
    [
        "filter on the logger",
        "handler on the logger",
        "second handler",
        "handler level",
        "logger level",
        "propagates to root",
        "another handler class",
        "disabled",
    ],
)
def test_any_other_setup_logs_through_the_logger(configured: io.StringIO, change: str) -> None:
    _alone()
    access, root = logging.getLogger("cairn.access"), logging.getLogger("cairn")
    undo: list[tuple[object, str, object]] = []

    def setattr_(obj: object, name: str, value: object) -> None:
        undo.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    try:
        if change == "filter on the logger":
            setattr_(access, "filters", [logging.Filter("elsewhere")])
        elif change == "handler on the logger":
            setattr_(access, "handlers", [logging.NullHandler()])
        elif change == "second handler":
            setattr_(root, "handlers", [*root.handlers, logging.NullHandler()])
        elif change == "handler level":
            setattr_(root.handlers[0], "level", logging.WARNING)
        elif change == "logger level":
            setattr_(access, "level", logging.WARNING)
            logging.getLogger().manager._clear_cache()  # type: ignore[attr-defined]
        elif change == "propagates to root":
            setattr_(root, "propagate", True)
        elif change == "another handler class":
            setattr_(root, "handlers", [logging.StreamHandler(io.StringIO())])
        elif change == "disabled":
            setattr_(access, "disabled", True)
        assert direct_handler(access) is None
    finally:
        for obj, name, value in reversed(undo):
            setattr(obj, name, value)
        logging.getLogger().manager._clear_cache()  # type: ignore[attr-defined]
    assert direct_handler(access) is not None


def test_a_request_writes_one_access_line_directly(
    configured: io.StringIO, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _alone()
    direct: list[str] = []
    write = JsonLinesHandler.write_fields

    def spied(self: JsonLinesHandler, logger: str, message: str, fields: dict[str, object]) -> None:
        direct.append(logger)
        write(self, logger, message, fields)

    monkeypatch.setattr(JsonLinesHandler, "write_fields", spied)
    app = create_app(make_settings(f"sqlite:///{tmp_path}/cairn.db"))
    try:
        with TestClient(app) as client:
            r = client.get("/healthz", headers={"X-Request-ID": "abc-123"})
            assert r.status_code == 200
    finally:
        app.state.runtime.engine.dispose()
    access = [line for line in _lines(configured) if line["logger"] == "cairn.access"]
    assert [(a["request_id"], a["method"], a["route"], a["status"]) for a in access] == [
        ("abc-123", "GET", "/healthz", 200)
    ]
    assert direct == ["cairn.access"]
    assert list(access[0]) == ["at", "level", "logger", "message", *FIELDS]


def test_a_broken_stream_never_fails_the_request(
    configured: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    _alone()
    handler = direct_handler(logging.getLogger("cairn.access"))
    assert handler is not None
    configured.close()  # writing raises ValueError now
    reported: list[logging.LogRecord] = []
    monkeypatch.setattr(handler, "handleError", reported.append)
    handler.write_fields("cairn.access", "request", FIELDS)
    assert len(reported) == 1
