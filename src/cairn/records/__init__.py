"""Team memory records (SPEC §6): short summaries of finished work for one team.

The Python API the host application's server code uses::

    from cairn import records
    record = records.save(engine, team_id, "Fixed the flaky deploy ...", repo_id=repo)
    records.purge_expired(engine)   # schedule it; the server does so itself

Everything else (search, list, delete, settings) lives in
:mod:`cairn.records.service`, behind :func:`cairn.records.access.resolve`.
"""

from __future__ import annotations

from cairn.records.service import Record, purge_expired, save, save_many, set_enabled

__all__ = ["Record", "purge_expired", "save", "save_many", "set_enabled"]
