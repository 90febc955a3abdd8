"""Counting what a request costs the database: its transactions (SQLAlchemy engine and pool
events) and, on PostgreSQL, its round trips (:func:`round_trips`).

Two kinds count: a transaction begun on a SQLAlchemy ``Connection`` (its ``begin`` event),
and a statement run straight on a pooled driver connection in autocommit
(:func:`keepstone.db.on_pooled`, a transaction of its own), seen as a pool checkout that no
``Connection`` made (``checkout`` without ``engine_connect``)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine


class Transactions:
    """Counts the transactions begun on an engine while :meth:`during` runs."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def during(self, call: Callable[[], Any]) -> tuple[int, Any]:
        begun: list[int] = []
        checkouts: list[int] = []
        connections: list[int] = []

        def on_begin(_conn: Connection) -> None:
            begun.append(1)

        def on_checkout(*_args: Any) -> None:
            checkouts.append(1)

        def on_connect(_conn: Connection) -> None:
            connections.append(1)

        listeners = [("begin", on_begin), ("checkout", on_checkout), ("engine_connect", on_connect)]
        for name, listener in listeners:
            event.listen(self.engine, name, listener)
        try:
            result = call()
        finally:
            for name, listener in listeners:
                event.remove(self.engine, name, listener)
        pooled = len(checkouts) - len(connections)
        return len(begun) + pooled, result


def round_trips(engine: Engine, work: Callable[[], object]) -> int:
    """How many times the client waited for the server during ``work``: PostgreSQL's
    ReadyForQuery messages in libpq's trace of every connection ``work`` checked out,
    pool checkout and return included."""
    traces: list[tuple[Any, Any]] = []

    def on_checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        trace = tempfile.TemporaryFile()
        dbapi_conn.pgconn.trace(trace.fileno())
        traces.append((dbapi_conn.pgconn, trace))

    event.listen(engine, "checkout", on_checkout)
    try:
        work()
    finally:
        event.remove(engine, "checkout", on_checkout)
    count = 0
    for pgconn, trace in traces:
        pgconn.untrace()
        trace.seek(0)
        count += sum("\tReadyForQuery\t" in line for line in trace.read().decode().splitlines())
        trace.close()
    return count
