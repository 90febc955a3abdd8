"""Run every benchmark in bench/ in turn, with quick sizes (``make bench``).

Each ``bench_*.py`` is a standalone script that prints its own figures; this runs
them one after another as child processes of the same interpreter, with the
environment passed through. With ``KEEPSTONE_TEST_POSTGRES_URL`` set, the scripts that
know PostgreSQL print its figures beside SQLite's in the same run, and
``bench_pg_vs_sqlite.py`` (run last) ends with one side-by-side table.

    make bench                                       # quick sizes, SQLite (+ fs)
    KEEPSTONE_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/test make bench
    .venv/bin/python bench/run_all.py --full         # each script's own default sizes
    .venv/bin/python bench/run_all.py --only store,pg_vs_sqlite

A script added to bench/ later runs too, with no arguments. Exit status: 0 when
every script exited 0, else 1 (a benchmark that checks a ceiling, such as the
export's peak RSS, reports FAIL by its exit status). Nothing here times out or
asserts on speed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent

#: Quick arguments per script (one or more runs each); the order they run in.
QUICK: dict[str, list[list[str]]] = {
    "bench_secrets.py": [[]],
    "bench_cli.py": [["--runs", "5"]],
    "bench_store.py": [["--small-count", "300", "--large-count", "50"]],
    "bench_write_cost.py": [["--docs", "300", "--rounds", "2"]],
    "bench_records.py": [["--sizes", "10000"]],
    "bench_search_quality.py": [[]],
    "bench_doc_write_search.py": [["--docs", "300", "--rounds", "5"]],
    "bench_contention.py": [["--seconds", "5"]],
    "bench_levers.py": [["--splits", "2", "--skip-context"]],
    "bench_api.py": [[]],
    "bench_ui_listing.py": [["--requests", "3"]],
    "bench_export_rss.py": [["--size", "32"]],
    "bench_pg_plans.py": [["--documents", "1000", "--searches", "20"]],
    "bench_soak.py": [["--seconds", "60"]],
    "bench_pg_vs_sqlite.py": [
        ["--small-count", "300", "--large-count", "50", "--api-count", "300"]
    ],
}
#: Modules in bench/ that are imported by the scripts, not run.
NOT_SCRIPTS = {"bench_common.py"}


def scripts() -> list[str]:
    """Every bench script present: the known ones in QUICK's order, then any others,
    with bench_pg_vs_sqlite.py (the summary table) last."""
    present = {p.name for p in BENCH.glob("bench_*.py")} - NOT_SCRIPTS
    known = [name for name in QUICK if name in present and name != "bench_pg_vs_sqlite.py"]
    others = sorted(present - set(QUICK))
    last = ["bench_pg_vs_sqlite.py"] if "bench_pg_vs_sqlite.py" in present else []
    return known + others + last


def short(name: str) -> str:
    return name.removeprefix("bench_").removesuffix(".py")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--full", action="store_true", help="run each script with its own default sizes"
    )
    parser.add_argument(
        "--only", default="", help="comma-separated script names (e.g. store,records)"
    )
    args = parser.parse_args(argv)
    wanted = {w.strip() for w in args.only.split(",") if w.strip()}
    chosen = [s for s in scripts() if not wanted or short(s) in wanted]
    unknown = wanted - {short(s) for s in scripts()}
    if unknown:
        parser.error(
            f"no benchmark named {', '.join(sorted(unknown))}; "
            f"choose from {', '.join(short(s) for s in scripts())}"
        )

    env = dict(os.environ)
    # The scripts import keepstone from src/ and their siblings from bench/.
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(BENCH.parent / "src"), str(BENCH), env.get("PYTHONPATH", "")) if p
    )
    pg = "PostgreSQL beside SQLite" if env.get("KEEPSTONE_TEST_POSTGRES_URL") else "no PostgreSQL"
    print(f"# {len(chosen)} benchmarks, {'full' if args.full else 'quick'} sizes, {pg}")

    outcomes: list[tuple[str, int, float]] = []
    for name in chosen:
        runs = [[]] if args.full else QUICK.get(name, [[]])
        for extra in runs:
            label = " ".join([name, *extra])
            print(f"\n{'=' * 78}\n## {label}\n{'=' * 78}", flush=True)
            start = time.perf_counter()
            code = subprocess.call([sys.executable, str(BENCH / name), *extra], env=env)
            elapsed = time.perf_counter() - start
            outcomes.append((label, code, elapsed))

    print(f"\n{'=' * 78}\n## summary\n{'=' * 78}")
    for label, code, elapsed in outcomes:
        status = "ok" if code == 0 else f"exit {code}"
        print(f"{status:>8}  {elapsed:7.1f} s  {label}")
    return 0 if all(code == 0 for _, code, _ in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
