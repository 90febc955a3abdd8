"""The access line written without a LogRecord is the line the logger would write, and it is
written so only while the logging setup is the one ``keepstone serve`` installs."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from keepstone.api.app import create_app
from keepstone.api.logs import JsonLinesHandler, configure, current_request_id, direct_handler
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
    """``configure()`` as ``keepstone serve`` calls it, its stream captured; undone after."""
    root = logging.getLogger("keepstone")
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
    """Only configure()'s handler on ``keepstone``: pytest's capture adds its own for each
    phase of a test, after the fixture ran (it removes them itself)."""
    root = logging.getLogger("keepstone")
    root.handlers[:] = [h for h in root.handlers if type(h) is JsonLinesHandler]


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_the_direct_line_is_the_loggers_line(configured: io.StringIO) -> None:
    _alone()
    access = logging.getLogger("keepstone.access")
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


_ACCESS, _KEEPSTONE = logging.getLogger("keepstone.access"), logging.getLogger("keepstone")

#: Each other setup: (what is changed, its attribute, the value it takes).
OTHER_SETUPS: dict[str, tuple[object, str, Callable[[], object]]] = {
    "filter on the logger": (_ACCESS, "filters", lambda: [logging.Filter("elsewhere")]),
    "handler on the logger": (_ACCESS, "handlers", lambda: [logging.NullHandler()]),
    "second handler": (
        _KEEPSTONE,
        "handlers",
        lambda: [*_KEEPSTONE.handlers, logging.NullHandler()],
    ),
    "handler level": (_KEEPSTONE, "level", lambda: logging.WARNING),
    "logger level": (_ACCESS, "level", lambda: logging.WARNING),
    "propagates to root": (_KEEPSTONE, "propagate", lambda: True),
    "another handler class": (
        _KEEPSTONE,
        "handlers",
        lambda: [logging.StreamHandler(io.StringIO())],
    ),
    "disabled": (_ACCESS, "disabled", lambda: True),
}


@pytest.mark.parametrize("change", OTHER_SETUPS)
def test_any_other_setup_logs_through_the_logger(
    configured: io.StringIO, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    _alone()
    target, name, value = OTHER_SETUPS[change]
    if change == "handler level":
        target = _KEEPSTONE.handlers[0]  # configure()'s, made by the fixture
    monkeypatch.setattr(target, name, value())
    _ACCESS.manager._clear_cache()  # levels are cached per logger
    assert direct_handler(_ACCESS) is None
    monkeypatch.undo()
    _ACCESS.manager._clear_cache()
    assert direct_handler(_ACCESS) is not None


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
    app = create_app(make_settings(f"sqlite:///{tmp_path}/keepstone.db"))
    try:
        with TestClient(app) as client:
            r = client.get("/healthz", headers={"X-Request-ID": "abc-123"})
            assert r.status_code == 200
    finally:
        app.state.runtime.engine.dispose()
    access = [line for line in _lines(configured) if line["logger"] == "keepstone.access"]
    assert [(a["request_id"], a["method"], a["route"], a["status"]) for a in access] == [
        ("abc-123", "GET", "/healthz", 200)
    ]
    assert direct == ["keepstone.access"]
    assert list(access[0]) == ["at", "level", "logger", "message", *FIELDS]


def test_a_broken_stream_never_fails_the_request(
    configured: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    _alone()
    handler = direct_handler(logging.getLogger("keepstone.access"))
    assert handler is not None
    configured.close()  # writing raises ValueError now
    reported: list[logging.LogRecord] = []
    monkeypatch.setattr(handler, "handleError", reported.append)
    handler.write_fields("keepstone.access", "request", FIELDS)
    assert len(reported) == 1
