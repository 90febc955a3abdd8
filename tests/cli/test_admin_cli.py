"""``keepstone admin list-orgs|list-users|list-keys|revoke-key`` on the server's database:
the same use-cases as the admin API's lists, one JSON object out."""

from __future__ import annotations

import json
from typing import Any


def test_list_orgs_pages_with_the_cursor_and_all(admin: Any) -> None:
    made = sorted(admin("create-org", "--name", f"org{i}")["id"] for i in range(5))
    first = admin("list-orgs", "--limit", "2")
    assert [o["id"] for o in first["orgs"]] == made[:2] and first["next_cursor"]
    second = admin("list-orgs", "--limit", "2", "--cursor", first["next_cursor"])
    assert [o["id"] for o in second["orgs"]] == made[2:4]
    third = admin("list-orgs", "--limit", "2", "--cursor", second["next_cursor"])
    assert [o["id"] for o in third["orgs"]] == made[4:] and third["next_cursor"] is None
    everything = admin("list-orgs", "--limit", "2", "--all")
    assert [o["id"] for o in everything["orgs"]] == made and everything["next_cursor"] is None


def test_list_keys_revoke_key_and_no_secret(admin: Any) -> None:
    org = admin("create-org", "--name", "Acme", "--plan", "pro_plus")["id"]
    team = admin("create-team", "--org", org, "--name", "core")["id"]
    user = admin("create-user", "--email", "ann@example.com", "--password", "hunter2hunter2")["id"]
    admin("add-member", "--team", team, "--user", user, "--role", "member")
    made = [
        admin("create-api-key", "--user", user, "--team", team, "--name", "k") for _ in range(2)
    ]
    listed = admin("list-keys", "--user", user)
    assert sorted(k["id"] for k in listed["api_keys"]) == sorted(k["id"] for k in made)
    text = json.dumps(listed) + json.dumps(admin("list-users"))
    for key in made:
        assert key["key"] not in text
    assert "hunter2" not in text and "argon2" not in text and "hash" not in text

    assert admin("revoke-key", "--id", made[0]["id"]) == {"id": made[0]["id"], "revoked": True}
    by_id = {k["id"]: k for k in admin("list-keys", "--team", team)["api_keys"]}
    assert by_id[made[0]["id"]]["revoked"] is True
    assert by_id[made[1]["id"]]["revoked"] is False
    code, _, err = admin("revoke-key", "--id", made[0]["id"], ok=False)
    assert code == 1
    assert err.strip() == f"keepstone: not_found: no active API key with id {made[0]['id']!r}"
    users = admin("list-users")["users"]
    assert [(u["email"], u["has_password"]) for u in users] == [("ann@example.com", True)]


def test_a_bad_limit_or_cursor_is_one_line(admin: Any) -> None:
    code, _, err = admin("list-users", "--limit", "500", ok=False)
    assert (
        code == 1 and err.strip() == "keepstone: invalid_request: limit must be 1-200 (default 50)"
    )
    code, _, err = admin("list-orgs", "--cursor", "nope", ok=False)
    assert code == 1 and len(err.splitlines()) == 1 and "cursor" in err


def test_set_quota_refuses_what_the_api_refuses(admin: Any) -> None:
    org = admin("create-org", "--name", "Acme")["id"]
    for target in (["--instance"], ["--org", org]):
        for value in (2**62 + 1, 2**63, 10**23, -1):
            code, out, err = admin("set-quota", *target, "--bytes", str(value), ok=False)
            assert code == 1 and out == ""
            assert err == (
                "keepstone: invalid_request: a quota must be a whole number of bytes from 0 to "
                f"4611686018427387904 (got {value})\n"
            )
        assert admin("set-quota", *target, "--bytes", str(2**62))  # the bound itself is taken
