"""A migrated, empty SQLite database, copied for each test store that starts empty.

Migrating a new SQLite file runs every component's steps, each in its own durable
transaction: most of the cost of opening a store in a test that only needs an empty one
(the conformance suite opens hundreds). Each process migrates one file once, the first
time one is asked for, and copies it for every store after that; the store opened on the
copy finds every migration applied, as on any restart. The migrations themselves are
tested where they are the subject (``tests/unit/test_migrations.py``,
``tests/records/test_migration.py``), on files migrated step by step.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from pathlib import Path

_lock = threading.Lock()
_template: list[Path] = []


def _migrated() -> Path:
    """This process's migrated, empty database file (made on first use)."""
    with _lock:
        if not _template:
            from keepstone.db import make_engine
            from keepstone.schema import upgrade_all

            folder = Path(tempfile.mkdtemp(prefix="keepstone-template-"))
            atexit.register(shutil.rmtree, folder, True)
            path = folder / "template.db"
            engine = make_engine(f"sqlite:///{path}")
            try:
                upgrade_all(engine)
            finally:
                engine.dispose()  # the last connection checkpoints the WAL into the file
            _template.append(path)
        return _template[0]


def migrated_sqlite(path: Path) -> str:
    """The URL of the SQLite database at ``path``; where there is none yet, a copy of the
    template is put there first: every component's tables, empty, every migration
    recorded as applied."""
    if not path.exists():
        shutil.copyfile(_migrated(), path)
    return f"sqlite:///{path}"
