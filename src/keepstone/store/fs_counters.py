"""The filesystem store's quota counters: ``<root>/.keepstone-usage.json``, kept under the
writers' lock, healed from the files when in doubt.

The file holds the tree's total and one total per space (:class:`UsageState`). A mutation
marks it dirty (that rename made durable) before it changes the tree and writes it clean
after (:meth:`Counters.dirty`), so a writer that dies in between leaves a dirty file, and
the next writer (or reader of the counters) recounts from the files
(:meth:`Counters.recount_locked`). A missing or corrupt file is recounted the same way.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

from keepstone.quota import Counter, Limits, clamp, subcap_or_none
from keepstone.spaces import SpaceRef
from keepstone.store.fs_files import atomic_write, os_errors
from keepstone.store.fs_layout import STATE_FILE, UsageState
from keepstone.store.fs_tree import FileTree
from keepstone.store.fs_versions import TreeHistory


class Counters:
    """The counters of one filesystem store's tree (see the module doc)."""

    def __init__(self, tree: FileTree, history: TreeHistory, limits: Limits) -> None:
        self._tree = tree
        self._history = history
        self._limits = limits

    def peek(self) -> UsageState:
        """The counters as they are, without the lock unless they are dirty (then after
        the writer, or healed after a dead one)."""
        if not self._tree.root.is_dir():
            return UsageState(0, {})
        with os_errors(""):
            state = self._read()
            if state is not None and not state.dirty:
                return state
            with self._tree.locked():  # wait for the writer, or heal after a dead one
                return self.load_locked()

    def load_locked(self) -> UsageState:
        """The counters, recounted when missing, corrupt or dirty. Call under the lock."""
        state = self._read()
        if state is None or state.dirty:
            state = self.recount_locked()
        return state

    def recount_locked(self) -> UsageState:
        """Recompute every counter from the documents on disk and save them clean. Call
        under the lock."""
        # A writer that died between its file operation and its history insert left the
        # state dirty: the files are the truth (see keepstone.store.fs_versions).
        self._history.reconcile_locked()
        spaces: dict[str, int] = {}
        for ref in self._tree.spaces():
            total = sum(st.st_size for _, _, st in self._tree.walk_space(ref, ""))
            if total:
                spaces[ref.id] = total
        state = UsageState(sum(spaces.values()), spaces)
        self._save(state, sync_data=True, sync_dir=True)
        return state

    def check_quota(self, ref: SpaceRef, state: UsageState, delta: int) -> None:
        """Refuse ``delta`` more bytes in ``ref`` past its space's sub-cap or the tree's
        aggregate."""
        space_cap = subcap_or_none(self._limits.subcap(ref.visibility))
        Counter("space", state.spaces.get(ref.id, 0), space_cap).check(delta)
        Counter("tree", state.tree, self._limits.team_quota).check(delta)

    @staticmethod
    def charge(state: UsageState, ref: SpaceRef, delta: int) -> None:
        """Add ``delta`` to the tree's and the space's totals (a counter never goes below
        zero; an empty space has none)."""
        state.tree = clamp(state.tree + delta)
        used = clamp(state.spaces.get(ref.id, 0) + delta)
        if used:
            state.spaces[ref.id] = used
        else:
            state.spaces.pop(ref.id, None)

    def mutate(
        self, state: UsageState, ref: SpaceRef, delta: int, change: Callable[[], None]
    ) -> None:
        """Apply ``change`` (the file operation) and charge ``delta``, crash-safely."""
        with self.dirty(state, sync_clean=False):
            change()
            self.charge(state, ref, delta)

    @contextlib.contextmanager
    def dirty(self, state: UsageState, *, sync_clean: bool) -> Iterator[None]:
        """Mark the counters dirty for the block that changes the tree (and charges
        ``state``), then save them clean; when the block fails, recount.

        Only the *rename* of the dirty state must be durable (directory fsync): if its
        bytes were lost, the torn file fails to parse and is recounted just the same.
        A lost or torn write of the clean state leaves the dirty one: self-healing, so
        it is synced only when ``sync_clean``."""
        state.dirty = True
        self._save(state, sync_data=False, sync_dir=True)
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):
                self.recount_locked()
            raise
        state.dirty = False
        self._save(state, sync_data=sync_clean, sync_dir=sync_clean)

    def _read(self) -> UsageState | None:
        try:
            raw = (self._tree.root / STATE_FILE).read_bytes()
        except FileNotFoundError:
            return None
        return UsageState.parse(raw)

    def _save(self, state: UsageState, *, sync_data: bool, sync_dir: bool) -> None:
        fd = os.open(self._tree.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            atomic_write(fd, STATE_FILE, state.to_json(), sync_data=sync_data, sync_dir=sync_dir)
        finally:
            os.close(fd)
