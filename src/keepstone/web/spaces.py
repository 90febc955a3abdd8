"""Naming a space in the UI: the API's four query parameters, kept in links and forms.

A space is named by ``name``, ``visibility`` (default ``project``), ``project`` and
``bot`` — the tenant and the user are the signed-in principal's, stamped by
:func:`keepstone.service.access.space_ref` exactly as for the API.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from keepstone.documents import Document, DocumentInfo
from keepstone.principal import Principal
from keepstone.service.access import space_ref
from keepstone.service.spaces import SpaceService
from keepstone.spaces import SpaceRef
from keepstone.text import is_whole_number

SPACE_FIELDS = ("name", "visibility", "project", "bot")
#: Documents on one page of a space's listing: a space of any size opens as fast as this.
LISTING_PAGE = 100
#: What a page says after the change that redirected to it (``saved=<key>``): fixed text,
#: so a crafted link cannot make a page say anything else.
SAVED_NOTICES = {
    "saved": "Saved.",
    "renamed": "Renamed: this is the document at its new path.",
    "deleted": "The document was deleted.",
}

#: The orders a space's listing is shown in, and how the UI names them.
LISTING_ORDERS = {"path": "Name", "updated": "Last change"}


def space_fields(source: Mapping[str, Any]) -> dict[str, str]:
    """The space-naming fields of a query or a form that are present and not empty."""
    out: dict[str, str] = {}
    for key in SPACE_FIELDS:
        value = source.get(key)
        if isinstance(value, str) and value:
            out[key] = value
    return out


def ref_of(who: Principal, fields: Mapping[str, str]) -> SpaceRef:
    """The space ``fields`` name, as ``who`` may name it (InvalidSpaceRef when they do not
    name one)."""
    return space_ref(
        who,
        fields.get("name", ""),
        fields.get("visibility", "project"),
        project=fields.get("project"),
        bot=fields.get("bot"),
    )


def fields_of(ref: SpaceRef) -> dict[str, str]:
    """The fields that name ``ref`` again (the inverse of :func:`ref_of`)."""
    out = {"name": ref.name, "visibility": ref.visibility.value}
    if ref.project:
        out["project"] = ref.project
    if ref.bot:
        out["bot"] = ref.bot
    return out


def label_fields(label: Any) -> dict[str, str]:
    """The fields naming a listed space (a :class:`keepstone.service.spaces.SpaceLabel`)."""
    out = {"name": str(label.name), "visibility": str(label.visibility)}
    if label.project:
        out["project"] = str(label.project)
    if label.bot:
        out["bot"] = str(label.bot)
    return out


@dataclass
class Folder:
    """A directory of a space's tree: its sub-folders and its documents, by name."""

    name: str
    folders: dict[str, Folder] = field(default_factory=dict)
    documents: list[DocumentInfo] = field(default_factory=list)

    @property
    def sorted_folders(self) -> list[Folder]:
        return [self.folders[k] for k in sorted(self.folders)]


def tree(documents: list[DocumentInfo]) -> Folder:
    """The documents (sorted by path) as a tree of folders."""
    root = Folder("")
    for doc in documents:
        node = root
        for part in doc.path.split("/")[:-1]:
            node = node.folders.setdefault(part, Folder(part))
        node.documents.append(doc)
    return root


def listing(service: SpaceService, ref: SpaceRef, query: Mapping[str, str]) -> dict[str, Any]:
    """One page of a space's listing as the space page shows it: by name as a tree of
    folders, or by last change as a flat list; narrowed to the paths holding the ``q``
    filter; the page after ``cursor`` (a bad sort or cursor is the 400 the API answers)."""
    sort = query.get("sort") or "path"
    match = (query.get("q") or "").strip()
    cursor = query.get("cursor") or None
    page = service.list_page(ref, limit=LISTING_PAGE, cursor=cursor, sort=sort, match=match)
    return {
        "saved": SAVED_NOTICES.get(query.get("saved", "")),
        "sort": sort,
        "orders": LISTING_ORDERS,
        "match": match,
        "cursor": cursor,
        "next_cursor": page.next_cursor,
        "documents": page.items,
        "root": tree(list(page.items)) if sort == "path" else None,
    }


def restored_notice(service: SpaceService, ref: SpaceRef, doc: Document, asked: str) -> int | None:
    """The version a restore made live again, from the redirect's ``restored=<version>``:
    only a kept version of the document, older than the live one, whose content the live
    document has (the same etag). Anything else shows nothing, as a crafted ``saved=``
    does, so a crafted link cannot announce a restore that did not happen."""
    if not is_whole_number(asked):
        return None
    number = int(asked)
    versions = list(service.versions(ref, doc.path))
    if not versions or versions[0].deleted or versions[0].etag != doc.etag:
        return None
    live = versions[0].version
    kept = next((v for v in versions if v.version == number and not v.deleted), None)
    return number if kept is not None and number < live and kept.etag == doc.etag else None
