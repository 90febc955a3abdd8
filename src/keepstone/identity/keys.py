"""Secrets of credentials: API keys, session cookies, CSRF tokens, and their keyed hashes.

A credential is a long random secret, so a fast keyed hash (HMAC-SHA-256 under the
server's key-hash secret) is as strong as a slow one and keeps argon2 off every
request's path. Only the hash is stored; the value is shown once.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from keepstone.db import read_transaction, utcnow, write_transaction
from keepstone.identity.schema import server_secrets
from keepstone.principal import API_KEY_PREFIX as API_KEY_PREFIX

_SECRET_NAME = "key_hash_secret"


def new_api_key() -> str:
    """A fresh API key: the prefix plus 32 random bytes, URL-safe."""
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


def new_token() -> str:
    """A fresh session cookie or CSRF token (32 random bytes)."""
    return secrets.token_urlsafe(32)


def new_id(prefix: str) -> str:
    """An opaque, unguessable row id such as ``team_3f9c...``."""
    return f"{prefix}_{secrets.token_hex(12)}"


class KeyHasher:
    """HMAC-SHA-256 under the server's key-hash secret."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("the key-hash secret must be at least 16 bytes")
        self._secret = secret

    def hash(self, value: str) -> str:
        return hmac.new(self._secret, value.encode("utf-8"), hashlib.sha256).hexdigest()

    def matches(self, value: str, digest: str) -> bool:
        return hmac.compare_digest(self.hash(value), digest)


def load_key_hasher(engine: Engine, configured: str | None) -> KeyHasher:
    """The hasher of ``KEEPSTONE_KEY_HASH_SECRET`` when set, else the secret kept in the database.

    The stored secret is created on first use, race-free across replicas (insert, and
    on conflict read the winner's).
    """
    if configured:
        return KeyHasher(configured.encode("utf-8"))
    stored = sa.select(server_secrets.c.value).where(server_secrets.c.name == _SECRET_NAME)
    with read_transaction(engine) as conn:
        value = conn.execute(stored).scalar()
    if value is None:
        # Another replica may create it first: then read theirs.
        with contextlib.suppress(sa.exc.IntegrityError), write_transaction(engine) as conn:
            conn.execute(
                server_secrets.insert().values(
                    name=_SECRET_NAME, value=secrets.token_hex(32), created_at=utcnow()
                )
            )
        with read_transaction(engine) as conn:
            value = conn.execute(stored).scalar_one()
    return KeyHasher(bytes.fromhex(str(value)))
