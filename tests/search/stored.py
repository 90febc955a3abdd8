"""The labelled sets of :mod:`tests.search.labelled` loaded through the product's stores
with their stored MiniLM vectors (tests/data/search_vectors.npz), and an embedder that
answers the stored vector of each known query text: so the product's search path is
measured without the model. Shared by ``tests/records/test_search_quality.py`` and
``bench/bench_search_quality.py``.

Records get their vectors through the records store's indexer API
(``store_record_embeddings``), document chunks through the document store's
(``pending_chunks`` / ``store_embeddings``), under :data:`MODEL`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from sqlalchemy.engine import Engine

from keepstone.db import utcnow
from keepstone.db.vectors import encode_many
from keepstone.embed.base import Vectors, normalise_rows
from keepstone.records.sql import SqlRecordStore
from keepstone.records.store import PendingRecord, new_record
from keepstone.spaces import SpaceRef
from keepstone.store.sql import SqlStore
from tests.search.labelled import EvalSet, jsonl

#: The model id the stored vectors are stored and searched under.
MODEL = "stored-all-MiniLM-L6-v2"
#: The project of the spaces the documents are written to.
DOCS_PROJECT = "quality"


class StoredEmbedder:
    """The stored vector of each text it knows (a query text not in the set is a
    KeyError: the caller then fails, it never ranks on a made-up vector)."""

    model_id = MODEL
    dim = 384

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls += 1
        return normalise_rows(np.vstack([self.vectors[t] for t in texts]).astype(np.float32))


def _blobs(vectors: np.ndarray) -> list[bytes]:
    return encode_many(normalise_rows(np.array(vectors, dtype=np.float32)))


def store_records(engine: Engine, team_id: str, es: EvalSet, units: np.ndarray) -> list[str]:
    """Insert the records of ``es`` (the records set) as team ``team_id``'s, each with
    its corpus id (the same on every dialect, so rankings compare as is), and store
    ``units[i]`` as the vector of record i. Returns the ids, in set order."""
    store = SqlRecordStore(engine)
    now = utcnow()
    made = [
        dataclasses.replace(new_record(team_id, u.text, None, now), id=u.section) for u in es.units
    ]
    with store.writing() as tx:
        tx.insert(made)
    pending = [PendingRecord(team_id, r.id, r.text) for r in made]
    stored = store.store_record_embeddings(pending, _blobs(units), MODEL)
    if stored != len(made):
        raise RuntimeError(f"stored {stored} record vectors of {len(made)}")
    return [r.id for r in made]


def store_documents(
    store: SqlStore, tenant: str, es: EvalSet, units: np.ndarray
) -> dict[str, SpaceRef]:
    """Write every document of tests/data/docs_corpus.jsonl into its space (a project
    space of team ``tenant`` named as the set names it), reconcile each space, and give
    every chunk the stored vector of the unit of ``es`` (the docs set) with its
    ``search_text``. Raises if a chunk has no such unit or the chunks are not the set's
    units. Returns each space's ref by the set's space name."""
    refs: dict[str, SpaceRef] = {}
    for d in jsonl("docs_corpus.jsonl"):
        name = str(d["space"])
        if name not in refs:
            refs[name] = SpaceRef.build("project", name, tenant=tenant, project=DOCS_PROJECT)
        store.write(refs[name], str(d["path"]), str(d["content"]))
    for ref in refs.values():
        store.reconcile(ref)
    by_text = {u.text: i for i, u in enumerate(es.units)}
    pending = store.pending_chunks(10 * len(es.units) + 1000, MODEL)
    unknown = [p for p in pending if p.search_text not in by_text]
    if unknown:
        first = unknown[0]
        raise RuntimeError(
            f"{len(unknown)} chunks have no labelled unit of their text, e.g. "
            f"{first.path} #{first.seq}: {first.search_text[:80]!r}"
        )
    if len(pending) != len(es.units):
        raise RuntimeError(f"{len(pending)} chunks stored, the set has {len(es.units)} units")
    vectors = units[[by_text[p.search_text] for p in pending]]
    stored = store.store_embeddings(pending, _blobs(vectors), MODEL)
    left = store.pending_chunks(1, MODEL)
    if stored != len(pending) or left:
        raise RuntimeError(f"stored {stored} chunk vectors of {len(pending)}")
    return refs
