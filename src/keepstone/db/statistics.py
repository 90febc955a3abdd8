"""Planner statistics after bulk changes (PostgreSQL).

PostgreSQL plans a query from the statistics ``ANALYZE`` gathers; until the autovacuum
daemon next runs (or never, where it is off), a table that a bulk import or a reindex
just filled is planned as the table it was before. The statements on the search path are
written so that their indexes drive them whatever the statistics say (docs/performance.md,
"Query plans"); :func:`refresh_statistics` is the second line: what changed a table in
bulk analyzes it once it has committed.

``ANALYZE`` reads a sample bounded by the statistics target (300 rows per unit of
``default_statistics_target``, 30,000 by default) however large the table, so its cost is
bounded; it is run only after changes of at least :data:`BULK_ROWS` rows. SQLite plans
without gathered statistics (it has no ``sqlite_stat1`` unless asked), so it is left as
it is.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from keepstone.db.engine import write_transaction

log = logging.getLogger(__name__)

#: A change of at least this many rows (documents imported, documents chunked, records
#: saved in one load) is followed by an ``ANALYZE`` of the tables it changed.
BULK_ROWS: Final = 200


def refresh_statistics(engine: Engine, tables: Sequence[str], changed_rows: int) -> bool:
    """``ANALYZE`` ``tables`` on PostgreSQL after a committed change of ``changed_rows``
    rows, when that is at least :data:`BULK_ROWS`; return whether it ran.

    The change is committed already, so a failure here (a lock wait cancelled, a
    connection lost) is logged and answers False rather than failing it.
    """
    if engine.dialect.name != "postgresql" or changed_rows < BULK_ROWS or not tables:
        return False
    quote = engine.dialect.identifier_preparer.quote
    statement = "ANALYZE " + ", ".join(quote(t) for t in tables)
    try:
        with write_transaction(engine, durable=False) as conn:
            conn.exec_driver_sql(statement)
    except sa.exc.DBAPIError as exc:
        log.warning("%s after a bulk change failed: %s", statement, str(exc).splitlines()[0])
        return False
    return True
