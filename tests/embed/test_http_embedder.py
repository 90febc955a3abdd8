"""The HTTP embedder against a real stand-in server: an OpenAI-compatible
``/v1/embeddings`` on 127.0.0.1, started in a thread for each test (no network)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from keepstone.cli.main import main
from keepstone.embed import HttpEmbedder, describe_embedder, open_embedder
from keepstone.errors import StoreUnavailable

KEY = "sk-test-0123456789"


@dataclass
class StandIn:
    """What the server answers (``mode``) and what it was asked (``requests``)."""

    url: str
    mode: str = "ok"
    requests: list[dict[str, Any]] = field(default_factory=list)


def vector_of(text: str, dims: int = 3) -> list[float]:
    """The stand-in's embedding of ``text``: not normalised, unique per text length."""
    return [float(len(text) + 1), 1.0, 0.0, 2.0][:dims]


def unit(rows: list[list[float]]) -> np.ndarray:
    matrix = np.asarray(rows, dtype=np.float64)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


class Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        stand_in = self.server.stand_in
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        stand_in.requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
        )
        texts = body["input"]
        items = [
            {"object": "embedding", "embedding": vector_of(t), "index": i}
            for i, t in enumerate(texts)
        ]
        mode = stand_in.mode
        if self.path != "/v1/embeddings":
            return self.reply(404, {"error": {"message": f"no route {self.path}"}})
        if mode == "ok":
            # Out of order on purpose: the client must sort by index.
            return self.reply(200, {"object": "list", "data": items[::-1], "model": body["model"]})
        if mode == "four-dims":
            for item, text in zip(items, texts, strict=True):
                item["embedding"] = vector_of(text, 4)
            return self.reply(200, {"data": items})
        if mode == "unauthorised":
            return self.reply(401, {"error": {"message": "Incorrect API key provided"}})
        if mode == "overloaded":
            return self.reply(500, {"error": "model is overloaded"})  # Ollama's shape
        if mode == "missing-one":
            return self.reply(200, {"data": items[1:]})
        if mode == "not-json":
            return self.reply(200, None, raw=b"<html>proxy error</html>")
        if mode == "nan":
            items[0]["embedding"] = [float("nan"), 0.0, 1.0]
            return self.reply(200, {"data": items}, raw=json.dumps({"data": items}).encode())
        if mode == "slow":
            time.sleep(1.0)
            return self.reply(200, {"data": items})
        raise AssertionError(mode)

    def reply(self, status: int, body: Any, raw: bytes | None = None) -> None:
        payload = raw if raw is not None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        try:
            self.wfile.write(payload)
        except OSError:
            pass  # the client gave up (the timeout test)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    stand_in: StandIn

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up mid-answer is what the timeout test does


@pytest.fixture
def server() -> Iterator[StandIn]:
    httpd = _Server(("127.0.0.1", 0), Handler)  # port 0: a free port
    httpd.stand_in = StandIn(url=f"http://127.0.0.1:{httpd.server_address[1]}")
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield httpd.stand_in
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture
def embedder(server: StandIn) -> Iterator[HttpEmbedder]:
    with HttpEmbedder(server.url, "nomic-embed-text", key=KEY, batch_size=2) as embedder:
        yield embedder


def test_vectors_come_back_in_order_normalised(server: StandIn, embedder: HttpEmbedder) -> None:
    texts = ["a", "bb", "ccc", "dddd", "eeeee"]
    vectors = embedder.embed(texts)
    assert vectors.dtype == np.float32 and vectors.shape == (5, 3)
    np.testing.assert_allclose(vectors, unit([vector_of(t) for t in texts]), rtol=1e-6)
    assert (embedder.model_id, embedder.dim) == ("nomic-embed-text", 3)
    # Batches of two, each one request to the OpenAI path, with the model and the key.
    assert [r["body"]["input"] for r in server.requests] == [
        ["a", "bb"],
        ["ccc", "dddd"],
        ["eeeee"],
    ]
    assert {r["path"] for r in server.requests} == {"/v1/embeddings"}
    assert {r["body"]["model"] for r in server.requests} == {"nomic-embed-text"}
    assert {r["auth"] for r in server.requests} == {f"Bearer {KEY}"}


def test_no_key_no_authorization_header(server: StandIn) -> None:
    with HttpEmbedder(server.url + "/v1/", "m") as embedder:  # a base URL ending in /v1
        embedder.embed(["x"])
    assert server.requests[0]["auth"] is None
    assert server.requests[0]["path"] == "/v1/embeddings"


def test_dim_asks_the_server_once(server: StandIn, embedder: HttpEmbedder) -> None:
    assert embedder.dim == 3
    assert embedder.dim == 3
    assert len(server.requests) == 1
    assert embedder.embed([]).shape == (0, 3)
    assert len(server.requests) == 1


def test_open_embedder_and_status(server: StandIn) -> None:
    embedder = open_embedder("http", url=server.url, model="m", key=KEY)
    assert isinstance(embedder, HttpEmbedder)
    embedder.close()
    status = describe_embedder("http", url=server.url, model="m", key=KEY)
    assert (status.ready, status.dim, status.model_id) == (True, 3, "m")
    assert status.location == server.url + "/v1/embeddings"
    server.mode = "overloaded"
    status = describe_embedder("http", url=server.url, model="m")
    assert not status.ready and status.problem is not None and "HTTP 500" in status.problem


@pytest.mark.parametrize(
    ("mode", "words"),
    [
        ("unauthorised", ["HTTP 401", "Incorrect API key provided", "KEEPSTONE_EMBEDDINGS_KEY"]),
        ("overloaded", ["HTTP 500", "model is overloaded"]),
        ("missing-one", ["no usable embeddings", "expected 2 embeddings"]),
        ("not-json", ["no usable embeddings"]),
        ("nan", ["malformed embeddings"]),
    ],
)
def test_a_refusal_is_a_clear_error(
    server: StandIn, embedder: HttpEmbedder, mode: str, words: list[str]
) -> None:
    server.mode = mode
    with pytest.raises(StoreUnavailable) as caught:
        embedder.embed(["a", "bb"])
    assert caught.value.status == 503
    for word in words:
        assert word in caught.value.message
    assert server.url in caught.value.message
    assert KEY not in caught.value.message


def test_a_wrong_path_says_what_to_check(server: StandIn) -> None:
    with HttpEmbedder(server.url + "/api", "m") as embedder:
        with pytest.raises(StoreUnavailable, match="HTTP 404.*KEEPSTONE_EMBEDDINGS_URL"):
            embedder.embed(["a"])


def test_a_model_that_changes_dimensions_is_refused(
    server: StandIn, embedder: HttpEmbedder
) -> None:
    embedder.embed(["a"])
    server.mode = "four-dims"
    with pytest.raises(StoreUnavailable, match="4 dimensions after 3"):
        embedder.embed(["a"])


def test_a_slow_server_times_out(server: StandIn) -> None:
    server.mode = "slow"
    with HttpEmbedder(server.url, "m", timeout=httpx.Timeout(0.2)) as embedder:
        with pytest.raises(StoreUnavailable, match="did not answer in time"):
            embedder.embed(["a"])


def test_a_server_that_is_not_there() -> None:
    httpd = _Server(("127.0.0.1", 0), Handler)
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.server_close()  # nothing listens on the port now
    with HttpEmbedder(url, "m") as embedder:
        with pytest.raises(StoreUnavailable, match="could not be reached"):
            embedder.embed(["a"])


def test_keepstone_models_status_over_http(
    server: StandIn,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KEEPSTONE_HOME", str(tmp_path))
    monkeypatch.setenv("KEEPSTONE_EMBEDDER", "http")
    monkeypatch.setenv("KEEPSTONE_EMBEDDINGS_URL", server.url)
    monkeypatch.setenv("KEEPSTONE_EMBEDDINGS_MODEL", "nomic-embed-text")
    monkeypatch.setenv("KEEPSTONE_EMBEDDINGS_KEY", KEY)
    assert main(["models", "status"]) == 0
    out = capsys.readouterr().out
    assert "embedder: http (nomic-embed-text, 3 dimensions)" in out
    assert f"endpoint: {server.url}/v1/embeddings" in out and "ready: yes" in out
    assert server.requests[-1]["auth"] == f"Bearer {KEY}"
    server.mode = "unauthorised"
    assert main(["models", "status"]) == 1
    assert "ready: no: the embeddings endpoint" in capsys.readouterr().out
