"""An edit is a read, the edit applied, and a write conditional on the etag read: what a
write landing in between does to it, on every adapter (the HTTP store's server does the
same, for its one request).

The write in between is made by a stand-in for another writer: it runs when the edit
applies itself to the text it read, through the same documents (for the HTTP adapter,
the served store behind the client).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from keepstone.documents import Edit, Insert, Replace
from keepstone.errors import InvalidEdit, NotFound, PreconditionFailed
from keepstone.store import base
from keepstone.store.base import EDIT_ATTEMPTS, MemoryStore, content_etag
from tests.conformance.helpers import ServedHttpStore, project_ref

NOTE = "# Deploys\n\nstaging first\n"
PATH = "deploys.md"


def _beside(store: MemoryStore) -> MemoryStore:
    """Another writer's way to the documents ``store`` holds."""
    return store.served if isinstance(store, ServedHttpStore) else store


@pytest.fixture
def meanwhile(store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """``meanwhile(*changes)``: the ``n``-th time an edit applies itself, the ``n``-th change
    (a text to write, or None to delete) lands first; past the last, none does."""
    queue: list[str | None] = []
    real = base.apply_edit

    def racing(content: str, edit: Edit, path: str) -> str:
        if queue:
            change = queue.pop(0)
            if change is None:
                _beside(store).delete(project_ref(), PATH)
            else:
                _beside(store).write(project_ref(), PATH, change)
        return real(content, edit, path)

    monkeypatch.setattr(base, "apply_edit", racing)
    yield lambda *changes: queue.extend(changes)
    assert not queue, "the edit applied itself fewer times than there were changes"


def test_an_edit_without_an_etag_applies_to_the_text_written_meanwhile(
    store: MemoryStore, meanwhile: Callable[..., None]
) -> None:
    store.write(project_ref(), PATH, NOTE)
    meanwhile(NOTE + "then production\n")
    done = store.edit(project_ref(), PATH, Replace("staging first", "canary first"))
    after = store.read(project_ref(), PATH)
    assert after.content == "# Deploys\n\ncanary first\nthen production\n"
    assert done.etag == after.etag == content_etag(after.content.encode())
    assert not done.created


def test_an_insert_meeting_writes_lands_in_the_last_text(
    store: MemoryStore, meanwhile: Callable[..., None]
) -> None:
    store.write(project_ref(), PATH, NOTE)
    meanwhile(*[NOTE + "x\n" * n for n in range(1, EDIT_ATTEMPTS)])
    store.edit(project_ref(), PATH, Insert(0, "top"))
    written = NOTE + "x\n" * (EDIT_ATTEMPTS - 1)
    assert store.read(project_ref(), PATH).content == "top\n" + written


def test_an_edit_with_an_etag_is_refused_and_the_change_kept(
    store: MemoryStore, meanwhile: Callable[..., None]
) -> None:
    seen = store.write(project_ref(), PATH, NOTE).etag
    meanwhile(NOTE + "then production\n")
    with pytest.raises(PreconditionFailed):
        store.edit(project_ref(), PATH, Insert(0, "top"), if_match=seen)
    assert store.read(project_ref(), PATH).content == NOTE + "then production\n"


def test_an_edit_whose_text_went_meanwhile_is_an_invalid_edit(
    store: MemoryStore, meanwhile: Callable[..., None]
) -> None:
    store.write(project_ref(), PATH, NOTE)
    meanwhile("# Deploys\n\nproduction only\n")
    with pytest.raises(InvalidEdit) as refused:
        store.edit(project_ref(), PATH, Replace("staging first", "canary first"))
    assert refused.value.details["reason"] == "no_match"
    assert store.read(project_ref(), PATH).content == "# Deploys\n\nproduction only\n"


def test_an_edit_of_a_document_deleted_meanwhile_is_not_found(
    store: MemoryStore, meanwhile: Callable[..., None]
) -> None:
    store.write(project_ref(), PATH, NOTE)
    meanwhile(None)
    with pytest.raises(NotFound):
        store.edit(project_ref(), PATH, Insert(0, "top"))
    assert not store.exists(project_ref(), PATH)


def test_an_edit_outrun_by_every_read_gives_up_naming_it(
    store: MemoryStore, meanwhile: Callable[..., None]
) -> None:
    store.write(project_ref(), PATH, NOTE)
    changes = [NOTE + "x\n" * n for n in range(1, EDIT_ATTEMPTS + 1)]
    meanwhile(*changes)
    with pytest.raises(PreconditionFailed, match=f"changed {EDIT_ATTEMPTS} times"):
        store.edit(project_ref(), PATH, Insert(0, "top"))
    assert store.read(project_ref(), PATH).content == changes[-1]
