"""The store against a plain-dict model, driven by hypothesis (one machine per adapter)."""

from __future__ import annotations

import io
import tarfile
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from keepstone.errors import ImportTooLarge, NotFound, QuotaExceeded
from keepstone.quota import Limits
from keepstone.spaces import Visibility
from keepstone.store.archive import export_space
from keepstone.store.base import ImportStrategy, MemoryStore
from tests.conformance.archives import regular, tar_gz
from tests.conformance.conftest import StoreFactory
from tests.conformance.helpers import project_ref

QUOTA = 400
REF = project_ref()
paths = st.sampled_from(["a.md", "b.md", "a-1.md", "dir/c.md", "dir/sub/d.md", "é.md"])
bodies = st.text(alphabet="xyzé\n", max_size=120)


def make_machine(store: MemoryStore) -> type[RuleBasedStateMachine]:
    class StoreVsModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            for doc in store.list(REF):  # every example starts from an empty space
                store.delete(REF, doc.path)
            self.model: dict[str, str] = {}

        def used(self, model: dict[str, str] | None = None) -> int:
            return sum(len(v.encode()) for v in (model or self.model).values())

        def fits(self, path: str, body: str) -> bool:
            after = dict(self.model)
            after[path] = body
            return self.used(after) <= QUOTA or self.used(after) <= self.used()

        @rule(path=paths, body=bodies)
        def write(self, path: str, body: str) -> None:
            if self.fits(path, body):
                result = store.write(REF, path, body)
                assert result.created == (path not in self.model)
                self.model[path] = body
            else:
                with pytest.raises(QuotaExceeded):
                    store.write(REF, path, body)

        @rule(path=paths)
        def delete(self, path: str) -> None:
            if path in self.model:
                store.delete(REF, path)
                del self.model[path]
            else:
                with pytest.raises(NotFound):
                    store.delete(REF, path)

        @rule(
            strategy=st.sampled_from(list(ImportStrategy)),
            incoming=st.dictionaries(paths, bodies, max_size=3),
        )
        def import_archive(self, strategy: ImportStrategy, incoming: dict[str, str]) -> None:
            data = tar_gz([regular(p, b) for p, b in sorted(incoming.items())])
            if sum(len(b.encode()) for b in incoming.values()) > QUOTA:
                with pytest.raises(ImportTooLarge):  # more than the space could ever hold
                    store.import_archive(REF, io.BytesIO(data), strategy)
                return
            report = store.import_archive(REF, io.BytesIO(data), strategy)
            expected: dict[str, str] = dict(self.model)
            for path, body in sorted(incoming.items()):
                if path in report.written:
                    expected[path] = body
                elif path in report.renamed:
                    new = report.renamed[path]
                    assert strategy is ImportStrategy.RENAME and new not in self.model
                    assert new.startswith(path[:-3] + "-")
                    expected[new] = body
                elif path in report.skipped:
                    assert strategy is ImportStrategy.SKIP and path in self.model
                else:
                    assert [r.path for r in report.rejected].count(path) == 1
                    assert any("quota" in r.reason for r in report.rejected if r.path == path)
            if strategy is ImportStrategy.SKIP:
                assert set(report.skipped) == set(incoming) & set(self.model)
            self.model = expected

        @rule()
        def export_matches(self) -> None:
            sink = io.BytesIO()
            assert export_space(store, REF, sink) == len(self.model)
            exported: dict[str, str] = {}
            with tarfile.open(fileobj=io.BytesIO(sink.getvalue()), mode="r:gz") as tar:
                for member in tar:
                    body = tar.extractfile(member)
                    assert body is not None
                    exported[member.name] = body.read().decode("utf-8")
            assert exported == self.model

        @invariant()
        def agrees(self) -> None:
            docs = {d.path: d.content for d in store.iter_documents(REF)}
            assert docs == self.model
            assert [d.path for d in store.list(REF)] == sorted(self.model)
            assert store.usage(REF).used_bytes == self.used()
            assert [d.path for d in store.list(REF, "dir")] == sorted(
                p for p in self.model if p.startswith("dir/")
            )

    return StoreVsModel


def test_store_agrees_with_a_dict(store_factory: StoreFactory) -> None:
    store = store_factory(Limits().with_subcap(Visibility.PROJECT, QUOTA))
    machine: Any = make_machine(store)
    machine.TestCase.settings = settings(
        max_examples=12,
        stateful_step_count=15,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    machine.TestCase().runTest()
