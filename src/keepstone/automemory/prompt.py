"""The ``# Auto memory`` system-prompt section for backends without auto-memory of
their own (claw, pi): the section IS the mechanism; their file tools do the rest."""

from __future__ import annotations

import os

#: How much of MEMORY.md goes into the prompt; the rest stays one file read away.
MAX_INDEX_LINES = 200


def render_prompt(directory: str | os.PathLike[str]) -> str:
    """Render the section for the memory directory ``directory`` (an absolute path)."""
    root = os.path.abspath(os.fspath(directory))
    index_path = os.path.join(root, "MEMORY.md")
    lines = [
        "# Auto memory",
        "",
        f"You have a persistent memory directory at `{root}`. Its contents are kept from one "
        "run to the next: whatever you write there, later runs of this bot in this repository "
        "will find.",
        "",
        "- `MEMORY.md` is the index: read it first; keep it short (what each other note holds, "
        "where you left off).",
        "- Put details in topic files next to it (for example `debugging.md`, `decisions.md`) "
        "and link them from `MEMORY.md`.",
        "- Use your ordinary file tools to read, create, edit and delete notes.",
        "- Record what you learned that is not obvious from the code: decisions and their "
        "reasons, pitfalls, commands that worked, where you left off. Update or remove notes "
        "that turn out to be wrong.",
        "- Only Markdown (`.md`) files are kept; other files and symlinks are dropped.",
        "- Never write credentials (API keys, tokens, private keys): a note containing one is "
        "not kept.",
    ]
    try:
        with open(index_path, encoding="utf-8", errors="replace") as fh:
            index = fh.read().splitlines()
    except OSError:
        index = None
    lines.append("")
    if index is None:
        lines.append("`MEMORY.md` does not exist yet; create it when you have something to keep.")
    else:
        lines += ["## MEMORY.md", "", *index[:MAX_INDEX_LINES]]
        if len(index) > MAX_INDEX_LINES:
            lines += [
                "",
                f"({len(index) - MAX_INDEX_LINES} more lines in MEMORY.md; read the file for "
                "the rest, and keep the index shorter)",
            ]
    return "\n".join(lines) + "\n"
