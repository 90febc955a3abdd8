"""Claude's memory tool (``memory_20250818``) backed by a Keepstone space
(docs/integrations/anthropic.md).

:class:`KeepstoneMemoryTool` and :class:`AsyncKeepstoneMemoryTool` are the ``anthropic`` SDK's
``BetaAbstractMemoryTool`` and ``BetaAsyncAbstractMemoryTool`` over a
:class:`~keepstone.Memory` / :class:`~keepstone.AsyncMemory`, local or on a server. The model
sees a tree under ``/memories``: ``/memories/a/b.md`` is the space's document ``a/b.md``, a
directory is a path prefix that some document lies under, and a name is one or the other,
never both (nothing is created over a directory or under a file).

Every command answers with the text of the SDK's own ``BetaLocalFilesystemMemoryTool`` and
refuses with its ``ToolError`` wording, so a model that learned the reference reads the same
thing. Where a space differs from a folder, the difference is said, not hidden:

- the space holds Markdown only: a file named without ``.md`` is refused with a tool error
  that says so;
- a directory's size in a listing is the bytes of the documents under it (a folder's is the
  filesystem's, which says nothing);
- ``rename`` and ``delete`` of a directory move or delete each document under it, one
  ordinary move or delete each, with its history;
- the space's own refusals (quota, secrets, deceptive characters, invalid paths, a change
  made meanwhile, a server out of reach) are tool errors ``Cannot <command> <path>
  (<code>): <message>``, the code and message of :mod:`keepstone.errors`.

Changes are conditional: ``create`` writes only where no document is, ``str_replace`` is a
:meth:`~keepstone.Memory.edit` and ``insert`` a write, both on the etag the command read, so
a change made meanwhile is never overwritten (the command is redone on the new text, a few
times at most).
"""

from __future__ import annotations

import asyncio
import functools
import posixpath
import unicodedata
from collections.abc import Callable, Iterable
from typing import TypeVar

try:
    from anthropic.lib.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool, ToolError
    from anthropic.types.beta import (
        BetaCacheControlEphemeralParam,
        BetaMemoryTool20250818CreateCommand,
        BetaMemoryTool20250818DeleteCommand,
        BetaMemoryTool20250818InsertCommand,
        BetaMemoryTool20250818RenameCommand,
        BetaMemoryTool20250818StrReplaceCommand,
        BetaMemoryTool20250818ViewCommand,
    )
except ImportError as exc:
    raise ImportError(
        "keepstone.integrations.anthropic needs the anthropic SDK (0.84 or later): "
        "pip install 'keepstone[anthropic]'"
    ) from exc

from keepstone.documents import Document, DocumentInfo
from keepstone.errors import (
    AlreadyExists,
    InvalidPath,
    KeepstoneError,
    NotFound,
    PreconditionFailed,
)
from keepstone.paths import shown
from keepstone.sdk import AsyncMemory, Memory

__all__ = ["AsyncKeepstoneMemoryTool", "KeepstoneMemoryTool"]

#: The directory the model's paths live under.
ROOT = "/memories"
#: The reference's line numbering: right-aligned to the width of its line limit.
_MAX_LINES = 999_999
_LINE_NUMBER_WIDTH = len(str(_MAX_LINES))
#: How often a conditional change that lost a race is redone on the new text.
_ATTEMPTS = 3
_MARKDOWN_ONLY = "this memory holds Markdown documents only: every file name ends in .md"

Command = (
    BetaMemoryTool20250818ViewCommand
    | BetaMemoryTool20250818CreateCommand
    | BetaMemoryTool20250818StrReplaceCommand
    | BetaMemoryTool20250818InsertCommand
    | BetaMemoryTool20250818DeleteCommand
    | BetaMemoryTool20250818RenameCommand
)
C = TypeVar("C", bound=Command)
T = TypeVar("T")


def _refusals(method: Callable[[T, C], str]) -> Callable[[T, C], str]:
    """``method`` with the space's refusals raised as the ``ToolError`` the model reads."""

    @functools.wraps(method)
    def run(self: T, command: C) -> str:
        try:
            return method(self, command)
        except KeepstoneError as exc:
            raise ToolError(f"Cannot {_what(command)} ({exc.code}): {exc.message}") from exc

    return run


def _what(command: Command) -> str:
    if isinstance(command, BetaMemoryTool20250818RenameCommand):
        return f"rename {shown(command.old_path)} to {shown(command.new_path)}"
    return f"{command.command} {shown(command.path)}"


class KeepstoneMemoryTool(BetaAbstractMemoryTool):
    """Claude's memory tool over one space: hand it to ``client.beta.messages.tool_runner``
    (``tools=[KeepstoneMemoryTool(memory)]``). ``memory`` is a :class:`~keepstone.Memory`;
    ``cache_control`` is the SDK's, passed on in the tool's definition."""

    def __init__(
        self, memory: Memory, *, cache_control: BetaCacheControlEphemeralParam | None = None
    ) -> None:
        if not isinstance(memory, Memory):
            raise TypeError(
                f"KeepstoneMemoryTool takes a keepstone Memory, not {type(memory).__name__}; "
                "for an AsyncMemory use AsyncKeepstoneMemoryTool"
            )
        super().__init__(cache_control=cache_control)
        self.memory = memory

    @_refusals
    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        path = command.path
        rel = _space_path(path)
        doc = self._document(rel)
        if doc is not None:
            return _file_view(path, doc.content, command.view_range)
        under = self.memory.list(rel)
        if rel and not under:
            raise _absent(path, rel, please=True)
        return _directory_view(path, rel, under)

    @_refusals
    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        path = command.path
        rel = _space_path(path)
        if not rel or self._is_directory(rel):
            raise ToolError(f"File {path} already exists")
        _require_markdown("create", path, rel)
        self._require_directories(command, rel)
        try:
            self.memory.write(rel, command.file_text, create_only=True)
        except PreconditionFailed:
            raise ToolError(f"File {path} already exists") from None
        return f"File created successfully at: {path}"

    @_refusals
    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        path, old, new = command.path, command.old_str, command.new_str
        rel = _space_path(path)

        def replace() -> str:
            doc = self._file(path, rel)
            _require_unique(path, doc.content, old)
            self.memory.edit(rel, old, new, if_match=doc.etag)
            return _replace_snippet(doc.content, old, new)

        return _until_applied(replace)

    @_refusals
    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        path = command.path
        rel = _space_path(path)

        def insert() -> str:
            doc = self._file(path, rel)
            text = _inserted(doc.content, command.insert_line, command.insert_text)
            self.memory.write(rel, text, if_match=doc.etag)
            return f"The file {path} has been edited."

        return _until_applied(insert)

    @_refusals
    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        path = command.path
        rel = _space_path(path)
        if not rel:
            raise ToolError("Cannot delete the /memories directory itself")
        # No document there: perhaps a directory named like one, listed below.
        if _is_document_name(rel) and self._deleted(rel):
            return f"Successfully deleted {path}"
        under = self.memory.list(rel)
        if not under:
            raise _absent(path, rel)
        self._delete_each(under)
        return f"Successfully deleted {path}"

    @_refusals
    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        old, new = command.old_path, command.new_path
        old_rel, new_rel = _space_path(old), _space_path(new)
        if not old_rel:
            raise ToolError("Cannot rename the /memories directory itself")
        if not new_rel or self._exists(new_rel):
            raise ToolError(f"The destination {new} already exists")
        done = f"Successfully renamed {old} to {new}"
        if self._document(old_rel) is not None:
            _require_markdown(f"rename {old} to", new, new_rel)
            self._require_directories(command, new_rel)
            try:
                self.memory.move(old_rel, new_rel)
            except AlreadyExists:
                raise ToolError(f"The destination {new} already exists") from None
            return done
        under = self.memory.list(old_rel)
        if not under:
            raise _absent(old, old_rel)
        if new_rel.startswith(old_rel + "/"):
            raise ToolError(f"Cannot move the directory {old} into itself ({new})")
        self._require_directories(command, new_rel)
        for info in under:
            self.memory.move(info.path, new_rel + info.path[len(old_rel) :])
        return done

    def clear_all_memory(self) -> str:
        """Delete every document of the space (each an ordinary delete, kept in its history)."""
        try:
            self._delete_each(self.memory.list())
        except KeepstoneError as exc:
            raise ToolError(f"Cannot clear the memory ({exc.code}): {exc.message}") from exc
        return "All memory cleared"

    # --- The space, as the tree the model sees -------------------------------------------

    def _document(self, rel: str) -> Document | None:
        """The document at ``rel`` when the name can be one and it exists, else None."""
        if not _is_document_name(rel):
            return None
        try:
            return self.memory.read(rel)
        except NotFound:
            return None

    def _exists(self, rel: str) -> bool:
        """Whether ``rel`` is a document or a directory (a prefix some document lies under)."""
        return self._document(rel) is not None or self._is_directory(rel)

    def _is_directory(self, rel: str) -> bool:
        """Whether some document lies under ``rel``; a name the space cannot hold holds
        none (the write that follows refuses it with the path's own reason)."""
        try:
            return bool(self.memory.list(rel, limit=1))
        except InvalidPath:
            return False

    def _require_directories(self, command: Command, rel: str) -> None:
        """Refuse to put something at ``rel`` when a directory of its path is a document:
        a name is a file or a directory, never both, so ``view``, ``rename`` and
        ``delete`` of it act on all of it. The reference cannot make such a path either
        (its filesystem fails with "Not a directory"); the refusal names the file."""
        parent = posixpath.dirname(rel)
        while parent:
            if self._document(parent) is not None:
                raise ToolError(
                    f"Cannot {_what(command)}: {ROOT}/{shown(parent)} is a file, not a directory"
                )
            parent = posixpath.dirname(parent)

    def _file(self, path: str, rel: str) -> Document:
        """The document the model names as a file, or the reference's error for a directory
        or a path that names nothing."""
        doc = self._document(rel)
        if doc is not None:
            return doc
        if not rel or self.memory.list(rel):
            raise ToolError(f"The path {path} is not a file.")
        raise _absent(path, rel, please=True)

    def _delete_each(self, infos: Iterable[DocumentInfo]) -> None:
        for info in infos:
            self._deleted(info.path)  # one deleted meanwhile: what was asked holds

    def _deleted(self, rel: str) -> bool:
        """Delete the document ``rel``; False when there was none to delete."""
        try:
            self.memory.delete(rel)
        except NotFound:
            return False
        return True


class AsyncKeepstoneMemoryTool(BetaAsyncAbstractMemoryTool):
    """:class:`KeepstoneMemoryTool` for ``AsyncAnthropic``'s tool runner: each command runs
    the synchronous one in a worker thread, as :class:`~keepstone.AsyncMemory` runs its
    calls. ``memory`` is an :class:`~keepstone.AsyncMemory` (or a :class:`~keepstone.Memory`)."""

    def __init__(
        self,
        memory: AsyncMemory | Memory,
        *,
        cache_control: BetaCacheControlEphemeralParam | None = None,
    ) -> None:
        sync = memory.sync if isinstance(memory, AsyncMemory) else memory
        if not isinstance(sync, Memory):
            raise TypeError(
                f"AsyncKeepstoneMemoryTool takes a keepstone AsyncMemory, not "
                f"{type(memory).__name__}"
            )
        super().__init__(cache_control=cache_control)
        self.memory = memory
        self._tool = KeepstoneMemoryTool(sync)

    async def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return await asyncio.to_thread(self._tool.view, command)

    async def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return await asyncio.to_thread(self._tool.create, command)

    async def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return await asyncio.to_thread(self._tool.str_replace, command)

    async def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return await asyncio.to_thread(self._tool.insert, command)

    async def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return await asyncio.to_thread(self._tool.delete, command)

    async def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return await asyncio.to_thread(self._tool.rename, command)

    async def clear_all_memory(self) -> str:
        """Delete every document of the space (each kept in its history)."""
        return await asyncio.to_thread(self._tool.clear_all_memory)


# --- Paths -----------------------------------------------------------------------------------


def _space_path(path: object) -> str:
    """The space's path for the model's ``/memories/...`` path ('' for ``/memories``),
    resolved as the reference resolves it (``.``, ``..``, repeated and trailing ``/``) and
    in NFC, the one spelling the space keeps (the model cannot see which form it typed)."""
    if not isinstance(path, str) or not (path == ROOT or path.startswith(ROOT + "/")):
        raise ToolError(f"Path must start with /memories, got: {shown(str(path))}")
    # The whole path is resolved first and only its result must lie in /memories, so
    # /memories/../memories/a.md is /memories/a.md; a '..' above '/' leaves the tree.
    resolved: list[str] = []
    for part in path.split("/"):
        if part == "..":
            if not resolved:
                raise ToolError(f"Path {shown(path)} would escape /memories directory")
            resolved.pop()
        elif part not in ("", "."):
            resolved.append(part)
    if resolved[:1] != [ROOT.lstrip("/")]:
        raise ToolError(f"Path {shown(path)} would escape /memories directory")
    return unicodedata.normalize("NFC", "/".join(resolved[1:]))


def _is_document_name(rel: str) -> bool:
    name = posixpath.basename(rel)
    return name.endswith(".md") and name != ".md"


def _require_markdown(verb: str, path: str, rel: str) -> None:
    if not _is_document_name(rel):
        suggestion = shown(f"{ROOT}/{posixpath.splitext(rel)[0] or rel}.md")
        raise ToolError(
            f"Cannot {verb} {shown(path)} (invalid_path): {_MARKDOWN_ONLY}; "
            f"name it e.g. {suggestion}"
        )


def _absent(path: str, rel: str, *, please: bool = False) -> ToolError:
    """The reference's "does not exist" (its ``view``, ``str_replace`` and ``insert`` add
    "Please provide a valid path."), with the Markdown rule when the name has another
    extension (a name without one may be meant as a directory)."""
    sentence = f"The path {path} does not exist" + (
        ". Please provide a valid path." if please else ""
    )
    name = posixpath.basename(rel)
    if "." in name.lstrip(".") and not _is_document_name(rel):
        sentence += ("" if sentence.endswith(".") else ".") + f" Note that {_MARKDOWN_ONLY}."
    return ToolError(sentence)


# --- The reference's texts --------------------------------------------------------------------


def _format_size(size: int) -> str:
    """A size as the reference prints it: ``0B``, ``512B``, ``1.5K``, ``4K``, ``2M``."""
    if size == 0:
        return "0B"
    units = ["B", "K", "M", "G"]
    i = min((size.bit_length() - 1) // 10, len(units) - 1)
    scaled = size / (1024**i)
    return f"{int(scaled)}{units[i]}" if scaled == int(scaled) else f"{scaled:.1f}{units[i]}"


def _directory_view(path: str, rel: str, under: list[DocumentInfo]) -> str:
    """The reference's listing: the directory, then what lies up to two levels under it,
    each directory followed by its contents, names in order, hidden names left out."""
    sizes: dict[tuple[tuple[str, ...], bool], int] = {}
    for info in under:
        parts = tuple((info.path[len(rel) + 1 :] if rel else info.path).split("/"))
        for depth in (1, 2):
            if depth > len(parts) or parts[depth - 1].startswith("."):
                break
            key = (parts[:depth], depth < len(parts))
            sizes[key] = sizes.get(key, 0) + info.size_bytes
    lines = [f"{_format_size(sum(info.size_bytes for info in under))}\t{path}"]
    for (parts, is_dir), size in sorted(sizes.items()):
        lines.append(f"{_format_size(size)}\t{path}/{'/'.join(parts)}{'/' if is_dir else ''}")
    header = (
        f"Here're the files and directories up to 2 levels deep in {path}, excluding hidden items:"
    )
    return header + "\n" + "\n".join(lines)


def _file_view(path: str, content: str, view_range: list[int] | None) -> str:
    """The reference's file view: each line numbered, ``view_range`` ``[first, last]``
    (``last`` -1 = to the end) choosing which."""
    lines = content.split("\n")
    if len(lines) > _MAX_LINES:
        raise ToolError(f"File {path} exceeds maximum line limit of 999,999 lines.")
    start = 0
    if view_range and len(view_range) == 2:
        start = max(1, view_range[0]) - 1
        end = len(lines) if view_range[1] == -1 else view_range[1]
        lines = lines[start:end]
    numbered = [_numbered(start + 1 + i, line) for i, line in enumerate(lines)]
    return f"Here's the content of {path} with line numbers:\n" + "\n".join(numbered)


def _numbered(number: int, line: str) -> str:
    return f"{str(number).rjust(_LINE_NUMBER_WIDTH)}\t{line}"


def _require_unique(path: str, content: str, old: str) -> None:
    """The reference's refusals of a ``str_replace`` whose ``old_str`` is absent or not
    unique; an empty ``old_str`` is refused too (the space's edit never guesses)."""
    if not old:
        raise ToolError(
            f"No replacement was performed, old_str is empty; give the exact text to replace "
            f"in {path} (to add lines, use insert)."
        )
    count = content.count(old)
    if count == 0:
        raise ToolError(
            f"No replacement was performed, old_str `{old}` did not appear verbatim in {path}."
        )
    if count > 1:
        lines: list[int] = []
        at = content.find(old)
        while at != -1:
            lines.append(content.count("\n", 0, at) + 1)
            at = content.find(old, at + 1)
        raise ToolError(
            f"No replacement was performed. Multiple occurrences of old_str `{old}` in lines: "
            f"{', '.join(map(str, lines))}. Please ensure it is unique"
        )


def _replace_snippet(content: str, old: str, new: str) -> str:
    """The reference's answer to a ``str_replace``: the changed line with two lines around it."""
    changed = content.count("\n", 0, content.find(old))
    lines = content.replace(old, new).split("\n")
    first, last = max(0, changed - 2), min(len(lines), changed + 3)
    snippet = [_numbered(n, lines[n - 1]) for n in range(first + 1, last + 1)]
    return (
        "The memory file has been edited. Here is the snippet showing the change "
        "(with line numbers):\n" + "\n".join(snippet)
    )


def _inserted(content: str, line: int, text: str) -> str:
    """``content`` with ``text`` as a line after line ``line``, as the reference inserts:
    the text's trailing line breaks dropped, the file ending with one."""
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    if line < 0 or line > len(lines):
        raise ToolError(
            f"Invalid `insert_line` parameter: {line}. "
            f"It should be within the range [0, {len(lines)}]."
        )
    lines.insert(line, text.rstrip("\n"))
    joined = "\n".join(lines)
    return joined if joined.endswith("\n") else joined + "\n"


def _until_applied(change: Callable[[], str]) -> str:
    """Run a conditional ``change``; when the document changed between its read and its
    write, run it again on the new text (the last refusal is the model's to read)."""
    for _ in range(_ATTEMPTS - 1):
        try:
            return change()
        except PreconditionFailed:
            continue
    return change()
