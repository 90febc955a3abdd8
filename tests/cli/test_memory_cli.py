"""``keepstone memory``: in-process through ``cli.main.main`` and once as a real subprocess."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from keepstone.cli.common import (
    keepstone_home,
    local_store,
    progress,
    resolve_server_args,
    space_ref_from_args,
)
from keepstone.cli.main import build_parser, main
from keepstone.spaces import SpaceRef, encode_workdir_key
from keepstone.store.fs import FilesystemStore
from tests.cli_runner import keepstone_argv, run_memory
from tests.serving import keepstone_serve


def feed_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def bot_ref(project: Path, bot: str = "b1", name: str = "default") -> SpaceRef:
    key = encode_workdir_key(project)
    return SpaceRef.build("bot", name, tenant="local", project=key, bot=bot)


def test_put_ls_cat_du_rm(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    feed_stdin(monkeypatch, b"# Notes\nfrom stdin\n")
    code, out, err = run_memory(capsys, "put", "MEMORY.md", "--bot", "b1")
    assert (code, err) == (0, "")
    assert out.startswith("created MEMORY.md")
    src = home.parent / "deploy.md"
    src.write_text("deploy steps")
    assert run_memory(capsys, "put", "topics/deploy.md", "--bot", "b1", "--file", str(src))[0] == 0

    code, out, _ = run_memory(capsys, "ls", "--bot", "b1")
    assert code == 0
    assert [line.split()[-1] for line in out.splitlines()] == ["MEMORY.md", "topics/deploy.md"]
    code, out, _ = run_memory(capsys, "ls", "topics", "--bot", "b1", "--json")
    assert [d["path"] for d in json.loads(out)["documents"]] == ["topics/deploy.md"]

    assert run_memory(capsys, "cat", "MEMORY.md", "--bot", "b1")[1] == "# Notes\nfrom stdin\n"

    code, out, _ = run_memory(capsys, "du", "--bot", "b1", "--json")
    usage = json.loads(out)
    assert usage["used_bytes"] == len("# Notes\nfrom stdin\n") + len("deploy steps")
    assert usage["quota_bytes"] == 256 * 1024 * 1024
    assert usage["space_id"] == bot_ref(Path.cwd()).id
    assert usage["index_bytes"] == 0  # never searched: the sidecar index is not made yet
    code, out, _ = run_memory(capsys, "du", "--bot", "b1")
    assert code == 0 and "of 256.0 MiB" in out
    assert "index  0 B  (search index of this space, no cap)" in out.splitlines()

    assert run_memory(capsys, "rm", "MEMORY.md", "--bot", "b1")[0] == 0
    code, out, err = run_memory(capsys, "cat", "MEMORY.md", "--bot", "b1")
    assert code == 1 and out == ""
    assert err.startswith("keepstone: not_found: ") and err.count("\n") == 1
    # The files are where a person would look for them.
    doc = home / "spaces/bot/local" / encode_workdir_key(Path.cwd()) / "b1/default/topics"
    assert (doc / "deploy.md").read_text() == "deploy steps"


def test_space_flags(home: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    other = tmp_path / "other-project"
    other.mkdir()
    src = tmp_path / "x.md"
    src.write_text("x")
    put = ["put", "a.md", "--file", str(src)]
    assert run_memory(capsys, *put, "--visibility", "project", "--project", str(other))[0] == 0
    assert run_memory(capsys, *put, "--visibility", "user", "--name", "n")[0] == 0
    store = local_store()
    project_ref = SpaceRef.build(
        "project", "default", tenant="local", project=encode_workdir_key(other)
    )
    assert [d.path for d in store.list(project_ref)] == ["a.md"]
    import getpass

    user_ref = SpaceRef.build("user", "n", tenant="local", user=getpass.getuser())
    assert [d.path for d in store.list(user_ref)] == ["a.md"]
    args = build_parser().parse_args(["memory", "ls", "--visibility", "org", "--bot", "ignored"])
    assert space_ref_from_args(args, "local").id == "v1:org:local::::default"
    assert keepstone_home() == home


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["ls"], "--bot"),
        (["ls", "--visibility", "bogus"], "invalid choice"),
        (["ls", "--visibility", "org", "--name", "a/b"], "--name"),
        (["ls", "--visibility", "project", "--project", "/no/such/dir"], "--project"),
        (["put", "a.md", "--visibility", "org", "--file", "/no/such/file"], "--file"),
        (["import", "--visibility", "org", "--in", "/no/such/file"], "--in"),
        (["cat"], "PATH"),
    ],
)
def test_usage_errors_exit_2(
    home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    code, out, err = run_memory(capsys, *argv)
    assert code == 2
    assert needle in err


@pytest.mark.parametrize(
    ("argv", "code_name"),
    [
        (["cat", "./a.md"], "invalid_path"),
        (["ls", "--visibility", "private"], "unsupported_visibility"),
        (["rm", "missing.md"], "not_found"),
        (["put", "x.md", "--visibility", "global", "--file", "{src}"], "platform_authority"),
        (["put", "x.md", "--if-match", "nope", "--file", "{src}"], "precondition_failed"),
        (["put", "x.md", "--file", "{secret}"], "secret_detected"),
        (["put", "x.md", "--file", "{binary}"], "invalid_document"),
    ],
)
def test_refusals_exit_1_with_one_line(
    home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    code_name: str,
) -> None:
    files = {
        "{src}": tmp_path / "src.md",
        "{secret}": tmp_path / "secret.md",
        "{binary}": tmp_path / "bin.md",
    }
    files["{src}"].write_text("fine")
    files["{secret}"].write_text("aws AKIAQ3EGRT6YHNP2LXVB")
    files["{binary}"].write_bytes(b"\xff\xfe\x00")
    argv = [str(files.get(a, a)) for a in argv]
    if "--visibility" not in argv:
        argv += ["--bot", "b1"]
    code, out, err = run_memory(capsys, *argv)
    assert code == 1
    assert err.startswith(f"keepstone: {code_name}") and err.count("\n") == 1
    assert "Traceback" not in err and "AKIAQ3EGRT6YHNP2LXVB" not in err


def test_quota_refusal_names_the_limit(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL", "4")
    feed_stdin(monkeypatch, b"12345")
    code, _, err = run_memory(capsys, "put", "a.md", "--visibility", "org")
    assert code == 1
    assert "keepstone: quota_exceeded: tree quota exceeded: 0 of 4 bytes used" in err
    monkeypatch.setenv("KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL", "many")
    code, _, err = run_memory(capsys, "du", "--visibility", "org")
    assert code == 1 and "KEEPSTONE_MEMORY_QUOTA_ORG_TOTAL" in err


def _tar(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_export_import_round_trip_and_strategies(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = local_store()
    src = bot_ref(Path.cwd(), "src")
    docs = {"MEMORY.md": "# top\n", "topics/a.md": "é" * 100, "b.md": ""}
    for path, content in docs.items():
        store.write(src, path, content)
    archive = tmp_path / "mem.tar.gz"
    code, out, err = run_memory(capsys, "export", "--bot", "src", "--out", str(archive))
    assert code == 0 and "exported 3 document(s) of bot space 'default' (" in err
    assert "bot src)" in err  # the space as the flags name it, as every other verb says
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == sorted(docs)

    code, out, _ = run_memory(capsys, "import", "--bot", "dst", "--in", str(archive), "--json")
    assert code == 0
    assert sorted(json.loads(out)["written"]) == sorted(docs)
    dst = bot_ref(Path.cwd(), "dst")
    assert {d.path: d.content for d in store.iter_documents(dst)} == docs
    assert store.usage(dst).used_bytes == store.usage(src).used_bytes

    store.write(dst, "MEMORY.md", "changed")
    code, out, _ = run_memory(capsys, "import", "--bot", "dst", "--in", str(archive))
    assert code == 0 and out.startswith("written 0, skipped 3, renamed 0, rejected 0")
    assert store.read(dst, "MEMORY.md").content == "changed"
    code, out, _ = run_memory(
        capsys, "import", "--bot", "dst", "--in", str(archive), "--strategy", "rename"
    )
    assert "renamed   MEMORY.md -> MEMORY-1.md" in out
    run_memory(capsys, "import", "--bot", "dst", "--in", str(archive), "--strategy", "overwrite")
    assert store.read(dst, "MEMORY.md").content == "# top\n"

    hostile = tmp_path / "hostile.tar.gz"
    hostile.write_bytes(_tar({"../evil.md": b"x", "ok.md": b"fine", "notes.txt": b"t"}))
    code, out, _ = run_memory(capsys, "import", "--bot", "dst", "--in", str(hostile), "--json")
    report = json.loads(out)
    assert code == 0 and report["written"] == ["ok.md"]
    assert sorted(r["path"] for r in report["rejected"]) == ["../evil.md", "notes.txt"]
    assert not (home / "spaces" / "bot" / "evil.md").exists()

    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"not a gzip at all")
    code, _, err = run_memory(capsys, "import", "--bot", "dst", "--in", str(broken))
    assert code == 1 and err.startswith("keepstone: invalid_archive")


def test_import_grants_global_authority_locally(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "g.tar.gz"
    archive.write_bytes(_tar({"catalog.md": b"shared"}))
    code, _, err = run_memory(capsys, "import", "--visibility", "global", "--in", str(archive))
    assert (code, err) == (0, "")
    assert local_store().read(SpaceRef.build("global", "default"), "catalog.md").content == "shared"
    assert (home / "spaces/global/_/default/catalog.md").read_bytes() == b"shared"


def test_export_to_stdout_and_import_from_stdin(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    local_store().write(bot_ref(Path.cwd()), "a.md", "stdout")
    buffer = io.BytesIO()
    fake_stdout = io.TextIOWrapper(buffer)
    monkeypatch.setattr(sys, "stdout", fake_stdout)
    assert main(["memory", "export", "--bot", "b1"]) == 0
    fake_stdout.flush()
    monkeypatch.undo()
    monkeypatch.setenv("KEEPSTONE_HOME", str(home))
    feed_stdin(monkeypatch, buffer.getvalue())
    code, out, _ = run_memory(capsys, "import", "--bot", "b2")
    assert code == 0 and "written   a.md" in out
    assert local_store().read(bot_ref(Path.cwd(), "b2"), "a.md").content == "stdout"


def test_server_flags_come_from_the_environment(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEPSTONE_SERVER", "http://127.0.0.1:9")
    monkeypatch.setenv("KEEPSTONE_TOKEN", "tok")
    args = build_parser().parse_args(["memory", "du", "--bot", "b"])
    resolve_server_args(args)  # the token is read after parsing (see test_newcomer)
    assert (args.server, args.token) == ("http://127.0.0.1:9", "tok")
    args = build_parser().parse_args(["memory", "du", "--bot", "b", "--server", "http://x"])
    assert args.server == "http://x"


def test_progress_counts_documents_exported_and_written(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from keepstone.store.base import ImportStrategy

    store = local_store()
    ref = bot_ref(Path.cwd())
    for i in range(4):
        store.write(ref, f"n{i}.md", str(i))
    ticks: list[int] = []
    sink = io.BytesIO()
    assert store.export(ref, sink, progress=ticks.append) == 4
    assert ticks == [1, 1, 1, 1]
    ticks.clear()
    sink.seek(0)
    report = store.import_archive(
        bot_ref(Path.cwd(), "b9"), sink, ImportStrategy.SKIP, progress=ticks.append
    )
    assert len(report.written) == len(ticks) == 4
    with progress("shown", 2, enabled=True) as advance:
        advance(2)
    with progress("hidden", enabled=False) as advance:
        advance(5)
    assert capsys.readouterr().out == ""


def test_real_subprocess(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    env = {**os.environ, "KEEPSTONE_HOME": str(tmp_path / "home")}
    env.pop("KEEPSTONE_SERVER", None)
    cmd = keepstone_argv()

    def keepstone(*argv: str, data: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [*cmd, "memory", *argv], input=data, cwd=project, env=env, capture_output=True
        )

    assert keepstone("put", "MEMORY.md", "--bot", "b", data=b"# remembered\n").returncode == 0
    exported = keepstone("export", "--bot", "b")
    assert exported.returncode == 0 and exported.stdout[:2] == b"\x1f\x8b"
    imported = keepstone("import", "--bot", "c", "--json", data=exported.stdout)
    assert imported.returncode == 0
    assert json.loads(imported.stdout)["written"] == ["MEMORY.md"]
    imported_ref = SpaceRef.build(
        "bot", "default", tenant="local", project=encode_workdir_key(project), bot="c"
    )
    with_home = FilesystemStore(tmp_path / "home" / "spaces")
    assert with_home.read(imported_ref, "MEMORY.md").content == "# remembered\n"
    missing = keepstone("ls")
    assert missing.returncode == 2 and missing.stderr.count(b"\n") == 1


def test_server_mode_against_a_real_local_server(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**os.environ, "KEEPSTONE_HOME": str(tmp_path / "server-home")}
    with keepstone_serve(
        "--local", env=env, log=tmp_path / "serve.log", ready="/healthz"
    ) as server:
        url = server.url
        src = tmp_path / "n.md"
        src.write_text("over http")
        remote = ["--bot", "b", "--server", url]
        assert run_memory(capsys, "put", "n.md", "--file", str(src), *remote)[0] == 0
        code, out, _ = run_memory(capsys, "ls", "--json", *remote)
        assert [d["path"] for d in json.loads(out)["documents"]] == ["n.md"]
        archive = tmp_path / "remote.tar.gz"
        assert run_memory(capsys, "export", "--out", str(archive), *remote)[0] == 0
        code, out, _ = run_memory(
            capsys, "import", "--in", str(archive), "--json", "--bot", "c", "--server", url
        )
        assert code == 0 and json.loads(out)["written"] == ["n.md"]
        # Nothing went to the local store.
        assert local_store().list(bot_ref(Path.cwd(), "b")) == []
        code, _, err = run_memory(capsys, "cat", "missing.md", *remote)
        assert code == 1 and err.startswith("keepstone: not_found")
    code, _, err = run_memory(capsys, "ls", *remote)
    assert code == 1 and err.startswith("keepstone: store_unavailable")


def test_reindex_finds_hand_made_files_and_is_idempotent(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, _ = run_memory(capsys, "put", "a.md", "--name", "n", "--visibility", "org", "--empty")
    assert code == 0
    assert run_memory(capsys, "reindex")[:2] == (0, "reindexed 1 document(s)\n")
    assert run_memory(capsys, "reindex")[:2] == (0, "reindexed 0 document(s)\n")
    # A note written by hand into the plain tree is found by the next reindex.
    hand = home / "spaces" / "org" / "local" / "n" / "hand.md"
    hand.write_text("# By hand\n\nwritten without keepstone\n", encoding="utf-8")
    assert run_memory(capsys, "reindex")[:2] == (0, "reindexed 1 document(s)\n")
    ref = SpaceRef.build("org", "n", tenant="local")
    paths = {row.path for row in FilesystemStore(home / "spaces").chunk_rows(ref)}
    assert "hand.md" in paths
    assert run_memory(capsys, "reindex", "--rebuild")[:2] == (0, "reindexed 2 document(s)\n")


def test_reindex_over_a_server_says_the_server_indexes_itself(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_memory(capsys, "reindex", "--server", "http://127.0.0.1:9")
    assert code == 1 and "a Keepstone server indexes its documents itself" in err


def test_mv_and_edit(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    del home
    src = Path.cwd() / "note-for-mv.md"
    try:
        src.write_text("# Deploy\nroll back with kubectl\n")
        run_memory(capsys, "put", "notes.md", "--bot", "b1", "--file", str(src))
    finally:
        src.unlink()
    code, out, _ = run_memory(capsys, "mv", "notes.md", "topics/deploy.md", "--bot", "b1")
    assert (code, out) == (0, out) and out.startswith("moved notes.md to topics/deploy.md")
    run_memory(capsys, "put", "MEMORY.md", "--bot", "b1", "--empty")
    # A document at the target is kept unless --overwrite says to replace it.
    code, _, err = run_memory(capsys, "mv", "topics/deploy.md", "MEMORY.md", "--bot", "b1")
    assert code == 1 and err.startswith("keepstone: already_exists: ")
    args = ("edit", "topics/deploy.md", "--bot", "b1")
    assert run_memory(capsys, *args, "--old", "kubectl", "--new", "helm")[0] == 0
    code, out, _ = run_memory(capsys, *args, "--insert-line", "0", "--text", "tags: ops")
    assert code == 0 and out.startswith("edited topics/deploy.md")
    text = run_memory(capsys, "cat", "topics/deploy.md", "--bot", "b1")[1]
    assert text == "tags: ops\n# Deploy\nroll back with helm\n"
    # A text that is not there is the edit's refusal; a mix of the forms, a usage error.
    code, _, err = run_memory(capsys, *args, "--old", "kubectl", "--new", "x")
    assert code == 1 and err.startswith("keepstone: invalid_edit: ")
    code, _, err = run_memory(capsys, *args, "--old", "helm", "--text", "x")
    assert code == 2 and "not both" in err
    code, _, err = run_memory(capsys, *args, "--old", "helm")
    assert code == 2 and "--old and --new go together" in err
    code, _, err = run_memory(capsys, *args, "--old", "helm", "--new", "x", "--if-match", "nope")
    assert code == 1 and err.startswith("keepstone: precondition_failed: ")
    code, out, _ = run_memory(capsys, "search", "helm", "--scope", "readable", "--json")
    best = json.loads(out)["results"][0]
    assert best["path"] == "topics/deploy.md" and best["space"]["bot"] == "b1", out
