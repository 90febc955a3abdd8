"""Counting the database transactions a request costs (SQLAlchemy engine events)."""

from __future__ import annotations

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

        def on_begin(_conn: Connection) -> None:
            begun.append(1)

        event.listen(self.engine, "begin", on_begin)
        try:
            result = call()
        finally:
            event.remove(self.engine, "begin", on_begin)
        return len(begun), result
