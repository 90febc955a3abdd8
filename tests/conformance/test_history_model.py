"""The history against a model kept in memory, driven by hypothesis (one machine per adapter).

Random writes, deletes, moves and imports, with a clock that steps forward by random
amounts (zero included: several changes in one instant). The model is the space as a dict
path → content at every instant a change was made; the invariant: for every recorded
instant, ``list_as_of`` and ``read_as_of`` of every path answer the model at that instant
(the listings after every step, the reads of older instants once per run).
"""

from __future__ import annotations

import io
import itertools
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from keepstone.errors import NotFound
from keepstone.quota import Limits
from keepstone.store.base import ImportStrategy, MemoryStore
from tests.conformance.archives import regular, tar_gz
from tests.conformance.conftest import StoreFactory
from tests.conformance.helpers import FakeClock, project_ref

PATHS = ["a.md", "b.md", "dir/c.md", "dir/sub/d.md", "é.md"]
paths = st.sampled_from(PATHS)
#: Small bodies, and now and then a large one: a version from version_pack.COMPRESS_FROM
#: bytes is packed when written (the SQL stores keep its row beside the live document),
#: a smaller one is copied into the history when replaced.
bodies = st.text(alphabet="xyé\n\r", max_size=40) | st.builds(
    lambda head, n: head + "z" * n, st.text(alphabet="xy", max_size=4), st.integers(4090, 4200)
)
#: Clock steps: none (changes in one instant), a microsecond, seconds, most of a day.
steps = st.sampled_from([0, 1, 1_000_000]) | st.integers(1, 86_400 * 1_000_000)

pytestmark = pytest.mark.requires("history")


def make_machine(store: MemoryStore, clock: FakeClock) -> type[RuleBasedStateMachine]:
    spaces = itertools.count()

    class HistoryVsModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            # A fresh space per example: history outlives deletes, so a reused space
            # would carry the versions of earlier examples.
            self.ref = project_ref(name=f"model-{next(spaces)}")
            self.live: dict[str, str] = {}
            self.past: dict[datetime, dict[str, str]] = {}
            self.instants: list[datetime] = []
            clock.tick(1)

        def changed(self) -> None:
            """Record the space as it is now, at the instant the change was stamped with."""
            if clock.now not in self.past:
                self.instants.append(clock.now)
            self.past[clock.now] = dict(self.live)

        @rule(micros=steps)
        def tick(self, micros: int) -> None:
            clock.tick(micros / 1_000_000)

        @rule(path=paths, body=bodies)
        def write(self, path: str, body: str) -> None:
            store.write(self.ref, path, body)
            self.live[path] = body
            self.changed()

        @rule(path=paths)
        def delete(self, path: str) -> None:
            if path not in self.live:
                with pytest.raises(NotFound):
                    store.delete(self.ref, path)
                return
            store.delete(self.ref, path)
            del self.live[path]
            self.changed()

        @precondition(lambda self: bool(self.live))
        @rule(data=st.data(), to=paths)
        def move(self, data: st.DataObject, to: str) -> None:
            path = data.draw(st.sampled_from(sorted(self.live)))
            if path == to:
                return
            store.move(self.ref, path, to, overwrite=True)
            self.live[to] = self.live.pop(path)
            self.changed()

        @rule(
            strategy=st.sampled_from(list(ImportStrategy)),
            incoming=st.dictionaries(paths, bodies, min_size=1, max_size=3),
        )
        def import_archive(self, strategy: ImportStrategy, incoming: dict[str, str]) -> None:
            data = tar_gz([regular(p, b) for p, b in sorted(incoming.items())])
            report = store.import_archive(self.ref, io.BytesIO(data), strategy)
            assert report.rejected == []
            for path, body in incoming.items():
                if path in report.written:
                    self.live[path] = body
                elif path in report.renamed:
                    self.live[report.renamed[path]] = body
                else:
                    assert path in report.skipped
            self.changed()

        @invariant()
        def the_past_agrees(self) -> None:
            """Every step: the listing at every recorded instant, and every path read at the
            newest one. An older instant's reads cannot change unless a later change
            rewrote a version already made: :meth:`teardown` reads them all once, at the end
            of the run, where such a rewrite still shows (and from where hypothesis shrinks
            it as from any step)."""
            before = clock.now - timedelta(days=365)
            assert store.list_as_of(self.ref, before) == []
            for at in self.instants:
                held = self.past[at]
                listed = store.list_as_of(self.ref, at)
                assert [d.path for d in listed] == sorted(held), at
                assert [d.size_bytes for d in listed] == [
                    len(held[d.path].encode("utf-8")) for d in listed
                ]
            if self.instants:
                self.reads_agree(self.instants[-1])
            assert {d.path: d.content for d in store.iter_documents(self.ref)} == self.live

        def reads_agree(self, at: datetime) -> None:
            """Every path the run has known, read as of ``at``, answers the model."""
            held = self.past[at]
            known = set(PATHS) | {p for past in self.past.values() for p in past}
            for path in sorted(known):
                if path in held:
                    assert store.read_as_of(self.ref, path, at).content == held[path]
                else:
                    with pytest.raises(NotFound):
                        store.read_as_of(self.ref, path, at)

        def teardown(self) -> None:
            for at in self.instants:
                self.reads_agree(at)

    return HistoryVsModel


def test_the_space_as_of_every_instant_agrees_with_a_model(store_factory: StoreFactory) -> None:
    store = store_factory(Limits())
    clock = FakeClock()
    store.clock = clock  # type: ignore[attr-defined]  # every history adapter has one
    machine: Any = make_machine(store, clock)
    machine.TestCase.settings = settings(
        max_examples=20,
        stateful_step_count=20,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    machine.TestCase().runTest()
