"""What only one side of the Memory API does: the local tree and the CLI agree on a space,
a server names the space its REST API does and refuses a bad key, ``import keepstone`` stays
cheap, and an AsyncMemory's gathered calls all land."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import keepstone
from keepstone import AsyncMemory, Memory
from keepstone.cli.main import main
from keepstone.errors import InvalidRequest, KeepstoneError, StoreUnavailable, Unauthenticated
from keepstone.http_client import tls
from keepstone.spaces import encode_workdir_key
from tests.sdk.conftest import Server
from tests.serving import free_port


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("KEEPSTONE_HOME", str(home))
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "none")
    for name in ("KEEPSTONE_SERVER", "KEEPSTONE_TOKEN", "KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL"):
        monkeypatch.delenv(name, raising=False)
    return home


# --- import keepstone --------------------------------------------------------------------------


def test_import_keepstone_loads_neither_numpy_nor_sqlalchemy() -> None:
    # The CLI reads keepstone.__version__ before it caps the native thread pools: importing
    # keepstone (and touching an error class) may not load what starts those pools.
    code = (
        "import sys, keepstone; keepstone.__version__; keepstone.NotFound; keepstone.WriteResult; "
        "print(sorted(m for m in ('numpy', 'sqlalchemy', 'keepstone.sdk') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_root_exports_the_api_and_the_common_errors() -> None:
    assert keepstone.Memory is Memory and keepstone.AsyncMemory is AsyncMemory
    assert issubclass(keepstone.NotFound, KeepstoneError) and keepstone.NotFound.code == "not_found"
    assert set(keepstone.__all__) <= set(dir(keepstone))
    assert all(getattr(keepstone, name) is not None for name in keepstone.__all__)
    with pytest.raises(AttributeError, match="no attribute 'Memroy'"):
        keepstone.Memroy  # noqa: B018


# --- Local -----------------------------------------------------------------------------------


def test_a_project_name_is_the_same_space_from_any_directory(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
    monkeypatch.chdir(tmp_path / "one")
    with Memory.local(bot="my-bot", project="web") as mem:
        mem.write("MEMORY.md", "# web\n")
    monkeypatch.chdir(tmp_path / "two")
    with Memory.local(bot="my-bot", project="web") as mem:
        assert mem.space.project == "web"
        assert mem.read("MEMORY.md").content == "# web\n"
    with Memory.local(bot="my-bot") as here:  # None: the current directory, encoded
        assert here.space.project == encode_workdir_key(tmp_path / "two")
        assert here.list() == []


def test_home_wins_over_keepstone_home(home: Path, tmp_path: Path) -> None:
    with Memory.local(project="web", home=tmp_path / "elsewhere") as mem:
        mem.write("a.md", "a")
    assert (tmp_path / "elsewhere" / "spaces").is_dir()
    with Memory.local(project="web") as mem:
        assert mem.list() == []


def test_the_cli_reads_what_memory_local_wrote(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "repo"
    project.mkdir()
    with Memory.local(bot="my-bot", project=str(project)) as mem:
        mem.write("MEMORY.md", "# from python\n")
    code = main(["memory", "cat", "MEMORY.md", "--bot", "my-bot", "--project", str(project)])
    assert (code, capsys.readouterr().out) == (0, "# from python\n")


def test_memory_local_writes_a_global_space_only_by_import(home: Path) -> None:
    # The console's authority, as the CLI's: a global space is changed by an import only.
    with Memory.local(project="web") as mem:
        mem.write("rules.md", "# Rules\n")
        archive = mem.export()
    with Memory.local(visibility="global", name="handbook") as shared:
        with pytest.raises(keepstone.Forbidden) as info:
            shared.write("rules.md", "x")
        assert info.value.code == "platform_authority_required"
        assert shared.import_(archive).written == ["rules.md"]
        assert shared.read("rules.md").content == "# Rules\n"


def test_a_home_that_is_a_file_is_one_clear_error(home: Path, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(InvalidRequest, match="'.*a-file' is not a directory"):
        Memory.local(project="web", home=tmp_path / "a-file")


def test_gathered_async_calls_all_land(home: Path) -> None:
    # One store used from many worker threads at once: each task writes its note, finds it
    # by its own word among the others' and edits it; nothing is lost or miscounted.
    async def task(mem: AsyncMemory, i: int) -> list[str]:
        await mem.write(f"n/{i:02}.md", f"# Note {i}\n\nword{i} " + "x" * i + "\n")
        found = [hit.path for hit in await mem.search(f"word{i}", limit=50)]
        await mem.edit(f"n/{i:02}.md", f"word{i}", f"WORD{i}")
        return found

    async def run() -> tuple[list[list[str]], list[str], int]:
        async with AsyncMemory.local(bot="my-bot", project="web") as mem:
            found = await asyncio.gather(*(task(mem, i) for i in range(1, 25)))
            paths = [d.path for d in await mem.list("n")]
            return found, paths, (await mem.usage()).used_bytes

    found, paths, used = asyncio.run(run())
    assert found == [[f"n/{i:02}.md"] for i in range(1, 25)]
    assert paths == [f"n/{i:02}.md" for i in range(1, 25)]
    assert used == sum(len(f"# Note {i}\n\nWORD{i} \n") + i for i in range(1, 25))


# --- Server ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_memory_connect_names_the_space_the_rest_api_does(
    server: Server, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = server.member_key()
    monkeypatch.setenv("KEEPSTONE_TOKEN", key)
    with Memory.connect(server.url, project="web") as mem:  # the key from KEEPSTONE_TOKEN
        mem.write("MEMORY.md", "# over the wire\n")
    params = {"visibility": "project", "project": "web", "name": "default", "path": "MEMORY.md"}
    r = httpx.get(
        f"{server.url}/api/memory/doc",
        params=params,
        headers={"Authorization": f"Bearer {key}"},
        verify=tls(),
    )
    assert r.status_code == 200, r.text
    assert r.json()["content"] == "# over the wire\n"


@pytest.mark.slow
def test_a_bad_key_is_unauthenticated_and_no_server_is_unavailable(
    server: Server, home: Path
) -> None:
    with Memory.connect(server.url, "keepstone_not-a-key", project="web") as mem:
        with pytest.raises(Unauthenticated) as info:
            mem.list()
        assert info.value.code == "unauthenticated"
    with Memory.connect(f"http://127.0.0.1:{free_port()}", "k", project="web") as mem:
        with pytest.raises(StoreUnavailable):
            mem.list()
    with pytest.raises(InvalidRequest, match="server's URL"):
        Memory.connect("", "k")
