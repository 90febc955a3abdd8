"""LangGraph's long-term memory store backed by a Keepstone space
(docs/integrations/langgraph.md).

:class:`KeepstoneStore` is a ``langgraph.store.base.BaseStore`` over one
:class:`~keepstone.Memory`, local or on a server: hand it to ``graph.compile(store=...)`` or
``create_react_agent(..., store=...)`` and every item LangGraph puts is a Markdown document
of the space, with its history, quotas, secret refusal and search.

- The item ``key`` of namespace ``("users", "42")`` is the document ``users/42/key.md``;
  labels and keys our paths do not take are escaped (:mod:`keepstone.integrations.langgraph_items`).
- Its value is a fenced JSON block; a document of the space that is not one (a note written
  by hand) is not an item: searches and listings pass it by, ``get`` refuses it.
- ``search`` with a ``query`` ranks the items under the namespace prefix by the space's
  hybrid search, each scored by its best section, the items it finds nothing in after
  them (score None), as LangGraph's stores rank every item; without a query, the items
  most recently updated first. ``filter`` is LangGraph's (equality and ``$eq``, ``$ne``, ``$gt``,
  ``$gte``, ``$lt``, ``$lte``).
- ``created_at`` is when the document was last created (its first version after its
  last deletion), ``updated_at`` when it was last written.
- The ops of a :meth:`~KeepstoneStore.batch` run one after the other, in order.
- The space's refusals (quota, secrets, invalid or too long paths, a server out of reach)
  are raised as the :class:`~keepstone.errors.KeepstoneError` they are. A key or namespace
  beyond a path's limits is refused by ``put`` only: nothing can be stored there, so
  ``get`` answers None, ``delete`` does nothing and ``search`` finds no item.
- An op's key that is not a string is ``str(key)``, as ``BaseStore``'s methods make it,
  for ops given to :meth:`~KeepstoneStore.batch` directly too.
- TTLs are not supported: ``put(..., ttl=N)`` raises ``NotImplementedError``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
except ImportError as exc:
    raise ImportError(
        "keepstone.integrations.langgraph needs LangGraph's store interface "
        "(langgraph-checkpoint 2.1 or later): pip install 'keepstone[langgraph]'"
    ) from exc

from keepstone.documents import Document, DocumentInfo
from keepstone.errors import InvalidDocument, NotFound
from keepstone.integrations.langgraph_items import (
    item_of_path,
    item_path,
    namespace_dir,
    parse_value,
    passes,
    render_value,
    stored_at,
)
from keepstone.sdk import Memory

__all__ = ["KeepstoneStore"]

#: The most sections one query search ranks (Memory.search's ceiling): the items of a
#: query search are found among them.
SEARCH_DEPTH = 50


class TtlNotSupported(NotImplementedError):
    """A put with a TTL: refused as LangGraph's own stores refuse one they cannot keep
    (``BaseStore.supports_ttl`` is False here), by the error type LangGraph's callers catch."""


class KeepstoneStore(BaseStore):
    """A LangGraph ``BaseStore`` over one space: ``KeepstoneStore(memory)``, ``memory`` a
    :class:`~keepstone.Memory` (for an :class:`~keepstone.AsyncMemory`, give its ``.sync``;
    the async methods run the sync ones in a worker thread). The store does not close the
    memory: its owner does."""

    supports_ttl = False

    def __init__(self, memory: Memory) -> None:
        if not isinstance(memory, Memory):
            raise TypeError(
                f"KeepstoneStore takes a keepstone Memory, not {type(memory).__name__}; "
                "for an AsyncMemory give its .sync"
            )
        self.memory = memory

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run each op in order (a read sees the writes before it) and return their results
        in the same order."""
        return [self._run(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread, so the event loop never waits on the space."""
        return await asyncio.to_thread(self.batch, list(ops))

    def _run(self, op: Op) -> Result:
        _check_labels(op)
        if isinstance(op, GetOp | PutOp) and not isinstance(op.key, str):
            op = op._replace(key=str(op.key))  # as BaseStore's get, put and delete do
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, PutOp):
            self._put(op)
            return None
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        raise TypeError(f"KeepstoneStore cannot run a {type(op).__name__}; give a LangGraph op")

    # --- Items ------------------------------------------------------------------------------

    def _get(self, op: GetOp) -> Item | None:
        path = stored_at(op.namespace, op.key)
        if path is None:
            return None  # beyond a path's limits: nothing is ever stored there
        try:
            doc = self.memory.read(path)
        except NotFound:
            return None
        value = parse_value(doc.content)
        if value is None:
            raise InvalidDocument(
                f"the document {path!r} is not a LangGraph item (a ```json block holding "
                "an object, as KeepstoneStore writes); fix it or delete it",
                path=path,
            )
        return self._item(op.namespace, op.key, doc, value)

    def _put(self, op: PutOp) -> None:
        if not op.namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        if op.value is None:
            gone = stored_at(op.namespace, op.key)
            if gone is not None:
                with contextlib.suppress(NotFound):  # deleting what is not there is done
                    self.memory.delete(gone)
            return
        path = item_path(op.namespace, op.key)
        if op.ttl is not None:
            raise TtlNotSupported(
                "TTL is not supported by KeepstoneStore (a space keeps a document until it "
                "is deleted); put without ttl, or delete the item when it is stale"
            )
        self.memory.write(path, render_value(op.value))

    def _item(
        self, namespace: tuple[str, ...], key: str, doc: Document, value: dict[str, Any]
    ) -> Item:
        return Item(
            value=value,
            key=key,
            namespace=namespace,
            created_at=self._created_at(doc),
            updated_at=doc.updated_at,
        )

    def _created_at(self, doc: Document) -> datetime:
        """When the document was last created: the oldest of its versions since its last
        deletion (its own time when the store keeps no history of it)."""
        try:
            versions = self.memory.versions(doc.path)
        except NotFound:
            return doc.updated_at
        created = doc.updated_at
        for version in versions:  # newest first
            if version.deleted:
                break
            created = min(created, version.at)
        return created

    # --- Search -----------------------------------------------------------------------------

    def _search(self, op: SearchOp) -> list[SearchItem]:
        if op.offset < 0 or op.limit < 0:
            raise ValueError("search takes a limit and an offset of 0 or more")
        wanted = op.offset + op.limit
        matched: list[tuple[tuple[str, ...], str, Document, dict[str, Any], float | None]] = []
        for path, score in self._candidates(op) if op.limit else ():
            named = item_of_path(path)
            doc = None if named is None else self._read(path)
            value = None if doc is None else parse_value(doc.content)
            if named is None or doc is None or value is None:
                continue  # not an item, or deleted meanwhile
            if not op.filter or passes(value, op.filter):
                matched.append((*named, doc, value, score))
                if len(matched) == wanted:
                    break
        return [  # the history lookup of created_at only for the items returned
            SearchItem(ns, key, value, self._created_at(doc), doc.updated_at, score)
            for ns, key, doc, value, score in matched[op.offset :]
        ]

    def _candidates(self, op: SearchOp) -> Iterator[tuple[str, float | None]]:
        """The paths that may hold the search's items, in the order they rank: the query's
        hits (each path once, at its best score), then every other document under the
        prefix, most recently updated first, without a score. A query orders the items,
        as in LangGraph's own stores; it never hides one."""
        if stored_at(op.namespace_prefix, "") is None:
            return  # not even the shortest item's path fits under the prefix: none is there
        under = namespace_dir(op.namespace_prefix)
        seen: set[str] = set()
        if op.query and op.query.strip():  # a blank query (only whitespace) is no query
            prefix = under + "/" if under else ""
            space = self.memory.space.id
            hits = self.memory.search(op.query, limit=SEARCH_DEPTH, path_prefix=prefix)
            for hit in hits:  # best first: a path's first hit is its best section
                also = (p for s, p in hit.also_in if s == space and p.startswith(prefix))
                for path in (hit.path, *also):
                    if path not in seen:
                        seen.add(path)
                        yield path, hit.score
        for info in sorted(self.memory.list(under), key=_newest_first):
            if info.path not in seen:
                yield info.path, None

    def _read(self, path: str) -> Document | None:
        try:
            return self.memory.read(path)
        except NotFound:
            return None

    # --- Namespaces -------------------------------------------------------------------------

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        namespaces = {
            named[0]
            for info in self.memory.list(_listed_dir(conditions))
            if (named := item_of_path(info.path)) is not None
            and all(_meets(c, named[0]) for c in conditions)
        }
        if op.max_depth is not None:
            namespaces = {ns[: op.max_depth] for ns in namespaces}
        return sorted(namespaces)[op.offset : op.offset + op.limit]


def _check_labels(op: Op) -> None:
    """LangGraph's rules for the labels of every namespace an op carries (its own methods
    check them, ops given to batch directly are not): strings, not empty, without '.'
    (LangGraph's separator) or NUL."""
    if isinstance(op, GetOp | PutOp):
        namespaces: Iterable[tuple[str, ...]] = (op.namespace,)
    elif isinstance(op, SearchOp):
        namespaces = (op.namespace_prefix,)
    elif isinstance(op, ListNamespacesOp):
        namespaces = (tuple(c.path) for c in op.match_conditions or ())
    else:
        return
    for namespace in namespaces:
        for label in namespace:
            if not isinstance(label, str):
                why = f"must be strings, not {type(label).__name__}"
            elif not label:
                why = "cannot be empty strings"
            elif "." in label or "\x00" in label:
                why = "cannot contain periods ('.') or NUL bytes"
            else:
                continue
            raise InvalidNamespaceError(
                f"Invalid namespace label {label!r} in {namespace!r}: namespace labels {why}."
            )


def _newest_first(info: DocumentInfo) -> tuple[float, str]:
    return -info.updated_at.timestamp(), info.path


def _listed_dir(conditions: Iterable[MatchCondition]) -> str:
    """The directory a listing can start from: the labels of a prefix condition before its
    first wildcard ('' = the whole space)."""
    for condition in conditions:
        if condition.match_type == "prefix":
            fixed = []
            for label in condition.path:
                if label == "*":
                    break
                fixed.append(label)
            return namespace_dir(tuple(fixed))
    return ""


def _meets(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether ``namespace`` meets a prefix or suffix condition ("*" matches any label)."""
    pattern = tuple(condition.path)
    if len(namespace) < len(pattern):
        return False
    if condition.match_type == "prefix":
        labels = namespace[: len(pattern)]
    elif condition.match_type == "suffix":
        labels = namespace[len(namespace) - len(pattern) :]
    else:
        raise ValueError(f"match_type {condition.match_type!r} is neither 'prefix' nor 'suffix'")
    return all(p in ("*", label) for p, label in zip(pattern, labels, strict=True))
