"""``keepstone.db`` re-exports its modules' public names, each loaded on first use: every
name resolves to the object its module defines, and what needs only ``keepstone.db.files``
(the filesystem store's sidecars) loads no SQLAlchemy."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import keepstone.db

#: The modules whose names keepstone.db re-exports (its docstring lists them).
MODULES = ("files", "durability", "engine", "migrations", "statistics")


def test_every_exported_name_is_its_modules_object() -> None:
    modules = [importlib.import_module(f"keepstone.db.{m}") for m in MODULES]
    assert keepstone.db.__all__, "keepstone.db exports nothing"
    for name in keepstone.db.__all__:
        value = getattr(keepstone.db, name)
        homes = [m.__name__ for m in modules if getattr(m, name, None) is value]
        assert homes, f"{name} is none of its modules' objects"
    assert set(keepstone.db.__all__) <= set(dir(keepstone.db))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        keepstone.db.nothing_here  # noqa: B018 (the lookup is the test)


def test_the_file_helpers_load_no_sqlalchemy() -> None:
    code = (
        "import sys\n"
        "from keepstone.db import enter_wal, is_disk_full, DISK_FULL_MESSAGE\n"
        "print(sorted(m for m in ('sqlalchemy', 'numpy', 'keepstone.db.engine') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
