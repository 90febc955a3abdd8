"""Where the test suite's CPU goes: runs a command (by default ``make unit``, the whole
pytest suite) while sampling every process of the machine from ``/proc``, then prints the
command's wall time, how busy the machine's cores were meanwhile, and the CPU seconds and
number of processes by what each process is. Python processes are told apart by their
command line, not their name (all are ``python3`` or ``keepstone``): pytest and its xdist
workers; the tests' fork server and the children it forks (``tests/processes.py``); each
``keepstone <command>`` (``serve`` apart from ``memory`` or ``mcp``); and a child that
multiprocessing spawned, by what spawned it (a server's indexer, or its ``--workers``).

    .venv/bin/python bench/profile_suite.py                      # the whole suite, ~7 min
    .venv/bin/python bench/profile_suite.py -- .venv/bin/pytest -q tests/web/test_browser.py

Samples five times a second, so a process's last fraction of a second and processes that
live less than that are undercounted. Linux only. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The suite as `make unit` runs it (its flags live in the Makefile, once).
DEFAULT = ["make", "--no-print-directory", "unit"]
TICK = os.sysconf("SC_CLK_TCK")

#: (pid, start time) → (name, kind, CPU ticks so far): a pid reused by a later process is
#: another key.
Seen = dict[tuple[str, str], tuple[str, str, int]]


def sample(seen: Seen) -> None:
    """Every live process's name, kind and user + system ticks, into ``seen``. The kind is
    read again only when the name changed (an ``exec``: a fork is sampled as its parent
    until it runs its own program)."""
    live: dict[str, tuple[tuple[str, str], str]] = {}  # pid → its key, its parent's pid
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:  # gone meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        key = (pid, fields[19])
        live[pid] = (key, fields[1])
        old = seen.get(key)
        kind = old[1] if old and old[0] == name else kind_of(pid, name)
        seen[key] = (name, kind, int(fields[11]) + int(fields[12]))
    for key, ppid in live.values():
        name, kind, ticks = seen[key]
        if kind == SPAWNED and ppid in live:
            seen[key] = (name, f"spawned by {seen[live[ppid][0]][1]}", ticks)


#: A multiprocessing child whose parent was not sampled yet.
SPAWNED = "spawned by multiprocessing"


def kind_of(pid: str, name: str) -> str:
    """What the process is, from its command line (its name where that says nothing)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return name
    line = " ".join(argv)
    if "multiprocessing.spawn" in line:
        return SPAWNED
    if "forkserver" in line:
        return "tests' fork server and its children"
    if "exec(eval(sys.stdin" in line:  # how execnet starts an xdist worker
        return "pytest-xdist worker"
    if any(Path(a).name == "pytest" for a in argv[:2]):
        return "pytest"
    for i, arg in enumerate(argv[:2]):
        if Path(arg).name == "keepstone":
            command = next((a for a in argv[i + 1 :] if not a.startswith("-")), "")
            return f"keepstone {command}".strip()
    return name


def busy_ticks() -> int:
    """The machine's ticks spent on anything but idling and waiting for the disk."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(
        int, Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    )
    return user + nice + system + irq + softirq + steal


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=12, help="kinds of process listed")
    parser.add_argument("command", nargs="*", help="the command to run (after --)")
    args = parser.parse_args(argv)
    before: Seen = {}
    sample(before)
    seen: Seen = dict(before)
    busy, start = busy_ticks(), time.perf_counter()
    child = subprocess.Popen(args.command or DEFAULT, cwd=ROOT)
    while child.poll() is None:
        sample(seen)
        time.sleep(0.2)
    sample(seen)
    wall, busy = time.perf_counter() - start, busy_ticks() - busy
    cpu: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for key, (_, kind, ticks) in seen.items():
        spent = ticks - before[key][2] if key in before else ticks
        if spent > 0 or key not in before:
            cpu[kind] += spent
            count[kind] += key not in before
    cores = os.cpu_count() or 1
    print(f"\nexit {child.returncode}; wall {wall:.0f} s; {cores} cores busy {busy / TICK:.0f} s")
    print(f"({busy / TICK / (wall * cores):.0%} of what they could give)\n")
    print(f"{'CPU s':>8} {'new processes':>14}  what")
    for name, ticks in cpu.most_common(args.top):
        print(f"{ticks / TICK:>8.1f} {count[name]:>14}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
