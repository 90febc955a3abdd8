"""The house's habits, held by a test (STYLE.md): no module of ``src/keepstone`` over 600
lines, no function over 60, no import circle among its modules.

Lines are counted as ``house_shape.py`` (the house's shape tool) counts them: a module's are
its newline characters plus one; a function's run from its ``def`` line to its last line
(decorators not included), nested functions and methods counted on their own as well as
inside what holds them. A function is named by its module and qualified name
(``keepstone/runtime.py::Runtime.close``), so the names do not move with line numbers.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "keepstone"

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, str]:
    """Every module's source, by its path under ``src`` (``keepstone/runtime.py``)."""
    return {
        path.relative_to(SRC).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def _module_lines(text: str) -> int:
    return text.count("\n") + 1


def _function_lines(module: str, text: str) -> dict[str, int]:
    """The length of every function of ``text``, by ``module::Qualified.name``."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                end = child.end_lineno or child.lineno
                lengths[f"{module}::{name}"] = end - child.lineno + 1
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(text), "")
    return lengths


@functools.cache
def _offenders() -> dict[str, int]:
    """Every module over :data:`MAX_MODULE_LINES` and every function over
    :data:`MAX_FUNCTION_LINES`, with its length (the tree is parsed once per run)."""
    found: dict[str, int] = {}
    for module, text in _modules().items():
        if _module_lines(text) > MAX_MODULE_LINES:
            found[module] = _module_lines(text)
        for function, lines in _function_lines(module, text).items():
            if lines > MAX_FUNCTION_LINES:
                found[function] = lines
    return found


def test_no_module_is_over_600_lines() -> None:
    assert {m: n for m, n in _offenders().items() if "::" not in m} == {}


def test_no_function_is_over_60_lines() -> None:
    assert {f: n for f, n in _offenders().items() if "::" in f} == {}


def _dotted(module: str) -> str:
    """``keepstone/store/fs.py`` → ``keepstone.store.fs``; a package is its ``__init__``."""
    return module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _imports(module: str, text: str, known: set[str]) -> set[str]:
    """The modules of ours ``text`` imports, anywhere in it (inside functions too: a lazy
    import is still an arrow), as house_shape.py resolves them."""
    name = _dotted(module)
    found: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = (
                    name.split(".") if module.endswith("__init__.py") else name.split(".")[:-1]
                )
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                if candidate in known:
                    found.add(candidate)
                elif base in known:
                    found.add(base)
    return found


def _circles(edges: dict[str, set[str]], packages: set[str]) -> list[list[str]]:
    """The strongly connected components of more than one module (packages' ``__init__``
    left out, as they only re-export)."""
    circles: list[list[str]] = []
    for start in sorted(set(edges) - packages):
        reach: set[str] = set()
        todo = [w for w in edges[start] if w not in packages]
        while todo:
            here = todo.pop()
            if here not in reach:
                reach.add(here)
                todo.extend(w for w in edges[here] if w not in packages)
        if start in reach:
            component = sorted(m for m in reach if start in _reach(edges, packages, m))
            if component not in circles:
                circles.append(component)
    return circles


def _reach(edges: dict[str, set[str]], packages: set[str], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for w in edges[todo.pop()]:
            if w not in packages and w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def test_no_import_circle() -> None:
    modules = _modules()
    known = {_dotted(m) for m in modules}
    packages = {_dotted(m) for m in modules if m.endswith("__init__.py")}
    edges = {_dotted(m): _imports(m, text, known) for m, text in modules.items()}
    assert _circles(edges, packages) == []


def test_the_circle_check_finds_one() -> None:
    edges = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}, "p": {"p.a"}}
    assert _circles(edges, {"p"}) == [["p.a", "p.b", "p.c"]]


def test_the_counting_finds_an_offender() -> None:
    body = "".join(f"        x{i} = {i}\n" for i in range(60))
    text = f"class C:\n    def long(self) -> None:\n{body}\n    def short(self) -> None: ...\n"
    lengths = _function_lines("m.py", text)
    assert lengths == {"m.py::C.long": 61, "m.py::C.short": 1}
    assert _module_lines("a\nb\n") == 3  # as house_shape.py counts: the last newline too
