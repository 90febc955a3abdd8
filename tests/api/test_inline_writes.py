"""A document write on SQLite runs on the event loop when the database's writer turn is
free, and in a worker thread, waiting there, when another thread or process has it
(keepstone.api.deps.CallerCredential.write): the loop never waits for a turn."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from keepstone.db import durability, sqlite_writers
from keepstone.errors import StoreUnavailable
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
        async with httpx.AsyncClient(transport=transport, base_url="http://keepstone") as http:
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


def test_a_write_on_the_loop_is_answered_only_after_its_fsync_off_the_loop_when_slow(
    app: FastAPI, client: TestClient, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/storage.md "Durability": the WAL sync of a write run on the loop is awaited
    there before the 201; on a disk whose fsync is slow, a thread of the database's own
    does it (a quick one the loop may do itself). PostgreSQL's commit is its own fsync:
    no WAL sync there."""
    sqlite = app.state.runtime.engine.dialect.name == "sqlite"
    synced = threading.Event()
    threads: list[str] = []
    real = durability._datasync

    def slow(fd: int) -> None:
        threads.append(threading.current_thread().name)
        time.sleep(0.1)  # an answer sent before the sync would come back before this ends
        real(fd)
        synced.set()

    monkeypatch.setattr(durability, "_datasync", slow)
    for _ in range(2):
        synced.clear()
        q = {**SPACE, "path": f"{unique('durable')}.md"}
        r = client.put(
            "/api/memory/doc", params=q, json={"content": "x"}, headers=world.headers("api_key")
        )
        assert r.status_code == 201, r.text
        assert synced.is_set() == sqlite
    if sqlite:
        # the first fsync may have run on the loop (the disk was quick until then); it
        # was slow, so the second ran on the thread
        assert len(threads) == 2 and threads[1] == "keepstone-wal-sync"
    else:
        assert threads == []


def test_coroutines_awaiting_together_share_the_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.db-wal").write_bytes(b"frames")
    sync = durability.WalSync(str(tmp_path / "a.db"))
    fsyncs: list[str] = []

    def slow(_fd: int) -> None:
        fsyncs.append(threading.current_thread().name)
        time.sleep(0.05)

    monkeypatch.setattr(durability, "_datasync", slow)
    sync._timed(0.05)  # the loop found the disk slow: the thread syncs for coroutines

    async def many() -> None:
        await asyncio.gather(*(sync.synced() for _ in range(20)))

    asyncio.run(many())
    assert 1 <= len(fsyncs) < 20
    assert set(fsyncs) == {"keepstone-wal-sync"}


def test_a_failed_fsync_fails_the_awaiting_coroutines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.db-wal").write_bytes(b"frames")
    sync = durability.WalSync(str(tmp_path / "a.db"))

    def broken(_fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(durability, "_datasync", broken)

    async def one() -> None:
        await sync.synced()

    with pytest.raises(StoreUnavailable, match="failed to sync"):
        asyncio.run(one())
