"""A member's own API keys (``/api/me/api-keys`` and the UI's "Your API keys" page).

A signed-in user (a browser session) mints, lists and revokes keys of their own, each
acting in one team they act in, with their standing there: a key never grants more than
its user has. Another team is ``404 team_not_found`` (as every team route answers a
non-member), another user's key ``404 not_found``. An API key cannot mint keys: a leaked
key must not be able to make itself permanent.
"""

from __future__ import annotations

from keepstone.errors import Forbidden, TeamNotFound
from keepstone.identity import listing
from keepstone.identity.service import IdentityService
from keepstone.principal import CredentialKind, Principal
from keepstone.service.access import require_csrf
from keepstone.service.admin import (
    DEFAULT_PAGE,
    ApiKeyEntry,
    CreatedKey,
    Page,
    required_key_name,
)
from keepstone.store.sql import SqlStore


class OwnKeys:
    def __init__(self, identity: IdentityService | None, store: SqlStore) -> None:
        self._identity = identity
        self._store = store

    def _user(self, who: Principal, *, mutating: bool) -> tuple[IdentityService, str]:
        if who.kind is not CredentialKind.SESSION or not who.user_id or self._identity is None:
            raise Forbidden("your own API keys are managed from a signed-in browser session")
        if mutating:
            require_csrf(who)
        return self._identity, who.user_id

    def create(self, who: Principal, team_id: str, name: str) -> CreatedKey:
        """A new key of the caller's, acting in ``team_id`` (one they act in)."""
        identity, user_id = self._user(who, mutating=True)
        standing = identity.standing(user_id, team_id)
        if standing is None or standing.team_role is None:
            raise TeamNotFound(f"no team {team_id!r} for this credential")
        key_id, key = identity.create_api_key(user_id, team_id, required_key_name(name))
        self._store.record_audit("key.create", who.actor, f"key {key_id} in team {team_id}")
        return CreatedKey(id=key_id, key=key)

    def list(
        self, who: Principal, *, limit: int = DEFAULT_PAGE, cursor: str | None = None
    ) -> Page[ApiKeyEntry]:
        """A page of the caller's keys, revoked ones too (never a key nor its hash)."""
        identity, user_id = self._user(who, mutating=False)
        return listing.list_api_keys(identity.engine, listing.PageAt(limit, cursor), user_id)

    def revoke(self, who: Principal, key_id: str) -> None:
        """Revoke one of the caller's live keys; another's is ``404 not_found``."""
        identity, user_id = self._user(who, mutating=True)
        identity.revoke_api_key(key_id, user_id=user_id)
        self._store.record_audit("key.revoke", who.actor, f"key {key_id}")
