"""The benchmarks cannot rot unseen: every name a bench/ script imports from a sibling
module of bench/ (or from the tests) is defined there. The scripts run only in `make bench`,
not in the suite, so a helper renamed under them would otherwise surface only when someone
next measures."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def _defined(module: Path) -> set[str]:
    """The names a module defines or imports at its top level."""
    names: set[str] = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _local(module: str) -> Path | None:
    """The file of ``module`` when it is a sibling in bench/ or a module of the tests."""
    if module.startswith("tests."):
        path = ROOT / (module.replace(".", "/") + ".py")
    else:
        path = BENCH / f"{module}.py"
    return path if path.is_file() else None


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py")))
def test_every_local_name_a_bench_script_imports_exists(script: str) -> None:
    tree = ast.parse((BENCH / script).read_text(encoding="utf-8"))
    missing = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            source = _local(node.module)
            if source is not None:
                have = _defined(source)
                missing += [f"{node.module}.{a.name}" for a in node.names if a.name not in have]
    assert not missing, f"bench/{script} imports names that do not exist: {missing}"
