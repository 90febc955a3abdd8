"""Embedders: text to unit vectors, offline (docs/search.md, "Embedders"). The default runs
all-MiniLM-L6-v2 on numpy; an OpenAI-compatible endpoint and ``none`` are the others.

    Embedder            the protocol: model_id, dim, embed(texts) -> (n, dim) float32 unit rows
    MiniLMEmbedder      KEEPSTONE_EMBEDDER=minilm (default): the model's files (locate_model),
                        loaded on the first embedding (LazyEmbedder)
    HttpEmbedder        KEEPSTONE_EMBEDDER=http: POST {KEEPSTONE_EMBEDDINGS_URL}/v1/embeddings
    None                KEEPSTONE_EMBEDDER=none: keyword search only

:func:`open_embedder` maps the setting to one of them; :func:`describe_embedder` is what
``keepstone models status`` reports. BLAS threads are limited per process before numpy loads
(``KEEPSTONE_EMBED_THREADS``, in ``keepstone.cli.main``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypedDict, Unpack

from keepstone.embed.base import (
    DEFAULT_BATCH_SIZE,
    Embedder,
    LazyEmbedder,
    Vectors,
    normalise_rows,
)
from keepstone.embed.http import HttpEmbedder, endpoint_url
from keepstone.embed.install import install_model, model_home
from keepstone.embed.minilm import (
    INSTALL_HINT,
    MODEL_ID,
    MODEL_PACKAGE,
    MiniLMEmbedder,
    locate_model,
    model_dim,
)
from keepstone.errors import InvalidRequest, KeepstoneError

__all__ = [
    "EMBEDDER_KINDS",
    "INSTALL_HINT",
    "MODEL_ID",
    "MODEL_PACKAGE",
    "Embedder",
    "EmbedderSettings",
    "EmbedderStatus",
    "HttpEmbedder",
    "LazyEmbedder",
    "MiniLMEmbedder",
    "Vectors",
    "configured_model_id",
    "describe_embedder",
    "locate_model",
    "install_model",
    "model_home",
    "normalise_rows",
    "open_embedder",
]

#: The values of ``KEEPSTONE_EMBEDDER``, the default first.
EMBEDDER_KINDS = ("minilm", "http", "none")


class EmbedderSettings(TypedDict, total=False):
    """Where an embedder's model is (``minilm``) or which server and model it asks
    (``http``); each absent one is None."""

    model_dir: Path | None
    home: Path | None
    url: str | None
    model: str | None
    key: str | None


def open_embedder(
    kind: str = "minilm",
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    **settings: Unpack[EmbedderSettings],
) -> Embedder | None:
    """The embedder ``kind`` names (``KEEPSTONE_EMBEDDER``); None for ``"none"``.

    ``minilm`` finds the model in ``model_dir`` / ``home`` / the installed package
    (:func:`~keepstone.embed.minilm.locate_model`) and checks its files' headers now, but
    loads it on the first embedding (:class:`LazyEmbedder`): a process with nothing to
    embed never holds it. ``http`` needs ``url`` and ``model``, ``key`` is optional. A
    missing or broken model is :class:`~keepstone.errors.StoreUnavailable`; an unknown
    kind or a missing setting is :class:`~keepstone.errors.InvalidRequest`.
    """
    if kind == "none":
        return None
    if kind == "minilm":
        where = locate_model(settings.get("model_dir"), settings.get("home"))
        return LazyEmbedder(
            MODEL_ID, model_dim(where), lambda: MiniLMEmbedder(where, batch_size=batch_size)
        )
    if kind == "http":
        url, model = settings.get("url"), settings.get("model")
        if not url or not model:
            raise InvalidRequest(
                "KEEPSTONE_EMBEDDER=http needs KEEPSTONE_EMBEDDINGS_URL (the server, e.g. "
                "http://127.0.0.1:11434) and KEEPSTONE_EMBEDDINGS_MODEL (a model it serves)"
            )
        return HttpEmbedder(url, model, key=settings.get("key"), batch_size=batch_size)
    raise InvalidRequest(f"KEEPSTONE_EMBEDDER={kind!r} is not one of {', '.join(EMBEDDER_KINDS)}")


def configured_model_id(kind: str, model: str | None = None) -> str | None:
    """The model id an embedder of ``kind`` stores beside its vectors, without loading it
    (``model``: ``KEEPSTONE_EMBEDDINGS_MODEL``); None for ``none``."""
    if kind == "none":
        return None
    return MODEL_ID if kind == "minilm" else model


@dataclass(frozen=True)
class EmbedderStatus:
    """What ``keepstone models status`` reports about the configured embedder."""

    #: ``minilm``, ``http`` or ``none``.
    kind: str
    #: Whether it embedded a probe text just now (always True for ``none``).
    ready: bool
    model_id: str | None = None
    dim: int | None = None
    #: The model directory (``minilm``) or the endpoint (``http``).
    location: str | None = None
    #: Why it is not ready: one sentence saying what to do.
    problem: str | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def describe_embedder(kind: str = "minilm", **settings: Unpack[EmbedderSettings]) -> EmbedderStatus:
    """The status of the embedder :func:`open_embedder` would open: it is opened and
    embeds one probe text (for ``http`` that is one request to the server)."""
    if kind == "none":
        return EmbedderStatus(kind="none", ready=True)
    location: str | None = None
    url = settings.get("url")
    model_id = configured_model_id(kind, settings.get("model"))
    try:
        if kind == "minilm":
            location = str(locate_model(settings.get("model_dir"), settings.get("home")))
        elif kind == "http" and url:
            location = endpoint_url(url)
        embedder = open_embedder(kind, **settings)
        assert embedder is not None
        try:
            vectors = embedder.embed(["keepstone models status"])
        finally:
            if isinstance(embedder, HttpEmbedder):
                embedder.close()
    except KeepstoneError as exc:
        return EmbedderStatus(
            kind=kind, ready=False, model_id=model_id, location=location, problem=exc.message
        )
    return EmbedderStatus(
        kind=kind,
        ready=True,
        model_id=embedder.model_id,
        dim=int(vectors.shape[1]),
        location=location,
    )
