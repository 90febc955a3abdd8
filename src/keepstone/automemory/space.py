"""Which space a run's auto-memory lives in, and whether it is on (SPEC §9.3)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from keepstone.agentconfig import AgentConfig, parse_bool_word
from keepstone.errors import InvalidRequest
from keepstone.spaces import AUTO_MEMORY_SPACE, SpaceRef, Visibility, encode_workdir_key


def repository_root(cwd: str | os.PathLike[str]) -> Path:
    """The nearest directory at or above ``cwd`` holding ``.git`` (a directory, or the
    file of a worktree); ``cwd`` itself when there is none.

    Keying on the repository root rather than the working directory is what lets a
    run started in a subdirectory, or a resume from elsewhere in the repository,
    find the same notes.
    """
    start = Path(os.path.realpath(os.fspath(cwd)))
    for candidate in (start, *start.parents):
        if (candidate / ".git").exists():
            return candidate
    return start


def resolve_bot_id(flag: str | None, config: AgentConfig | None) -> str:
    """``--bot``, else the config's ``scope.bot``, else the config file's directory name."""
    if flag:
        return flag
    if config is not None:
        if config.memory is not None and config.memory.bot:
            return config.memory.bot
        name = config.directory_name
        if name:
            return name
    raise InvalidRequest(
        "auto-memory needs a bot id: pass --bot ID, or --config FILE with memory.scope.bot"
    )


def decide_auto_memory(
    flag: str | None, config: AgentConfig | None, environ: Mapping[str, str]
) -> bool:
    """Precedence: ``--auto-memory`` → the config's ``auto_memory`` → ``KEEPSTONE_AUTO_MEMORY``
    → off. An invalid value at any level is an error naming where it came from."""
    if flag is not None:
        value = parse_bool_word(flag)
        if value is None:
            raise InvalidRequest(f"--auto-memory takes on or off, not {flag!r}")
        return value
    if config is not None and config.auto_memory is not None:
        return config.auto_memory
    raw = environ.get("KEEPSTONE_AUTO_MEMORY")
    if raw is not None and raw.strip() != "":
        # An environment variable may also say 1/0, as environment switches often do.
        value = {"1": True, "0": False}.get(raw.strip(), parse_bool_word(raw))
        if value is None:
            raise InvalidRequest(f"KEEPSTONE_AUTO_MEMORY={raw!r} is not on or off")
        return value
    return False


def auto_memory_ref(bot: str, cwd: str | os.PathLike[str], *, tenant: str = "") -> SpaceRef:
    """The one auto-memory space: visibility bot, name ``auto-memory``, project = the
    encoded repository root of ``cwd``."""
    return SpaceRef.build(
        Visibility.BOT,
        AUTO_MEMORY_SPACE,
        tenant=tenant,
        project=encode_workdir_key(repository_root(cwd)),
        bot=bot,
    )
