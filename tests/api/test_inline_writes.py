"""A document write on SQLite runs on the event loop when the database's writer turn is
free, and in a worker thread, waiting there, when another thread or process has it
(cairn.api.deps.CallerCredential.write): the loop never waits for a turn."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cairn.db import sqlite_writers
from tests.api.world import SPACE, World, unique


def test_a_write_with_a_free_turn_runs_on_the_loop(
    app: FastAPI, client: TestClient, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    spaces = app.state.runtime.spaces
    real = spaces.write
    on_loop: list[bool] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:  # a worker thread has no running loop
            on_loop.append(False)
        return real(*args, **kwargs)

    monkeypatch.setattr(spaces, "write", spy)
    q = {**SPACE, "path": f"{unique('inline')}.md"}
    r = client.put(
        "/api/memory/doc", params=q, json={"content": "x"}, headers=world.headers("api_key")
    )
    assert r.status_code == 201, r.text
    # SQLite: on the loop (no hop); PostgreSQL has no turn to take: a worker thread.
    assert on_loop == [app.state.runtime.engine.dialect.name == "sqlite"]


def test_a_write_waits_for_a_busy_turn_in_a_thread_while_the_loop_serves(
    app: FastAPI, client: TestClient, world: World
) -> None:
    headers = world.headers("api_key")
    ready = {**SPACE, "path": f"{unique('ready')}.md"}
    assert client.put("/api/memory/doc", params=ready, json={"content": "r"}, headers=headers)
    q = {**SPACE, "path": f"{unique('waits')}.md"}
    sqlite = app.state.runtime.engine.dialect.name == "sqlite"
    held, release = threading.Event(), threading.Event()

    def hold_the_turn() -> None:  # another writer of the process, e.g. an import batch
        with sqlite_writers(app.state.runtime.engine):
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold_the_turn)
    if sqlite:
        holder.start()
        assert held.wait(30)

    async def scenario() -> tuple[int, int, bool]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://cairn") as http:
            put = asyncio.create_task(
                http.put("/api/memory/doc", params=q, json={"content": "w"}, headers=headers)
            )
            await asyncio.sleep(0.3)
            waiting = not put.done()
            # The loop still answers while the write waits for its turn.
            got = await http.get("/api/memory/doc", params=ready, headers=headers)
            release.set()
            return got.status_code, (await put).status_code, waiting

    try:
        read_status, write_status, waited = asyncio.run(scenario())
    finally:
        release.set()
        if sqlite:
            holder.join(30)
    assert (read_status, write_status) == (200, 201)
    if sqlite:  # the write waited for the turn the holder had (PostgreSQL has none to wait
        # for; how soon its write answered is the machine's speed, not asserted)
        assert waited
    r = client.get("/api/memory/doc", params=q, headers=headers)
    assert r.status_code == 200 and r.json()["content"] == "w"
