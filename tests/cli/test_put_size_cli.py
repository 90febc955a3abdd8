"""``keepstone memory put`` measures its input as it reads it: never more than the document cap
and one byte, so a huge file or an endless stream is refused with ``document_too_large`` in the
memory of one document (SPEC: a document is at most 2 MiB).

Each input here is endless or far larger than the cap, but bounded on the test's side: a
``put`` that read it whole would fail the test rather than fill the machine's memory.
"""

from __future__ import annotations

import io
import os
import resource
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from keepstone.quota import DEFAULT_MAX_DOCUMENT_SIZE, MiB
from tests.cli_runner import keepstone_argv, keepstone_env, run_memory

CAP = DEFAULT_MAX_DOCUMENT_SIZE
#: What the test side hands out at most: far past the cap, far below the machine's memory.
FAR_PAST_CAP = 64 * MiB


class Endless(io.RawIOBase):
    """``yes |`` as a stream: b"y" for ever, counted; past ``stop`` bytes the test fails."""

    def __init__(self, stop: int = FAR_PAST_CAP) -> None:
        self.handed = 0
        self.stop = stop

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.handed >= self.stop:
            raise AssertionError(f"put read {self.handed} bytes of an endless stream")
        n = len(buffer)
        buffer[:n] = b"y" * n
        self.handed += n
        return n


def endless_stdin(monkeypatch: pytest.MonkeyPatch) -> Endless:
    stream = Endless()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(stream)))
    return stream


def peak_of(run: Callable[[], tuple[int, str, str]]) -> tuple[tuple[int, str, str], int]:
    """``run()``'s answer and the most memory Python held for it meanwhile."""
    tracemalloc.start()
    try:
        answer = run()
        return answer, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_endless_stdin_is_refused_at_the_configured_cap(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEPSTONE_MEMORY_MAX_DOC", "1000")
    stream = endless_stdin(monkeypatch)
    code, out, err = run_memory(capsys, "put", "a.md", "--bot", "b1")
    assert code == 1 and out == ""
    assert err == (
        "keepstone: document_too_large: document is over 1000 bytes (stdin was read no "
        "further); the limit is 1000 bytes\n"
    )
    assert stream.handed <= 64 * 1024  # the cap and one byte, and one buffer of read-ahead
    assert run_memory(capsys, "ls", "--bot", "b1")[1] == ""


def test_endless_stdin_through_a_server_is_refused_before_any_request(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = endless_stdin(monkeypatch)
    # Nothing listens there: the refusal comes before the store is asked anything.
    code, _, err = run_memory(
        capsys, "put", "a.md", "--bot", "b1", "--server", "http://127.0.0.1:9"
    )
    assert code == 1
    assert err.startswith("keepstone: document_too_large: document is over 3145728 bytes ")
    assert "a Keepstone server takes at most 3145728 bytes in one request" in err
    assert stream.handed <= 3 * MiB + 64 * 1024


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[tuple[Path, list[int]]]:
    """A named pipe a thread writes b"a" into until its reader leaves, or until far past the
    cap; the list holds the bytes it got written."""
    path = tmp_path / "pipe.md"
    os.mkfifo(path)
    written = [0]

    def feed() -> None:
        fd = os.open(path, os.O_WRONLY)
        block = b"a" * (64 * 1024)
        try:
            while written[0] < FAR_PAST_CAP:
                written[0] += os.write(fd, block)
        except BrokenPipeError:
            pass
        finally:
            os.close(fd)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    yield path, written
    # A writer still waiting for a reader opens now, and its next write finds none.
    os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    writer.join(5)


def test_a_file_that_never_ends_is_refused_in_the_memory_of_one_document(
    home: Path, capsys: pytest.CaptureFixture[str], fifo: tuple[Path, list[int]]
) -> None:
    path, written = fifo
    (code, _, err), peak = peak_of(
        lambda: run_memory(capsys, "put", "a.md", "--bot", "b1", "--file", str(path))
    )
    assert code == 1
    assert err == (
        f"keepstone: document_too_large: document is over {CAP} bytes (--file {str(path)!r} "
        f"was read no further); the limit is {CAP} bytes\n"
    )
    assert written[0] < 2 * CAP  # the cap, one byte, what the pipe holds
    assert peak < 4 * CAP


def test_a_large_regular_file_is_refused_by_its_size_unread(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = tmp_path / "big.md"
    with open(big, "wb") as sparse:
        sparse.truncate(FAR_PAST_CAP)  # a hole: no data block is written to disk
    (code, _, err), peak = peak_of(
        lambda: run_memory(capsys, "put", "a.md", "--bot", "b1", "--file", str(big))
    )
    assert code == 1
    assert err == (
        f"keepstone: document_too_large: document is {FAR_PAST_CAP} bytes; the limit is "
        f"{CAP} bytes\n"
    )
    assert peak < CAP


def test_a_document_at_the_cap_is_written(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = tmp_path / "full.md"
    full.write_bytes(b"a" * CAP)
    code, out, _ = run_memory(capsys, "put", "a.md", "--bot", "b1", "--file", str(full))
    assert code == 0 and out.startswith("created a.md (2.0 MiB")


def test_dev_zero_under_a_memory_limit_is_one_line(home: Path) -> None:
    """The audit's case as a process: ``--file /dev/zero`` with 1 GB of address space."""

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    done = subprocess.run(
        [*keepstone_argv(), "memory", "put", "z.md", "--bot", "b1", "--file", "/dev/zero"],
        env=keepstone_env(home, KEEPSTONE_EMBEDDER="none"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        preexec_fn=limit_memory,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.decode() == (
        f"keepstone: document_too_large: document is over {CAP} bytes (--file '/dev/zero' was "
        f"read no further); the limit is {CAP} bytes\n"
    )
