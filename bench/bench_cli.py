"""How long a ``keepstone memory`` command takes on the plain tree (the filesystem store, the
local default), from the start of its process to its exit: what an agent's hook pays on
every call. Prints the median wall time and the process's CPU (user + system) per command,
and with ``--baseline SRC`` (as ``bench_freshness.py`` takes it), the same for another
checkout's code side by side, the trees taking
turns run by run, and the ratio.

    .venv/bin/python bench/bench_cli.py
    .venv/bin/python bench/bench_cli.py --baseline ../other-checkout/src --runs 30

Each tree runs as ``python -m keepstone.cli.main`` with its ``src`` first on ``PYTHONPATH``,
in a home of its own holding one note, after one warm-up run of each command (which
compiles the tree's bytecode). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "src"
SPACE = ("--bot", "bench")
#: (label, argv after ``keepstone``, stdin); the put also writes the note the others read.
PUT = ("memory put", ("memory", "put", "notes/a.md", *SPACE), b"# notes\nthe next step\n")
COMMANDS: tuple[tuple[str, tuple[str, ...], bytes], ...] = (
    ("--version", ("--version",), b""),
    ("memory cat", ("memory", "cat", "notes/a.md", *SPACE), b""),
    ("memory ls", ("memory", "ls", *SPACE), b""),
    PUT,
    ("memory log", ("memory", "log", "notes/a.md", *SPACE), b""),
)


def run_once(src: Path, home: Path, argv: tuple[str, ...], stdin: bytes) -> tuple[float, float]:
    """One command's wall seconds and its process's CPU seconds."""
    env = {**os.environ, "PYTHONPATH": str(src), "KEEPSTONE_HOME": str(home)}
    # Bytecode written (an installed package has it): the warm-up compiles each tree once.
    for name in ("KEEPSTONE_SERVER", "KEEPSTONE_TOKEN", "PYTHONDONTWRITEBYTECODE"):
        env.pop(name, None)
    before = _children_cpu()
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "keepstone.cli.main", *argv],
        env=env,
        input=stdin,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    wall = time.perf_counter() - began
    if done.returncode:
        raise SystemExit(
            f"{' '.join(argv)} failed in {src}: {done.stderr.decode(errors='replace')}"
        )
    return wall, _children_cpu() - before


def _children_cpu() -> float:
    """User + system seconds of every child this process has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="another checkout's src, run beside this one")
    parser.add_argument("--runs", type=int, default=20, help="runs of each command per tree")
    args = parser.parse_args(argv)
    if args.baseline and args.baseline.resolve() == HERE:
        parser.error("--baseline is this checkout's own src: give another checkout's")
    trees = [HERE] + ([args.baseline.resolve()] if args.baseline else [])
    figures: dict[tuple[Path, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        homes = {src: Path(tmp) / f"home{i}" for i, src in enumerate(trees)}
        for src in trees:  # the note, then one warm-up run of each command
            for _, command, stdin in (PUT, *COMMANDS):
                run_once(src, homes[src], command, stdin)
        for turn in range(args.runs):
            for src in trees if turn % 2 == 0 else trees[::-1]:
                for label, command, stdin in COMMANDS:
                    got = run_once(src, homes[src], command, stdin)
                    figures.setdefault((src, label), []).append(got)
    print(f"{args.runs} runs of each command per tree, medians (wall ms / CPU ms)\n")
    print(f"{'command':<12}" + "".join(f"{str(src)[-40:]:>44}" for src in trees))
    for label, _, _ in COMMANDS:
        cells = []
        for src in trees:
            runs = figures[(src, label)]
            wall = statistics.median(w for w, _ in runs) * 1e3
            cpu = statistics.median(c for _, c in runs) * 1e3
            cells.append(f"{wall:>7.0f} / {cpu:>4.0f}")
        ratio = ""
        if len(trees) == 2:
            this, other = (statistics.median(w for w, _ in figures[(s, label)]) for s in trees)
            ratio = f"   this/other wall {this / other:.2f}"
        print(f"{label:<12}" + "".join(f"{c:>44}" for c in cells) + ratio)
    return 0


if __name__ == "__main__":
    sys.exit(main())
