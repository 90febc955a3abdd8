"""The Messages API played back from a script, so the ``anthropic`` SDK's own tool runner
drives a tool with no network.

:class:`RecordedApi` is the HTTP transport the SDK's client is built on: it answers the
first request with one assistant message holding the recorded ``tool_use`` blocks (the
runner calls the tool for each, in order, as it does for a real reply) and the next with
an ``end_turn``; it keeps every request body, so the ``tool_result`` blocks the runner
sent back are read from the second request, exactly as the API would have received them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from anthropic import Anthropic, AsyncAnthropic

try:  # the transport package the installed SDK is built on
    import httpx2 as http
except ImportError:  # anthropic before it moved to httpx2
    import httpx as http  # type: ignore[no-redef]

MODEL = "claude-sonnet-4-5"


@dataclass(frozen=True)
class Result:
    """One ``tool_result`` block the runner sent back."""

    text: str
    is_error: bool


def _message(content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
    return {
        "id": "msg_recorded",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


@dataclass
class RecordedApi:
    """A Messages API whose one reply calls the tool ``name`` with each of ``uses``."""

    uses: list[dict[str, Any]]
    name: str = "memory"
    final_text: str = "Done."
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, request: Any) -> Any:
        self.requests.append(json.loads(request.content))
        if len(self.requests) == 1:
            blocks = [
                {"type": "tool_use", "id": f"toolu_{i:03d}", "name": self.name, "input": use}
                for i, use in enumerate(self.uses)
            ]
            return http.Response(200, json=_message(blocks, "tool_use"))
        return http.Response(
            200, json=_message([{"type": "text", "text": self.final_text}], "end_turn")
        )

    def client(self) -> Anthropic:
        transport = http.MockTransport(self)
        return Anthropic(api_key="recorded", http_client=http.Client(transport=transport))

    def async_client(self) -> AsyncAnthropic:
        transport = http.MockTransport(self)
        return AsyncAnthropic(api_key="recorded", http_client=http.AsyncClient(transport=transport))

    def results(self) -> list[Result]:
        """The ``tool_result`` blocks of the runner's second request, in order."""
        assert len(self.requests) == 2, f"the runner made {len(self.requests)} requests"
        blocks = self.requests[1]["messages"][-1]["content"]
        assert [b["tool_use_id"] for b in blocks] == [
            f"toolu_{i:03d}" for i in range(len(self.uses))
        ]
        return [Result(_text(b["content"]), bool(b.get("is_error"))) for b in blocks]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content)


def _run_kwargs(tool: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 1024,
        "tools": [tool],
        "messages": [{"role": "user", "content": "Use your memory."}],
    }


def run(tool: Any, uses: list[dict[str, Any]]) -> list[Result]:
    """What the SDK's ``tool_runner`` sends back after calling ``tool`` with ``uses``."""
    api = RecordedApi(uses)
    with api.client() as client:
        client.beta.messages.tool_runner(**_run_kwargs(tool)).until_done()
    return api.results()


async def run_async(tool: Any, uses: list[dict[str, Any]]) -> list[Result]:
    """:func:`run` through ``AsyncAnthropic``'s runner, for an async tool."""
    api = RecordedApi(uses)
    async with api.async_client() as client:
        await client.beta.messages.tool_runner(**_run_kwargs(tool)).until_done()
    return api.results()
