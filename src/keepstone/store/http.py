"""``HttpMemoryStore``: the :class:`~keepstone.store.base.MemoryStore` over a Keepstone
server's REST API (SPEC §5), for ``keepstone memory --server`` and the tools.

Errors come back as the same :mod:`keepstone.errors` classes the server raised (mapped
from the ``{"error": {"code"}}`` body); a server that cannot be reached, does not answer in
time or breaks off its answer is :class:`~keepstone.errors.StoreUnavailable`, and so is an
answer that is not the JSON a Keepstone server sends (a proxy's page, another server's JSON),
each saying which (:mod:`keepstone.http_client` reads every answer). Export and import
stream: neither holds a whole archive in memory.

The server stamps the tenant and user from the token, so ``ref.tenant`` and
``ref.user`` are not sent (and cannot name another team's space).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, BinaryIO

import httpx

from keepstone import errors, http_client
from keepstone.activity import (
    AGENT_RUN,
    AGENT_RUN_HEADER,
    Actor,
    Change,
    ChangePage,
    FeedQuery,
    current_kind,
)
from keepstone.document_pages import PageAsk
from keepstone.documents import (
    Rejected,
    Replace,
    VersionInfo,
    parse_import_strategy,
)
from keepstone.http_client import Fields
from keepstone.paging import Page
from keepstone.paths import validate_doc_path
from keepstone.search.found import Found
from keepstone.spaces import SpaceRef
from keepstone.store.base import (
    CheckedDelete,
    CheckedEdit,
    CheckedMove,
    CheckedWrite,
    Document,
    DocumentInfo,
    ImportAsk,
    ImportReport,
    MemoryStore,
    Progress,
    Usage,
    WriteResult,
    check_precondition,
)

_CHUNK = 64 * 1024

#: What the answers read here are, as a message about a wrong one names them.
_WRITTEN = "a write's answer"
_LISTING = "a listing of documents"


def error_from_response(response: httpx.Response, server: str = "") -> errors.KeepstoneError:
    """The :mod:`keepstone.errors` instance an error answer of the server at ``server``
    stands for."""
    response.read()
    return http_client.error_of(response, server)


def _if_match(etag: str | None) -> dict[str, str]:
    return {"If-Match": f'"{etag}"'} if etag is not None else {}


def _info(body: Fields) -> DocumentInfo:
    """A document's metadata as the server renders it."""
    return DocumentInfo(
        body.text("path"), body.integer("size_bytes"), body.when("updated_at"), body.text("etag")
    )


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One hit of a server's document search (``GET /api/memory/search``)."""

    path: str
    heading: str
    snippet: str
    score: float
    matched: tuple[str, ...]
    #: (space id, path) of the near-duplicates this hit stands for.
    also_in: tuple[tuple[str, str], ...] = ()


# Aliases: the class below defines a method called ``list``.
SearchHits = Found[SearchHit]
Versions = list[VersionInfo]
Infos = list[DocumentInfo]
#: Hits of a search over every readable space, each with its space as the server renders it.
SpacedHits = Found[tuple[SearchHit, dict[str, Any]]]


def _hit(body: Fields) -> SearchHit:
    """A hit as the server renders it."""
    return SearchHit(
        body.text("path"),
        body.text("heading"),
        body.text("snippet"),
        body.number("score"),
        tuple(body.strings("matched")),
        # A server from before near-duplicates were folded sends none.
        tuple((a.text("space_id"), a.text("path")) for a in body.objects("also_in", optional=True)),
    )


class HttpMemoryStore(MemoryStore):
    """A store that is a Keepstone server: ``HttpMemoryStore("http://127.0.0.1:8420", token)``.

    ``team`` sets ``X-Keepstone-Team`` (only needed for session-style credentials of users
    in several teams; an API key already names its team).
    """

    # Quotas and platform authority are the server's: it enforces them (this client has
    # no set_team_quota, and a global write is authorized by the server from the token).
    # The history is the server's too: its routes answer the three reads of the past.
    capabilities = frozenset({"private", "history"})

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        team: str | None = None,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"User-Agent": "keepstone-http-store", **http_client.bearer(token)}
        if team:
            headers["X-Keepstone-Team"] = http_client.visible_ascii(team, "the team id", "team")
        #: The server's base URL, as every message about its answers names it.
        self._server = http_client.server_url(base_url)
        # Idle connections dropped before the server's keep-alive ends, and a request whose
        # reused connection the server closed under it sent again when that is safe.
        self._client = httpx.Client(
            base_url=self._server,
            headers=headers,
            timeout=timeout,
            transport=http_client.transport(transport),
        )

    def close(self) -> None:
        self._client.close()

    # --- plumbing -----------------------------------------------------------------------

    @staticmethod
    def _params(ref: SpaceRef, **extra: str) -> dict[str, str]:
        params = {"name": ref.name, "visibility": ref.visibility.value}
        if ref.project:
            params["project"] = ref.project
        if ref.bot:
            params["bot"] = ref.bot
        params.update(extra)
        return params

    def _request(
        self, method: str, url: str, *, stream: bool = False, **kwargs: Any
    ) -> httpx.Response:
        """The server's 2xx answer, or the error that says what came instead
        (:func:`keepstone.http_client.send`)."""
        if method != "GET" and current_kind() == AGENT_RUN:
            # ``keepstone run --server`` folding an agent's files back: the server records
            # the change as the agent run's (its key still decides what it may do).
            kwargs["headers"] = {**kwargs.get("headers", {}), AGENT_RUN_HEADER: "1"}
        return http_client.send(self._client, self._server, method, url, stream=stream, **kwargs)

    def _answer(self, what: str, method: str, url: str, **kwargs: Any) -> Fields:
        """The JSON object of the server's answer, to be read as ``what`` (e.g. "a
        document"): every answer this store reads comes through here."""
        response = self._request(method, url, **kwargs)
        return http_client.answer(response, self._server, what)

    # --- the seven -------------------------------------------------------------------------

    def read(self, ref: SpaceRef, path: str) -> Document:
        path = validate_doc_path(path)  # as every store refuses it (a read needs no authority)
        return self._document(self._params(ref, path=path))

    def _write(self, ref: SpaceRef, w: CheckedWrite) -> WriteResult:
        # The grant only says the caller claims authority: the server checks it again
        # from the token, and audits the write there.
        if w.if_none_match and self.exists(ref, w.path):
            # Not atomic over HTTP: a create racing another create may still replace it.
            check_precondition(w.path, "", None, if_none_match=True)
        body = self._answer(
            _WRITTEN,
            "PUT",
            "/api/memory/doc",
            params=self._params(ref, path=w.path),
            content=w.data,
            headers={**_if_match(w.if_match), "Content-Type": "text/markdown; charset=utf-8"},
        )
        return _write_result(body)

    def _edit(self, ref: SpaceRef, e: CheckedEdit) -> WriteResult:
        # One request, not a read and a write: the server applies the edit as every edit is
        # applied (conditional on the etag it read), and the document never travels here.
        if isinstance(e.edit, Replace):
            body: dict[str, Any] = {"old": e.edit.old, "new": e.edit.new}
        else:
            body = {"insert_line": e.edit.line, "text": e.edit.text}
        answer = self._answer(
            _WRITTEN,
            "POST",
            "/api/memory/doc/edit",
            params=self._params(ref, path=e.path),
            json=body,
            headers=_if_match(e.if_match),
        )
        return _write_result(answer)

    def _move(self, ref: SpaceRef, m: CheckedMove) -> WriteResult:
        extra = {"path": m.path, "to": m.to}
        if m.overwrite:
            extra["overwrite"] = "true"
        params = self._params(ref, **extra)
        answer = self._answer(
            _WRITTEN, "POST", "/api/memory/doc/move", params=params, headers=_if_match(m.if_match)
        )
        return _write_result(answer)

    def _delete(self, ref: SpaceRef, d: CheckedDelete) -> None:
        params = self._params(ref, path=d.path)
        self._request("DELETE", "/api/memory/doc", params=params, headers=_if_match(d.if_match))

    def list(self, ref: SpaceRef, dir: str = "") -> list[DocumentInfo]:
        params = self._params(ref, dir=dir) if dir else self._params(ref)
        body = self._answer(_LISTING, "GET", "/api/memory/docs", params=params)
        return [_info(d) for d in body.objects("documents")]

    def list_page(self, ref: SpaceRef, ask: PageAsk) -> Page[DocumentInfo]:
        """The server's page: the cursor is the server's, passed on as it was given."""
        given = {"dir": ask.dir, "limit": str(ask.limit), "sort": ask.sort, "cursor": ask.cursor}
        params = self._params(ref, **{k: v for k, v in given.items() if v})
        body = self._answer(_LISTING, "GET", "/api/memory/docs", params=params)
        return Page(
            tuple(_info(d) for d in body.objects("documents")), body.optional_text("next_cursor")
        )

    def search(
        self,
        ref: SpaceRef,
        q: str,
        limit: int,
        path_prefix: str = "",
        filters: Mapping[str, str] | None = None,
    ) -> SearchHits:
        """The server's answer to ``GET /api/memory/search`` for the space, best first
        (``filters``: since, until, min_score, tags, recency_days as query parameters)."""
        body = self._search(self._params(ref), q, limit, path_prefix, filters)
        return Found([_hit(hit) for hit in body.objects("results")], body.integer("pending", 0))

    def search_readable(
        self,
        q: str,
        limit: int,
        path_prefix: str = "",
        filters: Mapping[str, str] | None = None,
    ) -> SpacedHits:
        """The server's answer to ``GET /api/memory/search?scope=readable``: each hit with
        the space it was found in, as the server renders it; the server decides which
        spaces the credential may read."""
        body = self._search({"scope": "readable"}, q, limit, path_prefix, filters)
        hits = [(_hit(hit), dict(hit.nested("space").body)) for hit in body.objects("results")]
        return Found(hits, body.integer("pending", 0))

    def _search(
        self,
        params: dict[str, str],
        q: str,
        limit: int,
        path_prefix: str,
        filters: Mapping[str, str] | None,
    ) -> Fields:
        """The body of ``GET /api/memory/search`` for what ``params`` names (a space, or
        ``scope=readable``) with the search's own query parameters."""
        query = {**params, "q": q, "limit": str(limit), **(filters or {})}
        if path_prefix:
            query["path_prefix"] = path_prefix
        return self._answer("a search's answer", "GET", "/api/memory/search", params=query)

    def list_readable_spaces(self) -> dict[str, Any]:
        """The server's answer to ``GET /api/memory/spaces``: the spaces the credential
        may read, with their usage, as the server renders them (checked to hold what a
        reader of it reads)."""
        body = self._answer("a list of spaces", "GET", "/api/memory/spaces")
        for item in body.objects("spaces"):
            item.nested("space")
            item.integer("used_bytes")
            item.integer("quota_bytes")
        return body.body

    def activity(self, refs: Sequence[SpaceRef], query: FeedQuery) -> ChangePage:
        """``GET /api/memory/activity``: the server decides what the caller sees and names
        each actor (``refs`` []: every space of the team the server lets it read)."""
        params = self._params(refs[0]) if refs else {}
        params["limit"] = str(query.limit)
        if query.since is not None:
            params["since"] = _aware(query.since).isoformat()
        if query.kind is not None:
            params["actor_kind"] = query.kind
        if query.cursor is not None:
            params["cursor"] = query.cursor
        body = self._answer("a page of changes", "GET", "/api/memory/activity", params=params)
        changes = tuple(
            Change(
                at=c.when("at"),
                space_id=c.text("space_id"),
                path=c.text("path"),
                action=c.text("action"),
                actor=Actor(c.nested("actor").text("kind"), c.nested("actor").text("name")),
                size_delta=c.optional_integer("size_delta"),
                version=c.integer("version"),
            )
            for c in body.objects("changes")
        )
        return ChangePage(changes, body.optional_text("next_cursor"))

    def restore_version(
        self, ref: SpaceRef, path: str, version: int, if_match: str | None
    ) -> WriteResult:
        """``POST /api/memory/doc/restore``: the server restores (and records a restore)."""
        params = self._params(ref, path=path, version=str(version))
        answer = self._answer(
            _WRITTEN, "POST", "/api/memory/doc/restore", params=params, headers=_if_match(if_match)
        )
        return _write_result(answer)

    def usage(self, ref: SpaceRef, *, index: bool = True) -> Usage:
        # The server's answer carries the index's bytes either way.
        body = self._answer("a space's usage", "GET", "/api/memory/usage", params=self._params(ref))
        return Usage(
            space_id=body.text("space_id"),
            used_bytes=body.integer("used_bytes"),
            quota_bytes=body.integer("quota_bytes"),
            team_used_bytes=body.integer("team_used_bytes"),
            team_quota_bytes=body.integer("team_quota_bytes"),
            # A server from before document history does not send them.
            history_used_bytes=body.integer("history_used_bytes", 0),
            history_quota_bytes=body.integer("history_quota_bytes", 0),
            # Nor one from before index bytes were reported.
            index_bytes=body.integer("index_bytes", 0),
        )

    def iter_documents(self, ref: SpaceRef, dir: str = "") -> Iterator[Document]:
        for info in self.list(ref, dir):
            try:
                yield self.read(ref, info.path)
            except errors.NotFound:
                continue  # deleted since the listing

    # --- the past: the server's history routes -------------------------------------------

    # A path with no history, or no such version: the server's refusal stands as it said it
    # (its wording, its space id), never reworded here, so a client reads what the API says.

    def _versions(self, ref: SpaceRef, path: str) -> Versions:
        params = self._params(ref, path=path)
        body = self._answer("a list of versions", "GET", "/api/memory/doc/versions", params=params)
        return [_version(v) for v in body.objects("versions")]

    def _read_version(self, ref: SpaceRef, path: str, version: int) -> Document | None:
        return self._document(self._params(ref, path=path, version=str(version)))

    def _read_version_at(self, ref: SpaceRef, info: DocumentInfo, at: datetime) -> Document | None:
        # One request per document of an as-of export, not a listing of versions and a read.
        return self._read_past(ref, info.path, as_of=_aware(at).isoformat())

    def read_as_of(self, ref: SpaceRef, path: str, at: datetime) -> Document:
        """The server's answer to ``GET /api/memory/doc?as_of=`` (its 404 when the
        document did not exist then)."""
        return self._document(self._params(ref, path=path, as_of=_aware(at).isoformat()))

    def _read_past(self, ref: SpaceRef, path: str, **when: str) -> Document | None:
        try:
            return self._document(self._params(ref, path=path, **when))
        except errors.NotFound as exc:
            if exc.code != errors.NotFound.code:
                raise
            return None

    def _document(self, params: dict[str, str]) -> Document:
        """``GET /api/memory/doc`` of ``params``: a document of now or of the past."""
        body = self._answer("a document", "GET", "/api/memory/doc", params=params)
        info = _info(body)
        return Document(
            info.path, body.text("content"), info.size_bytes, info.updated_at, info.etag
        )

    def _list_as_of(self, ref: SpaceRef, at: datetime, prefix: str) -> Infos:
        extra = {"as_of": _aware(at).isoformat()}
        if prefix:
            extra["dir"] = prefix
        params = self._params(ref, **extra)
        body = self._answer(_LISTING, "GET", "/api/memory/docs", params=params)
        return [_info(d) for d in body.objects("documents")]

    # --- streaming export / import -------------------------------------------------------

    def _export(self, ref: SpaceRef, sink: BinaryIO, progress: Progress | None, level: int) -> int:
        """Stream the server's tarball into ``sink``; return the document count listed.
        The server compresses at its own ``KEEPSTONE_EXPORT_GZIP_LEVEL``: ``level`` is not
        sent; nor is ``progress`` called."""
        count = len(self.list(ref))
        params = self._params(ref)
        response = self._request("GET", "/api/memory/export", stream=True, params=params)
        try:
            with http_client.reading(response, self._server, self._client.timeout):
                for chunk in response.iter_bytes(_CHUNK):
                    sink.write(chunk)
        finally:
            response.close()
        return count

    def _import(self, ref: SpaceRef, source: BinaryIO, ask: ImportAsk) -> ImportReport:
        """Send the archive to the server, which checks and imports it and answers with the
        report. ``total(n)``: the member count, read here from a file (not a pipe) before
        the upload; ``progress(n)``: every member at once, when the server's report comes
        (the server reports no member before the end). The server decides platform
        authority from the credential (so no ``grant``)."""
        if ask.total is not None:
            from keepstone.store.archive import count_members

            members = count_members(source)
            if members is not None:
                ask.total(members)
        body = self._answer(
            "an import's report",
            "POST",
            "/api/memory/import",
            params=self._params(ref, strategy=parse_import_strategy(ask.strategy).value),
            content=iter(lambda: source.read(_CHUNK), b""),
            headers={"Content-Type": "application/gzip"},
        )
        report = ImportReport(
            written=body.strings("written"),
            skipped=body.strings("skipped"),
            renamed=body.string_map("renamed"),
            rejected=[Rejected(r.text("path"), r.text("reason")) for r in body.objects("rejected")],
        )
        if ask.progress is not None:
            ask.progress(
                len(report.written)
                + len(report.skipped)
                + len(report.renamed)
                + len(report.rejected)
            )
        return report


def _version(body: Fields) -> VersionInfo:
    """One version as ``GET /api/memory/doc/versions`` renders it."""
    return VersionInfo(
        version=body.integer("version"),
        etag=body.text("etag"),
        size_bytes=body.integer("size"),
        at=body.when("at"),
        actor=body.text("actor"),
        deleted=body.flag("deleted"),
    )


def _aware(at: datetime) -> datetime:
    """``at`` as an instant in UTC: a naive one is UTC (as the server takes it)."""
    return at.astimezone(UTC) if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _write_result(body: Fields) -> WriteResult:
    return WriteResult(
        path=body.text("path"),
        size_bytes=body.integer("size_bytes"),
        etag=body.text("etag"),
        created=body.flag("created"),
    )
