"""The filesystem store's tree on disk: its lock, and every walk, read, write, rename and
removal of a file in it.

Every path is walked one component at a time with ``O_NOFOLLOW``: a symbolic link inside
the tree is never followed, and reading or writing through one is refused with
:class:`~keepstone.errors.Conflict` naming the path. How a space and a document path are
spelled as names is :mod:`keepstone.store.fs_layout`'s; what the files mean (documents,
counters, history) is the store's.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from keepstone.db import is_disk_full
from keepstone.errors import Conflict
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.fs_files import atomic_write
from keepstone.store.fs_layout import (
    LOCK_FILE,
    TEMP_PREFIX,
    TEMP_SUFFIX,
    Components,
    decode_component,
    directory_named,
    document_named,
    encode_dir_prefix,
    space_components,
    space_depth,
    space_named,
)


@dataclass(slots=True)
class Replaced:
    """A document file just replaced (:meth:`FileTree.replace_file_undoably`): :meth:`undo`
    puts back what was there (or removes a new one), :meth:`keep` drops the old file. It
    holds its directory open until one of them is called (exactly one always is).

    What was there comes back by one of two ways: an old file linked aside (``aside``) is
    renamed back, needing no room; an old file held in memory (``old``) is written again,
    in room that ``make_room`` gives when the disk is full."""

    tree: FileTree
    dfd: int
    space: Components
    doc: Components
    path: str
    aside: str | None
    old: Found | None
    make_room: Callable[[], bool]

    def keep(self) -> None:
        """Drop the old file's link. Not synced: the new file is durable already, and a
        link a crash brings back is a stale temporary file, removed as any other."""
        try:
            if self.aside is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.aside, dir_fd=self.dfd)
        finally:
            os.close(self.dfd)

    def undo(self) -> None:
        aside, name, dfd = self.aside, self.doc[-1], self.dfd
        try:
            if self.old is not None:
                self._write_old(name, dfd, self.old)
            else:
                with contextlib.suppress(FileNotFoundError):
                    if aside is not None:
                        os.replace(aside, name, src_dir_fd=dfd, dst_dir_fd=dfd)
                    else:
                        os.unlink(name, dir_fd=dfd)
                os.fsync(dfd)
        finally:
            os.close(dfd)
        if aside is None and self.old is None:
            self.tree.tidy_dirs(self.space, self.space + self.doc, self.path)

    def _write_old(self, name: str, dfd: int, old: Found) -> None:
        """The old file written again, with its time; on a full disk once more in the room
        ``make_room`` gives back."""
        data, st = old
        try:
            atomic_write(dfd, name, data, mtime_ns=st.st_mtime_ns)
        except OSError as exc:
            if not is_disk_full(exc) or not self.make_room():
                raise
            atomic_write(dfd, name, data, mtime_ns=st.st_mtime_ns)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

#: (content, stat) of a regular file of the tree.
Found = tuple[bytes, os.stat_result]
#: (document path, its components under the space, stat) of a document a walk found.
Walked = tuple[str, Components, os.stat_result]


class FileTree:
    """The directory tree under ``root``, walked without following links."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the writers' lock (``fcntl.flock`` of ``<root>/.keepstone.lock``): across
        threads and processes, one writer at a time changes the tree and its counters."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def open_dirs(self, comps: Components, path: str, *, create: bool = False) -> int | None:
        """A descriptor of the directory ``root/comps``, walked without following links
        (``create``: making the missing ones). ``None`` when a component is absent."""
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            for comp in comps:
                try:
                    nfd = os.open(comp, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        os.close(fd)
                        return None
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(comp, 0o755, dir_fd=fd)
                    nfd = os.open(comp, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        _refuse_entry(fd, comp, path)
                    raise
                os.close(fd)
                fd = nfd
            return fd
        except BaseException:
            os.close(fd)
            raise

    def read_file(self, comps: Components, path: str) -> Found | None:
        """(content, stat) of the regular file ``root/comps``; None when absent."""
        dfd = self.open_dirs(comps[:-1], path)
        if dfd is None:
            return None
        try:
            return read_in(dfd, comps[-1], path)
        finally:
            os.close(dfd)

    def replace_file_undoably(
        self,
        space: Components,
        doc: Components,
        path: str,
        data: bytes,
        mtime_ns: int | None,
        old: Found | None,
        hold_up_to: int,
        make_room: Callable[[], bool],
    ) -> Replaced:
        """:meth:`replace_file`, for a change that is recorded next. ``old`` is the file
        there, read under the lock (None: a new document, which the undo removes). Of up to
        ``hold_up_to`` bytes, :meth:`Replaced.undo` writes it again from memory, in room
        ``make_room`` gives on a full disk: the replace costs what a plain one does. A
        larger one is linked aside first, so the undo renames it back (no room needed), at
        the cost of unlinking it after the change. A link a crash leaves is a stale
        temporary file (:func:`~keepstone.store.fs_files.remove_stale_temps`)."""
        dfd = self.open_dirs(space + doc[:-1], path, create=True)
        assert dfd is not None  # create=True always yields a directory
        aside: str | None = None
        if old is not None and len(old[0]) > hold_up_to:
            old, aside = None, f"{TEMP_PREFIX}{uuid.uuid4().hex}{TEMP_SUFFIX}"
            try:
                os.link(doc[-1], aside, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                aside = None  # removed by hand since it was read: the undo removes the new one
            except BaseException:
                os.close(dfd)
                raise
        replaced = Replaced(self, dfd, space, doc, path, aside, old, make_room)
        try:
            atomic_write(dfd, doc[-1], data, mtime_ns=mtime_ns)
        except BaseException:
            replaced.keep()  # nothing was replaced: the old file's extra link goes
            raise
        return replaced

    def rename_file(
        self, space: Components, src: Components, dst: Components, to: str, mtime_ns: int
    ) -> None:
        """``rename(2)`` within the space: atomic, replacing a file at ``dst``; the moved
        file's mtime (its ``updated_at``) becomes ``mtime_ns``, the move's instant."""
        sfd = self.open_dirs(space + src[:-1], to)
        assert sfd is not None  # the caller read the file under the lock
        try:
            dfd = self.open_dirs(space + dst[:-1], to, create=True)
            assert dfd is not None  # create=True always yields a directory
            try:
                os.rename(src[-1], dst[-1], src_dir_fd=sfd, dst_dir_fd=dfd)
                os.utime(dst[-1], ns=(mtime_ns, mtime_ns), dir_fd=dfd, follow_symlinks=False)
                os.fsync(dfd)
            finally:
                os.close(dfd)
            os.fsync(sfd)
        finally:
            os.close(sfd)
        self.tidy_dirs(space, space + src, to)

    def remove_file(self, space: Components, doc: Components, path: str) -> None:
        comps = space + doc
        dfd = self.open_dirs(comps[:-1], path)
        if dfd is None:
            return
        try:
            os.unlink(comps[-1], dir_fd=dfd)
            os.fsync(dfd)
        finally:
            os.close(dfd)
        self.tidy_dirs(space, comps, path)

    def tidy_dirs(self, space: Components, comps: Components, path: str) -> None:
        """Remove the empty directories a document left behind at ``comps``, up to (not
        including) the space's own directory: a person browsing the tree sees no dead
        folders."""
        for depth in range(len(comps) - 1, len(space), -1):
            parent = self.open_dirs(comps[: depth - 1], path)
            if parent is None:
                return
            try:
                os.rmdir(comps[depth - 1], dir_fd=parent)
            except OSError:
                return
            finally:
                os.close(parent)

    def walk_space(self, ref: SpaceRef, prefix: str) -> Iterator[Walked]:
        """(document path, its components, stat) of each listable document under prefix."""
        start = encode_dir_prefix(prefix)
        try:
            fd = self.open_dirs(space_components(ref) + start, prefix)
        except Conflict:
            return  # a link or a file where a directory would be: nothing to list
        if fd is None:
            return
        base = prefix.split("/") if prefix else []
        yield from _walk_docs(fd, base, start, "")

    def spaces(self) -> Iterator[SpaceRef]:
        """Every space that has a directory in the tree (private spaces have none)."""
        for vis in Visibility:
            if vis is Visibility.PRIVATE:
                continue
            for values, comps in self._walk_qualifiers([vis.value], [], space_depth(vis)):
                ref = space_named(vis, values, comps)
                if ref is not None:
                    yield ref

    def _walk_qualifiers(
        self, comps: Components, values: Components, want: int, pending: str = ""
    ) -> Iterator[tuple[Components, Components]]:
        """(decoded segments, components) of each directory ``want`` segments down."""
        fd = self.open_dirs(comps, "")
        if fd is None:
            return
        try:
            names = [e.name for e in os.scandir(fd) if e.is_dir(follow_symlinks=False)]
        finally:
            os.close(fd)
        for name in sorted(names):
            seg, more = decode_component(name, pending, "qual")
            if seg is None and more is None:
                continue
            if more is not None:
                yield from self._walk_qualifiers([*comps, name], values, want, more)
                continue
            assert seg is not None
            found = [*values, seg]
            if len(found) == want:
                yield found, [*comps, name]
            else:
                yield from self._walk_qualifiers([*comps, name], found, want)


def read_in(dir_fd: int, name: str, path: str) -> Found | None:
    """(content, stat) of the regular file ``name`` in the directory ``dir_fd``, opened
    without following a link; None when absent."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            _refuse_entry(dir_fd, name, path)
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_a_document(path)
        with open(fd, "rb", closefd=False) as file:
            return file.read(), st
    finally:
        os.close(fd)


def document_size(dir_fd: int, name: str, path: str) -> int | None:
    """The size of the document ``name`` in the directory ``dir_fd`` (one ``lstat``);
    None when absent, :class:`Conflict` when a link or anything but a file is there."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise Conflict(
            f"{path!r} is a symbolic link in the filesystem store; the store never "
            "follows links: replace the link with a file",
            path=path,
        )
    if not stat.S_ISREG(st.st_mode):
        raise not_a_document(path)
    return st.st_size


def not_a_document(path: str) -> Conflict:
    return Conflict(
        f"{path!r} is a directory or special file in the filesystem store, "
        "not a document; move it aside",
        path=path,
    )


def _walk_docs(fd: int, segs: list[str], comps: list[str], pending: str) -> Iterator[Walked]:
    """Recursively list regular ``.md`` files below ``fd`` (closed on return)."""
    try:
        entries = sorted(os.scandir(fd), key=lambda e: e.name)
        files: list[tuple[str, os.stat_result]] = []
        dirs: list[str] = []
        for entry in entries:
            if entry.is_symlink():
                continue
            if entry.is_file(follow_symlinks=False):
                try:
                    files.append((entry.name, entry.stat(follow_symlinks=False)))
                except FileNotFoundError:
                    continue  # renamed or removed meanwhile (a writer's temporary file)
            elif entry.is_dir(follow_symlinks=False):
                dirs.append(entry.name)
        for name, st in files:
            path = document_named(segs, comps, name, pending)
            if path is not None:
                yield path, [*comps, name], st
        for name in dirs:
            step = directory_named(name, pending)
            if step is None:
                continue
            seg, more = step
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # replaced by a link or removed meanwhile: never followed
            next_segs = segs if seg is None else [*segs, seg]
            yield from _walk_docs(sub, next_segs, [*comps, name], more or "")
    finally:
        os.close(fd)


def _refuse_entry(dir_fd: int, name: str, path: str) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise Conflict(
            f"{path!r} passes through a symbolic link in the filesystem store; the store "
            "never follows links: replace the link with a directory or file",
            path=path,
        )
    raise Conflict(
        f"{path!r} passes through a file where the store needs a directory; move it aside",
        path=path,
    )
