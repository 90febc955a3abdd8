"""Benchmark: how long a big space's page takes to render its first page of documents.

In process (the real app of ``keepstone serve``, no socket), for a space of 2,000 and of
10,000 documents imported in one archive, on a temporary SQLite file and, with
``--postgres URL``, on PostgreSQL too (a fresh org, team and user each run, so any
database will do): a signed-in browser's ``GET /t/{team}/space`` by name and by last
change (``sort=updated``), ``--requests`` times each; prints the median and the slowest in
milliseconds. The goal: the first page of 10,000 documents under 300 ms. Not a test: it
prints figures, asserts nothing.

    .venv/bin/python bench/bench_ui_listing.py [--requests 15] [--postgres URL]
"""

from __future__ import annotations

import argparse
import io
import statistics
import tarfile
import tempfile
import time
import uuid

from fastapi.testclient import TestClient

from keepstone.api.app import create_app
from keepstone.config import Config

ADMIN = "bench-admin-token-0123456789abcdef"
PASSWORD = "bench-password-0123456789"
SIZES = (2_000, 10_000)
GOAL_MS = 300.0


def archive(count: int) -> bytes:
    """A gzipped tarball of ``count`` small documents spread over 20 folders."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for i in range(count):
            data = f"# note {i}\n\nSome words about note {i}.\n".encode()
            info = tarfile.TarInfo(f"folder-{i % 20:02}/note-{i:05}.md")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def signed_in(client: TestClient) -> tuple[str, dict[str, str], dict[str, str]]:
    """A fresh org, team and member signed in: the team, the browser's cookie, and the
    member's API key (which imports the documents)."""
    admin = {"Authorization": f"Bearer {ADMIN}"}
    org = client.post("/api/admin/orgs", json={"name": "b", "plan": "pro_plus"}, headers=admin)
    org_id = org.json()["id"]
    team = client.post("/api/admin/teams", json={"org_id": org_id, "name": "t"}, headers=admin)
    team_id = team.json()["id"]
    email = f"ui-{uuid.uuid4().hex[:8]}@example.com"
    body = {"email": email, "password": PASSWORD}
    user = client.post("/api/admin/users", json=body, headers=admin).json()["id"]
    member = {"user_id": user, "role": "member"}
    client.post(f"/api/admin/teams/{team_id}/members", json=member, headers=admin)
    made = client.post(
        "/api/admin/api-keys",
        json={"user_id": user, "team_id": team_id, "name": "bench"},
        headers=admin,
    )
    key = {"Authorization": f"Bearer {made.json()['key']}"}
    login = client.post("/api/auth/login", json=body)
    login.raise_for_status()
    cookie = f"keepstone_session={login.cookies['keepstone_session']}"
    client.cookies.clear()
    return team_id, {"Cookie": cookie}, key


def median_ms(client: TestClient, url: str, params: dict[str, str], n: int) -> tuple[float, float]:
    times = []
    for _ in range(n + 1):
        started = time.perf_counter()
        r = client.get(url, params=params)
        times.append((time.perf_counter() - started) * 1e3)
        if r.status_code != 200 or r.text.count("/doc?") < 100:
            raise SystemExit(f"the space page failed: {r.status_code} {r.text[-300:]}")
    client.cookies.clear()
    return statistics.median(times[1:]), max(times[1:])  # the first warms the caches


def run(database: str, n: int) -> list[tuple[str, int, str, float, float]]:
    config = Config(
        database_url=database,
        admin_token=ADMIN,
        key_hash_secret="bench-key-hash-secret-0123456789",
        embedder="none",
        argon2_time_cost=1,
        argon2_memory_kib=1024,
    )
    rows = []
    with TestClient(create_app(config)) as client:
        team, cookie, key = signed_in(client)
        for count in SIZES:
            space = {"name": f"big-{count}", "project": "p"}
            r = client.post(
                "/api/memory/import",
                params=space,
                content=archive(count),
                headers={**key, "Content-Type": "application/gzip"},
            )
            if r.status_code >= 300:
                raise SystemExit(f"import failed: {r.status_code} {r.text[:300]}")
            client.headers.update(cookie)
            for sort in ("path", "updated"):
                mid, worst = median_ms(client, f"/t/{team}/space", {**space, "sort": sort}, n)
                rows.append((database.split(":", 1)[0], count, sort, mid, worst))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=15)
    parser.add_argument("--postgres", default=None, help="a PostgreSQL URL to measure too")
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="keepstone-bench-ui-")
    databases = [f"sqlite:///{home}/keepstone.db", *([args.postgres] if args.postgres else [])]
    print(f"first page of a space's listing (100 documents), median of {args.requests}")
    print(f"{'database':12} {'documents':>9} {'sort':>8} {'median ms':>10} {'max ms':>8}  goal")
    for database in databases:
        for kind, count, sort, mid, worst in run(database, args.requests):
            mark = "✓" if mid < GOAL_MS else "✗"
            print(f"{kind:12} {count:9} {sort:>8} {mid:10.1f} {worst:8.1f}  < {GOAL_MS:.0f} {mark}")


if __name__ == "__main__":
    main()
