"""A small populated instance for API tests: one org, its team, one user per role.

Everything is created through the admin API with the admin token (so that API is
exercised too); sessions through ``POST /api/auth/login``.
"""

from __future__ import annotations

import io
import tarfile
import uuid
from dataclasses import dataclass, field

from fastapi import FastAPI
from fastapi.testclient import TestClient

from keepstone.identity.service import IdentityService
from keepstone.spaces import SpaceRef
from keepstone.store.base import MemoryStore, PlatformGrant

ADMIN_TOKEN = "test-admin-token-abcdefghijklmnopqrstuvwxyz"
SERVICE_TOKEN = "test-service-token-abcdefghijklmnopqrstuvwx"
PASSWORD = "correct horse battery"

#: Every credential the policy table speaks of.
CREDENTIALS = (
    "none",
    "viewer",
    "config_editor",
    "member",
    "admin",
    "org_admin",
    "org_owner",
    "super_admin",
    "admin_token",
    "api_key",
    "session_no_csrf",
    "service_token",
)
TEAM_ROLES = ("viewer", "config_editor", "member", "admin")

SPACE = {"name": "policy", "project": "p1"}
GLOBAL_SPACE = {"name": "policy-global", "visibility": "global"}
SEED_PATH = "seed.md"


def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def tarball(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, text in files.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@dataclass
class World:
    app: FastAPI
    client: TestClient
    org_id: str = ""
    team_id: str = ""
    project_id: str = ""
    users: dict[str, str] = field(default_factory=dict)
    emails: dict[str, str] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    key_ids: dict[str, str] = field(default_factory=dict)
    sessions: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def identity(self) -> IdentityService:
        identity: IdentityService = self.app.state.runtime.identity
        return identity

    @property
    def store(self) -> MemoryStore:
        store: MemoryStore = self.app.state.runtime.store
        return store

    def post(self, path: str, body: dict[str, object]) -> dict[str, object]:
        r = self.client.post(path, json=body, headers=admin_headers())
        assert r.status_code == 201, r.text
        out: dict[str, object] = r.json()
        return out

    def login(self, role: str) -> tuple[str, str]:
        r = self.client.post(
            "/api/auth/login", json={"email": self.emails[role], "password": PASSWORD}
        )
        assert r.status_code == 200, r.text
        cookie = r.cookies["keepstone_session"]
        self.client.cookies.clear()
        return cookie, str(r.json()["csrf_token"])

    def headers(self, cred: str, *, fresh: bool = False) -> dict[str, str]:
        """Request headers presenting ``cred`` (a fresh session when ``fresh``)."""
        if cred == "none":
            return {}
        if cred == "admin_token":
            return admin_headers()
        if cred == "service_token":
            return {"Authorization": f"Bearer {SERVICE_TOKEN}"}
        if cred == "api_key":
            return {"Authorization": f"Bearer {self.keys['member']}"}
        role = "member" if cred == "session_no_csrf" else cred
        cookie, csrf = self.login(role) if fresh else self.sessions[role]
        out = {"Cookie": f"keepstone_session={cookie}"}
        if cred != "session_no_csrf":
            out["X-CSRF-Token"] = csrf
        if role != "super_admin":
            out["X-Keepstone-Team"] = self.team_id
        return out

    def team_ref(self, **space: str) -> SpaceRef:
        q = {**SPACE, **space}
        return SpaceRef.build(
            q.get("visibility", "project"), q["name"], tenant=self.team_id, project=q["project"]
        )

    def seed(self, path: str, *, global_space: bool = False) -> None:
        if global_space:
            glob = SpaceRef.build("global", GLOBAL_SPACE["name"])
            self.store.write(glob, path, "seed", grant=PlatformGrant("test"))
        else:
            self.store.write(self.team_ref(), path, "seed")

    def scratch_user(self) -> str:
        return self.identity.create_user(f"{unique('scratch')}@example.com")


def build_world(app: FastAPI, client: TestClient) -> World:
    w = World(app=app, client=client)
    w.org_id = str(w.post("/api/admin/orgs", {"name": "Acme", "plan": "pro_plus"})["id"])
    w.team_id = str(w.post("/api/admin/teams", {"org_id": w.org_id, "name": "core"})["id"])
    w.project_id = str(w.post(f"/api/admin/teams/{w.team_id}/projects", {"name": "web"})["id"])
    for role in (*TEAM_ROLES, "org_admin", "org_owner", "super_admin", "login"):
        email = f"{role}-{uuid.uuid4().hex[:6]}@example.com"
        body: dict[str, object] = {"email": email, "password": PASSWORD, "name": role}
        if role == "super_admin":
            body["super_admin"] = True
        w.users[role] = str(w.post("/api/admin/users", body)["id"])
        w.emails[role] = email
    for role in TEAM_ROLES:
        w.post(f"/api/admin/teams/{w.team_id}/members", {"user_id": w.users[role], "role": role})
    for role, org_role in (("org_admin", "admin"), ("org_owner", "owner")):
        w.post(f"/api/admin/orgs/{w.org_id}/members", {"user_id": w.users[role], "role": org_role})
    for role in TEAM_ROLES:
        body = {"user_id": w.users[role], "team_id": w.team_id, "name": role}
        minted = w.post("/api/admin/api-keys", body)
        w.keys[role], w.key_ids[role] = str(minted["key"]), str(minted["id"])
    for role in (*TEAM_ROLES, "org_admin", "org_owner", "super_admin"):
        w.sessions[role] = w.login(role)
    w.seed(SEED_PATH)
    w.seed(SEED_PATH, global_space=True)
    return w
