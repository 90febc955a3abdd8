"""Export and import speed and peak memory on a large space, against their goals.

Builds a space of ``--size`` (200 MiB by default) on the filesystem store and on a
SQLite file, then for each runs the export in a child process and the import of that
archive into a fresh space in another child. Each child times its own call
(``MemoryStore.export`` / ``import_archive``: the interpreter's start is not document
work) and the parent reads the child's peak RSS from the kernel (``os.wait4`` rusage,
cross-checked by psutil polling); the import is checked to reproduce every document
byte for byte. Prints MB/s of document bytes and the peak RSS, each beside its goal:
export >= 100 MB/s, import >= 50 MB/s, peak RSS < 150 MB. Asserts nothing.

    .venv/bin/python bench/bench_export_rss.py                  # 200 MiB, fs and sqlite
    .venv/bin/python bench/bench_export_rss.py --size 32 --adapter sqlite
    .venv/bin/python bench/bench_export_rss.py --text prose     # mixed-case Markdown

The default notes are lower-case words, digits and full stops. ``--text prose`` writes
``bench_secrets.py``'s Markdown prose instead (capitals, URLs, code, hyphens): the
characters the secret detector's triggers start with occur throughout it, so its scan,
and with it the import, is slower on it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from keepstone.quota import GiB, Limits, MiB
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import MemoryStore
from keepstone.store.fs import FilesystemStore

DOC_BYTES = 128 * 1024
LIMITS = Limits(team_quota=4 * GiB).with_subcap(Visibility.BOT, 2 * GiB)
WORDS = "keepstone keeps what agents learned across runs in plain markdown notes".split()

GOAL_EXPORT_MBS = 100.0
GOAL_IMPORT_MBS = 50.0
GOAL_RSS_MB = 150.0

CHILD = """
import sys, time
from keepstone.quota import GiB, Limits
from keepstone.spaces import SpaceRef, Visibility
from keepstone.store.base import ImportStrategy
verb, adapter, where, archive = sys.argv[1:5]
limits = Limits(team_quota=4 * GiB).with_subcap(Visibility.BOT, 2 * GiB)
if adapter == "fs":
    from keepstone.store.fs import FilesystemStore
    store = FilesystemStore(where, limits)
else:
    from keepstone.store.sql import SqlStore
    store = SqlStore.open(where, limits)
bot = "src" if verb == "export" else "dst"
ref = SpaceRef.build("bot", "default", tenant="local", project="bench", bot=bot)
start = time.perf_counter()
if verb == "export":
    with open(archive, "wb") as sink:
        store.export(ref, sink)
        sink.flush()
else:
    with open(archive, "rb") as source:
        report = store.import_archive(ref, source, ImportStrategy.SKIP)
    assert not report.rejected, report.rejected
print(time.perf_counter() - start)
store.close()
"""


def body(index: int, size: int) -> str:
    """Prose-like text: compresses like real notes, never secret-shaped."""
    head = f"# note {index}\n\n"
    words: list[str] = [head]
    n = len(head)
    i = index
    while n < size:
        word = WORDS[i % len(WORDS)] + (" " if i % 13 else f" {i}.\n")
        words.append(word)
        n += len(word)
        i += 5
    return "".join(words)[:size]


def prose_body(index: int, size: int) -> str:
    from bench_secrets import prose  # this directory is the script's, on sys.path

    return f"# note {index}\n\n" + prose(size, seed=index)[: size - 16]


def build(store: MemoryStore, ref: SpaceRef, total: int, text: str = "notes") -> int:
    count = max(1, total // DOC_BYTES)
    make = prose_body if text == "prose" else body
    for i in range(count):
        store.write(ref, f"notes/{i // 100:03d}/note-{i:05d}.md", make(i, DOC_BYTES))
    return count


def run_measured(cmd: list[str]) -> tuple[float, float, int, int]:
    """(seconds the child timed, wall seconds, peak RSS bytes from wait4, peak RSS bytes
    seen by polling)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    polled = 0
    done = threading.Event()

    def poll() -> None:
        nonlocal polled
        try:
            ps = psutil.Process(proc.pid)
            while not done.is_set():
                polled = max(polled, ps.memory_info().rss)
                time.sleep(0.005)
        except psutil.Error:
            return

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    _, status, rusage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    done.set()
    watcher.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    out = proc.stdout.read().decode() if proc.stdout else ""
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[3:6])}… failed ({proc.returncode}): {err.strip()}")
    # ru_maxrss is KiB on Linux, bytes on macOS.
    factor = 1 if sys.platform == "darwin" else 1024
    return float(out.strip().splitlines()[-1]), wall, rusage.ru_maxrss * factor, polled


def digests(store: MemoryStore, ref: SpaceRef) -> dict[str, str]:
    return {
        d.path: hashlib.sha256(d.content.encode()).hexdigest() for d in store.iter_documents(ref)
    }


def goal(label: str, value: float, target: float, *, at_least: bool, unit: str) -> str:
    ok = value >= target if at_least else value < target
    sign = "≥" if at_least else "<"
    return f"{label}: goal {sign} {target:.0f} {unit}: {value:.1f} {'✓' if ok else '✗'}"


def run_adapter(adapter: str, size: int, tmp: Path, text: str = "notes") -> None:
    src = SpaceRef.build("bot", "default", tenant="local", project="bench", bot="src")
    dst = SpaceRef.build("bot", "default", tenant="local", project="bench", bot="dst")
    tmp.mkdir(parents=True)
    archive = tmp / f"export-{adapter}.tar.gz"
    store: MemoryStore
    if adapter == "fs":
        where = str(tmp / "spaces")
        store = FilesystemStore(where, LIMITS)
    else:
        from keepstone.store.sql import SqlStore

        where = f"sqlite:///{tmp / 'keepstone.db'}"
        store = SqlStore.open(where, LIMITS)
    child = [sys.executable, "-c", CHILD]
    try:
        start = time.perf_counter()
        count = build(store, src, size, text)  # a bot space: no platform authority
        used = store.usage(src).used_bytes
        print(
            f"[{adapter}] built {count} documents, {used / MiB:.1f} MiB "
            f"in {time.perf_counter() - start:.1f} s",
            flush=True,
        )
        seconds, wall, rss, polled = run_measured([*child, "export", adapter, where, str(archive)])
        print(
            f"[{adapter}] export: {seconds:.2f} s ({wall:.2f} s with the interpreter's start), "
            f"archive {archive.stat().st_size / 1e6:.1f} MB, "
            f"peak RSS {rss / 1e6:.1f} MB (polled {polled / 1e6:.1f})"
        )
        print(
            "  "
            + goal("export MB/s", used / seconds / 1e6, GOAL_EXPORT_MBS, at_least=True, unit="MB/s")
        )
        print("  " + goal("export peak RSS", rss / 1e6, GOAL_RSS_MB, at_least=False, unit="MB"))
        seconds, wall, rss, polled = run_measured([*child, "import", adapter, where, str(archive)])
        print(
            f"[{adapter}] import: {seconds:.2f} s ({wall:.2f} s with the interpreter's start), "
            f"peak RSS {rss / 1e6:.1f} MB (polled {polled / 1e6:.1f})"
        )
        print(
            "  "
            + goal("import MB/s", used / seconds / 1e6, GOAL_IMPORT_MBS, at_least=True, unit="MB/s")
        )
        print("  " + goal("import peak RSS", rss / 1e6, GOAL_RSS_MB, at_least=False, unit="MB"))
        before, after = digests(store, src), digests(store, dst)
        same = before == after and store.usage(dst).used_bytes == used
        print(f"[{adapter}] round trip: {len(after)}/{len(before)} documents, identical: {same}")
    finally:
        store.close()


def parse_size(text: str) -> int:
    """``200`` or ``200MiB`` (MiB), ``1GiB``."""
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    if t.endswith("g"):
        return int(float(t[:-1]) * GiB)
    return int(float(t.removesuffix("m")) * MiB)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adapter", choices=["fs", "sqlite", "both"], default="both")
    parser.add_argument("--size", default="200", help="size of the space: 200, 200MiB, 1GiB")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument(
        "--text", choices=["notes", "prose"], default="notes", help="what the documents hold"
    )
    args = parser.parse_args(argv)
    size = parse_size(args.size)
    adapters = ["fs", "sqlite"] if args.adapter == "both" else [args.adapter]
    tmp = Path(tempfile.mkdtemp(prefix="keepstone-rss-"))
    try:
        for adapter in adapters:
            run_adapter(adapter, size, tmp / adapter, args.text)
        return 0
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
