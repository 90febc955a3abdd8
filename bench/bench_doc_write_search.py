"""What a document write costs the next search of its space, in process: an agent's loop of
"note something, then search" against a space of many documents (docs/search.md, "How it
ranks").

For each size (``--docs``: documents of five sections each, about six chunks a document) a
fresh store is filled (the SQL store on SQLite, the filesystem store with its sidecar index,
and with ``--postgres URL`` the SQL store in a throw-away schema of that database), every
chunk is given a vector of a stand-in model (random unit vectors: the cost of the dense
side, not its quality), and one ``DocumentSearch`` with that
model searches the space. Then, ``--rounds`` times: a search alone (the caches warm), and a
search right after one document is rewritten and its chunks embedded. Keyword-only is the
same without the model. p50 in milliseconds of each.

``--baseline SRC`` runs the same in another checkout's source (``src``), in a child process,
taking turns with this one: figures side by side from the same minutes of a noisy machine.

    .venv/bin/python bench/bench_doc_write_search.py
    .venv/bin/python bench/bench_doc_write_search.py --docs 500,2000 --baseline /tmp/old/src
    .venv/bin/python bench/bench_doc_write_search.py --postgres "$KEEPSTONE_TEST_POSTGRES_URL"

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent.parent / "src"
WORDS = (
    "deploy billing cache index queue retry timeout schema migration token quota worker "
    "search vector backup restore tenant limit audit latency"
).split()
DIM = 384


class RandomModel:
    """Unit vectors that depend only on the batch size: what the dense side costs."""

    model_id = "bench-random"
    dim = DIM

    def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
        rows = np.random.default_rng(len(texts)).standard_normal((len(texts), DIM))
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def document(rnd: random.Random, i: int) -> str:
    sections = (
        f"## Section {s}\n\n" + " ".join(rnd.choice(WORDS) for _ in range(60)) + f" note{i}x{s}\n"
        for s in range(5)
    )
    return f"# Document {i}\n\n" + "\n".join(sections)


def measure(docs: int, rounds: int, hybrid: bool, kind: str, postgres: str) -> dict[str, float]:
    """p50 ms of a search alone and of one right after a write, in a fresh store of
    ``kind`` (``sqlite``, ``fs``, or ``postgres``: in a throw-away schema of ``postgres``)."""
    import uuid

    from bench_store import BENCH_LIMITS, drop_schema
    from keepstone.db.vectors import encode_many
    from keepstone.service.search import DocumentSearch
    from keepstone.spaces import SpaceRef, Visibility
    from keepstone.store.fs import FilesystemStore
    from keepstone.store.sql import SqlStore

    rnd = random.Random(docs)
    model = RandomModel()
    schema = f"bench_{uuid.uuid4().hex[:12]}" if kind == "postgres" else ""
    with tempfile.TemporaryDirectory() as tmp:
        store: Any
        if kind == "postgres":
            store = SqlStore.open(postgres, BENCH_LIMITS, schema=schema)
        elif kind == "fs":
            store = FilesystemStore(Path(tmp) / "spaces", BENCH_LIMITS)
        else:
            store = SqlStore.open(f"sqlite:///{tmp}/bench.db", BENCH_LIMITS)
        ref = SpaceRef.build(Visibility.PROJECT, "notes", tenant="t1", project="p1")
        for i in range(docs):
            store.write(ref, f"notes/d{i}.md", document(rnd, i))

        def embed_pending() -> None:
            store.reconcile(ref)
            while hybrid and (rows := store.pending_chunks(2000, model.model_id)):
                vectors = encode_many(model.embed([r.search_text for r in rows]))
                store.store_embeddings(rows, vectors, model.model_id)

        embed_pending()
        search = DocumentSearch(store, model if hybrid else None)
        search.search([ref], "billing retry")
        alone: list[float] = []
        after: list[float] = []
        for k in range(rounds):
            started = time.perf_counter()
            search.search([ref], "quota worker")
            alone.append(time.perf_counter() - started)
            store.write(ref, f"notes/d{k}.md", document(rnd, docs + k))
            embed_pending()
            started = time.perf_counter()
            search.search([ref], "quota worker")
            after.append(time.perf_counter() - started)
        store.close()
    if schema:
        drop_schema(postgres, schema)
    return {"alone": statistics.median(alone) * 1e3, "after": statistics.median(after) * 1e3}


def run_in(
    src: Path, docs: int, rounds: int, hybrid: bool, kind: str, postgres: str
) -> dict[str, float]:
    """:func:`measure` in a child process importing the product from ``src`` (this
    checkout's too, so both trees start alike)."""
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{Path(__file__).resolve().parent}"}
    argv = [sys.executable, __file__, "--child", f"{docs},{rounds},{int(hybrid)},{kind}"]
    argv += ["--postgres", postgres] if postgres else []
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", default="500,2000", help="space sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--baseline", type=Path, help="another checkout's src, run beside this")
    parser.add_argument("--postgres", default="", help="a PostgreSQL URL: measure there too")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        *numbers, kind = args.child.split(",")
        docs, rounds, hybrid = (int(x) for x in numbers)
        print(json.dumps(measure(docs, rounds, bool(hybrid), kind, args.postgres)))
        return
    trees = [("this", HERE)] + ([("base", args.baseline.resolve())] if args.baseline else [])
    databases = ["sqlite", "fs"] + (["postgres"] if args.postgres else [])
    print(
        f"{'db':<9} {'docs':>6} {'side':<8} {'tree':<5} {'search alone p50':>17} "
        f"{'after a write p50':>18}"
    )
    for db in databases:
        for docs in (int(x) for x in args.docs.split(",")):
            for hybrid in (False, True):
                for name, src in reversed(trees) if docs % 2 else trees:
                    got = run_in(src, docs, args.rounds, hybrid, db, args.postgres)
                    side = "hybrid" if hybrid else "keyword"
                    print(
                        f"{db:<9} {docs:>6} {side:<8} {name:<5} {got['alone']:>14.1f} ms "
                        f"{got['after']:>15.1f} ms",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
