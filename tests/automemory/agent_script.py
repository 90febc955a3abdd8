"""A stand-in agent for ``keepstone run`` tests, written out as a script by the tests.

It edits, adds, deletes and symlinks notes in ``$KEEPSTONE_AUTO_MEMORY_DIR``, writes a
secret into one note and a non-Markdown file beside them, records what it saw in
``$AGENT_REPORT`` (a JSON file outside the memory directory), and then, by ``MODE``:
exits 0, exits 3, or waits to be signalled.
"""

AGENT = r"""
import json, os, sys, time
from pathlib import Path

mode = sys.argv[1]
d = Path(os.environ["KEEPSTONE_AUTO_MEMORY_DIR"])
seen = {
    str(p.relative_to(d)): p.read_text()
    for p in sorted(d.rglob("*")) if p.is_file()
}
report = {
    "argv": sys.argv[2:],
    "dir": str(d),
    "seen": seen,
    "prompt": os.environ.get("KEEPSTONE_AUTO_MEMORY_PROMPT"),
    "prompt_file": os.environ.get("KEEPSTONE_AUTO_MEMORY_PROMPT_FILE"),
}
if mode == "append":
    note = d / "MEMORY.md"
    old = note.read_text() if note.exists() else ""
    note.write_text(old + os.environ["AGENT_LINE"] + "\n")
elif mode != "noop":
    (d / "MEMORY.md").write_text("# Index\nedited by the agent\n")
    (d / "topics").mkdir(exist_ok=True)
    (d / "topics" / "new.md").write_text("a new note\n")
    (d / "old.md").unlink()
    (d / "link.md").symlink_to(d / "keep.md")
    (d / "linkdir").symlink_to(d / "topics")
    (d / "secret.md").write_text("token ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8" + "\n")
    (d / "notes.txt").write_text("not markdown\n")
Path(os.environ["AGENT_REPORT"]).write_text(json.dumps(report))
if mode == "exit3":
    sys.exit(3)
if mode == "wait":
    Path(os.environ["AGENT_REPORT"] + ".ready").write_text("ready")
    time.sleep(120)
    sys.exit(99)
"""
