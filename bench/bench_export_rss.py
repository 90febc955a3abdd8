"""Peak memory of exporting a large space, and an export → import round trip.

Builds a space of ``--mib`` MiB (200 by default) in a temporary ``CAIRN_HOME``, runs
the export in a child process and reads the child's peak RSS from the kernel
(``os.wait4`` rusage, cross-checked by psutil polling), then imports the archive into
a fresh space in another child and checks every document is reproduced byte for
byte. Prints MB/s for both directions.

* ``--adapter fs`` (default): the children are the real ``cairn memory export`` and
  ``cairn memory import`` commands on the filesystem store.
* ``--adapter sqlite``: the children run ``SqlStore.export`` / ``import_archive`` on a
  SQLite file (the CLI's ``--server`` mode would measure the HTTP server instead).

Exit status 1 when the export's peak RSS reaches ``--limit-mb`` (150 by default).
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

from cairn.quota import GiB, Limits, MiB
from cairn.spaces import SpaceRef, Visibility, encode_workdir_key
from cairn.store.base import MemoryStore
from cairn.store.fs import FilesystemStore

DOC_BYTES = 128 * 1024
LIMITS = Limits(team_quota=4 * GiB).with_subcap(Visibility.BOT, 2 * GiB)
WORDS = "cairn keeps what agents learned across runs in plain markdown notes".split()

SQL_CHILD = """
import sys
from cairn.quota import GiB, Limits
from cairn.spaces import SpaceRef, Visibility
from cairn.store.base import ImportStrategy
from cairn.store.sql import SqlStore
verb, url, archive, project, bot = sys.argv[1:6]
limits = Limits(team_quota=4 * GiB).with_subcap(Visibility.BOT, 2 * GiB)
store = SqlStore.open(url, limits)
ref = SpaceRef.build("bot", "default", tenant="local", project=project, bot=bot)
if verb == "export":
    with open(archive, "wb") as sink:
        store.export(ref, sink)
else:
    with open(archive, "rb") as source:
        report = store.import_archive(ref, source, ImportStrategy.SKIP)
    assert not report.rejected, report.rejected
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


def build(store: MemoryStore, ref: SpaceRef, total: int) -> int:
    count = max(1, total // DOC_BYTES)
    for i in range(count):
        store.write(ref, f"notes/{i // 100:03d}/note-{i:05d}.md", body(i, DOC_BYTES))
    return count


def run_measured(cmd: list[str], env: dict[str, str]) -> tuple[float, int, int]:
    """(seconds, peak RSS bytes from wait4, peak RSS bytes seen by polling)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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
    elapsed = time.perf_counter() - start
    done.set()
    watcher.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])}… failed ({proc.returncode}): {err.strip()}")
    # ru_maxrss is KiB on Linux, bytes on macOS.
    factor = 1 if sys.platform == "darwin" else 1024
    return elapsed, rusage.ru_maxrss * factor, polled


def digests(store: MemoryStore, ref: SpaceRef) -> dict[str, str]:
    return {
        d.path: hashlib.sha256(d.content.encode()).hexdigest() for d in store.iter_documents(ref)
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adapter", choices=["fs", "sqlite"], default="fs")
    parser.add_argument("--mib", type=int, default=200, help="size of the space (MiB)")
    parser.add_argument("--limit-mb", type=float, default=150.0, help="peak RSS ceiling (MB)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="cairn-rss-"))
    try:
        project_dir = tmp / "project"
        project_dir.mkdir()
        project = encode_workdir_key(project_dir)
        src = SpaceRef.build("bot", "default", tenant="local", project=project, bot="src")
        dst = SpaceRef.build("bot", "default", tenant="local", project=project, bot="dst")
        archive = tmp / "export.tar.gz"
        env = {**os.environ, "CAIRN_HOME": str(tmp / "home")}
        env["CAIRN_MEMORY_QUOTA_ORG_TOTAL"] = str(4 * GiB)
        env["CAIRN_MEMORY_QUOTA_BOT"] = str(2 * GiB)
        store: MemoryStore
        if args.adapter == "fs":
            store = FilesystemStore(tmp / "home" / "spaces", LIMITS)
            cairn = [sys.executable, "-m", "cairn.cli.main", "memory"]
            space = ["--project", str(project_dir)]
            export_cmd = [*cairn, "export", "--bot", "src", *space, "--out", str(archive)]
            import_cmd = [*cairn, "import", "--bot", "dst", *space, "--in", str(archive)]
        else:
            from cairn.store.sql import SqlStore

            url = f"sqlite:///{tmp / 'cairn.db'}"
            store = SqlStore.open(url, LIMITS)
            child = [sys.executable, "-c", SQL_CHILD]
            export_cmd = [*child, "export", url, str(archive), project, "src"]
            import_cmd = [*child, "import", url, str(archive), project, "dst"]

        start = time.perf_counter()
        count = build(store, src, args.mib * MiB)  # a bot space: no platform authority
        used = store.usage(src).used_bytes
        print(
            f"built {count} documents, {used / MiB:.1f} MiB ({args.adapter}) "
            f"in {time.perf_counter() - start:.1f} s",
            flush=True,
        )

        seconds, rss, polled = run_measured(export_cmd, env)
        size = archive.stat().st_size
        print(
            f"export: {seconds:.2f} s, {used / seconds / 1e6:.1f} MB/s of documents, "
            f"archive {size / 1e6:.1f} MB"
        )
        print(f"export peak RSS: {rss / 1e6:.1f} MB (wait4), {polled / 1e6:.1f} MB (polled)")

        seconds, irss, _ = run_measured(import_cmd, env)
        print(
            f"import: {seconds:.2f} s, {used / seconds / 1e6:.1f} MB/s of documents, "
            f"peak RSS {irss / 1e6:.1f} MB"
        )
        before, after = digests(store, src), digests(store, dst)
        same = before == after and store.usage(dst).used_bytes == used
        print(f"round trip: {len(after)}/{len(before)} documents, identical: {same}")
        store.close()
        ok = same and rss < args.limit_mb * 1e6
        print(f"export peak RSS < {args.limit_mb:.0f} MB: {'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
