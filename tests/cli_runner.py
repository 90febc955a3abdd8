"""Running the ``keepstone`` command in tests: in process through ``keepstone.cli.main.main``
with pytest's ``capsys`` (:func:`run_cli`), or as a real subprocess (:func:`keepstone_argv`,
:func:`keepstone_env`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from keepstone.cli.main import main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``keepstone *argv`` in process: its exit code, stdout and stderr (argparse's own
    usage errors raise ``SystemExit``; their code is returned the same way)."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def run_memory(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``keepstone memory *argv`` in process (see :func:`run_cli`)."""
    return run_cli(capsys, "memory", *argv)


def keepstone_argv() -> list[str]:
    """The installed ``keepstone`` console script next to this interpreter (else ``-m``)."""
    script = Path(sys.executable).parent / "keepstone"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "keepstone.cli.main"]


def keepstone_env(home: Path, **settings: str) -> dict[str, str]:
    """This environment without any ``KEEPSTONE_*`` of ours, with ``KEEPSTONE_HOME=home``
    and ``settings`` (``KEEPSTONE_INDEXER="off"``, ...)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEPSTONE_")}
    env["KEEPSTONE_HOME"] = str(home)
    env.update(settings)
    return env
