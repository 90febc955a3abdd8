"""``Memory``: one knowledge space from Python, local or on a server (docs/python.md).

A face like the CLI, built the way the CLI builds its own (:mod:`keepstone.cli.common`):
:meth:`Memory.local` is the filesystem store under ``$KEEPSTONE_HOME/spaces`` with the local
console acting (team ``local``), :meth:`Memory.connect` the HTTP client store with a
server's client acting (the server authenticates the key and decides every rule). Both
then call the same :class:`~keepstone.service.spaces.SpaceService` verbs, so a ``Memory``
returns the CLI's dataclasses and raises the CLI's :class:`~keepstone.errors.KeepstoneError`
classes.

A ``Memory`` may be shared by threads (:class:`~keepstone.sdk.aio.AsyncMemory` runs each call
in a worker thread): the filesystem store takes an exclusive ``flock`` per mutation and
one SQLite connection per thread for its index, the HTTP client is thread-safe, and the
document search is built once under a lock.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any, BinaryIO, Literal, overload

import keepstone.sdk.tools as agent_tools
from keepstone import runtime
from keepstone.activity import DEFAULT_LIMIT, ChangePage
from keepstone.config import Config
from keepstone.document_pages import Listing
from keepstone.documents import (
    Document,
    DocumentInfo,
    ImportReport,
    ImportStrategy,
    Usage,
    VersionInfo,
    WriteResult,
    edit_of,
)
from keepstone.errors import InvalidRequest, InvalidSpaceRef
from keepstone.principal import CredentialKind, Principal
from keepstone.service.access import console_principal, remote_principal
from keepstone.service.filters import SearchFilters, search_filters
from keepstone.service.spaces import Hits, ReadableHits, SpaceList, SpaceService
from keepstone.spaces import (
    REQUIRED_QUALIFIERS,
    SpaceRef,
    Visibility,
    login_name,
    parse_visibility,
    project_key,
)
from keepstone.tools.dispatch import MemoryTools, ToolResult, error_result
from keepstone.tools.formats import OpenAIApi, openai_tool
from keepstone.tools.schemas import MEMORY_SEARCH

#: ``search(scope=READABLE)``: every space the caller may read.
READABLE = "readable"

# Aliases: the class below defines a method called ``list``.
Infos = list[DocumentInfo]
Versions = list[VersionInfo]
Tools = list[agent_tools.Tool]
Definitions = list[dict[str, Any]]

#: What :meth:`Memory.export` writes into: a path, or a binary file open for writing.
Destination = str | os.PathLike[str] | IO[bytes]
#: What :meth:`Memory.import_` reads: a path, the archive's bytes, or a binary file.
Source = str | os.PathLike[str] | bytes | bytearray | IO[bytes]


def space_for(
    tenant: str,
    *,
    bot: str | None,
    project: str | None,
    name: str,
    visibility: str | None,
    user: str | None,
) -> SpaceRef:
    """The space the constructors' arguments name, or an error naming the argument.

    The visibility defaults to ``bot`` when a bot is given, else ``project``. The project
    is :func:`~keepstone.spaces.project_key`'s: a bare word is a name, a directory spelling
    (``.``, ``~/src/web``) that directory encoded, None the current directory. A qualifier
    the visibility does not take is refused rather than dropped, so a typo cannot
    silently name another space.
    """
    vis = parse_visibility(visibility) if visibility is not None else None
    if vis is None:
        vis = Visibility.BOT if bot is not None else Visibility.PROJECT
    takes = REQUIRED_QUALIFIERS[vis]
    for field, value in (("bot", bot), ("project", project), ("user", user)):
        if value is not None and field not in takes:
            raise InvalidSpaceRef(
                f"visibility {vis.value!r} does not take {field}; drop {field}= or pick a "
                f"visibility that does",
                field=field,
            )
    if vis is Visibility.BOT and not bot:
        raise InvalidSpaceRef(
            "visibility 'bot' needs bot='ID' (or pick another visibility)", field="bot"
        )
    key = project_key(project) if "project" in takes else None
    if vis is Visibility.USER and not user:
        user = _login_user()
    return SpaceRef.build(vis, name, tenant=tenant, project=key, bot=bot, user=user)


def _strings(**given: object) -> None:
    """Refuse an argument that is not text, ``invalid_request`` naming it, as the agent tools
    refuse one (a path or a body of another type is a malformed call, not a bad path)."""
    for name, value in given.items():
        if not isinstance(value, str):
            raise InvalidRequest(f"{name} must be a string, not {type(value).__name__}", field=name)


def _login_user() -> str:
    """The login name, the default ``user``; refused, naming ``user``, when it is unknown."""
    name = login_name()
    if name is None:
        raise InvalidSpaceRef("cannot tell your login name; pass user='NAME'", field="user")
    return name


class Memory:
    """One knowledge space: read, write, edit, move, list, search, export and import its
    Markdown documents.

    Make one with :meth:`local` or :meth:`connect`; close it with :meth:`close` or use it
    as a context manager. Every refusal is a :class:`keepstone.errors.KeepstoneError` subclass
    (``NotFound``, ``PreconditionFailed``, ``QuotaExceeded``, ...) whose ``code`` and
    ``message`` are the ones the CLI and the HTTP API give.
    """

    def __init__(self, service: SpaceService, who: Principal, space: SpaceRef, where: str) -> None:
        self._service = service
        self._who = who
        self._space = space
        self._where = where
        self._search_lock = threading.Lock()
        self._closed = False

    # --- Constructors ----------------------------------------------------------------------

    @classmethod
    def local(
        cls,
        bot: str | None = None,
        project: str | None = None,
        *,
        name: str = "default",
        visibility: str | None = None,
        user: str | None = None,
        home: str | os.PathLike[str] | None = None,
    ) -> Memory:
        """The space in the local store under ``home`` (default ``$KEEPSTONE_HOME``, else
        ``~/.keepstone``), as the CLI's ``keepstone memory`` reaches it without ``--server``.

        ``visibility`` defaults to ``"bot"`` when ``bot`` is given, else ``"project"``.
        ``project`` is a name (``"web"``), a directory spelling (``"."``,
        ``"~/src/web"``), or None for the current directory. ``user`` (visibility
        ``"user"``) defaults to the login name. The other ``KEEPSTONE_*`` settings (quotas,
        embedder) are read from the environment.
        """
        config = Config.from_env(home=None if home is None else Path(home))
        runtime.check_home(config, "home" if home is not None else "KEEPSTONE_HOME")
        who = console_principal("local")
        space = space_for(
            who.team_id, bot=bot, project=project, name=name, visibility=visibility, user=user
        )
        store = runtime.open_local_store(config)
        search = functools.partial(
            runtime.document_search, config, store, embed_budget=runtime.EMBED_BUDGET_SECONDS
        )
        service = SpaceService(store, search, export_gzip_level=config.export_gzip_level)
        return cls(service, who, space, f"local {config.home}")

    @classmethod
    def connect(
        cls,
        url: str,
        token: str | None = None,
        *,
        bot: str | None = None,
        project: str | None = None,
        name: str = "default",
        visibility: str | None = None,
    ) -> Memory:
        """The space on the Keepstone server at ``url``, reached with API key ``token``
        (default ``$KEEPSTONE_TOKEN``). The server stamps the team (and, for visibility
        ``"user"``, the user) from the key and decides every rule. The space arguments
        are :meth:`local`'s."""
        if not isinstance(url, str) or not url.strip():
            raise InvalidRequest("give the server's URL, e.g. 'http://127.0.0.1:8000'")
        if token is None:
            token = Config.from_env().token
        who = remote_principal()
        space = space_for(
            who.team_id, bot=bot, project=project, name=name, visibility=visibility, user=None
        )
        store = runtime.open_remote_store(url, token)
        return cls(SpaceService(store), who, space, url)

    # --- The space ----------------------------------------------------------------------------

    @property
    def space(self) -> SpaceRef:
        """The space this memory reads and writes."""
        return self._space

    def read(
        self, path: str, *, version: int | None = None, as_of: datetime | None = None
    ) -> Document:
        """The document at ``path``; ``NotFound`` when there is none. ``version`` reads
        that version of it (:meth:`versions`), ``as_of`` the document as it was at that
        instant (a naive datetime is UTC); ``NotFound`` when it did not exist then."""
        _strings(path=path)
        service = self._open()
        if version is not None and as_of is not None:
            raise InvalidRequest("read takes version or as_of, not both")
        if version is not None:
            return service.read_version(self._space, path, version)
        if as_of is not None:
            return service.read_as_of(self._space, path, _instant(as_of))
        return service.read(self._space, path)

    def write(
        self, path: str, content: str, *, if_match: str | None = None, create_only: bool = False
    ) -> WriteResult:
        """Create or replace the document at ``path`` (``created`` says which). With
        ``if_match`` (an etag), only if the document still has it; with ``create_only``,
        only if there is none; else ``PreconditionFailed``."""
        _strings(path=path, content=content)
        return self._open().write(
            self._who, self._space, path, content, if_match=if_match, create_only=create_only
        )

    def edit(
        self,
        path: str,
        old: str | None = None,
        new: str | None = None,
        *,
        insert_line: int | None = None,
        text: str | None = None,
        if_match: str | None = None,
    ) -> WriteResult:
        """Change part of the document at ``path``: ``edit(path, old, new)`` replaces the
        one exact occurrence of ``old``; ``edit(path, insert_line=n, text=t)`` inserts
        ``t`` as whole lines after line ``n`` (0 = at the top). ``InvalidEdit`` when
        ``old`` is absent or occurs more than once, or the line is out of range. A change
        made meanwhile by anyone is never overwritten: the edit applies to the document as
        it is when the edit lands; with ``if_match``, a change is ``PreconditionFailed``."""
        _strings(path=path)
        change = edit_of(old, new, insert_line, text)
        return self._open().edit(self._who, self._space, path, change, if_match=if_match)

    def move(
        self, path: str, to: str, *, overwrite: bool = False, if_match: str | None = None
    ) -> WriteResult:
        """Move the document at ``path`` to ``to``, atomically; ``AlreadyExists`` when a
        document is at ``to``, unless ``overwrite``. Returns the document at its new path."""
        _strings(path=path, to=to)
        return self._open().move(
            self._who, self._space, path, to, overwrite=overwrite, if_match=if_match
        )

    def delete(self, path: str, *, if_match: str | None = None) -> None:
        """Remove the document at ``path``; ``NotFound`` when there is none."""
        _strings(path=path)
        self._open().delete(self._who, self._space, path, if_match=if_match)

    def list(
        self,
        dir: str = "",
        *,
        as_of: datetime | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        sort: str | None = None,
    ) -> Listing:
        """The documents under directory prefix ``dir`` ('' = all), sorted by path; with
        ``as_of``, as the space held them at that instant. With ``limit``, one page of at
        most that many (``sort="updated"``: newest change first), the one after the page
        whose ``next_cursor`` is ``cursor``; the answer is a list either way, and its
        ``next_cursor`` is the next page's (None when whole, or on the last page)."""
        service, at = self._open(), None if as_of is None else _instant(as_of)
        if limit is not None:
            page = service.list_page(self._space, dir, limit=limit, cursor=cursor, sort=sort, at=at)
            return Listing(page.items, page.next_cursor)
        if cursor is not None or sort is not None:
            raise InvalidRequest("cursor and sort page a listing: pass limit with them")
        if at is not None:
            return Listing(service.list_as_of(self._space, at, dir))
        return Listing(service.list(self._space, dir))

    # --- History (docs/history.md) -------------------------------------------------------------

    def versions(self, path: str) -> Versions:
        """The versions of the document at ``path``, newest first, the live one included
        (deletions too, ``deleted`` True); ``NotFound`` when the path never had one."""
        _strings(path=path)
        return self._open().versions(self._space, path)

    def diff(self, path: str, from_: int, to: int | None = None) -> str:
        """A unified diff of the document from version ``from_`` to version ``to`` (default:
        the newest, i.e. the live document); '' when they are equal."""
        _strings(path=path)
        service = self._open()
        if to is None:
            to = service.versions(self._space, path)[0].version
        return service.diff(self._space, path, from_, to)

    def restore(self, path: str, version: int, *, if_match: str | None = None) -> WriteResult:
        """Make ``version`` of the document current again: a new write of its content,
        checked like any write (quota, secrets, ``if_match``)."""
        _strings(path=path)
        return self._open().restore(self._who, self._space, path, version, if_match=if_match)

    def recent(
        self,
        since: datetime | str | None = None,
        limit: int = DEFAULT_LIMIT,
        *,
        actor_kind: str | None = None,
        cursor: str | None = None,
    ) -> ChangePage:
        """What changed in the space lately, newest first (docs/python.md, "Recent changes"):
        the changes made at or after ``since`` (an instant or ISO 8601 text), ``limit``
        (1-100) of them after ``cursor`` (the page before's ``next_cursor``), made by actors
        of ``actor_kind`` (``user``, ``api_key``, ``agent_run``, ...) when given."""
        return self._open().recent(
            self._who, self._space, since=since, actor_kind=actor_kind, limit=limit, cursor=cursor
        )

    @overload
    def search(
        self,
        query: str,
        *,
        limit: int = 10,
        path_prefix: str = "",
        scope: None = None,
        min_score: float | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        tags: Sequence[str] | str | None = None,
        recency_days: float | None = None,
    ) -> Hits: ...
    @overload
    def search(
        self,
        query: str,
        *,
        limit: int = 10,
        path_prefix: str = "",
        scope: Literal["readable"],
        min_score: float | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        tags: Sequence[str] | str | None = None,
        recency_days: float | None = None,
    ) -> ReadableHits: ...
    def search(
        self,
        query: str,
        *,
        limit: int = 10,
        path_prefix: str = "",
        scope: str | None = None,
        min_score: float | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        tags: Sequence[str] | str | None = None,
        recency_days: float | None = None,
    ) -> Hits | ReadableHits:
        """The best sections of the space for ``query`` (1-50 hits, best first): keyword,
        and meaning when an embedder is configured (docs/search.md). Only hits above the
        relevance floor — or scoring at least ``min_score`` (-1 to 1) when given — of
        documents whose path starts with ``path_prefix``, last written within ``since``
        / ``until`` (datetimes or ISO 8601; naive ones are UTC), whose front matter's
        tags hold all of ``tags``; ``recency_days``, a recency prior's half-life (off by
        default). Near-duplicate sections are folded into the best (its ``also_in``).
        An empty list means nothing was relevant enough; a bad filter is
        ``InvalidRequest`` naming it. The answer's ``pending`` says how many of the
        space's chunks are not yet embedded (searched by keyword only; 0 with
        keyword-only search); locally, pending chunks are embedded for up to 1.5 s
        before the search. ``scope="readable"`` searches every space you may read instead
        (REST's ``scope=readable``): each hit then comes with its ``space``."""
        filters = search_filters(
            since=since,
            until=until,
            min_score=min_score,
            tags=list(tags) if isinstance(tags, list | tuple) else tags,
            recency_days=recency_days,
        )
        service = self._open()
        with self._search_lock:  # build the search (and load its model) once
            service.document_search()
        if scope is not None:
            return self._search_readable(scope, query, limit, path_prefix, filters)
        return service.search(
            self._who, self._space, query, limit=limit, path_prefix=path_prefix, filters=filters
        )

    def _search_readable(
        self, scope: str, query: str, limit: int, path_prefix: str, filters: SearchFilters
    ) -> ReadableHits:
        if scope != READABLE:
            raise InvalidRequest(
                f"unknown scope {scope!r}; use scope='readable' (every space you may read) or "
                "leave it out to search this space",
                field="scope",
            )
        who = self._who
        if who.kind is CredentialKind.CONSOLE:  # locally: whose user spaces, as the CLI's
            who = console_principal(self._space.user or _login_user())
        return self._open().search_readable(
            who, query, limit=limit, path_prefix=path_prefix, filters=filters
        )

    def spaces(self) -> SpaceList:
        """The spaces you may read that exist, with their usage, sorted by id (REST's
        ``GET /api/memory/spaces``): ``spaces`` (each its ``space``, ``used_bytes``,
        ``quota_bytes``) and ``truncated``. Locally, every space of the store."""
        service = self._open()
        return service.list_spaces(self._who)

    def usage(self) -> Usage:
        """Bytes used by the space and by all spaces, against their quotas."""
        return self._open().usage(self._space)

    @overload
    def export(self, dest: None = None, *, as_of: datetime | None = None) -> bytes: ...
    @overload
    def export(self, dest: Destination, *, as_of: datetime | None = None) -> int: ...
    def export(
        self, dest: Destination | None = None, *, as_of: datetime | None = None
    ) -> bytes | int:
        """The space as a gzipped tarball: its bytes when ``dest`` is None, else written to
        ``dest`` (a path, replaced whole only once the archive is complete, or a binary
        file open for writing) and the number of documents returned. With ``as_of``, the
        space as it was at that instant."""
        service = self._open()
        at = None if as_of is None else _instant(as_of)

        def into(sink: BinaryIO) -> int:
            if at is None:
                return service.export(self._space, sink)
            return service.export_as_of(self._space, at, sink)

        if dest is None:
            buffer = io.BytesIO()
            into(buffer)
            return buffer.getvalue()
        if isinstance(dest, str | os.PathLike):
            return service.export_to(self._space, dest, as_of=at)
        return into(_binary(dest, "dest", "wb"))

    def import_(self, source: Source, strategy: str = ImportStrategy.SKIP.value) -> ImportReport:
        """Merge a gzipped tarball (a path, its bytes, or a binary file open for reading)
        into the space. A document that exists is kept (``"skip"``), replaced
        (``"overwrite"``) or imported beside it under a new name (``"rename"``); what could
        not be written safely is listed in ``rejected``."""
        service = self._open()
        with contextlib.ExitStack() as stack:
            if isinstance(source, bytes | bytearray):
                stream: BinaryIO = io.BytesIO(bytes(source))
            elif isinstance(source, str | os.PathLike):
                stream = stack.enter_context(_opened(Path(source)))
            else:
                stream = _binary(source, "source", "rb")
            return service.import_archive(self._who, self._space, stream, strategy)

    # --- Tools for an agent (docs/python.md) ---------------------------------------------------

    def tools(self, *, read_only: bool = False) -> Tools:
        """The agent tools over this space, as ``keepstone mcp`` serves them (``memory_read``,
        ``memory_write``, ``memory_search``...), each a :class:`~keepstone.sdk.tools.Tool`:
        name, description, JSON-schema ``parameters``, and a call with keyword arguments
        that returns the text for the model (a refusal included). ``read_only`` (and a
        global space) withholds the ones that change the space."""

        def run(name: str, arguments: agent_tools.Arguments) -> ToolResult:
            return self.run_tool(name, arguments, read_only=read_only)

        return [agent_tools.Tool.of(spec, run) for spec in self._agent_tools(read_only).specs]

    def anthropic_tools(self, *, read_only: bool = False) -> Definitions:
        """:meth:`tools`' definitions for the Anthropic Messages API: ``{"name",
        "description", "input_schema"}``; run the model's calls with :meth:`run_tool`."""
        return self._agent_tools(read_only).anthropic_tools()

    def openai_tools(
        self, *, read_only: bool = False, api: OpenAIApi = "chat", strict: bool = False
    ) -> Definitions:
        """:meth:`tools`' definitions as OpenAI function tools: Chat Completions'
        (``api="chat"``) or the Responses API's (``api="responses"``); ``strict`` puts them
        in strict mode, on schemas whose optional arguments are nullable (a null is an
        argument left out). Run the model's calls with :meth:`run_tool`."""
        specs = self._agent_tools(read_only).specs
        return [openai_tool(spec, api=api, strict=strict) for spec in specs]

    def run_tool(
        self, name: str, arguments: agent_tools.Arguments = None, *, read_only: bool = False
    ) -> ToolResult:
        """Run the model's call of tool ``name`` on ``arguments`` (a mapping, or the JSON
        object text a model sends); always a :class:`~keepstone.tools.ToolResult`, whose
        ``text`` goes back to the model and whose ``is_error`` marks a refusal. An
        optional argument given as null counts as left out."""
        tools = self._agent_tools(read_only)
        try:
            args = agent_tools.tool_arguments(name, arguments)
        except InvalidRequest as exc:
            return error_result(exc)
        if name == MEMORY_SEARCH:
            self._searching()
        return tools.dispatch(name, args)

    def _agent_tools(self, read_only: bool) -> MemoryTools:
        return MemoryTools(self._open(), self._space, write=not read_only, who=self._who)

    # --- Life -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Release the store's files and connections; calling it again does nothing."""
        if not self._closed:
            self._closed = True
            self._service.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Memory {self._space.id} ({self._where})>"

    def _open(self) -> SpaceService:
        if self._closed:
            raise InvalidRequest("this Memory is closed; make another one to go on")
        return self._service

    def _searching(self) -> SpaceService:
        """The service, its document search built (and its model loaded) once, under a
        lock, whichever thread searches first."""
        service = self._open()
        with self._search_lock:
            service.document_search()
        return service


def _instant(as_of: object) -> datetime:
    """``as_of`` when it is a datetime (naive = UTC, as the stores read it), else an error."""
    if not isinstance(as_of, datetime):
        raise InvalidRequest(
            f"as_of must be a datetime (naive = UTC), not {type(as_of).__name__}; "
            "e.g. datetime(2026, 11, 30, 14, tzinfo=UTC)"
        )
    return as_of


def _binary(stream: Any, arg: str, mode: str) -> BinaryIO:
    """``stream`` when it is a file object in binary mode, else an error saying so."""
    if isinstance(stream, io.TextIOBase):
        raise InvalidRequest(f"{arg} is a text file; open it in binary mode ({mode!r})")
    method = "write" if "w" in mode else "read"
    if not callable(getattr(stream, method, None)):
        kinds = "a path or a binary file" if "w" in mode else "a path, bytes or a binary file"
        raise InvalidRequest(f"{arg} must be {kinds}, not {type(stream).__name__}")
    return stream  # type: ignore[no-any-return]


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[BinaryIO]:
    try:
        stream = open(path, "rb")
    except OSError as exc:
        raise InvalidRequest(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    with stream:
        yield stream
