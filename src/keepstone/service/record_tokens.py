"""The page tokens of a records listing (``next_token``): HMAC-signed, and bound to the
team, the caller's visibility and the repository filter they were issued for, so a token
can neither be forged nor carried to another listing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import datetime

from keepstone.errors import InvalidRequest
from keepstone.records.store import PagePosition, utc
from keepstone.service.access import TeamAccess


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign_page_token(
    key: bytes, access: TeamAccess, repo_id: str | None, position: PagePosition
) -> str:
    payload = {
        "t": access.team_id,
        "v": access.visibility_fingerprint,
        "r": repo_id,
        "c": utc(position.created_at).isoformat(),
        "i": position.record_id,
    }
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode("utf-8")
    mac = hmac.new(key, body, hashlib.sha256).digest()
    return f"{_b64(body)}.{_b64(mac)}"


def read_page_token(
    key: bytes, token: str, access: TeamAccess, repo_id: str | None
) -> PagePosition:
    bad = InvalidRequest(
        "field 'next_token' is not a token this list gave you; start again without next_token",
        field="next_token",
    )
    try:
        body_text, mac_text = token.split(".", 1)
        body, mac = _unb64(body_text), _unb64(mac_text)
        if not hmac.compare_digest(mac, hmac.new(key, body, hashlib.sha256).digest()):
            raise bad
        payload = json.loads(body)
        bound = (payload["t"], payload["v"], payload["r"])
        position = PagePosition(utc(datetime.fromisoformat(payload["c"])), str(payload["i"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise bad from exc
    # Bound to the team, the caller's visibility and the filter it was issued for.
    if bound != (access.team_id, access.visibility_fingerprint, repo_id):
        raise bad
    return position
