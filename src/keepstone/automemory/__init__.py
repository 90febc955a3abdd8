"""Auto-memory: one persisted directory for an agent's own MEMORY.md (SPEC §9.3).

``keepstone run`` resolves one space (visibility ``bot``, name ``auto-memory``, project
= the repository root), materialises it into a directory, points the backend at
it, runs the command and folds the edits back — also when the command failed or was
interrupted.
"""

from keepstone.automemory.prompt import render_prompt
from keepstone.automemory.runner import RunOptions, run_command, run_with_auto_memory
from keepstone.automemory.space import (
    auto_memory_ref,
    decide_auto_memory,
    repository_root,
    resolve_bot_id,
)
from keepstone.automemory.sync import (
    Snapshot,
    SyncReport,
    fold_back,
    materialise,
    materialise_as_of,
    sync_deadline,
)

__all__ = [
    "RunOptions",
    "Snapshot",
    "SyncReport",
    "auto_memory_ref",
    "decide_auto_memory",
    "fold_back",
    "materialise",
    "materialise_as_of",
    "render_prompt",
    "repository_root",
    "resolve_bot_id",
    "run_command",
    "run_with_auto_memory",
    "sync_deadline",
]
