"""An OpenAI-compatible embeddings endpoint as an embedder (Ollama, vLLM, TEI, OpenAI).

``POST {url}/v1/embeddings`` with ``{"model", "input": [texts]}``, answered by
``{"data": [{"embedding": [...], "index": i}, ...]}``. The rows are put back in the
order of ``index`` and normalised again (not every server returns unit vectors). A
server that cannot be reached, times out, refuses or answers something else is
:class:`~keepstone.errors.StoreUnavailable` with a message naming the endpoint; the key is
never part of a message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from keepstone import http_client
from keepstone.embed.base import DEFAULT_BATCH_SIZE, Vectors, batches, normalise_rows
from keepstone.errors import StoreUnavailable

#: Seconds to connect, and to wait for an answer (a cold model on a local server takes a
#: while to load on its first request).
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 60.0
#: How much of an error answer's text goes into the message.
_ERROR_EXCERPT = 200


def endpoint_url(url: str) -> str:
    """The embeddings endpoint of the server at ``url``; ``url`` may already end in
    ``/v1`` (as OpenAI's client's base URLs do)."""
    base = url.rstrip("/")
    return base + ("/embeddings" if base.endswith("/v1") else "/v1/embeddings")


class HttpEmbedder:
    """The embedder of ``model`` served at ``url`` (``KEEPSTONE_EMBEDDINGS_URL``,
    ``KEEPSTONE_EMBEDDINGS_MODEL``), with ``key`` as a Bearer token when given.

    ``model_id`` is ``model``. ``dim`` is learned from the first answer; reading it
    before any :meth:`embed` asks the server once. Close it with :meth:`close` (or use
    it as a context manager).
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        key: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        timeout: httpx.Timeout | None = None,
    ) -> None:
        self.url = endpoint_url(
            http_client.server_url(url, "KEEPSTONE_EMBEDDINGS_URL", "embeddings_url")
        )
        self.model_id: str = model
        self.batch_size = batch_size
        self._dim: int | None = None
        self._client = httpx.Client(
            headers=http_client.bearer(key, "KEEPSTONE_EMBEDDINGS_KEY", "embeddings_key"),
            timeout=timeout or httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT),
            # One retry of a connection that failed before anything was sent.
            transport=httpx.HTTPTransport(retries=1, verify=http_client.tls()),
        )

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Unit vectors of ``texts`` (see :class:`~keepstone.embed.base.Embedder`)."""
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        parts = [self._request(list(batch)) for batch in batches(texts, self.batch_size)]
        return normalise_rows(np.concatenate(parts) if len(parts) > 1 else parts[0])

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> HttpEmbedder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _request(self, texts: list[str]) -> Vectors:
        try:
            response = self._client.post(self.url, json={"model": self.model_id, "input": texts})
        except httpx.TimeoutException as exc:
            raise StoreUnavailable(
                f"the embeddings endpoint {self.url} did not answer in time ({exc!r})"
            ) from exc
        except httpx.HTTPError as exc:
            raise StoreUnavailable(
                f"the embeddings endpoint {self.url} could not be reached: {exc}"
            ) from exc
        if response.status_code != 200:
            raise StoreUnavailable(self._refusal(response))
        try:
            rows = _rows(response.json(), len(texts))
            vectors = np.asarray(rows, dtype=np.float32)
        except (ValueError, TypeError, KeyError) as exc:
            raise StoreUnavailable(
                f"the embeddings endpoint {self.url} answered with no usable embeddings: {exc}"
            ) from exc
        if vectors.ndim != 2 or vectors.shape[1] == 0 or not np.isfinite(vectors).all():
            raise StoreUnavailable(
                f"the embeddings endpoint {self.url} answered with malformed embeddings"
            )
        if self._dim is not None and vectors.shape[1] != self._dim:
            raise StoreUnavailable(
                f"the embeddings endpoint {self.url} answered {vectors.shape[1]} dimensions "
                f"after {self._dim}: did the model behind it change?"
            )
        self._dim = int(vectors.shape[1])
        return vectors

    def _refusal(self, response: httpx.Response) -> str:
        status = response.status_code
        message = f"the embeddings endpoint {self.url} answered HTTP {status}"
        detail = _error_detail(response)
        if detail:
            message += f": {detail}"
        if status in (401, 403):
            message += " (check KEEPSTONE_EMBEDDINGS_KEY)"
        elif status == 404:
            message += (
                f" (is KEEPSTONE_EMBEDDINGS_URL the server's base URL, and {self.model_id!r} "
                "a model it serves?)"
            )
        return message


def _rows(body: Any, count: int) -> list[Any]:
    """The embeddings of ``body`` in the order of their ``index`` (raises ValueError,
    TypeError or KeyError on any other shape)."""
    data = body["data"]
    if not isinstance(data, list):
        raise TypeError("'data' is not a list")
    ordered = sorted(data, key=lambda item: int(item["index"]))
    indexes = [int(item["index"]) for item in ordered]
    if indexes != list(range(count)):
        raise ValueError(f"expected {count} embeddings indexed 0..{count - 1}")
    return [item["embedding"] for item in ordered]


def _error_detail(response: httpx.Response) -> str:
    """The server's own words about an error, short: OpenAI's ``{"error": {"message"}}``,
    Ollama's ``{"error": "..."}``, FastAPI's ``{"detail"}``, else the text."""
    try:
        body = response.json()
    except ValueError:
        text = response.text
    else:
        error = body.get("error", body.get("detail", body)) if isinstance(body, dict) else body
        if isinstance(error, dict) and "message" in error:
            error = error["message"]
        text = error if isinstance(error, str) else str(error)
    text = " ".join(text.split())
    return text[:_ERROR_EXCERPT] + ("…" if len(text) > _ERROR_EXCERPT else "")
